//! Agents that write kernels in a loop with feedback: `coder-judge` (CudaForge), `kevin`
//! (Kevin's multi-turn refinement), `cuda-agent` (CUDA Agent's ReAct with tools) and
//! `command` (any external program). `../shared/reference/agents.md` describes the three
//! published systems; each module cites the section it follows.
//!
//! Every kernel an agent writes is evaluated by the engine (the same workers,
//! case families and timing as `kbench run`), under the agent's name, into the run's own
//! `records.jsonl`; so `kbench report` picks the fastest correct kernel per task as
//! CudaForge does. Tasks and their LLM calls run concurrently (`--jobs`) and submit their
//! kernels to one evaluation service ([`crate::exec::Service`]): one evaluation at a time
//! per device (CPU timing and a GPU are never shared), each GPU of `--gpus` in parallel.

pub mod client;
pub mod fake_server;

pub mod coder_judge;
pub mod command;
pub mod cuda_agent;
pub mod kevin;
pub mod ncu_feedback;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use kbench_record::{EvalRecord, Outcome};
use kbench_suites::Problem;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::agents::Candidate;
use crate::config::{AgentConfig, RunConfig};
use crate::llm::client::{ChatReply, Llm, LlmError, Spend};

/// The agent kinds that produce kernels in a feedback loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    CoderJudge,
    Kevin,
    CudaAgent,
    Command,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::CoderJudge => "coder-judge",
            Kind::Kevin => "kevin",
            Kind::CudaAgent => "cuda-agent",
            Kind::Command => "command",
        }
    }
}

/// Options of an agent run (from `kbench run`).
#[derive(Debug, Clone)]
pub struct Options {
    pub kind: Kind,
    pub llm_config: Option<PathBuf>,
    /// The model for kevin / cuda-agent, and the Coder's by default.
    pub model: Option<String>,
    pub coder: Option<String>,
    pub judge: Option<String>,
    /// Rounds (coder-judge), turns (kevin) or steps (cuda-agent); `None`: the paper's.
    pub max_rounds: Option<u32>,
    pub trajectories: u32,
    /// kevin: trajectories of a task run at once.
    pub trajectory_jobs: u32,
    /// kevin: apply the paper's format / reward-hacking checks (a violation scores 0).
    pub kevin_format_checks: bool,
    /// cuda-agent: stop when a prompt grows past this many tokens.
    pub context_tokens: u64,
    pub max_cost_usd: Option<f64>,
    pub max_task_cost_usd: Option<f64>,
    pub max_minutes: Option<f64>,
    pub max_task_minutes: Option<f64>,
    pub jobs: usize,
    pub llm_replay: Option<PathBuf>,
    /// `command`: the program (run with `sh -c`).
    pub command: Option<String>,
    /// Name of the KernelBench `runs/<name>/` folder (default: the agent's name).
    pub runs_name: Option<String>,
    /// GPU named in the prompts (default: the run's GPU, or "CPU").
    pub gpu: Option<String>,
}

/// Why a task stopped early, if it did.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Stopped(pub String);

/// Run-wide budgets and the clock.
pub struct Budget {
    pub started: Instant,
    pub opts: Options,
}

impl Budget {
    /// `Some(reason)` when this task (started at `task_started`, having spent `spent`) or the
    /// run must stop before another model call or round.
    pub fn exceeded(
        &self,
        llm: Option<&Llm>,
        task_started: Instant,
        spent: &Spend,
    ) -> Option<String> {
        let o = &self.opts;
        if let (Some(max), Some(llm)) = (o.max_cost_usd, llm) {
            let total = llm.spent().cost_usd;
            if total >= max {
                return Some(format!(
                    "run budget: ${total:.4} spent of --max-cost-usd {max}"
                ));
            }
        }
        if let Some(max) = o.max_task_cost_usd {
            if spent.cost_usd >= max {
                return Some(format!(
                    "task budget: ${:.4} spent of --max-task-cost-usd {max}",
                    spent.cost_usd
                ));
            }
        }
        if let Some(max) = o.max_minutes {
            let m = self.started.elapsed().as_secs_f64() / 60.0;
            if m >= max {
                return Some(format!("run budget: {m:.2} min of --max-minutes {max}"));
            }
        }
        if let Some(max) = o.max_task_minutes {
            let m = task_started.elapsed().as_secs_f64() / 60.0;
            if m >= max {
                return Some(format!(
                    "task budget: {m:.2} min of --max-task-minutes {max}"
                ));
            }
        }
        None
    }
}

