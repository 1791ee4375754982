//! Arguments of `kbench report` and `kbench leaderboard`, and the speedup basis and paper
//! tables both read.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Run directories (or records.jsonl files) to report on.
    #[arg(required = true, value_name = "RUN_DIR")]
    pub runs: Vec<PathBuf>,
    /// Write every metric as CSV (one row per run, scope, baseline and metric).
    #[arg(long, value_name = "FILE")]
    pub export_csv: Option<PathBuf>,
    /// Write the whole report as JSON.
    #[arg(long, value_name = "FILE")]
    pub export_json: Option<PathBuf>,
    /// Write the report as Markdown tables.
    #[arg(long, value_name = "FILE")]
    pub export_markdown: Option<PathBuf>,
    /// Print a table in the shape of this paper's instead of kbench's own.
    #[arg(long, value_enum)]
    pub table: Option<TableArg>,
    /// Write PNG and SVG plots into this directory.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,
    /// Speedup ratio (default: median; mean with --table, as the papers use means).
    #[arg(long, value_enum)]
    pub basis: Option<BasisArg>,
    /// Count kernels failed by this integrity flag as their cases and timing say, as if the
    /// flag were not raised (repeatable or comma-separated, e.g. `no-custom-kernel`); each
    /// such record says so in its notes. Kernels that failed a case stay failed.
    #[arg(long = "ignore-flag", value_name = "FLAG", value_delimiter = ',')]
    pub ignore_flags: Vec<String>,
    /// Which candidates count (default: best; first with --table kernelbench, whose
    /// analysis reads sample 0 only).
    #[arg(long, value_enum)]
    pub pick: Option<PickArg>,
    /// A claims file from `kbench import`: adds, for each run, the claims report (claimed vs
    /// measured per kernel, a reason for every disagreement, the set-level table).
    #[arg(long, value_name = "FILE")]
    pub claims: Option<PathBuf>,
    /// With --claims: write claims.md, claims.csv and claims.json into DIR (one set of files
    /// per run, prefixed with the run's label when there are several).
    #[arg(long, value_name = "DIR", requires = "claims")]
    pub claims_out: Option<PathBuf>,
    /// Read runs that cannot be verified (no `secret`, no or a changed `run.json`, records
    /// from before kbench signed them, a records file outside its run folder) instead of
    /// refusing them; every output then marks them UNVERIFIED.
    #[arg(long)]
    pub unverified: bool,
}

/// Which candidates of each problem a report considers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PickArg {
    /// Every candidate; a task reports its fastest correct one.
    Best,
    /// Each problem's first sample only.
    First,
}

#[derive(Debug, Args)]
pub struct LeaderboardArgs {
    /// Run directories (or records.jsonl files) to compare.
    #[arg(required = true, value_name = "RUN_DIR")]
    pub runs: Vec<PathBuf>,
    /// The HTML file to write.
    #[arg(long, value_name = "FILE", default_value = "leaderboard.html")]
    pub out: PathBuf,
    /// Page title.
    #[arg(long, default_value = "kbench leaderboard")]
    pub title: String,
    /// Speedup ratio.
    #[arg(long, value_enum, default_value = "median")]
    pub basis: BasisArg,
    /// Count kernels failed by this integrity flag as their cases and timing say, as if the
    /// flag were not raised (repeatable or comma-separated, e.g. `no-custom-kernel`); each
    /// such record says so in its notes. Kernels that failed a case stay failed.
    #[arg(long = "ignore-flag", value_name = "FLAG", value_delimiter = ',')]
    pub ignore_flags: Vec<String>,
    /// A claims file from `kbench import`: adds a claims section (claimed vs measured) per run.
    #[arg(long, value_name = "FILE")]
    pub claims: Option<PathBuf>,
    /// Read runs that cannot be verified (no `secret`, no or a changed `run.json`, records
    /// from before kbench signed them, a records file outside its run folder) instead of
    /// refusing them; every output then marks them UNVERIFIED.
    #[arg(long)]
    pub unverified: bool,
}

/// Which timing ratio speedups use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BasisArg {
    /// kbench's default: the record's paired speedup (median over interleaved rounds of
    /// reference time / candidate time).
    Median,
    /// reference mean / candidate mean (KernelBench, CudaForge, CUDA Agent).
    Mean,
}

/// A paper's results table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TableArg {
    /// CudaForge Tables 1-2: Correct, Median, 75%, Perf, Fast1 (failures count as 0).
    Cudaforge,
    /// CUDA Agent Table 1: Pass, Faster vs Eager/Compile, Geomean vs Eager/Compile.
    CudaAgent,
    /// Kevin Table 1: best@k and avg@k over trajectories.
    Kevin,
    /// KernelBench: compiled, correct, fast_p, geomean over correct.
    Kernelbench,
}
