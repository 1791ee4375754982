//! A run's records as KernelBench's `eval_results.json`, so its analysis scripts read kbench
//! runs: `kernelbench/level_<L>/eval_results.json` for every level of the run, and
//! `eval_results.json` at the top of the run directory too when the run has one level (the
//! place KernelBench's `runs/<name>/` has it). Rewritten whole whenever a run or a merge
//! finishes; the types are `kbench_record::eval_results`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kbench_record::eval_results::from_records;
use kbench_record::EvalRecord;

use super::write_atomic;

/// The file's name, at the top of a single-level run and in each level's folder.
pub const EVAL_RESULTS: &str = "eval_results.json";

/// Writes the files for `records` (the whole log, last record per key winning) into the run
/// directory `dir`; returns the paths written.
pub fn write_eval_results(dir: &Path, records: &[EvalRecord]) -> Result<Vec<PathBuf>> {
    let levels = from_records(records);
    let mut written = Vec::new();
    for (level, results) in &levels {
        let folder = dir.join("kernelbench").join(format!("level_{level}"));
        std::fs::create_dir_all(&folder)
            .with_context(|| format!("creating {}", folder.display()))?;
        let path = folder.join(EVAL_RESULTS);
        write_atomic(&path, &serde_json::to_vec_pretty(results)?)?;
        written.push(path);
    }
    let top = dir.join(EVAL_RESULTS);
    match levels.values().next() {
        Some(only) if levels.len() == 1 => {
            write_atomic(&top, &serde_json::to_vec_pretty(only)?)?;
            written.push(top);
        }
        // Several levels: a top-level file would mix problem ids of different levels.
        _ => {
            if top.exists() {
                std::fs::remove_file(&top)
                    .with_context(|| format!("removing {}", top.display()))?;
            }
        }
    }
    Ok(written)
}