/// Evaluates kernels through the engine's evaluation service ([`crate::exec::Service`]),
/// into the run directory. Tasks submit concurrently; the service evaluates one kernel at a
/// time per device (the CPU, or each `--gpus` GPU, as `kbench run` does) and keeps each
/// problem's reference worker and cases open between a task's rounds.
pub struct Evaluator {
    service: crate::exec::Service,
    agent: &'static str,
    stop: Arc<AtomicBool>,
}

impl Evaluator {
    /// Starts the service on the run's settings (device, GPUs, families, timing, run
    /// directory), its records named after `agent`.
    pub fn new(base: &RunConfig, agent: &'static str, stop: Arc<AtomicBool>) -> Result<Self> {
        let mut c = base.clone();
        c.agent = AgentConfig::Given {
            agent,
            candidates: Vec::new(),
        };
        c.resume = true;
        c.quiet = true;
        let service = crate::exec::Service::start(&c, Arc::clone(&stop))?;
        Ok(Self {
            service,
            agent,
            stop,
        })
    }

    /// Correctness on every configured case family, then timing (when the run times).
    /// A kernel already recorded under this name (a resumed run) is not evaluated again.
    /// `sample` is the trajectory (kevin) or 0: `kbench report` takes each sample as one
    /// independent trajectory for best@k / avg@k.
    pub fn evaluate(
        &self,
        problem: &Problem,
        name: &str,
        sample: u32,
        source: &str,
    ) -> Result<EvalRecord> {
        if self.stop.load(Ordering::SeqCst) {
            bail!("interrupted");
        }
        let cand = Candidate::new(name.to_string(), sample, source.to_string(), None);
        let key = crate::plan::record_key(problem, self.agent, &cand);
        let record = self.service.evaluate(problem, cand)?;
        if record.key() != key {
            bail!(
                "the engine answered kernel {name} of {} with the record of {}",
                problem.key(),
                record.key()
            );
        }
        Ok(record)
    }

    /// The task of `problem` ended: its reference worker may close.
    pub fn release(&self, problem: &Problem) {
        self.service.release(problem);
    }

    pub fn stats(&self) -> crate::exec::ServiceStats {
        self.service.stats()
    }

    /// Waits for the service to stop; what it did.
    pub fn finish(&self) -> Result<crate::exec::ServiceStats> {
        self.service.finish()
    }
}

/// Hook for profiler feedback (issue 9: Nsight Compute metrics and the roofline). The
/// Judge's optimisation mode and the `profile` tools receive what it returns, verbatim.
pub trait ProfileFeedback: Send + Sync {
    /// A JSON document describing where the kernel's time goes.
    fn profile(&self, problem: &Problem, source: &str, record: &EvalRecord) -> Value;
}

/// What is available until `kbench profile` lands: the measured times, marked as such.
pub struct TimingOnly;

impl ProfileFeedback for TimingOnly {
    fn profile(&self, _problem: &Problem, _source: &str, r: &EvalRecord) -> Value {
        self.profile_record(r)
    }
}

impl TimingOnly {
    /// The record's measured times, labelled as such.
    pub fn profile_record(&self, r: &EvalRecord) -> Value {
        match &r.timing {
            Some(t) => json!({
                "source": "kbench timing (no profiler on this device: the measured times only)",
                "candidate_median_ms": round3(t.candidate.median_ms),
                "candidate_mean_ms": round3(t.candidate.mean_ms),
                "reference_median_ms": round3(t.reference.median_ms),
                "speedup": round3(t.speedup),
                "timing_clock": t.candidate.clock,
            }),
            None => json!({"source": "kbench", "note": "not timed (--no-timing)"}),
        }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// One kernel an agent produced, with its evaluation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KernelResult {
    pub name: String,
    pub sha256: String,
    pub correct: bool,
    pub speedup: Option<f64>,
    pub outcome: String,
}

impl KernelResult {
    pub fn from_record(r: &EvalRecord) -> Self {
        Self {
            name: r.candidate.name.clone(),
            sha256: r.candidate.sha256.clone(),
            correct: r.outcome.is_ok(),
            speedup: r.timing.as_ref().map(|t| t.speedup),
            outcome: r.outcome.to_string(),
        }
    }

