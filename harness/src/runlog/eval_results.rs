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
pub(crate) const EVAL_RESULTS: &str = "eval_results.json";

/// Writes the files for `records` (the whole log, last record per key winning) into the run
/// directory `dir`; returns the paths written.
pub(crate) fn write_eval_results(dir: &Path, records: &[EvalRecord]) -> Result<Vec<PathBuf>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::one_shot_records;
    use kbench_record::eval_results::KbEvalResults;
    use kbench_record::Outcome;

    fn read(path: &Path) -> KbEvalResults {
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    #[test]
    fn one_file_per_level_last_record_wins_and_samples_stay_unique() {
        let mut records = one_shot_records();
        // Resumed log: the same key again, now a compile error; it wins.
        let mut again = records[0].clone();
        again.outcome = Outcome::CompileError {
            message: "boom".into(),
        };
        again.timing = None;
        // Another candidate with the same sample number: kept out, named in metadata.
        let mut other = records[1].clone();
        other.candidate.name = "round02".into();
        records.extend([again, other]);
        let t = tempfile::tempdir().unwrap();
        // A top-level file of an earlier single-level run is removed: this one spans levels.
        std::fs::write(t.path().join(EVAL_RESULTS), "{}").unwrap();
        let written = write_eval_results(t.path(), &records).unwrap();
        assert_eq!(written.len(), 3, "{written:?}");
        assert!(!t.path().join(EVAL_RESULTS).exists());
        let l1 = read(&t.path().join("kernelbench/level_1/eval_results.json"));
        let p1 = &l1[&1];
        assert_eq!(p1.len(), 1);
        assert!(!p1[0].compiled && !p1[0].correctness && p1[0].runtime == -1.0);
        assert!(p1[0].metadata["compilation_error"]
            .as_str()
            .unwrap()
            .contains("boom"));
        let p19 = &l1[&19];
        assert_eq!(p19.len(), 1);
        assert!(p19[0].correctness && p19[0].runtime > 0.0);
        assert_eq!(
            p19[0].metadata["kbench_same_sample_candidates"],
            serde_json::json!(["round02"])
        );
        let l2 = read(&t.path().join("kernelbench/level_2/eval_results.json"));
        assert!(l2[&40][0].metadata.contains_key("runtime_error"));
        assert!(t
            .path()
            .join("kernelbench/level_3/eval_results.json")
            .exists());
    }
}
