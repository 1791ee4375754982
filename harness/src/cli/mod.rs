//! Command-line arguments (clap): plain values, no I/O. This file holds the top-level parser
//! and the command enum; each command (or family of commands) has its file with its arguments
//! (`run.rs`, `report.rs` for report and leaderboard, `baselines.rs`, `slurm.rs`, ...), and the
//! arguments several commands share have theirs (`suite.rs`, `eval.rs`, `setup.rs` for
//! `--python`). `commands::run_config` turns them into the plain values `config/` validates.

use clap::{Parser, Subcommand};

mod audit;
mod baselines;
mod check;
mod demo;
mod eval;
mod fake_llm;
mod gpus;
mod import;
mod list;
mod merge;
mod profile;
mod report;
mod run;
mod serve;
mod setup;
mod slurm;
mod suite;
pub use audit::{AuditArgs, AuditProfileArg};
pub use baselines::{BaselinesArgs, BaselinesCommand, ImportArgs, MeasureArgs, ShowArgs};
pub use check::CheckArgs;
pub use demo::DemoArgs;
pub use eval::{EvalArgs, PrecisionArg, ProfileArg};
pub use fake_llm::FakeLlmArgs;
pub use gpus::GpusArgs;
pub use import::{ImportFormat, ImportSetArgs, ModelModeArg};
pub use list::ListArgs;
pub use merge::MergeArgs;
pub use profile::ProfileArgs;
pub use report::{BasisArg, LeaderboardArgs, PickArg, ReportArgs, TableArg};
pub use run::{AgentArgs, AgentKind, RunArgs};
pub use serve::ServeArgs;
pub use setup::{PythonArgs, SetupArgs};
pub use slurm::{SlurmArgs, SlurmCommand, SlurmResubmitArgs, SlurmStatusArgs, SlurmSubmitArgs};
pub use suite::{BuiltinSuite, SuiteArgs};

#[derive(Debug, Parser)]
#[command(
    name = "kbench",
    version,
    about = "Evaluate LLM-written GPU kernels against KernelBench problems",
    after_help = "Exit codes: 0 all kernels ok, 1 harness error, 2 usage error, \
                  3 evaluated but some kernels failed, 4 (slurm status) shards still queued or \
                  running, 5 (slurm status) shards stopped unfinished: resubmit them, \
                  130 interrupted."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create kbench's private Python environment (torch, numpy, safetensors, ninja) and check it.
    Setup(SetupArgs),
    /// Set up, then evaluate the `reference` agent on the embedded smoke suite.
    Demo(DemoArgs),
    /// List the GPUs the CUDA driver sees, with the properties that bound kernel speed.
    Gpus(GpusArgs),
    /// List the problems of a suite: level, id and name, one per line.
    List(ListArgs),
    /// Evaluate an agent's kernels over a suite and append records to a run log.
    Run(Box<RunArgs>),
    /// Metrics of one or more runs, from their logs alone: a table, exports, paper tables, plots.
    Report(ReportArgs),
    /// Write a static HTML page comparing runs side by side (one file, no network).
    Leaderboard(LeaderboardArgs),
    /// Shard a kbench command over a Slurm job array; follow and resubmit its shards.
    Slurm(SlurmArgs),
    /// A published kernel set (KernelBench runs, JSON lines, the leaderboard) into the replay
    /// layout and a claims file.
    Import(ImportSetArgs),
    /// Combine run directories (the shards of one run) into one run directory.
    Merge(MergeArgs),
    /// Measure, import and show baseline times (eager, torch.compile, max-autotune).
    Baselines(BaselinesArgs),
    /// Stress-test one kernel on one problem under every case family; a per-case table.
    Check(Box<CheckArgs>),
    /// Flag problems a trivial kernel passes under KernelBench's check (zeros, a constant,
    /// an input copied, an input or weight ignored), and whether `signed` inputs remove that.
    Audit(AuditArgs),
    /// A scripted OpenAI-compatible chat server on loopback, for tests and dry runs of agents.
    FakeLlm(FakeLlmArgs),
    /// Profile one kernel on one problem: Nsight Compute metrics (CudaForge's set plus a
    /// roofline's), a roofline verdict per kernel and the problem's speed of light; the
    /// PyTorch profiler where ncu cannot be used.
    Profile(Box<ProfileArgs>),
    /// Serve evaluations over HTTP (leaderboards, RL rewards): a durable queue, signed
    /// verdicts, a verdict cache, tokens with quotas; every candidate sandboxed.
    Serve(Box<ServeArgs>),
}
