//! `kbench import kernelbench-runs`: KernelBench's `runs/<name>/` folder (kbench run
//! directories write the same `eval_results.json`). Kernels are its
//! `level_<L>_problem_<P>_sample_<S>_kernel.py` files; `eval_results.json`, when present,
//! gives each sample's claimed correctness and mean runtime (ms). Problem ids there are per
//! level, so the level comes from the kernel files, which must then all be of one level.
//! A speedup is claimed only with KernelBench's baseline times (`--baseline-json`,
//! `{"level1": {"<id>_<Name>.py": {"mean": ms}}}`): baseline mean / runtime, against
//! `compile` when the file's name says so, else `eager`.
//!
//! Files are read through [`UntrustedDir`] over the folder: a kernel file that links out of
//! it (or to a kbench run's `secret`, which a kbench run folder holds), a FIFO, an
//! oversized or non-UTF-8 file is an error naming it, and its entry a `no_kernel` one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use kbench_record::claims::Claim;
use kbench_record::eval_results::samples_of;
use serde_json::Value;

use super::{Entry, Parsed};
use crate::agents::untrusted_file::{read_named_text, UntrustedDir, INDEX_CAP, KERNEL_CAP};

const EVAL_RESULTS: &str = "eval_results.json";

/// `level_1_problem_19_sample_0_kernel.py` → (1, 19, 0).
fn parse_name(name: &str) -> Option<(u8, u32, u32)> {
    let rest = name.strip_prefix("level_")?.strip_suffix("_kernel.py")?;
    let (l, rest) = rest.split_once("_problem_")?;
    let (p, s) = rest.split_once("_sample_")?;
    Some((l.parse().ok()?, p.parse().ok()?, s.parse().ok()?))
}

/// Baseline times: (level, id) → mean ms, and the baseline they are.
struct Baselines {
    kind: &'static str,
    field: String,
    means: BTreeMap<(u8, u32), f64>,
}

