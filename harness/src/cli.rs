//! Command-line arguments: plain values, no I/O. `commands::run_config` turns them into the
//! plain values `config/` validates.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::shard::Shard;

mod import_set;
mod report_args;
mod setup;
pub use import_set::{ImportFormat, ImportSetArgs, ModelModeArg};
pub use report_args::{LeaderboardArgs, PickArg, ReportArgs};
pub use setup::{PythonArgs, SetupArgs};

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
}

#[derive(Debug, Args)]
pub struct FakeLlmArgs {
    /// The script: JSON with per-model lists of replies (see harness/src/fakellm.rs).
    #[arg(long, value_name = "FILE")]
    pub script: PathBuf,
    /// Port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Write the base URL here once listening.
    #[arg(long, value_name = "FILE")]
    pub url_file: Option<PathBuf>,
    /// Append every request received here, one JSON line each.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
}

/// Options of the LLM agents (coder-judge, kevin, cuda-agent) and the command agent.
#[derive(Debug, Args, Clone, Default)]
pub struct AgentArgs {
    /// The model configuration (named models: base URL, model, key variable, prices).
    #[arg(long, value_name = "FILE", default_value = "kbench.toml")]
    pub llm_config: PathBuf,
    /// Model (a name in the configuration) for kevin and cuda-agent; coder-judge's default
    /// for both roles.
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// coder-judge: the Coder's model.
    #[arg(long, value_name = "NAME")]
    pub coder: Option<String>,
    /// coder-judge: the Judge's model (default: the Coder's).
    #[arg(long, value_name = "NAME")]
    pub judge: Option<String>,
    /// Rounds per task (coder-judge: 10), turns per trajectory (kevin: 8), steps (cuda-agent:
    /// 200) or requests (command: 50).
    #[arg(long, value_name = "N")]
    pub max_rounds: Option<u32>,
    /// kevin: independent trajectories per task.
    #[arg(long, value_name = "T", default_value_t = 16)]
    pub trajectories: u32,
    /// kevin: trajectories of one task run at once (their model calls overlap).
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub trajectory_jobs: u32,
    /// kevin: the paper's format checks — torch.nn.functional or nn modules, try/except,
    /// `pass`, or no CUDA kernel make a kernel score 0 (off by default: CPU runs use no CUDA).
    #[arg(long)]
    pub kevin_format_checks: bool,
    /// cuda-agent: stop a task whose prompt grows past this many tokens; kevin: drop the
    /// earliest turns from the prompt past it (about 4 characters a token).
    #[arg(long, value_name = "N", default_value_t = 128_000)]
    pub context_tokens: u64,
    /// Agents: re-time this many of a task's fastest correct kernels together, choose there,
    /// and report a fresh measurement of the choice (0: keep the fastest measurement).
    // The default is llm::DEFAULT_FINALISTS (cli may not import llm).
    #[arg(long, value_name = "K", default_value_t = 4)]
    pub finalists: u32,
    /// Stop starting model calls once the run has spent this many dollars.
    #[arg(long, value_name = "USD")]
    pub max_cost_usd: Option<f64>,
    /// Stop a task once it has spent this many dollars.
    #[arg(long, value_name = "USD")]
    pub max_task_cost_usd: Option<f64>,
    /// Stop starting rounds once the run has lasted this many minutes.
    #[arg(long, value_name = "MIN")]
    pub max_minutes: Option<f64>,
    /// Stop a task after this many minutes.
    #[arg(long, value_name = "MIN")]
    pub max_task_minutes: Option<f64>,
    /// Tasks in flight at once (their model calls run concurrently; kernel evaluations
    /// take turns).
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub jobs: usize,
    /// Replay the model replies recorded in this earlier agent run (its --out) instead of
    /// calling a model; the kernels are evaluated again.
    #[arg(long, value_name = "RUN_DIR")]
    pub llm_replay: Option<PathBuf>,
    /// --agent command: the program, run with `sh -c` (e.g. "python3 examples/command_agent.py").
    #[arg(long, value_name = "CMD")]
    pub command: Option<String>,
    /// The folder name under runs/ for the final kernels (default: the agent's name).
    #[arg(long, value_name = "NAME")]
    pub runs_name: Option<String>,
    /// The GPU named in prompts (default: the run's GPU as the driver names it, or CPU).
    #[arg(long, value_name = "NAME")]
    pub target_gpu: Option<String>,
}

