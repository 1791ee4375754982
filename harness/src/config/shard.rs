//! Shards of a run: `--shard i/N` keeps every N-th problem of the suite, counting from the
//! i-th, in a fixed order, so that every shard of one command line gets the same problems
//! every time it runs (a resubmitted shard redoes exactly its own work, `--resume` skips
//! what it already recorded) and the N shards together cover the plan once.
//!
//! Shards split by problem, not by candidate: a problem's reference cases are made once per
//! process and kept for all its candidates, so splitting one problem's candidates over
//! hosts would make them again on each.

use std::fmt;
use std::str::FromStr;

use kbench_suites::Loaded;
#[cfg(test)]
use kbench_suites::Problem;

use crate::config::suite::Suite;

/// Shard `index` of `count` (0-based), written `i/N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    pub(crate) index: u32,
    pub(crate) count: u32,
}

impl Shard {
    #[cfg(test)]
    /// This shard's problems: round-robin over the problems sorted by (level, id, suite,
    /// file). Sorting first makes the split independent of the order the suite was read in;
    /// round-robin over the sorted list spreads each level (and so the heavy level-3
    /// problems) evenly.
    pub(crate) fn select(&self, problems: Vec<Problem>) -> Vec<Problem> {
        self.select_by(problems, |p| {
            (p.level, p.id, p.suite.clone(), p.file.clone())
        })
    }

    /// This shard's part of a suite: its problems and its broken problem files together,
    /// split as [`select`](Self::select) splits problems, so that the shards of one command
    /// line record each broken file once.
    pub(crate) fn select_suite(&self, suite: Suite) -> Suite {
        let all: Vec<Loaded> = suite
            .problems
            .into_iter()
            .map(Loaded::Problem)
            .chain(suite.broken.into_iter().map(Loaded::Broken))
            .collect();
        let mut out = Suite::default();
        let key = |e: &Loaded| match e {
            Loaded::Problem(p) => (p.level, p.id, p.suite.clone(), p.file.clone()),
            Loaded::Broken(b) => (b.level, b.id, b.suite.clone(), b.file.clone()),
        };
        for e in self.select_by(all, key) {
            match e {
                Loaded::Problem(p) => out.problems.push(p),
                Loaded::Broken(b) => out.broken.push(b),
            }
        }
        out
    }

    fn select_by<T, K: Ord>(&self, mut items: Vec<T>, key: impl Fn(&T) -> K) -> Vec<T> {
        items.sort_by_key(|x| key(x));
        items
            .into_iter()
            .enumerate()
            .filter(|(i, _)| *i as u64 % u64::from(self.count) == u64::from(self.index))
            .map(|(_, p)| p)
            .collect()
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("--shard {s}: expected i/N with 0 <= i < N, e.g. 0/3");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        let s: Shard = "1/3".parse().unwrap();
        assert_eq!(s, Shard { index: 1, count: 3 });
        assert_eq!(s.to_string(), "1/3");
        for bad in ["", "1", "3/3", "0/0", "-1/3", "a/3", "1/b", "1/3/4"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }

    #[test]
    fn shards_partition_the_suite_evenly_whatever_its_order() {
        let problems = kbench_suites::smoke();
        let n = problems.len();
        let mut reversed = problems.clone();
        reversed.reverse();
        let mut seen = Vec::new();
        for index in 0..3 {
            let shard = Shard { index, count: 3 };
            let keys: Vec<String> = shard
                .select(problems.clone())
                .iter()
                .map(Problem::key)
                .collect();
            let again: Vec<String> = shard
                .select(reversed.clone())
                .iter()
                .map(Problem::key)
                .collect();
            assert_eq!(keys, again, "shard {shard} depends on the suite's order");
            assert!(keys.len() == n / 3 || keys.len() == n / 3 + 1, "{keys:?}");
            seen.extend(keys);
        }
        seen.sort();
        let mut all: Vec<String> = problems.iter().map(Problem::key).collect();
        all.sort();
        assert_eq!(
            seen, all,
            "the shards must cover every problem exactly once"
        );
    }

    /// A broken problem file falls in exactly one shard, as a problem does.
    #[test]
    fn broken_problem_files_are_sharded_with_the_problems() {
        use kbench_suites::BrokenProblem;
        let broken = |id: u32| BrokenProblem {
            suite: "kernelbench".into(),
            level: 1,
            id,
            name: "Broken".into(),
            file: format!("{id}_Broken.py"),
            path: format!("level1/{id}_Broken.py").into(),
            sha256: String::new(),
            reason: "no class Model".into(),
        };
        let suite = Suite {
            problems: kbench_suites::smoke(),
            broken: vec![broken(100), broken(101)],
        };
        let total = suite.problems.len() + suite.broken.len();
        let mut seen = Vec::new();
        for index in 0..3 {
            let part = Shard { index, count: 3 }.select_suite(suite.clone());
            seen.extend(part.problems.iter().map(Problem::key));
            seen.extend(part.broken.iter().map(BrokenProblem::key));
        }
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), total);
    }
}
