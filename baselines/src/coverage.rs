//! How much of a problem set one baseline file covers, per level: problems with a usable
//! time, problems whose measurement failed (with the recorded outcome), stale entries, and
//! problems with neither a time nor a reason (gaps). Pure data for `kbench baselines show`.

use std::collections::BTreeMap;

use kbench_suites::Problem;
use serde::Serialize;

use crate::store::{BaselineFile, Lookup};

/// One level's coverage by one file.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LevelCoverage {
    pub level: u8,
    /// Problems of the level in the set; `None` when no set was given (only the file's own
    /// entries are known, so gaps cannot be counted).
    pub problems: Option<usize>,
    /// Usable times.
    pub measured: usize,
    /// Recorded failures, by outcome (`timeout`, `out_of_memory`, `mismatch`, ...).
    pub failed: BTreeMap<String, usize>,
    /// Entries that must not be used (the problem changed after it was timed or failed).
    pub stale: usize,
    /// Problems with neither a time nor a recorded failure: `level/file` names, sorted by id.
    pub gaps: Vec<String>,
}

impl LevelCoverage {
    pub fn failed_total(&self) -> usize {
        self.failed.values().sum()
    }

    /// Every problem has a time or a recorded reason, and none is stale.
    pub fn complete(&self) -> bool {
        self.problems.is_some() && self.gaps.is_empty() && self.stale == 0
    }
}

/// Coverage of `problems` by `file`, per level of the set.
pub fn coverage_of(file: &BaselineFile, problems: &[Problem]) -> Vec<LevelCoverage> {
    let mut by_level: BTreeMap<u8, LevelCoverage> = BTreeMap::new();
    for p in problems {
        let r = p.to_ref();
        let c = by_level.entry(r.level).or_insert_with(|| LevelCoverage {
            level: r.level,
            problems: Some(0),
            ..Default::default()
        });
        *c.problems.get_or_insert(0) += 1;
        match file.lookup(r.level, &r.file, &r.sha256) {
            Lookup::Usable(_) => c.measured += 1,
            Lookup::Failed(e) => *c.failed.entry(e.outcome.clone()).or_insert(0) += 1,
            Lookup::Stale(_) => c.stale += 1,
            Lookup::Missing => c.gaps.push(format!("level{}/{}", r.level, r.file)),
        }
    }
    by_level.into_values().collect()
}

/// Coverage as far as the file alone tells: its entries per level, no gaps known.
pub fn entries_of(file: &BaselineFile) -> Vec<LevelCoverage> {
    let mut by_level: BTreeMap<u8, LevelCoverage> = BTreeMap::new();
    let new = |level| LevelCoverage {
        level,
        ..Default::default()
    };
    for (&level, entries) in &file.levels {
        let c = by_level.entry(level).or_insert_with(|| new(level));
        for e in entries.values() {
            if e.stale.is_some() {
                c.stale += 1;
            } else {
                c.measured += 1;
            }
        }
    }
    for (&level, errors) in &file.errors {
        let c = by_level.entry(level).or_insert_with(|| new(level));
        for e in errors.values() {
            *c.failed.entry(e.outcome.clone()).or_insert(0) += 1;
        }
    }
    by_level.into_values().collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::store::{BaselineEnv, Entry, ErrorEntry, Origin};
    use crate::Mode;

    /// A problem of `level` whose source names it (shared with the table's tests).
    pub(crate) fn problem(level: u8, id: u32) -> Problem {
        let source = format!("class Model: pass  # problem {level}/{id}\n");
        Problem {
            suite: "kernelbench".into(),
            level,
            id,
            name: format!("P{id}"),
            file: format!("{id}_P{id}.py"),
            sha256: kbench_suites::sha256_hex(source.as_bytes()),
            source,
            origin: None,
        }
    }

    fn entry(sha: &str) -> Entry {
        Entry {
            problem_sha256: Some(sha.into()),
            ..Entry::from_samples(vec![1.0], "H100", "cuda:0")
        }
    }

    fn error(outcome: &str) -> ErrorEntry {
        ErrorEntry {
            outcome: outcome.into(),
            message: "why".into(),
            compile_s: None,
            problem_sha256: None,
            measured_unix_s: None,
            run_id: None,
            profile: None,
            gpu_alone: false,
            gpu_uuid: None,
        }
    }

    #[test]
    fn every_problem_is_measured_failed_stale_or_a_gap() {
        let problems: Vec<Problem> = (1..=5)
            .map(|i| problem(1, i))
            .chain([problem(2, 1)])
            .collect();
        let mut f = BaselineFile::new(Mode::Compile, Origin::Measured, BaselineEnv::default());
        let l1 = f.levels.entry(1).or_default();
        l1.insert("1_P1.py".into(), entry(&problems[0].to_ref().sha256));
        l1.insert("2_P2.py".into(), entry("another source"));
        let e1 = f.errors.entry(1).or_default();
        e1.insert("3_P3.py".into(), error("timeout"));
        e1.insert("4_P4.py".into(), error("timeout"));
        let cov = coverage_of(&f, &problems);
        assert_eq!(cov.len(), 2);
        let (l1, l2) = (&cov[0], &cov[1]);
        assert_eq!((l1.problems, l1.measured, l1.stale), (Some(5), 1, 1));
        assert_eq!(l1.failed, BTreeMap::from([("timeout".to_string(), 2)]));
        assert_eq!(l1.gaps, vec!["level1/5_P5.py".to_string()]);
        assert!(!l1.complete());
        assert_eq!((l2.problems, l2.measured, l2.gaps.len()), (Some(1), 0, 1));
        // The file alone: its entries, nothing known about gaps.
        let alone = entries_of(&f);
        assert_eq!(alone.len(), 1);
        assert_eq!(
            (
                alone[0].problems,
                alone[0].measured,
                alone[0].failed_total()
            ),
            (None, 2, 2)
        );
        assert!(!alone[0].complete());
    }
}