    /// Speedup counted for picking: correct kernels by speedup (untimed ones as 0).
    pub fn score(&self) -> Option<f64> {
        self.correct.then(|| self.speedup.unwrap_or(0.0))
    }
}

/// One round / turn / step of a task, as logged in `agent/<task>/rounds.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Round {
    pub index: u32,
    /// e.g. `seed`, `correction`, `optimisation`, `turn`, `step`.
    pub kind: String,
    /// Trajectory (kevin), else 0.
    #[serde(default)]
    pub trajectory: u32,
    /// The feedback this round's prompt carried (error tail, Judge issue, speedup …).
    pub feedback: Option<String>,
    pub kernel: Option<KernelResult>,
    /// Why the round failed without a kernel (malformed reply, bad tool arguments …).
    pub failed: Option<String>,
}

/// The outcome of one task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskResult {
    pub problem: String,
    pub agent: String,
    pub kernels: Vec<KernelResult>,
    /// The kernel written to `runs/`: the fastest correct one, else the last one produced.
    pub final_kernel: Option<KernelResult>,
    pub rounds: u32,
    pub failed_rounds: u32,
    pub spend: Spend,
    pub wall_s: f64,
    pub stopped: Option<String>,
    /// Agent-specific numbers (kevin: best-of-T and average-of-T).
    pub extra: Value,
}

/// What each agent's task function gets.
pub struct TaskCtx<'a> {
    pub problem: &'a Problem,
    pub opts: &'a Options,
    pub llm: Option<&'a Llm>,
    pub eval: &'a Evaluator,
    pub budget: &'a Budget,
    pub profiler: &'a dyn ProfileFeedback,
    pub dir: PathBuf,
    pub started: Instant,
    pub spend: Mutex<Spend>,
    pub gpu: String,
    rounds_log: Mutex<Vec<Round>>,
    /// Sources by kernel name, for the final pick.
    sources: Mutex<Vec<(KernelResult, String)>>,
    pub stopped: Mutex<Option<String>>,
}

impl TaskCtx<'_> {
    /// The task's stream name for the LLM log (`L1_P3`, plus a suffix per trajectory).
    pub fn stream(&self, suffix: &str) -> String {
        format!(
            "level{}_problem{}{}",
            self.problem.level, self.problem.id, suffix
        )
    }

    /// Checks the budgets; records and returns the reason when one is exceeded.
    pub fn over_budget(&self) -> Option<String> {
        let spent = *self.spend.lock().unwrap_or_else(|e| e.into_inner());
        let why = self.budget.exceeded(self.llm, self.started, &spent)?;
        self.stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(why.clone());
        Some(why)
    }

    /// A model call charged to this task. Fatal errors (bad key, unknown model, replay
    /// mismatch) end the run; others are returned for the round to fail with.
    pub fn chat(
        &self,
        model: &str,
        stream: &str,
        label: &str,
        messages: &[Value],
        tools: Option<&[Value]>,
    ) -> Result<std::result::Result<ChatReply, LlmError>> {
        let llm = self.llm.context("this agent has no model configured")?;
        match llm.chat(model, stream, label, messages, tools) {
            Ok(r) => {
                self.spend.lock().unwrap_or_else(|e| e.into_inner()).add(&r);
                Ok(Ok(r))
            }
            Err(e) if e.is_fatal() => Err(anyhow::anyhow!("{e}")),
            Err(e) => Ok(Err(e)),
        }
    }

    /// Evaluates a kernel, keeps its source under `agent/<task>/kernels/` and notes it.
    pub fn evaluate(&self, name: &str, source: &str) -> Result<(EvalRecord, KernelResult)> {
        self.evaluate_sample(name, 0, source)
    }

    /// [`evaluate`](Self::evaluate) as sample (trajectory) `sample`.
    pub fn evaluate_sample(
        &self,
        name: &str,
        sample: u32,
        source: &str,
    ) -> Result<(EvalRecord, KernelResult)> {
        let kdir = self.dir.join("kernels");
        std::fs::create_dir_all(&kdir)?;
        std::fs::write(kdir.join(format!("{name}.py")), source)
            .with_context(|| format!("saving kernel {name}"))?;
        let rec = self.eval.evaluate(self.problem, name, sample, source)?;
        let k = KernelResult::from_record(&rec);
        self.sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((k.clone(), source.to_string()));
        Ok((rec, k))
    }

    pub fn log_round(&self, r: Round) -> Result<()> {
        let line = serde_json::to_string(&r)?;
        let path = self.dir.join("rounds.jsonl");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        use std::io::Write;
        writeln!(f, "{line}")?;
        self.rounds_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(r);
        Ok(())
    }

    /// Saves a prompt or message as text beside the rounds (for people reading the run).
    pub fn save_text(&self, name: &str, text: &str) {
        let _ = std::fs::write(self.dir.join(name), text);
    }
}

