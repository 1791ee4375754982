//! Arguments of `kbench run`: the agent and its options, the run folder, shards and
//! baselines; the run that `kbench demo` performs.

use std::path::PathBuf;

use clap::{Args, Parser, ValueEnum};

use super::eval::EvalArgs;
use super::setup::PythonArgs;
use super::suite::SuiteArgs;
use super::{Cli, Command};
use crate::config::shard::Shard;

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