#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// The problem file (class Model, get_inputs, get_init_inputs).
    #[arg(long, value_name = "FILE")]
    pub problem: PathBuf,
    /// The kernel to profile: a module defining class ModelNew.
    #[arg(long, value_name = "FILE")]
    pub kernel: PathBuf,
    /// auto (a GPU when there is one), cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    pub device: String,
    #[arg(long, value_enum, default_value = "fp32")]
    pub precision: PrecisionArg,
    /// Profiled calls of the kernel (after the warm-up).
    #[arg(long, default_value_t = 5)]
    pub calls: u32,
    /// Unprofiled warm-up calls.
    #[arg(long, default_value_t = 3)]
    pub warmup: u32,
    /// The ncu executable (default: `ncu` on PATH, else /usr/local/cuda/bin/ncu).
    #[arg(long, value_name = "PATH")]
    pub ncu: Option<PathBuf>,
    /// Use the PyTorch profiler even where ncu is available.
    #[arg(long)]
    pub no_ncu: bool,
    /// Keep the worker's specs, results and ncu's CSV in this folder.
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub python: PythonArgs,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The problem file (class Model, get_inputs, get_init_inputs), named `<id>_<Name>.py`.
    #[arg(long, value_name = "FILE")]
    pub problem: PathBuf,
    /// The kernel to check: a module defining class ModelNew.
    #[arg(long, value_name = "FILE")]
    pub kernel: PathBuf,
    /// Keep the run directory (record, logs) here; default: a temporary one.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub python: PythonArgs,
    #[command(flatten)]
    pub eval: EvalArgs,
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

#[derive(Debug, Args)]
pub struct DemoArgs {
    #[command(flatten)]
    pub python: PythonArgs,
    /// Run directory (default: ./kbench-demo, replaced on each demo).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// auto (a GPU when there is one), cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    pub device: String,
}

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