/// The fastest correct kernel, else the last one produced.
fn pick_final(sources: &[(KernelResult, String)]) -> Option<(KernelResult, String)> {
    let best = sources.iter().filter(|(k, _)| k.correct).max_by(|a, b| {
        a.0.score()
            .unwrap_or(0.0)
            .total_cmp(&b.0.score().unwrap_or(0.0))
    });
    best.or(sources.last()).cloned()
}

/// Runs an agent over the run's problems; returns the exit code. On CUDA the profile
/// feedback is `kbench profile`'s (Nsight Compute metrics, roofline, speed of light; the
/// PyTorch profiler where ncu cannot be used); on the CPU it is the measured times.
pub fn run(config: &RunConfig, opts: &Options, stop: Arc<AtomicBool>) -> Result<i32> {
    match config.device {
        kbench_record::Device::Cuda(_) => {
            let ncu = ncu_feedback::NcuFeedback::new(
                config.device,
                config.precision,
                config.python.python.clone(),
            );
            run_with_profiler(config, opts, stop, &ncu)
        }
        kbench_record::Device::Cpu => run_with_profiler(config, opts, stop, &TimingOnly),
    }
}

/// [`run`] with another source of profile feedback: issue 9's `kbench profile` (Nsight
/// Compute metrics, roofline) plugs in here, and the Judge's optimisation mode, cuda-agent's
/// `profile` tool and the command agent's `profile` request all receive its JSON.
pub fn run_with_profiler(
    config: &RunConfig,
    opts: &Options,
    stop: Arc<AtomicBool>,
    profiler: &dyn ProfileFeedback,
) -> Result<i32> {
    let resuming = config.out.join(crate::runlog::MANIFEST).exists();
    if resuming && !config.resume {
        bail!(
            "{} already holds a run: pass --resume to continue it (the model calls it recorded are answered from its llm/ folder and the kernels it evaluated are not evaluated again), or choose another --out",
            config.out.display()
        );
    }
    if resuming && opts.llm_replay.is_some() {
        bail!(
            "--resume continues {} from its own recorded calls: drop --llm-replay",
            config.out.display()
        );
    }
    if opts.kind == Kind::Command && opts.command.is_none() {
        bail!("--agent command needs --command 'PROGRAM ARGS' (see README: the command agent protocol)");
    }
    // Check the models before anything is written.
    let llm_file = match opts.kind {
        Kind::Command => None,
        _ => {
            let path = opts
                .llm_config
                .clone()
                .unwrap_or_else(|| PathBuf::from("kbench.toml"));
            let file = crate::llm::client::LlmFile::load(&path)?;
            for role in model_roles(opts)? {
                file.model(&role, &path)?;
            }
            Some((file, path))
        }
    };
    std::fs::create_dir_all(&config.out)
        .with_context(|| format!("creating {}", config.out.display()))?;
    let llm = match llm_file {
        None => None,
        Some((file, path)) => Some(Llm::new(
            file,
            &path,
            &config.out,
            opts.llm_replay.as_deref(),
            resuming,
        )?),
    };
    let agent = opts.kind.name();
    let eval = Evaluator::new(config, agent, Arc::clone(&stop))?;
    let budget = Budget {
        started: Instant::now(),
        opts: opts.clone(),
    };
    let gpu = opts.gpu.clone().unwrap_or_else(|| gpu_label(config));
    let queue = Mutex::new(
        config
            .problems
            .iter()
            .collect::<std::collections::VecDeque<_>>(),
    );
    let results: Mutex<Vec<TaskResult>> = Mutex::new(Vec::new());
    let fatal: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let jobs = opts.jobs.max(1).min(config.problems.len().max(1));
    let runs_name = opts.runs_name.clone().unwrap_or_else(|| agent.to_string());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                if stop.load(Ordering::SeqCst)
                    || fatal.lock().unwrap_or_else(|e| e.into_inner()).is_some()
                {
                    return;
                }
                let Some(problem) = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front()
                else {
                    return;
                };
                let r = run_task(
                    config,
                    opts,
                    problem,
                    llm.as_ref(),
                    &eval,
                    &budget,
                    profiler,
                    &gpu,
                    &runs_name,
                );
                match r {
                    Ok(t) => {
                        if !config.quiet {
                            eprintln!("kbench: {}", describe_task(&t));
                        }
                        results.lock().unwrap_or_else(|e| e.into_inner()).push(t)
                    }
                    Err(e) => {
                        fatal
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .get_or_insert(
                                e.context(format!("agent {agent}, problem {}", problem.key())),
                            );
                    }
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by(|a, b| a.problem.cmp(&b.problem));
    let mut lines = String::new();
    for t in &results {
        lines.push_str(&serde_json::to_string(t)?);
        lines.push('\n');
    }
    crate::runlog::write_atomic(&config.out.join("agent_tasks.jsonl"), lines.as_bytes())?;
    let total = llm.as_ref().map(|l| l.spent()).unwrap_or_default();
    // Every task has ended: the service finishes (nothing is queued) and says what it did.
    let evaluations = match eval.finish() {
        Ok(s) => s,
        Err(e) => {
            fatal
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(e);
            eval.stats()
        }
    };
    let summary = json!({
        "agent": agent,
        "tasks": results.len(),
        "solved": results.iter().filter(|t| t.final_kernel.as_ref().is_some_and(|k| k.correct)).count(),
        "llm": total,
        // Replayed runs report the recorded calls' tokens and dollars (nothing was spent now).
        "llm_replayed_from": opts.llm_replay.as_ref().filter(|_| llm.as_ref().is_some_and(|l| l.replaying())),
        // A resumed run: calls answered from this run's own records (their tokens and
        // dollars are in `llm`, spent by the run before it was interrupted).
        "llm_calls_resumed": llm.as_ref().map(|l| l.reused_calls()).unwrap_or(0),
        "wall_s": budget.started.elapsed().as_secs_f64(),
        "runs_dir": config.out.join("runs").join(&runs_name),
        "evaluations": evaluations,
    });
    crate::runlog::write_atomic(
        &config.out.join("agent_summary.json"),
        serde_json::to_string_pretty(&summary)?.as_bytes(),
    )?;
    if let Some(e) = fatal.into_inner().unwrap_or_else(|e| e.into_inner()) {
        if stop.load(Ordering::SeqCst) {
            eprintln!(
                "kbench: interrupted: {e:#}; what was recorded is kept in {}",
                config.out.display()
            );
            return Ok(crate::exit::INTERRUPTED);
        }
        return Err(e);
    }
    println!(
        "{agent}: {} task(s), {} with a correct kernel; {} model call(s), {} input + {} output tokens, ${:.4}; kernels in {}",
        results.len(),
        summary["solved"],
        total.calls,
        total.input_tokens,
        total.output_tokens,
        total.cost_usd,
        config.out.join("runs").join(&runs_name).display()
    );
    println!(
        "run log: {}",
        config.out.join(crate::runlog::RECORDS).display()
    );
    if stop.load(Ordering::SeqCst) {
        return Ok(crate::exit::INTERRUPTED);
    }
    Ok(
        if results
            .iter()
            .all(|t| t.final_kernel.as_ref().is_some_and(|k| k.correct))
        {
            crate::exit::OK
        } else {
            crate::exit::KERNELS_FAILED
        },
    )
}

fn describe_task(t: &TaskResult) -> String {
    let k = match &t.final_kernel {
        Some(k) if k.correct => format!(
            "{} correct{}",
            k.name,
            k.speedup.map(|s| format!(", {s:.3}x")).unwrap_or_default()
        ),
        Some(k) => format!("no correct kernel (last: {})", k.outcome),
        None => "no kernel".into(),
    };
    format!(
        "{} {}: {} kernel(s), {}; {} call(s), ${:.4}{}",
        t.agent,
        t.problem,
        t.kernels.len(),
        k,
        t.spend.calls,
        t.spend.cost_usd,
        t.stopped
            .as_deref()
            .map(|s| format!("; stopped: {s}"))
            .unwrap_or_default()
    )
}

fn model_roles(opts: &Options) -> Result<Vec<String>> {
    Ok(match opts.kind {
        Kind::CoderJudge => vec![coder_model(opts)?, judge_model(opts)?],
        Kind::Kevin | Kind::CudaAgent => vec![opts
            .model
            .clone()
            .context("this agent needs --model NAME (a model of kbench.toml)")?],
        Kind::Command => vec![],
    })
}

pub(crate) fn coder_model(opts: &Options) -> Result<String> {
    opts.coder
        .clone()
        .or_else(|| opts.model.clone())
        .context("coder-judge needs --coder NAME (or --model NAME for both roles)")
}

pub(crate) fn judge_model(opts: &Options) -> Result<String> {
    opts.judge
        .clone()
        .or_else(|| opts.coder.clone())
        .or_else(|| opts.model.clone())
        .context("coder-judge needs --judge NAME (or --model NAME for both roles)")
}

fn gpu_label(config: &RunConfig) -> String {
    match config.device {
        kbench_record::Device::Cpu => {
            "CPU (no GPU: kernels run on the host, as PyTorch or C++ CPU extensions)".to_string()
        }
        kbench_record::Device::Cuda(g) => crate::gpu::describe()
            .ok()
            .and_then(|all| all.into_iter().find(|i| i.index == g))
            .map(|i| i.name)
            .unwrap_or_else(|| "NVIDIA GPU".to_string()),
    }
}

/// The GPU specification lines of CudaForge's prompts (agents.md §1.4): the run's GPU as the
/// driver reports it.
pub fn gpu_spec(config_gpu: &str) -> String {
    let mut out = format!("GPU Name: {config_gpu}\n");
    if let Ok(all) = crate::gpu::describe() {
        if let Some(i) = all.iter().find(|i| config_gpu.contains(&i.name)) {
            out.push_str(&format!(
                "Architecture: compute capability {}.{}\nDetails:\n• SMs: {}\n• SM clock: {} MHz\n• GPU Memory: {:.0} GB\n• Memory Bandwidth: {:.0} GB/s\n• L2 cache: {} MB\n• Shared memory capacity per SM: {} KB\n",
                i.compute_capability.0,
                i.compute_capability.1,
                i.sms,
                i.sm_clock_khz / 1000,
                i.memory_bytes as f64 / 1e9,
                i.peak_bandwidth_gbs(),
                i.l2_bytes / (1 << 20),
                i.shared_memory_per_sm_bytes / 1024
            ));
        }
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn run_task(
    config: &RunConfig,
    opts: &Options,
    problem: &Problem,
    llm: Option<&Llm>,
    eval: &Evaluator,
    budget: &Budget,
    profiler: &dyn ProfileFeedback,
    gpu: &str,
    runs_name: &str,
) -> Result<TaskResult> {
    let dir = config
        .out
        .join("agent")
        .join(format!("level{}_problem{}", problem.level, problem.id));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let _ = std::fs::remove_file(dir.join("rounds.jsonl"));
    let ctx = TaskCtx {
        problem,
        opts,
        llm,
        eval,
        budget,
        profiler,
        dir,
        started: Instant::now(),
        spend: Mutex::new(Spend::default()),
        gpu: gpu.to_string(),
        rounds_log: Mutex::new(Vec::new()),
        sources: Mutex::new(Vec::new()),
        stopped: Mutex::new(None),
    };
    let extra = match opts.kind {
        Kind::CoderJudge => coder_judge::run(&ctx),
        Kind::Kevin => kevin::run(&ctx),
        Kind::CudaAgent => cuda_agent::run(&ctx),
        Kind::Command => command::run(&ctx),
    };
    // No more kernels of this problem: the service may close its reference worker.
    eval.release(problem);
    let extra = extra?;
    let sources = ctx.sources.into_inner().unwrap_or_else(|e| e.into_inner());
    let rounds = ctx
        .rounds_log
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    let final_pick = match opts.kind {
        // The command agent submits its own final kernel (last in the list).
        Kind::Command => command::submitted(&extra, &sources),
        _ => pick_final(&sources),
    };
    if let Some((_, src)) = &final_pick {
        let d = config.out.join("runs").join(runs_name);
        std::fs::create_dir_all(&d)?;
        std::fs::write(
            d.join(format!(
                "level_{}_problem_{}_sample_0_kernel.py",
                problem.level, problem.id
            )),
            src,
        )?;
    }
    Ok(TaskResult {
        problem: problem.key(),
        agent: opts.kind.name().to_string(),
        kernels: sources.iter().map(|(k, _)| k.clone()).collect(),
        final_kernel: final_pick.map(|(k, _)| k),
        rounds: rounds.len() as u32,
        failed_rounds: rounds.iter().filter(|r| r.failed.is_some()).count() as u32,
        spend: ctx.spend.into_inner().unwrap_or_else(|e| e.into_inner()),
        wall_s: ctx.started.elapsed().as_secs_f64(),
        stopped: ctx.stopped.into_inner().unwrap_or_else(|e| e.into_inner()),
        extra,
    })
}

// ---------------------------------------------------------------------------------------
// Shared prompt pieces and reply parsing.

/// The first fenced code block (closing fence optional), as CudaForge extracts code
/// (agents.md §1.1); `None` when the reply has no fence.
pub fn extract_code(reply: &str) -> Option<String> {
    let start = reply.find("```")?;
    let after = &reply[start + 3..];
    let body_start = after.find('\n').map(|i| i + 1).unwrap_or(after.len());
    let body = &after[body_start..];
    let code = match body.find("```") {
        Some(end) => &body[..end],
        None => body,
    };
    let code = code.trim_end().to_string();
    (!code.trim().is_empty()).then_some(code)
}

/// The text after the first code block (Kevin's summary of the turn), else before it.
pub fn text_outside_code(reply: &str) -> String {
    if let Some(start) = reply.find("```") {
        let after = &reply[start + 3..];
        if let Some(end) = after.find("```") {
            let tail = after[end + 3..].trim();
            if !tail.is_empty() {
                return tail.to_string();
            }
        }
        return reply[..start].trim().to_string();
    }
    reply.trim().to_string()
}

/// CudaForge's JSON extraction (agents.md §1.1): first ```json block, else the first
/// `{...}`, else the whole text; an error when none parses.
pub fn extract_json(reply: &str) -> std::result::Result<Value, String> {
    if let Some(i) = reply.find("```json") {
        let rest = &reply[i + 7..];
        let body = rest.find("```").map(|e| &rest[..e]).unwrap_or(rest);
        if let Ok(v) = serde_json::from_str(body.trim()) {
            return Ok(v);
        }
    }
    if let (Some(a), Some(b)) = (reply.find('{'), reply.rfind('}')) {
        if a < b {
            if let Ok(v) = serde_json::from_str(&reply[a..=b]) {
                return Ok(v);
            }
        }
    }
    serde_json::from_str(reply.trim()).map_err(|e| {
        format!(
            "no JSON object in the reply ({e}): {}",
            reply.chars().take(200).collect::<String>()
        )
    })
}

/// The error log a failing kernel leaves: the outcome, then the process's last lines;
/// the last 150 lines, with pybind's `Invoked with:` tail cut (agents.md §1.1).
pub fn error_log(r: &EvalRecord) -> String {
    // The outcome's Display keeps one line; the build log and traceback are in the message.
    let mut text = match &r.outcome {
        Outcome::CompileError { message } => format!("compile_error:\n{message}\n"),
        Outcome::RuntimeError { phase, message } => {
            format!("runtime_error ({phase}):\n{message}\n")
        }
        other => format!("{other}\n"),
    };
    if !r.log_tail.trim().is_empty() {
        text.push_str(&r.log_tail);
    }
    let text = match text.find("Invoked with:") {
        Some(i) => text[..i].to_string(),
        None => text,
    };
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(150);
    lines[start..].join("\n")
}

/// Kevin's feedback classes (agents.md §3.1).
pub fn status_of(o: &Outcome) -> &'static str {
    match o {
        Outcome::Ok => "correct",
        Outcome::CompileError { .. } => "compilation error",
        Outcome::RuntimeError { .. } | Outcome::Timeout { .. } | Outcome::Crashed { .. } => {
            "runtime error"
        }
        Outcome::ReferenceError { .. } => "reference error",
        _ => "incorrect",
    }
}

/// KernelBench's one-shot example pair (element-wise add), as the seed prompts show it.
pub const EXAMPLE_MODEL: &str = r#"import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a, b):
        return a + b

def get_inputs():
    a = torch.randn(1, 128).cuda()
    b = torch.randn(1, 128).cuda()
    return [a, b]

def get_init_inputs():
    return []
"#;

pub const EXAMPLE_MODEL_NEW: &str = r#"import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void elementwise_add_kernel(const float* a, const float* b, float* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        out[idx] = a[idx] + b[idx];
    }
}

torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b) {
    auto size = a.numel();
    auto out = torch::zeros_like(a);
    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;
    elementwise_add_kernel<<<num_blocks, block_size>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), size);
    return out;
}
"""
cpp_src = "torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b);"

elementwise_add = load_inline(name="elementwise_add", cpp_sources=cpp_src, cuda_sources=source,
                              functions=["elementwise_add_cuda"], verbose=False)

class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.elementwise_add = elementwise_add

    def forward(self, a, b):
        return self.elementwise_add.elementwise_add_cuda(a, b)
"#;

/// KernelBench's one-shot seed prompt (CudaForge round 0, agents.md §1.2a).
pub fn seed_prompt(problem: &Problem) -> String {
    format!(
        "You write custom CUDA kernels to replace the pytorch operators in the given architecture to get speedups.\n\n\
         You have complete freedom to choose the set of operators you want to replace. You may make the decision to replace some operators with custom CUDA kernels and leave others unchanged. You may replace multiple operators with custom implementations, consider operator fusion opportunities (combining multiple operators into a single kernel, for example, combining matmul+relu), or algorithmic changes (such as online softmax). You are only limited by your imagination.\n\n\
         Here's an example to show you the syntax of inline embedding custom CUDA operators in torch: The example given architecture is:\n\n```python\n{EXAMPLE_MODEL}```\n\n\
         The example new arch with custom CUDA kernels looks like this:\n\n```python\n{EXAMPLE_MODEL_NEW}```\n\n\
         You are given the following architecture:\n\n```python\n{}\n```\n\n\
         Optimize the architecture named Model with custom CUDA operators! Name your optimized output architecture ModelNew. Output the new code in codeblocks. Please generate real code, NOT pseudocode, make sure the code compiles and is fully functional. Just output the new model code, no other text, and NO testing code!\n",
        problem.source
    )
}

pub fn system(text: &str) -> Value {
    json!({"role": "system", "content": text})
}

pub fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

/// Reads `agent_tasks.jsonl` of a run.
pub fn read_tasks(dir: &Path) -> Result<Vec<TaskResult>> {
    let path = dir.join("agent_tasks.jsonl");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).with_context(|| format!("a line of {}", path.display())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_and_json_extraction() {
        assert_eq!(
            extract_code("text\n```python\nx = 1\n```\nsummary").as_deref(),
            Some("x = 1")
        );
        assert_eq!(extract_code("```\ny = 2\n").as_deref(), Some("y = 2"));
        assert_eq!(extract_code("no code here"), None);
        assert_eq!(
            text_outside_code("```python\nx\n```\nI fused it."),
            "I fused it."
        );
        assert_eq!(
            extract_json("blah ```json\n{\"a\": 1}\n``` x").unwrap()["a"],
            1
        );
        assert_eq!(extract_json("say {\"b\": 2} ok").unwrap()["b"], 2);
        assert!(extract_json("not json at all").is_err());
    }
}
