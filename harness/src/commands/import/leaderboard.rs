//! `kbench import leaderboard`: KernelBenchLeaderboard's site data. `docs/assets/data.json`
//! maps `"Level L: ID_Name"` to a list of `{display_name, torch_speedup, file}`; the kernel
//! is `docs/assets/solutions/<file>.py` and the problem as the leaderboard ran it is
//! `docs/assets/problems/lL_pP.py` (the set's reference). An entry's sample is its index in
//! its problem's list; published entries passed KernelBench's check, so each is claimed
//! correct, with `torch_speedup` against eager PyTorch.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kbench_record::claims::Claim;
use serde_json::Value;

use super::{Entry, Parsed};

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

pub fn read(src: &Path) -> Result<Parsed> {
    let assets = assets_of(src)?;
    let data_path = assets.join("data.json");
    let text = std::fs::read_to_string(&data_path)
        .with_context(|| format!("cannot read {}", data_path.display()))?;
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
        let ref_path = assets
            .join("problems")
            .join(format!("l{level}_p{problem}.py"));
        let reference = std::fs::read_to_string(&ref_path).ok();
        if reference.is_none() {
            out.error(
                at.clone(),
                format!("no problem file problems/l{level}_p{problem}.py: its kernels are imported without the set's reference"),
            );
        }
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
            let kernel_rel = format!("solutions/{file}.py");
            let kernel = std::fs::read_to_string(assets.join(&kernel_rel)).ok();
            out.entries.push(Entry {
                at,
                level,
                problem,
                sample: Some(i as u32),
                label: item
                    .get("display_name")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                missing: kernel
                    .is_none()
                    .then(|| format!("{kernel_rel} is not in the set (or not readable text)")),
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
