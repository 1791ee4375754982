//! Which problems a command takes (`--suite`, `--kernelbench`, `--levels`, `--problem`,
//! `--select`): shared by `run`, `list`, `audit` and `baselines measure`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// Which problems to take.
#[derive(Debug, Args, Clone, Default)]
pub struct SuiteArgs {
    /// A built-in suite.
    #[arg(long, value_enum, conflicts_with_all = ["kernelbench", "problem"])]
    pub suite: Option<BuiltinSuite>,
    /// A KernelBench checkout, or a folder holding level1/ level2/ level3/.
    #[arg(long, value_name = "DIR", conflicts_with = "problem")]
    pub kernelbench: Option<PathBuf>,
    /// Levels to take from --kernelbench (default: every level folder it has of 1, 2, 3).
    #[arg(long, value_delimiter = ',')]
    pub levels: Vec<u8>,
    /// A single problem file (class Model, get_inputs, get_init_inputs).
    #[arg(long, value_name = "FILE")]
    pub problem: Option<PathBuf>,
    /// Only these problems: comma-separated `ID`, `A-B`, `L/ID` or `L/A-B` (e.g. 1/19,2/1-5).
    #[arg(long, value_name = "SPEC")]
    pub select: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BuiltinSuite {
    /// kbench's own small problems, fast on one CPU core.
    Smoke,
}
