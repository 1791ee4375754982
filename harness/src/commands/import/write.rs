//! The import's output: samples numbered, kernels in the replay layout, the set's reference
//! code under `refs/` and again under `problems/`, empty and placeholder kernels kept as
//! `no_kernel` entries (no file), and `claims.json`. [`plan`] decides every file without
//! touching the disk, so that `out_folder` can check --out before anything is written;
//! [`commit`] writes them.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::Result;
use kbench_record::claims::{
    ClaimSet, ClaimedKernel, ClaimsFile, ImportError, CLAIMS_SCHEMA_VERSION,
};

use super::out_folder::{write_new, WrittenFile, CLAIMS, MANIFEST, PROBLEMS, REFS};
use super::Parsed;

/// What an import will write.
pub(crate) struct Planned {
    pub(crate) claims: ClaimsFile,
    /// Every file but the claims file and the manifest: (path relative to --out, bytes).
    pub(crate) files: Vec<(String, Vec<u8>)>,
    /// Things worth saying that are not errors (a problem shipped with two references).
    pub(crate) notes: Vec<String>,
}

impl Planned {
    /// Every path the import writes, relative to --out, the claims file and manifest too.
    pub(crate) fn paths(&self) -> Vec<String> {
        let mut v: Vec<String> = self.files.iter().map(|(p, _)| p.clone()).collect();
        v.push(CLAIMS.into());
        v.push(MANIFEST.into());
        v
    }

    /// The levels whose references are written under `problems/`.
    pub(crate) fn problem_levels(&self) -> Vec<u8> {
        let mut levels: Vec<u8> = self
            .files
            .iter()
            .filter_map(|(p, _)| {
                p.strip_prefix(PROBLEMS)?
                    .strip_prefix("/level")?
                    .split('/')
                    .next()?
                    .parse()
                    .ok()
            })
            .collect();
        levels.sort_unstable();
        levels.dedup();
        levels
    }
}

/// Why `source` is no kernel: empty, no `ModelNew`, or a body of only `pass`, `...`,
/// docstrings, comments (TODO) and `raise NotImplementedError`.
pub(crate) fn placeholder(source: &str) -> Option<String> {
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

/// Numbers the entries' samples and decides their kernel and reference files and the
/// claims file; nothing is written.
pub(crate) fn plan(set: ClaimSet, parsed: Parsed) -> Planned {
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
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    let mut shared_ref: HashMap<(u8, u32), String> = HashMap::new();
    let names: HashMap<(u8, u32), &str> = numbered
        .iter()
        .filter_map(|(_, e)| Some(((e.level, e.problem), e.problem_name.as_deref()?)))
        .collect();
    for ((level, problem), list) in &refs {
        if let [only] = list.as_slice() {
            let rel = format!("{REFS}/level_{level}_problem_{problem}.py");
            files.push((rel.clone(), only.as_bytes().to_vec()));
            shared_ref.insert((*level, *problem), rel);
            let name =
                crate::runlog::sanitize(names.get(&(*level, *problem)).unwrap_or(&"problem"));
            files.push((
                format!("{PROBLEMS}/level{level}/{problem}_{name}.py"),
                only.as_bytes().to_vec(),
            ));
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
                    files.push((rel.clone(), r.as_bytes().to_vec()));
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
                files.push((file.clone(), src.as_bytes().to_vec()));
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
    Planned {
        claims,
        files,
        notes,
    }
}

/// Writes what [`plan`] decided into `out` (made ready by `out_folder::prepare_out`), the
/// claims file and then the manifest of every file written last.
pub(crate) fn commit(out: &Path, planned: &Planned) -> Result<()> {
    let claims = serde_json::to_string_pretty(&planned.claims)?;
    let mut written = Vec::with_capacity(planned.files.len() + 1);
    for (rel, bytes) in planned
        .files
        .iter()
        .map(|(r, b)| (r.as_str(), b.as_slice()))
        .chain([(CLAIMS, claims.as_bytes())])
    {
        write_new(&out.join(rel), bytes)?;
        written.push(WrittenFile::of(rel, bytes));
    }
    super::out_folder::write_manifest(out, written)
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