fn read_baselines(path: &Path) -> Result<Baselines> {
    let text = read_named_text(path, INDEX_CAP)
        .map_err(|why| anyhow!("cannot read --baseline-json {}: it {why}", path.display()))?;
    let data: Value = serde_json::from_str(&text)
        .with_context(|| format!("--baseline-json {} is not JSON", path.display()))?;
    let Some(levels) = data.as_object() else {
        bail!("--baseline-json {}: expected KernelBench's {{\"level1\": {{\"<id>_<Name>.py\": {{\"mean\": ms}}}}}}", path.display());
    };
    let mut means = BTreeMap::new();
    for (lk, problems) in levels {
        let Some(level) = lk.strip_prefix("level").and_then(|l| l.parse::<u8>().ok()) else {
            continue;
        };
        for (file, t) in problems.as_object().into_iter().flatten() {
            let id = file
                .split_once('_')
                .and_then(|(id, _)| id.parse::<u32>().ok());
            let mean = t.get("mean").and_then(Value::as_f64);
            if let (Some(id), Some(mean)) = (id, mean.filter(|m| *m > 0.0)) {
                means.insert((level, id), mean);
            }
        }
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    Ok(Baselines {
        kind: if name.to_ascii_lowercase().contains("compile") {
            "compile"
        } else {
            "eager"
        },
        field: format!("runtime ({name} mean / runtime)"),
        means,
    })
}

pub(crate) fn read(src: &Path, baseline_json: Option<&Path>) -> Result<Parsed> {
    let listing = std::fs::read_dir(src)
        .with_context(|| format!("cannot read the runs folder {}", src.display()))?;
    let baselines = baseline_json.map(read_baselines).transpose()?;
    let folder = UntrustedDir::new(src, &[])
        .with_context(|| format!("cannot read the runs folder {}", src.display()))?;
    let mut out = Parsed::default();
    let mut names: Vec<String> = listing
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    let mut at: BTreeMap<(u8, u32, u32), usize> = BTreeMap::new();
    for name in names {
        let Some((level, problem, sample)) = parse_name(&name) else {
            continue;
        };
        let (kernel, missing) = match folder.read_text(Path::new(&name), KERNEL_CAP) {
            Ok(s) => (Some(s), None),
            Err(why) => {
                let why = format!("kernel file {name} not imported: it {why}");
                out.error(name.clone(), why.clone());
                (None, Some(why))
            }
        };
        at.insert((level, problem, sample), out.entries.len());
        out.entries.push(Entry {
            at: name,
            level,
            problem,
            sample: Some(sample),
            kernel,
            missing,
            ..Entry::default()
        });
    }
    let results_path = src.join(EVAL_RESULTS);
    // `symlink_metadata`: a dangling link is there, and named below.
    if std::fs::symlink_metadata(&results_path).is_err() {
        if baselines.is_some() {
            out.error(
                EVAL_RESULTS,
                "--baseline-json was given but the folder has no eval_results.json: no runtimes to make speedups of",
            );
        }
        return Ok(out);
    }
    let levels: BTreeSet<u8> = at.keys().map(|k| k.0).collect();
    let level = match levels.iter().collect::<Vec<_>>().as_slice() {
        [only] => **only,
        [] => {
            out.error(EVAL_RESULTS, "its problem ids are per level, and no level_<L>_problem_<P>_sample_<S>_kernel.py file says which level: not read");
            return Ok(out);
        }
        many => {
            out.error(EVAL_RESULTS, format!("its problem ids are per level, but the kernel files are of levels {many:?}: not read (KernelBench runs are single-level)"));
            return Ok(out);
        }
    };
    let parsed: Result<Value, String> = folder
        .read_text(Path::new(EVAL_RESULTS), INDEX_CAP)
        .map_err(|why| format!("not read: it {why}"))
        .and_then(|t| serde_json::from_str(&t).map_err(|e| format!("not JSON ({e})")));
    let problems = match parsed {
        Ok(Value::Object(m)) => m,
        Ok(_) => {
            out.error(EVAL_RESULTS, "expected an object of problem ids");
            return Ok(out);
        }
        Err(e) => {
            out.error(EVAL_RESULTS, e);
            return Ok(out);
        }
    };
    let mut no_baseline = BTreeSet::new();
    for (pid, value) in &problems {
        let here = format!("{EVAL_RESULTS} key {pid:?}");
        let Ok(problem) = pid.trim().parse::<u32>() else {
            out.error(here, "not a problem id");
            continue;
        };
        let samples = match samples_of(value) {
            Ok(s) => s,
            Err(e) => {
                out.error(here, e);
                continue;
            }
        };
        for (i, result) in samples.into_iter().enumerate() {
            let r = match result {
                Ok(r) => r,
                Err(e) => {
                    out.error(format!("{here} [{i}]"), e);
                    continue;
                }
            };
            let mut claims = Vec::new();
            if let Some(b) = &baselines {
                if r.correctness && r.runtime > 0.0 {
                    match b.means.get(&(level, problem)) {
                        Some(mean) => claims.push(Claim {
                            speedup: mean / r.runtime,
                            baseline: b.kind.into(),
                            field: b.field.clone(),
                        }),
                        None => {
                            no_baseline.insert(problem);
                        }
                    }
                }
            }
            let key = (level, problem, r.sample_id);
            let entry = match at.get(&key) {
                Some(&i) => &mut out.entries[i],
                None => {
                    let file = format!(
                        "level_{level}_problem_{problem}_sample_{}_kernel.py",
                        r.sample_id
                    );
                    at.insert(key, out.entries.len());
                    out.entries.push(Entry {
                        at: format!("{here} sample {}", r.sample_id),
                        level,
                        problem,
                        sample: Some(r.sample_id),
                        missing: Some(format!(
                            "eval_results.json has a result for it but the folder has no {file}"
                        )),
                        ..Entry::default()
                    });
                    out.entries.last_mut().expect("just pushed")
                }
            };
            entry.claimed_correct = Some(r.correctness);
            entry.claims = claims;
        }
    }
    for problem in no_baseline {
        out.error(
            format!("level {level} problem {problem}"),
            "--baseline-json has no time for it: its speedup is not claimed",
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_parse() {
        assert_eq!(
            parse_name("level_2_problem_40_sample_3_kernel.py"),
            Some((2, 40, 3))
        );
        assert_eq!(parse_name("level_2_problem_40_sample_x_kernel.py"), None);
        assert_eq!(parse_name("eval_results.json"), None);
    }
}