#[derive(Debug, Args)]
pub struct GpusArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub suite: SuiteArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AgentKind {
    /// Submits each problem's own code as ModelNew (sanity check: correct, speedup ≈ 1).
    Reference,
    /// Evaluates kernels already on disk (--replay-dir).
    Replay,
    /// CudaForge: Coder and Judge models over N rounds (--coder, --judge; default 10 rounds).
    CoderJudge,
    /// Kevin: T trajectories (--trajectories, default 16) of K turns (default 8).
    Kevin,
    /// CUDA Agent: one ReAct agent with tools through function calling (default 200 steps).
    CudaAgent,
    /// Any external program (--command), speaking kbench's JSON-lines protocol (README).
    Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProfileArg {
    Strict,
    Kernelbench,
    #[value(name = "kernelbench-v0.1")]
    KernelbenchV01,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrecisionArg {
    Fp32,
    Fp16,
    Bf16,
}

impl PrecisionArg {
    /// The worker's spelling: fp32, fp16, bf16.
    pub fn as_str(self) -> &'static str {
        match self {
            PrecisionArg::Fp32 => "fp32",
            PrecisionArg::Fp16 => "fp16",
            PrecisionArg::Bf16 => "bf16",
        }
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub suite: SuiteArgs,
    #[command(flatten)]
    pub python: PythonArgs,
    /// Which agent produces the candidate kernels.
    #[arg(long, value_enum, default_value = "reference")]
    pub agent: AgentKind,
    /// For --agent replay: KernelBench's runs/<name>/ folder (level_L_problem_P_sample_S_kernel.py),
    /// or a folder of `<id>_*.py` files (optionally under level<L>/).
    #[arg(long, value_name = "DIR")]
    pub replay_dir: Option<PathBuf>,
    #[command(flatten)]
    pub agent_args: AgentArgs,
    /// Run directory: run.json, records.jsonl, logs/, kernels/.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Continue the run in --out, skipping what is already recorded.
    #[arg(long)]
    pub resume: bool,
    /// Evaluate only shard i of N (0-based): every N-th problem of the suite in a fixed
    /// order. The tasks of `kbench slurm submit` pass it; `kbench merge` joins the shards.
    #[arg(long, value_name = "i/N")]
    pub shard: Option<Shard>,
    /// Take the run's secret seed from FILE instead of making a new one: the shards of one
    /// run share it, so their inputs are those of a single run.
    #[arg(long, value_name = "FILE")]
    pub secret_from: Option<PathBuf>,
    #[command(flatten)]
    pub eval: EvalArgs,
    /// Compare each correct kernel with baseline times: a list of eager, compile,
    /// max-autotune, reduce-overhead, max-autotune-no-cudagraphs. Stored times matching this
    /// GPU and torch version are used and missing ones are measured first; with `live` in
    /// the list (alone: eager,compile) all are measured now, into the run directory.
    #[arg(long, value_name = "LIST")]
    pub baselines: Option<String>,
    /// Use this baseline file for a mode (e.g. one made by `kbench baselines import`):
    /// `MODE=FILE`, repeatable. Refused when timed on another GPU or torch version.
    #[arg(long, value_name = "MODE=FILE")]
    pub baseline_file: Vec<String>,
    /// Use --baseline-file files even when timed on another GPU or torch version.
    #[arg(long)]
    pub force_baselines: bool,
    /// The baseline store (default: ./baselines/data when it exists, else the cache's).
    #[arg(long, value_name = "DIR")]
    pub baseline_store: Option<PathBuf>,
}

/// How kernels are evaluated and timed: shared by `run` and `baselines measure`.
#[derive(Debug, Args, Clone)]
pub struct EvalArgs {
    /// auto (a GPU when there is one), cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// GPUs to spread the run over, e.g. `0,1` (with --device cuda; default: all visible
    /// GPUs for `--device cuda`/`auto`, the one named for `--device cuda:N`).
    #[arg(long, value_name = "LIST")]
    pub gpus: Option<String>,
    #[arg(long, value_enum, default_value = "fp32")]
    pub precision: PrecisionArg,
    /// Tolerance profile for verdicts.
    #[arg(long, value_enum, default_value = "strict")]
    pub profile: ProfileArg,
    /// Module mode of both models: `train` (KernelBench: as constructed) or `eval` (`.eval()`
    /// on both right after construction, as some published sets evaluate).
    #[arg(long, value_name = "MODE", default_value = "train", value_parser = ["train", "eval"])]
    pub model_mode: String,
    /// Correctness trials of the `random` case family (KernelBench: 5).
    #[arg(long, default_value_t = 5)]
    pub trials: u32,
    // Its help names the families from their one list (`config::families_help`); the list is
    // checked by `config::parse_families`.
    #[arg(long, value_name = "LIST", default_value = "all", help = crate::config::families_help())]
    pub families: String,
    /// Timed calls per kernel (reference and candidate each).
    #[arg(long, default_value_t = 100)]
    pub timed_calls: u32,
    /// Untimed warm-up calls before timing.
    #[arg(long, default_value_t = 3)]
    pub warmup: u32,
    /// Ignored, kept so that older scripts still run: timed calls are driven one at a time,
    /// the reference's and the candidate's alternating, each call its own round.
    #[arg(long, default_value_t = 50, hide = true)]
    pub rounds: u32,
    /// Untimed calls opening each timed call's window, on the worker's own case: `auto`
    /// (one while the reference's warm-up calls are shorter than 5 ms; none for longer calls,
    /// where a cold first call measured under 1% slower), or a number. On a GPU a window that
    /// follows the same side's own window opens without them.
    #[arg(long, default_value = "auto", value_name = "auto|N")]
    pub round_warmup: String,
    /// Check correctness only.
    #[arg(long)]
    pub no_timing: bool,
    /// Fail (integrity flag `no-custom-kernel`) a CUDA candidate whose own kernels never ran
    /// in a profiled call (all its time in cuBLAS, cuDNN, ATen...). Without it that is
    /// recorded as an advisory.
    #[arg(long)]
    pub require_custom_kernels: bool,
    /// Skip the L2 flush before each timed call (CUDA only).
    #[arg(long)]
    pub no_l2_flush: bool,
    /// Also time each kernel that passes the random cases under other evaluators'
    /// conventions (`kernelbench`, `kernelbench-v0.1`, `cuda-l1`, comma-separated), each side in its own worker:
    /// a diagnosis for claims (`report --claims`), never a speedup kbench reports.
    #[arg(long, value_name = "METHODS", value_delimiter = ',')]
    pub time_as: Vec<String>,
    /// Run candidates without the bubblewrap sandbox (every record and report then says the
    /// run was not contained). Without it, a run of untrusted kernels on a host where no
    /// sandbox can be made is refused.
    #[arg(long)]
    pub no_sandbox: bool,
    /// Each worker's memory cap (reference, candidates, build jobs): a size such as 8GiB,
    /// `none`, or `auto`: three quarters of the host's memory (or of kbench's cgroup limit)
    /// shared among the workers alive at once, at least 2 GiB. A cgroup's memory.max where
    /// the host allows it (then all workers together are capped at three quarters too), else
    /// on the CPU each worker's address-space limit beyond what torch maps, else (a GPU
    /// without a cgroup memory controller) no cap. A candidate over its cap is
    /// `memory_cap`; a reference over it is the problem's `reference_error`.
    #[arg(long, value_name = "SIZE", default_value = "auto")]
    pub memory_cap: String,
    /// Seconds allowed for starting a worker (python and torch import).
    #[arg(long, default_value_t = 120.0)]
    pub timeout_start: f64,
    /// Seconds allowed for loading a candidate, including its extension builds (default
    /// 300: three times the slowest `load_inline` build measured on a loaded GPU host), or a
    /// problem's reference; for a baseline mode, its torch.compile (default 900).
    #[arg(long, value_name = "SECONDS")]
    pub timeout_load: Option<f64>,
    /// Seconds allowed for one correctness case.
    #[arg(long, default_value_t = 120.0)]
    pub timeout_run: f64,
    /// Seconds allowed for one round of timed calls.
    #[arg(long, default_value_t = 300.0)]
    pub timeout_time: f64,
    /// Take no new problem once the run has lasted this many seconds: the problems already
    /// taken (with their workers, builds or compiles started ahead) finish, the rest wait
    /// for `--resume` (for `baselines measure`, the same command again). Exits 75. For a
    /// time-boxed job (a Slurm walltime, a machine held for a few minutes) that should end
    /// cleanly rather than lose a half-done problem to its kill.
    #[arg(long, value_name = "SECONDS")]
    pub stop_starting_after: Option<f64>,
    /// Processes building candidate extensions ahead of evaluation, at lowered priority
    /// (default on cuda: one per core but one, as many as three quarters of the memory or of
    /// the cgroup's limit has room for at 4 GiB each;
    /// half of them start until the first build is done; 0 on cpu, where compiles would
    /// disturb CPU timing).
    #[arg(long, value_name = "N")]
    pub build_jobs: Option<usize>,
    /// Host memory (MiB) for keeping a problem's reference cases between its candidates;
    /// problems whose cases do not fit remake them per candidate (default: a quarter of RAM).
    #[arg(long, value_name = "MIB")]
    pub case_cache_mb: Option<u64>,
    /// CPU intra-op threads for workers on --device cpu (same for reference and candidate).
    #[arg(long, default_value_t = 1)]
    pub cpu_threads: u32,
    /// Seed for weights, set before get_init_inputs, Model and ModelNew (KernelBench: 42).
    #[arg(long, default_value_t = 42)]
    pub weight_seed: u64,
    /// No progress bar or per-kernel lines.
    #[arg(long)]
    pub quiet: bool,
}

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

#[derive(Debug, Args)]
pub struct SlurmArgs {
    #[command(subcommand)]
    pub command: SlurmCommand,
}

#[derive(Debug, Subcommand)]
pub enum SlurmCommand {
    /// Write a job array over N shards of a kbench command and submit it with sbatch.
    Submit(SlurmSubmitArgs),
    /// Each shard's state: done, queued or running (squeue), or stopped unfinished.
    Status(SlurmStatusArgs),
    /// Submit again the shards that stopped unfinished (failed, pre-empted, cancelled, timed
    /// out); each resumes its own run log, so nothing is evaluated twice or lost.
    Resubmit(SlurmResubmitArgs),
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples: kbench slurm submit --shards 8 --partition gpu --time 4:00:00 \
                  -- run --kernelbench KernelBench --agent replay --replay-dir runs/x --out runs/x-eval\n\
                  kbench slurm submit --shards 8 --partition gpu \
                  -- baselines measure --kernelbench KernelBench --work runs/baselines --store baselines/data"
)]
pub struct SlurmSubmitArgs {
    /// Number of shards, one array task each.
    #[arg(long, value_name = "N")]
    pub shards: u32,
    /// Slurm partition (sbatch --partition).
    #[arg(long)]
    pub partition: Option<String>,
    /// Slurm account to charge (sbatch --account).
    #[arg(long)]
    pub account: Option<String>,
    /// Time limit per task in sbatch's format, e.g. 90, 4:00:00 or 1-00:00:00.
    #[arg(long)]
    pub time: Option<String>,
    /// GPUs per task, `N` or `TYPE:N` (sbatch --gres=gpu:...); Slurm sets each task's
    /// CUDA_VISIBLE_DEVICES and the run uses all of them. Default: 1, or 0 with --device cpu.
    #[arg(long, value_name = "[TYPE:]N")]
    pub gpus_per_task: Option<String>,
    /// CPU cores per task (sbatch --cpus-per-task).
    #[arg(long, value_name = "N")]
    pub cpus_per_task: Option<u32>,
    /// Job name in squeue.
    #[arg(long, default_value = "kbench")]
    pub job_name: String,
    /// Another `#SBATCH` option for every task, repeatable, e.g. --sbatch=--qos=high.
    #[arg(long = "sbatch", value_name = "OPTION", allow_hyphen_values = true)]
    pub sbatch_lines: Vec<String>,
    /// kbench executable the tasks run (default: this one); compute nodes must reach it.
    #[arg(long, value_name = "PATH")]
    pub kbench: Option<PathBuf>,
    /// Write the job script and the submission record, but do not call sbatch.
    #[arg(long)]
    pub dry_run: bool,
    /// The kbench command to shard, after `--`: `run ... --out DIR` or `baselines measure
    /// ... --work DIR [--store STORE]`. DIR, which compute nodes must share, gets the shards
    /// (DIR/shards/i) and later the merged run; measure's shards all commit into STORE
    /// (default: the store a local measure would use).
    #[arg(last = true, required = true, num_args = 1.., value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct SlurmStatusArgs {
    /// The directory of `kbench slurm submit` (the command's --out, or measure's --work).
    pub dir: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SlurmResubmitArgs {
    /// The directory of `kbench slurm submit` (the command's --out, or measure's --work).
    pub dir: PathBuf,
    /// Say which shards would be resubmitted, without calling sbatch.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Run directories to combine (shards of one run), or the --out directory of
    /// `kbench slurm submit` (all its shards).
    #[arg(required = true, value_name = "DIR")]
    pub inputs: Vec<PathBuf>,
    /// Where the merged run goes (default: the submission directory, when merging one).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Merge a submission even though some of its shards have not finished.
    #[arg(long)]
    pub partial: bool,
    /// Merge runs that cannot be verified (no `secret`, a changed `run.json`) instead of
    /// refusing them: the merged run gets no secret, so every report of it says UNVERIFIED.
    #[arg(long)]
    pub unverified: bool,
}

impl RunArgs {
    /// The `run` that `kbench demo` performs: the reference agent on the smoke suite.
    pub fn parse_demo(
        out: &std::path::Path,
        device: &str,
        python: Option<&std::path::Path>,
    ) -> RunArgs {
        let mut argv: Vec<std::ffi::OsString> = [
            "kbench",
            "run",
            "--suite",
            "smoke",
            "--agent",
            "reference",
            "--device",
            device,
        ]
        .iter()
        .map(Into::into)
        .collect();
        argv.push("--out".into());
        argv.push(out.into());
        if let Some(p) = python {
            argv.push("--python".into());
            argv.push(p.into());
        }
        match Cli::parse_from(argv).command {
            Command::Run(a) => *a,
            _ => unreachable!("the demo argv names the run command"),
        }
    }
}
