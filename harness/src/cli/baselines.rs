//! Arguments of `kbench baselines measure|import|show`: the baseline store.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::eval::EvalArgs;
use super::setup::PythonArgs;
use super::suite::SuiteArgs;
use crate::config::shard::Shard;

#[derive(Debug, Args)]
pub struct BaselinesArgs {
    #[command(subcommand)]
    pub command: BaselinesCommand,
}

#[derive(Debug, Subcommand)]
pub enum BaselinesCommand {
    /// Time the problems' Model in each mode on this GPU and torch version, into the store
    /// (resumable: only what the store lacks is measured).
    Measure(Box<MeasureArgs>),
    /// Import KernelBench's baseline JSON files into the store, marked as imported.
    Import(ImportArgs),
    /// List the store's files: GPU, torch version, mode, problems timed and failed.
    Show(ShowArgs),
}

#[derive(Debug, Args)]
pub struct MeasureArgs {
    #[command(flatten)]
    pub suite: SuiteArgs,
    #[command(flatten)]
    pub python: PythonArgs,
    /// Modes to measure: eager, compile, max-autotune, reduce-overhead,
    /// max-autotune-no-cudagraphs.
    #[arg(long, default_value = "eager,compile")]
    pub modes: String,
    /// The baseline store (default: ./baselines/data when it exists, else the cache's).
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// Where the measuring runs' logs go (default: in kbench's cache, per GPU and torch);
    /// an interrupted measurement's records there are folded in by the next one.
    #[arg(long, value_name = "DIR")]
    pub work: Option<PathBuf>,
    /// Measure again the problems whose mode failed before.
    #[arg(long)]
    pub retry_failed: bool,
    /// Evaluate only shard i of N of the problems (Slurm array tasks pass it).
    #[arg(long, value_name = "i/N")]
    pub shard: Option<Shard>,
    /// Problems taken ahead per GPU, their compiles started while the one before is timed
    /// (default 4, or 1 when a mode autotunes: max-autotune's compiles time kernels on the
    /// GPU, and several at once on one GPU slow each other past the compile timeout).
    /// 0 takes nothing ahead (each problem has its GPU to itself, as the pass that measures
    /// out-of-memory failures again does).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(0..=64))]
    pub lookahead: Option<u16>,
    #[command(flatten)]
    pub eval: EvalArgs,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// KernelBench baseline files (`results/timing/<hardware>/baseline_time_torch*.json`).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The baseline store (default: ./baselines/data when it exists, else the cache's).
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// torch version the files were timed with (known for KernelBench's own folders).
    #[arg(long)]
    pub torch: Option<String>,
    /// GPU name, when the entries' `hardware` should not be used.
    #[arg(long)]
    pub gpu: Option<String>,
    /// Mode, when the file name is not one KernelBench writes.
    #[arg(long)]
    pub mode: Option<String>,
    /// Mark problems stale (never used): `L/ID`, repeatable or comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "L/ID")]
    pub stale: Vec<String>,
    /// A caveat to record with the imported times, repeatable.
    #[arg(long)]
    pub caveat: Vec<String>,
    /// Replace a file already in the store.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The baseline store (default: ./baselines/data when it exists, else the cache's).
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// A KernelBench checkout: coverage counts its problems, so those with neither a time
    /// nor a recorded reason (gaps) show.
    #[arg(long, value_name = "DIR")]
    pub kernelbench: Option<PathBuf>,
    /// List every gap (problem with neither a time nor a reason) by name (needs
    /// --kernelbench).
    #[arg(long, requires = "kernelbench")]
    pub gaps: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}
