//! The problems of a run: which suite ([`SuiteSpec`]), loaded and filtered by `--select`, and
//! the problem files handed to workers.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kbench_suites::{BrokenProblem, Loaded, Problem};

use crate::config::resolve::Selection;
use crate::worker::python;

/// Which problems to take: one problem file, levels of a KernelBench checkout, or (neither
/// given) the built-in smoke suite; then only those `select` names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SuiteSpec {
    /// A single problem file.
    pub(crate) problem: Option<PathBuf>,
    /// A KernelBench checkout, or a folder holding level1/ level2/ level3/.
    pub(crate) kernelbench: Option<PathBuf>,
    /// Levels to take from `kernelbench`; none: every level folder it has.
    pub(crate) levels: Vec<u8>,
    /// `--select`: comma-separated `ID`, `A-B`, `L/ID` or `L/A-B`.
    pub(crate) select: Option<String>,
}

impl SuiteSpec {
    /// Human description of the problem source, e.g. `smoke` or the KernelBench path.
    pub(crate) fn label(&self) -> String {
        if let Some(p) = &self.problem {
            return format!("file {}", p.display());
        }
        if let Some(d) = &self.kernelbench {
            return format!("kernelbench {} levels {:?}", d.display(), self.levels_of(d));
        }
        "smoke".into()
    }

    /// What `--levels` left out took, when the KernelBench folder lacks a level folder (a
    /// folder of one level, an import's `problems/`), so that such a run is not taken for the
    /// whole benchmark; `None` when `--levels` was given or every level is there.
    pub(crate) fn default_levels_note(&self) -> Option<String> {
        let dir = self
            .kernelbench
            .as_ref()
            .filter(|_| self.problem.is_none())?;
        if !self.levels.is_empty() {
            return None;
        }
        let have = kbench_suites::kernelbench_levels(dir);
        let absent: Vec<String> = (1..=3u8)
            .filter(|l| !have.contains(l))
            .map(|l| format!("level{l}/"))
            .collect();
        if have.is_empty() || absent.is_empty() {
            return None;
        }
        let list: Vec<String> = have.iter().map(u8::to_string).collect();
        Some(format!(
            "--levels left out: taking level{} {} of {}, the level folder{} it has (it has no {}); pass --levels to choose",
            if have.len() == 1 { "" } else { "s" },
            list.join(", "),
            dir.display(),
            if have.len() == 1 { "" } else { "s" },
            absent.join(" or ")
        ))
    }

    /// The levels to take from KernelBench folder `dir`: those asked for, else every level
    /// folder it has.
    fn levels_of(&self, dir: &Path) -> Vec<u8> {
        if self.levels.is_empty() {
            kbench_suites::kernelbench_levels(dir)
        } else {
            self.levels.clone()
        }
    }
}

/// The problems a suite names, after `--select`: those that loaded, and the problem files
/// that could not be loaded as problems (each costs its own problem a `problem_error`
/// record, never the run).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Suite {
    pub(crate) problems: Vec<Problem>,
    pub(crate) broken: Vec<BrokenProblem>,
}

/// Loads the problems the suite names, filtered by `--select`. A single `--problem FILE` that
/// cannot be loaded is an error (it is the whole suite); a broken file of a KernelBench level
/// is one entry of [`Suite::broken`].
pub(crate) fn load_suite(s: &SuiteSpec) -> Result<Suite> {
    let mut suite = if let Some(p) = &s.problem {
        Suite {
            problems: vec![kbench_suites::load_problem_file(p)?],
            broken: Vec::new(),
        }
    } else if let Some(d) = &s.kernelbench {
        for l in &s.levels {
            if !(1..=3).contains(l) {
                bail!("--levels: level {l} is not one of 1, 2, 3");
            }
        }
        let levels = s.levels_of(d);
        if levels.is_empty() && d.is_dir() {
            bail!(
                "KernelBench folder {} has no level1/, level2/ or level3/ folder: pass a KernelBench checkout (holding KernelBench/level1..3) or a folder holding level folders",
                d.display()
            );
        }
        let mut suite = Suite::default();
        for entry in kbench_suites::load_kernelbench(d, &levels)? {
            match entry {
                Loaded::Problem(p) => suite.problems.push(p),
                Loaded::Broken(b) => suite.broken.push(b),
            }
        }
        suite
    } else {
        Suite {
            problems: kbench_suites::smoke(),
            broken: Vec::new(),
        }
    };
    if let Some(spec) = &s.select {
        let sel = Selection::parse(spec)?;
        suite.problems.retain(|p| sel.matches(p.level, p.id));
        suite.broken.retain(|b| sel.matches(b.level, b.id));
        if suite.problems.is_empty() && suite.broken.is_empty() {
            bail!("--select {spec} matches no problem of the suite");
        }
    }
    Ok(suite)
}

/// The problem file handed to workers: the exact bytes that were hashed, in the cache.
pub(crate) fn materialize_problem(cache: &Path, p: &Problem) -> Result<PathBuf> {
    python::write_content_addressed(&cache.join("problems"), &p.file, p.source.as_bytes())
        .with_context(|| format!("writing problem {} to the cache", p.file))
}
