//! How kernels are evaluated and timed (device, precision, tolerance profile, case
//! families, timing, workers' limits): shared by `run`, `check` and `baselines measure`.

use clap::{Args, ValueEnum};

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
    /// Timed calls per kernel (reference and candidate each), at most.
    #[arg(long, default_value_t = 100)]
    pub timed_calls: u32,
    /// Timed calls after which a timing may stop, at a multiple of 10, once the speedup's 99%
    /// interval is within 1% of it and the harness's clock supports every claim
    /// conclusively. Set it to --timed-calls to time every kernel that many times.
    #[arg(long, default_value_t = 30, value_name = "N")]
    pub min_timed_calls: u32,
    /// Untimed warm-up calls before timing. On a GPU the reference's placement probe (its
    /// case's call, timed where its memory may lie) counts among them; one still runs in the
    /// timing's own windows.
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
