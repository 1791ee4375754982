//! Problems for kbench: the KernelBench loader (any checkout, levels 1–3), single problem
//! files given on the command line, and kbench's own embedded `smoke` suite.
//!
//! A problem is a Python module in KernelBench's format (`class Model`, `get_inputs`,
//! `get_init_inputs`, as every level 1–3 file of KernelBench is written). This crate only reads and
//! checks sources; it never runs Python.

/// `(level, file name, source)` of an embedded smoke problem, read from `suites/smoke/`.
macro_rules! smoke_file {
    ($level:expr, $file:literal) => {
        ($level, $file, include_str!(concat!("../smoke/", $file)))
    };
}

mod broken;
mod error;
mod kernelbench;
mod problem;
mod smoke;
mod validate;

pub use broken::{BrokenProblem, Loaded};
pub use error::SuiteError;
pub use kernelbench::{
    kernelbench_levels, load_kernelbench, load_problem_file, KERNELBENCH_LEVELS,
};
pub use problem::{parse_problem_file_name, sha256_hex, Problem};
pub use smoke::{smoke, SMOKE_SUITE};
pub use validate::validate_problem_source;
