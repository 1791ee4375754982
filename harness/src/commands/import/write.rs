//! The import's output: samples numbered, kernels written in the replay layout, the set's
//! reference code under `refs/`, empty and placeholder kernels kept as `no_kernel` entries
//! (no file), and `claims.json`. Also what --out may hold before an import.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::{bail, Context, Result};
use kbench_record::claims::{
    ClaimSet, ClaimedKernel, ClaimsFile, ImportError, CLAIMS_SCHEMA_VERSION,
};

use super::Parsed;
use crate::runlog::write_atomic;

/// The claims file's name in --out.
pub const CLAIMS: &str = "claims.json";
const REFS: &str = "refs";
/// The set's references again in KernelBench's layout (`level<L>/<P>_<name>.py`), so
/// `kbench run --kernelbench DIR/problems` evaluates the kernels on the problems they were
/// written for.
const PROBLEMS: &str = "problems";

/// What was written.
pub struct Written {
    pub claims: ClaimsFile,
    /// Things worth saying that are not errors (a problem shipped with two references).
    pub notes: Vec<String>,
}

/// A replay kernel file's name: `level_<L>_problem_<P>_sample_<S>_kernel.py`.
fn is_replay_file(name: &str) -> bool {
    name.starts_with("level_")
        && name.ends_with("_kernel.py")
        && name.contains("_problem_")
        && name.contains("_sample_")
}

/// Makes --out ready: new, empty, or an earlier import (whose kernels, refs and claims are
/// removed); anything else only with `force`. Returns the kernel files removed.
pub fn prepare_out(out: &Path, force: bool) -> Result<usize> {
    if !out.exists() {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        return Ok(0);
    }
    if !out.is_dir() {
        bail!("--out {} is a file, not a folder", out.display());
    }
    let entries: Vec<_> = std::fs::read_dir(out)
        .with_context(|| format!("reading {}", out.display()))?
        .filter_map(|e| e.ok())
        .collect();
    if entries.is_empty() {
        return Ok(0);
    }
    let earlier = ClaimsFile::read(&out.join(CLAIMS)).is_ok();
    if !earlier && !force {
        bail!(
            "--out {} is not empty and is not an earlier `kbench import` (it has no readable {CLAIMS}): choose a new or empty folder, or pass --force to import into it (its level_*_problem_*_sample_*_kernel.py files, {REFS}/ and {PROBLEMS}/ are replaced)",
            out.display()
        );
    }
    let mut removed = 0;
    for e in entries {
        let name = e.file_name().to_string_lossy().to_string();
        let path = e.path();
        if is_replay_file(&name) && path.is_file() {
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            removed += 1;
        } else if (name == REFS || name == PROBLEMS) && path.is_dir() {
            std::fs::remove_dir_all(&path)
                .with_context(|| format!("removing {}", path.display()))?;
        } else if name == CLAIMS {
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        }
    }
    Ok(removed)
}

/// Why `source` is no kernel: empty, no `ModelNew`, or a body of only `pass`, `...`,
/// docstrings, comments (TODO) and `raise NotImplementedError`.
pub fn placeholder(source: &str) -> Option<String> {
    if source.trim().is_empty() {
        return Some("empty kernel source".into());
    }
    let lines: Vec<&str> = source
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .collect();
    let defines_model_new = lines.iter().any(|l| {
        l.strip_prefix("class ModelNew")
            .or_else(|| l.strip_prefix("ModelNew"))
            .is_some_and(|rest| {
                rest.starts_with(['(', ':', ' ', '='])
                    && (l.starts_with("class") || rest.trim_start().starts_with('='))
            })
    });
    if !defines_model_new {
        return Some("no `class ModelNew` in the kernel source".into());
    }
    let mut in_doc: Option<&str> = None;
    let substantive = lines.iter().any(|l| {
        if let Some(q) = in_doc {
            if l.contains(q) {
                in_doc = None;
            }
            return false;
        }
        for q in ["\"\"\"", "'''"] {
            if let Some(rest) = l.strip_prefix(q) {
                if !rest.contains(q) {
                    in_doc = Some(q);
                }
                return false;
            }
        }
        let trivial = l.starts_with("import ")
            || l.starts_with("from ")
            || l.starts_with("class ")
            || l.starts_with("def ")
            || l.starts_with('@')
            || l.starts_with("super(")
            || l.starts_with("raise NotImplementedError")
            || l.starts_with("return None")
            || *l == "return"
            || *l == "pass"
            || *l == "..."
            || l.to_ascii_uppercase().contains("TODO")
            || ((l.starts_with('"') || l.starts_with('\'')) && !l.contains('='));
        !trivial
    });
    if substantive {
        None
    } else {
        Some("placeholder kernel: ModelNew's body is only pass, ..., TODO or docstrings".into())
    }
}

