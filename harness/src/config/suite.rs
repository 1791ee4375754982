//! The problems of a run: which suite ([`SuiteSpec`]), loaded and filtered by `--select`, and
//! the problem files handed to workers.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kbench_suites::Problem;

use crate::config::resolve::Selection;
use crate::worker::python;

/// Which problems to take: one problem file, levels of a KernelBench checkout, or (neither
/// given) the built-in smoke suite; then only those `select` names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SuiteSpec {
    /// A single problem file.
    pub problem: Option<PathBuf>,
    /// A KernelBench checkout, or a folder holding level1/ level2/ level3/.
    pub kernelbench: Option<PathBuf>,
    /// Levels to take from `kernelbench`.
    pub levels: Vec<u8>,
    /// `--select`: comma-separated `ID`, `A-B`, `L/ID` or `L/A-B`.
    pub select: Option<String>,
}

impl SuiteSpec {
    /// Human description of the problem source, e.g. `smoke` or the KernelBench path.
    pub fn label(&self) -> String {
        if let Some(p) = &self.problem {
            return format!("file {}", p.display());
        }
        if let Some(d) = &self.kernelbench {
            return format!("kernelbench {} levels {:?}", d.display(), self.levels);
        }
        "smoke".into()
    }
}

/// Loads the problems the suite names, filtered by `--select`.
pub fn load_suite(s: &SuiteSpec) -> Result<Vec<Problem>> {
    let mut problems = if let Some(p) = &s.problem {
        vec![kbench_suites::load_problem_file(p)?]
    } else if let Some(d) = &s.kernelbench {
        for l in &s.levels {
            if !(1..=3).contains(l) {
                bail!("--levels: level {l} is not one of 1, 2, 3");
            }
        }
        kbench_suites::load_kernelbench(d, &s.levels)?
    } else {
        kbench_suites::smoke()
    };
    if let Some(spec) = &s.select {
        let sel = Selection::parse(spec)?;
        problems.retain(|p| sel.matches(p.level, p.id));
        if problems.is_empty() {
            bail!("--select {spec} matches no problem of the suite");
        }
    }
    Ok(problems)
}

/// The problem file handed to workers: the exact bytes that were hashed, in the cache.
pub fn materialize_problem(cache: &Path, p: &Problem) -> Result<PathBuf> {
    python::write_content_addressed(&cache.join("problems"), &p.file, p.source.as_bytes())
        .with_context(|| format!("writing problem {} to the cache", p.file))
}
