//! Arguments of `kbench audit`: the problems a trivial kernel passes.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::setup::PythonArgs;
use super::suite::SuiteArgs;

/// The KernelBench tolerance an audit checks against (at fp32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuditProfileArg {
    /// KernelBench HEAD: atol = rtol = 1e-4.
    Kernelbench,
    /// The papers' KernelBench: atol = rtol = 1e-2.
    #[value(name = "kernelbench-v0.1")]
    KernelbenchV01,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Example: kbench audit --kernelbench KernelBench --device cpu --max-rows 64 \
                  --jobs 2 --out audit/kernelbench"
)]
pub struct AuditArgs {
    #[command(flatten)]
    pub suite: SuiteArgs,
    #[command(flatten)]
    pub python: PythonArgs,
    /// auto (a GPU when there is one), cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Tolerance profile the trivial outputs are checked against (fp32).
    #[arg(long, value_enum, default_value = "kernelbench")]
    pub profile: AuditProfileArg,
    /// Write audit.json and audit.md into this directory (default: print the table only).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Seconds allowed per problem (worker start, load and all measurements).
    #[arg(long, default_value_t = 600.0)]
    pub timeout: f64,
    /// Cut the batch dimension of the inputs to this many rows where the model allows it
    /// (for hosts without the memory of the problems' full inputs).
    #[arg(long, value_name = "N")]
    pub max_rows: Option<u64>,
    /// Problems audited in parallel (one worker process each).
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// CPU intra-op threads per worker on --device cpu (default: the cores divided by --jobs).
    #[arg(long, value_name = "N")]
    pub cpu_threads: Option<u32>,
    /// Seed for weights, set before get_init_inputs and Model (KernelBench: 42).
    #[arg(long, default_value_t = 42)]
    pub weight_seed: u64,
    /// Continue an interrupted audit into --out: the problems it already audited (with the
    /// same settings) are kept, not measured again.
    #[arg(long, requires = "out")]
    pub resume: bool,
}
