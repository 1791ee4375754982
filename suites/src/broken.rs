//! A problem file of a suite that could not be loaded as a problem: it costs that problem
//! one `problem_error` record, never the whole suite.

use std::path::PathBuf;

use kbench_record::ProblemRef;

/// A file named like a problem (`<id>_<Name>.py` in a `levelN/` folder) that is not a
/// loadable one: unreadable, not UTF-8, missing `class Model` / `get_inputs` /
/// `get_init_inputs`, or sharing its id with another file. Files not named like problems
/// (`__init__.py`, helpers) are not problems and never become one of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("problem file {}: {reason}", path.display())]
pub struct BrokenProblem {
    pub suite: String,
    pub level: u8,
    pub id: u32,
    /// The file stem after `<id>_`.
    pub name: String,
    /// File name as in the suite, e.g. `7_Broken.py`.
    pub file: String,
    pub path: PathBuf,
    /// sha256 of the file's bytes, hex; empty when they could not be read.
    pub sha256: String,
    /// What is wrong and what to do about it.
    pub reason: String,
}

impl BrokenProblem {
    /// The problem reference its `problem_error` record carries.
    pub fn to_ref(&self) -> ProblemRef {
        ProblemRef {
            suite: self.suite.clone(),
            level: self.level,
            id: self.id,
            name: self.name.clone(),
            file: self.file.clone(),
            sha256: self.sha256.clone(),
        }
    }

    /// Stable key, e.g. `kernelbench/L1/7`, as a loaded problem of that id would have.
    pub fn key(&self) -> String {
        self.to_ref().key()
    }
}

/// One problem file of a suite: loaded, or broken (named, with what is wrong).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loaded {
    Problem(crate::Problem),
    Broken(BrokenProblem),
}

impl Loaded {
    /// The problem, when it loaded.
    pub fn problem(&self) -> Option<&crate::Problem> {
        match self {
            Loaded::Problem(p) => Some(p),
            Loaded::Broken(_) => None,
        }
    }

    /// The broken file, when it did not load.
    pub fn broken(&self) -> Option<&BrokenProblem> {
        match self {
            Loaded::Problem(_) => None,
            Loaded::Broken(b) => Some(b),
        }
    }

    /// `(level, id)` of the problem or broken file.
    pub fn level_id(&self) -> (u8, u32) {
        match self {
            Loaded::Problem(p) => (p.level, p.id),
            Loaded::Broken(b) => (b.level, b.id),
        }
    }
}
