//! One unit of work, measure → judge → record: a candidate's files prepared, its worker
//! started and driven through the cases and timing (`measure`), each answer judged
//! (`judge`), and its record assembled.
//!
//! May import every box below it (`measure`, `judge`, `runlog`, `agents`, `config`,
//! `worker`, `gpu`). Drives one worker at a time; concurrency is `exec`'s.

pub(crate) mod candidate;
pub(crate) mod prepare;
pub(crate) mod record;
pub(crate) mod start;

use std::path::Path;

use kbench_suites::Problem;

use crate::agents::Candidate;
use prepare::Prepared;

/// One unit of work: a candidate of a problem, prepared, under an agent's name.
pub(crate) struct Unit<'a> {
    pub(crate) problem: &'a Problem,
    /// The problem's file as the workers load it.
    pub(crate) problem_path: &'a Path,
    pub(crate) cand: &'a Candidate,
    pub(crate) prep: &'a Prepared,
    pub(crate) agent: &'a str,
}