/// Numbers the entries' samples, writes their kernels and references into `out` and the
/// claims file; `out` must have been made ready by [`prepare_out`].
pub fn write(out: &Path, set: ClaimSet, parsed: Parsed) -> Result<Written> {
    let Parsed {
        entries,
        mut errors,
        mut notes,
    } = parsed;
    // Samples: the source's own, else the next free one of the problem, in source order.
    let mut taken: HashMap<(u8, u32, u32), String> = HashMap::new();
    let mut next: HashMap<(u8, u32), u32> = HashMap::new();
    let mut numbered = Vec::with_capacity(entries.len());
    for e in entries {
        let sample = match e.sample {
            Some(s) => s,
            None => {
                let n = next.entry((e.level, e.problem)).or_insert(0);
                while taken.contains_key(&(e.level, e.problem, *n)) {
                    *n += 1;
                }
                *n
            }
        };
        if let Some(first) = taken.get(&(e.level, e.problem, sample)) {
            errors.push(ImportError {
                at: e.at.clone(),
                message: format!(
                    "level {} problem {} sample {sample} again (first at {first}); this one is not imported",
                    e.level, e.problem
                ),
            });
            continue;
        }
        taken.insert((e.level, e.problem, sample), e.at.clone());
        numbered.push((sample, e));
    }
    // References: one file per problem, or one per sample where the set ships several.
    let mut refs: BTreeMap<(u8, u32), Vec<&str>> = BTreeMap::new();
    for (_, e) in &numbered {
        if let Some(r) = e.reference.as_deref().filter(|r| !r.trim().is_empty()) {
            let list = refs.entry((e.level, e.problem)).or_default();
            if !list.contains(&r) {
                list.push(r);
            }
        }
    }
    let refs_dir = out.join(REFS);
    if !refs.is_empty() {
        std::fs::create_dir_all(&refs_dir)
            .with_context(|| format!("creating {}", refs_dir.display()))?;
    }
    let mut shared_ref: HashMap<(u8, u32), String> = HashMap::new();
    let names: HashMap<(u8, u32), &str> = numbered
        .iter()
        .filter_map(|(_, e)| Some(((e.level, e.problem), e.problem_name.as_deref()?)))
        .collect();
    for ((level, problem), list) in &refs {
        if let [only] = list.as_slice() {
            let rel = format!("{REFS}/level_{level}_problem_{problem}.py");
            write_atomic(&out.join(&rel), only.as_bytes())?;
            shared_ref.insert((*level, *problem), rel);
            let name =
                crate::runlog::sanitize(names.get(&(*level, *problem)).unwrap_or(&"problem"));
            let dir = out.join(PROBLEMS).join(format!("level{level}"));
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            write_atomic(&dir.join(format!("{problem}_{name}.py")), only.as_bytes())?;
        } else {
            notes.push(format!(
                "level {level} problem {problem}: the set ships {} different reference codes; each sample's is kept in {REFS}/level_{level}_problem_{problem}_sample_<S>.py",
                list.len()
            ));
        }
    }
    let mut kernels = Vec::with_capacity(numbered.len());
    for (sample, e) in numbered {
        let (level, problem) = (e.level, e.problem);
        let name = format!("level_{level}_problem_{problem}_sample_{sample}_kernel");
        let reference = match shared_ref.get(&(level, problem)) {
            Some(rel) => Some(rel.clone()),
            None => match e.reference.as_deref().filter(|r| !r.trim().is_empty()) {
                Some(r) => {
                    let rel = format!("{REFS}/level_{level}_problem_{problem}_sample_{sample}.py");
                    write_atomic(&out.join(&rel), r.as_bytes())?;
                    Some(rel)
                }
                None => None,
            },
        };
        let no_kernel = match &e.kernel {
            None => Some(
                e.missing
                    .clone()
                    .unwrap_or_else(|| "no kernel source".into()),
            ),
            Some(src) => placeholder(src),
        };
        let kernel = match (&no_kernel, &e.kernel) {
            (None, Some(src)) => {
                let file = format!("{name}.py");
                write_atomic(&out.join(&file), src.as_bytes())?;
                Some(file)
            }
            _ => None,
        };
        kernels.push(ClaimedKernel {
            level,
            problem,
            sample,
            name,
            kernel,
            label: e.label,
            claims: e.claims,
            claimed_correct: e.claimed_correct,
            reference,
            no_kernel,
        });
    }
    kernels.sort_by_key(|k| (k.level, k.problem, k.sample));
    let claims = ClaimsFile {
        schema_version: CLAIMS_SCHEMA_VERSION,
        set,
        kernels,
        errors,
    };
    write_atomic(
        &out.join(CLAIMS),
        serde_json::to_string_pretty(&claims)?.as_bytes(),
    )?;
    Ok(Written { claims, notes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_told_from_kernels() {
        assert!(placeholder("  \n").unwrap().contains("empty"));
        assert!(placeholder("import torch\nclass Model: pass\n")
            .unwrap()
            .contains("ModelNew"));
        let stub = "import torch\nclass ModelNew(torch.nn.Module):\n    \"\"\"A kernel.\n    later\"\"\"\n    def __init__(self):\n        super().__init__()\n    def forward(self, x):\n        # TODO: write the kernel\n        ...\n";
        assert!(placeholder(stub).unwrap().contains("placeholder"), "{stub}");
        let real = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n";
        assert_eq!(placeholder(real), None);
        assert_eq!(placeholder("from m import K\nModelNew = K\n"), None);
    }
}
