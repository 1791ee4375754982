//! `kbench import leaderboard`: KernelBenchLeaderboard's site data. `docs/assets/data.json`
//! maps `"Level L: ID_Name"` to a list of `{display_name, torch_speedup, file}`; the kernel
//! is `docs/assets/solutions/<file>.py` and the problem as the leaderboard ran it is
//! `docs/assets/problems/lL_pP.py` (the set's reference). An entry's sample is its index in
//! its problem's list; published entries passed KernelBench's check, so each is claimed
//! correct, with `torch_speedup` against eager PyTorch.
//!
//! Every file is read through [`UntrustedDir`] over the assets folder: a `file` with `..` or
//! an absolute path, a link out of the folder, a FIFO, an oversized or non-UTF-8 file is an
//! error naming its entry, and the entry is kept as a `no_kernel` one (its claims visible).

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use kbench_record::claims::Claim;
use serde_json::Value;

use super::{Entry, Parsed};
use crate::agents::untrusted_file::{Refusal, UntrustedDir, INDEX_CAP, KERNEL_CAP};

/// The assets folder: SRC itself or SRC/docs/assets.
fn assets_of(src: &Path) -> Result<PathBuf> {
    for dir in [src.join("docs").join("assets"), src.to_path_buf()] {
        if dir.join("data.json").is_file() {
            return Ok(dir);
        }
    }
    bail!(
        "{} is not KernelBenchLeaderboard's site: no data.json in it or in its docs/assets/",
        src.display()
    )
}

/// `Level 1: 23_Softmax` → (1, 23).
fn parse_key(key: &str) -> Option<(u8, u32)> {
    let rest = key.trim().strip_prefix("Level")?.trim_start();
    let (level, rest) = rest.split_once(':')?;
    let (id, _) = rest.trim_start().split_once('_')?;
    Some((level.trim().parse().ok()?, id.parse().ok()?))
}

pub(crate) fn read(src: &Path) -> Result<Parsed> {
    let assets = assets_of(src)?;
    let data_path = assets.join("data.json");
    let folder = UntrustedDir::new(&assets, &[])
        .with_context(|| format!("cannot read {}", assets.display()))?;
    let text = folder
        .read_text(Path::new("data.json"), INDEX_CAP)
        .map_err(|why| anyhow!("cannot read {}: it {why}", data_path.display()))?;
    let data: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not JSON", data_path.display()))?;
    let Value::Object(map) = data else {
        bail!(
            "{} is not the leaderboard's data: expected an object of \"Level L: ID_Name\" keys",
            data_path.display()
        );
    };
    let mut out = Parsed::default();
    let mut empty = 0;
    for (key, list) in &map {
        let at = format!("key {key:?}");
        let Some((level, problem)) = parse_key(key) else {
            out.error(at, "not a \"Level L: ID_Name\" key");
            continue;
        };
        let Value::Array(items) = list else {
            out.error(at, "expected a list of {display_name, torch_speedup, file}");
            continue;
        };
        if items.is_empty() {
            empty += 1;
            continue;
        }
        let ref_rel = format!("problems/l{level}_p{problem}.py");
        let reference = match folder.read_text(Path::new(&ref_rel), KERNEL_CAP) {
            Ok(r) => Some(r),
            Err(why) if why.is_missing() => {
                out.error(
                    at.clone(),
                    format!("no problem file {ref_rel}: its kernels are imported without the set's reference"),
                );
                None
            }
            Err(why) => {
                out.error(
                    at.clone(),
                    format!("problem file {ref_rel} not read: it {why}; its kernels are imported without the set's reference"),
                );
                None
            }
        };
        for (i, item) in items.iter().enumerate() {
            let at = format!("{at} [{i}]");
            let file = match item.get("file").and_then(Value::as_str) {
                Some(f) if !f.trim().is_empty() => f.trim(),
                _ => {
                    out.error(at, "file is missing or not a string");
                    continue;
                }
            };
            let claims = match item.get("torch_speedup") {
                Some(Value::Number(n)) => match n.as_f64().filter(|x| x.is_finite() && *x >= 0.0) {
                    Some(speedup) => vec![Claim {
                        speedup,
                        baseline: "eager".into(),
                        field: "torch_speedup".into(),
                    }],
                    None => {
                        out.error(at, format!("torch_speedup is {n}, not a speedup"));
                        continue;
                    }
                },
                None | Some(Value::Null) => Vec::new(),
                Some(v) => {
                    out.error(at, format!("torch_speedup is {v}, not a number"));
                    continue;
                }
            };
            // Joined as paths: an absolute `file` stays absolute, and is refused as such.
            let kernel_path = Path::new("solutions").join(format!("{file}.py"));
            let kernel_rel = kernel_path.display().to_string();
            let (kernel, missing) = match folder.read_text(&kernel_path, KERNEL_CAP) {
                Ok(k) => (Some(k), None),
                Err(why) if why.is_missing() => {
                    (None, Some(format!("{kernel_rel} is not in the set")))
                }
                Err(why) => {
                    let why = not_imported(&kernel_rel, &why);
                    out.error(at.clone(), why.clone());
                    (None, Some(why))
                }
            };
            out.entries.push(Entry {
                at,
                level,
                problem,
                sample: Some(i as u32),
                label: item
                    .get("display_name")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                missing,
                kernel,
                claims,
                claimed_correct: Some(true),
                reference: reference.clone(),
                problem_name: key
                    .split_once(':')
                    .and_then(|(_, r)| r.trim().split_once('_'))
                    .map(|(_, name)| name.to_string()),
            });
        }
    }
    if empty > 0 {
        out.notes.push(format!(
            "{empty} problem(s) of data.json list no entries (the leaderboard has no kernel for them): nothing to import for those"
        ));
    }
    Ok(out)
}

/// Why a kernel file of the set was refused, for its entry.
fn not_imported(rel: &str, why: &Refusal) -> String {
    format!("kernel file {rel} not imported: it {why}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse() {
        assert_eq!(parse_key("Level 1: 23_Softmax"), Some((1, 23)));
        assert_eq!(parse_key("Level 3: 5_MinGPT_Block"), Some((3, 5)));
        assert_eq!(parse_key("Level x: 5_A"), None);
        assert_eq!(parse_key("1_A"), None);
    }
}
