//! The evaluation loop: one trusted reference worker per problem, one fresh untrusted worker
//! per candidate, verdicts computed here, one record appended per candidate.

pub mod affinity;
pub mod run_dir;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use kbench_adversarial::Comparison;
use kbench_record::protocol::Frame;
use kbench_record::{
    CandidateRef, CaseFamily, CaseResult, Device, Dtype, Environment, EvalRecord, HostTensor,
    Outcome, Phase, PhaseTimes, SCHEMA_VERSION,
};
use kbench_suites::Problem;
use serde_json::{json, Value};

use crate::agents::{Agent, Candidate, ReferenceAgent, ReplayAgent};
use crate::config::{materialize_problem, AgentConfig, RunConfig};
use crate::gpu::compare::DeviceComparator;
use crate::gpu::devmem::Gpu;
use crate::measure::reference::{CaseData, DevTensorOwned, RefCase, RefFailure, ReferenceSession};
use crate::measure::timing::{time_pair, TimingResult};
use crate::runlog::{now_unix, RunDir};
use crate::worker::build::{BuildJob, BuildPool};
use crate::worker::python::{self, PythonInfo};
use crate::worker::{Gates, Role, Worker, WorkerFault, WorkerSpec};

mod service;
pub use service::{device_lock, Service, ServiceStats};

/// Largest payload accepted from a worker: generous, but bounded so that a hostile length
/// prefix cannot make the harness allocate without limit.
const MAX_PAYLOAD: u64 = 256 << 30;

/// What a `kbench run` produced.
#[derive(Debug)]
pub struct RunResult {
    /// Records in the log: the ones found on resume, then the ones added now.
    pub records: Vec<EvalRecord>,
    /// Records added by this invocation.
    pub added: usize,
    /// Candidates skipped because they were already recorded.
    pub skipped: usize,
    pub interrupted: bool,
    pub run_dir: PathBuf,
}

/// Runs the whole plan. `stop` is raised by the signal handler.
pub fn run(config: &RunConfig, stop: Arc<AtomicBool>) -> Result<RunResult> {
    // First, before any thread or process is started: they inherit the mask that keeps them
    // off the cores reserved for timing.
    let timing_cores = timing_cores_of(config);
    let info = if matches!(config.agent, AgentConfig::Given { .. }) {
        python::probe_cached(&config.python)?
    } else {
        python::probe(&config.python)?
    };
    check_cuda(config, &info)?;
    let worker_script = python::materialize_worker(&config.cache)?;
    let mut run_dir = run_dir::open(config)?;
    let say = |msg: &str| {
        if !config.quiet {
            eprintln!("kbench: {msg}");
        }
    };
    if let Some(r) = &run_dir.repaired {
        say(r);
    }
    let agent: Box<dyn Agent> = match &config.agent {
        AgentConfig::Reference => Box::new(ReferenceAgent),
        AgentConfig::Replay { dir } => {
            let a = ReplayAgent::scan(dir, &config.problems)?;
            for p in &a.unmatched {
                say(&format!(
                    "replay file {} matches no selected problem; skipped",
                    p.display()
                ));
            }
            Box::new(a)
        }
        AgentConfig::Baselines { plan } => {
            Box::new(crate::commands::baselines::BaselineAgent { plan: plan.clone() })
        }
        AgentConfig::Given { agent, candidates } => Box::new(crate::agents::GivenAgent {
            agent,
            candidates: candidates.clone(),
        }),
    };

    // The plan: every (problem, candidate) not yet recorded.
    let mut plan: Vec<(&Problem, Vec<Candidate>)> = Vec::new();
    let mut skipped = 0;
    for p in &config.problems {
        let pending: Vec<Candidate> = agent
            .candidates(p)?
            .into_iter()
            .filter(|c| {
                let done = run_dir.is_recorded(&record_key(p, agent.name(), c));
                skipped += usize::from(done);
                !done
            })
            .collect();
        if !pending.is_empty() {
            plan.push((p, pending));
        }
    }
    let total: usize = plan.iter().map(|(_, c)| c.len()).sum();
    if skipped > 0 {
        say(&format!(
            "resuming: {skipped} kernel(s) already recorded, {total} to go"
        ));
    }
    let progress = progress_bar(total as u64, config.quiet);
    let env_base = environment_base(&info);
    let cuda_arch = cuda_arch_of(config);
    let mut ctx = Ctx {
        config,
        python: &config.python.python,
        info: &info,
        worker_script: &worker_script,
        stop: Arc::clone(&stop),
        cuda_arch,
        builds: None,
        gates: Gates::default(),
    };

    // Write every pending candidate out and queue the ones with extensions for building.
    let mut prepared_plan = Vec::with_capacity(plan.len());
    let mut to_build = Vec::new();
    for (problem, candidates) in plan {
        let problem_path = materialize_problem(&config.cache, problem)?;
        let mut list = Vec::with_capacity(candidates.len());
        for cand in candidates {
            let prep = prepare_candidate(&ctx, problem, &cand, agent.name(), &run_dir)?;
            if crate::worker::build::builds_extensions(&cand.source) {
                to_build.push(build_job(&run_dir, &problem_path, &prep));
            }
            list.push((cand, prep));
        }
        prepared_plan.push((problem, problem_path, list));
    }
    if config.build_jobs > 0 && !to_build.is_empty() {
        let pool = start_build_pool(
            config,
            &worker_script,
            ctx.cuda_arch.clone(),
            &stop,
            config.build_jobs.min(to_build.len()),
        );
        say(&format!(
            "building {} candidate extension(s) ahead on {} process(es)",
            to_build.len(),
            config.build_jobs.min(to_build.len())
        ));
        for job in to_build {
            pool.submit(job);
        }
        ctx.builds = Some(pool);
    }
    let ctx = ctx;

    // One executor per GPU (or one for the CPU), each taking whole problems from the queue,
    // so a problem's reference cases stay on the GPU that made them.
    let execs = open_execs(config, timing_cores)?;
    let sampler = start_sampler(config, &run_dir);
    let queue = std::sync::Mutex::new(std::collections::VecDeque::from(prepared_plan));
    let shared = Shared {
        queue,
        run_dir: &run_dir,
        added: std::sync::Mutex::new(Vec::new()),
        interrupted: AtomicBool::new(false),
        error: std::sync::Mutex::new(None),
        progress: &progress,
        env_base: &env_base,
        agent: agent.name(),
    };
    std::thread::scope(|scope| {
        for exec in &execs {
            let ctx = &ctx;
            let shared = &shared;
            scope.spawn(move || {
                if let Err(e) = executor(ctx, exec, shared) {
                    shared.interrupted.store(true, Ordering::SeqCst);
                    let mut slot = shared.error.lock().unwrap_or_else(|e| e.into_inner());
                    slot.get_or_insert(e);
                }
            });
        }
    });
    if let Some(s) = sampler {
        s.stop();
    }
    let Shared {
        added,
        interrupted,
        error,
        ..
    } = shared;
    if let Some(e) = error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        progress.finish_and_clear();
        return Err(e);
    }
    let added = added.into_inner().unwrap_or_else(|e| e.into_inner());
    let interrupted = interrupted.into_inner() || stop.load(Ordering::SeqCst);
    progress.finish_and_clear();
    if let Some(pool) = ctx.builds {
        pool.shutdown();
    }
    let added_n = added.len();
    let mut records = std::mem::take(&mut run_dir.existing);
    records.extend(added);
    Ok(RunResult {
        records,
        added: added_n,
        skipped,
        interrupted,
        run_dir: run_dir.root.clone(),
    })
}

/// A `--device cuda` run needs a torch that can use CUDA.
fn check_cuda(config: &RunConfig, info: &PythonInfo) -> Result<()> {
    if matches!(config.device, Device::Cuda(_)) && !info.cuda_available {
        anyhow::bail!(
            "--device {}: torch {} in {} cannot use CUDA (torch.cuda.is_available() is False); use --device cpu or an interpreter with a CUDA build of torch",
            config.device,
            info.torch,
            info.executable
        );
    }
    Ok(())
}

/// The environment every record of the run carries (its device name is filled per GPU).
fn environment_base(info: &PythonInfo) -> Environment {
    Environment {
        kbench: env!("CARGO_PKG_VERSION").into(),
        python: info.python.clone(),
        torch: info.torch.clone(),
        device_name: String::new(),
        cuda: info.torch_cuda.clone(),
        hostname: hostname(),
    }
}

/// `TORCH_CUDA_ARCH_LIST` for the run's GPUs, e.g. `9.0`; `None` on the CPU.
fn cuda_arch_of(config: &RunConfig) -> Option<String> {
    if config.gpus.is_empty() {
        return None;
    }
    crate::gpu::describe().ok().map(|gpus| {
        let mut archs: Vec<String> = config
            .gpus
            .iter()
            .filter_map(|g| gpus.get(*g as usize))
            .map(|g| format!("{}.{}", g.compute_capability.0, g.compute_capability.1))
            .collect();
        archs.sort();
        archs.dedup();
        archs.join(";")
    })
}

/// Niceness of build-ahead jobs and their compilers.
pub const BUILD_NICENESS: u32 = 10;

/// The pool that builds candidate extensions ahead on the CPU.
fn start_build_pool(
    config: &RunConfig,
    worker_script: &Path,
    arch: Option<String>,
    stop: &Arc<AtomicBool>,
    jobs: usize,
) -> BuildPool {
    let python = config.python.python.clone();
    let script = worker_script.to_path_buf();
    let cache = config.cache.clone();
    let interrupt = Arc::clone(stop);
    let spec_for: Arc<crate::worker::build::SpecFor> = Arc::new(move |job: &BuildJob| WorkerSpec {
        python: python.clone(),
        script: script.clone(),
        role: Role::Candidate,
        cwd: job.build_dir.clone(),
        // No GPU: builds need only the compiler. Niced: the evaluation's own processes
        // (and the timed ones above all) come first on a host whose cores the builds fill.
        env: {
            let mut env = worker_env(&python, Device::Cpu, arch.as_deref(), &cache);
            env.push(("KBENCH_NICE".into(), BUILD_NICENESS.to_string()));
            env
        },
        log_path: Some(job.log_path.clone()),
        max_payload: 1 << 20,
        interrupt: Some(Arc::clone(&interrupt)),
        gate: None,
    });
    BuildPool::start(jobs, spec_for, config.timeouts.start, config.timeouts.load)
}

/// The build-ahead job of a prepared candidate whose source builds an extension.
fn build_job(run_dir: &RunDir, problem_path: &Path, prep: &Prepared) -> BuildJob {
    BuildJob {
        build_dir: prep.build_dir.clone(),
        problem_path: problem_path.to_path_buf(),
        candidate_path: prep.source_path.clone(),
        log_path: run_dir.logs_dir().join(format!("{}.build.log", prep.key)),
    }
}

/// The timing cores of the run (before any thread or process starts; see `affinity`).
fn timing_cores_of(config: &RunConfig) -> Vec<Option<usize>> {
    if config.gpus.is_empty() {
        vec![None]
    } else {
        crate::exec::affinity::reserve_timing_cores(config.gpus.len())
    }
}

/// One executor device per `--gpus` entry, or the CPU.
fn open_execs(config: &RunConfig, timing_cores: Vec<Option<usize>>) -> Result<Vec<Exec>> {
    let devices: Vec<Device> = if config.gpus.is_empty() {
        vec![Device::Cpu]
    } else {
        config.gpus.iter().map(|g| Device::Cuda(*g)).collect()
    };
    let mut execs = Vec::with_capacity(devices.len());
    for (d, core) in devices.into_iter().zip(timing_cores) {
        execs.push(Exec::open(d, core)?);
    }
    Ok(execs)
}

/// The GPU sampler of a CUDA run (`gpu_samples.jsonl`).
fn start_sampler(config: &RunConfig, run_dir: &RunDir) -> Option<crate::gpu::nvml::GpuSampler> {
    // Position k of the sampler's list is CUDA ordinal k (empty: not sampled), so a sample's
    // `gpu` field is the same number as a record's `gpu`.
    let gpu_uuids: Vec<String> = match crate::gpu::describe() {
        Ok(all) => all
            .iter()
            .map(|i| {
                if config.gpus.contains(&i.index) {
                    i.uuid.clone()
                } else {
                    String::new()
                }
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    (!config.gpus.is_empty() && !gpu_uuids.is_empty())
        .then(|| {
            crate::gpu::nvml::GpuSampler::start(
                gpu_uuids,
                std::time::Duration::from_millis(100),
                run_dir.root.join("gpu_samples.jsonl"),
            )
        })
        .flatten()
}

type PlanItem<'a> = (&'a Problem, PathBuf, Vec<(Candidate, Prepared)>);

/// What the executors share: the queue of problems and where results go.
struct Shared<'a, 'p> {
    queue: std::sync::Mutex<std::collections::VecDeque<PlanItem<'p>>>,
    run_dir: &'a RunDir,
    added: std::sync::Mutex<Vec<EvalRecord>>,
    interrupted: AtomicBool,
    error: std::sync::Mutex<Option<anyhow::Error>>,
    progress: &'a indicatif::ProgressBar,
    env_base: &'a Environment,
    agent: &'a str,
}

impl<'p> Shared<'_, 'p> {
    fn pop(&self) -> Option<PlanItem<'p>> {
        if self.interrupted.load(Ordering::SeqCst) {
            return None;
        }
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
    }
}

/// A worker process being started on a thread of its own while other work runs, so that
/// Python's start-up and torch's import never hold up the GPU. On the CPU the start waits
/// until the worker is needed: a second process importing torch would disturb CPU timing.
///
/// A started worker may also be sent its first request ahead (a reference worker's `load`):
/// like a start, it is paused while any kernel is timed (the gate), so it never competes
/// with a timed call.
enum Prestart {
    Started(std::thread::JoinHandle<Prestarted>),
    Later(Box<WorkerSpec>, std::time::Duration),
}

/// A worker started ahead, and its answer to the request sent ahead, if any.
type Prestarted = (
    Result<Worker, WorkerFault>,
    Option<Result<Frame, WorkerFault>>,
);

impl Prestart {
    fn spawn_then(
        spec: WorkerSpec,
        timeout: std::time::Duration,
        ahead: bool,
        first: Option<(Frame, std::time::Duration)>,
    ) -> Self {
        if !ahead {
            return Prestart::Later(Box::new(spec), timeout);
        }
        Prestart::Started(std::thread::spawn(move || {
            let mut started = Worker::start(&spec, timeout);
            let reply = match (&mut started, first) {
                (Ok(w), Some((frame, limit))) => {
                    let hold = spec.gate.as_ref().map(|g| g.hold(w.pgid()));
                    let reply = w.request(frame, limit);
                    drop(hold);
                    Some(reply)
                }
                _ => None,
            };
            (started, reply)
        }))
    }
    fn take_with_reply(self) -> Prestarted {
        match self {
            Prestart::Started(h) => h.join().unwrap_or_else(|_| {
                (
                    Err(WorkerFault::Spawn("worker start-up thread panicked".into())),
                    None,
                )
            }),
            Prestart::Later(spec, timeout) => (Worker::start(&spec, timeout), None),
        }
    }
    /// Stops a worker that was started but is not needed.
    fn discard(self) {
        if let Prestart::Started(h) = self {
            if let Ok((Ok(w), _)) = h.join() {
                w.shutdown();
            }
        }
    }
}

/// A problem taken from the queue, with its workers already starting.
struct Upcoming<'p> {
    item: PlanItem<'p>,
    reference: Prestart,
    first_candidate: Option<(tempfile::TempDir, Prestart)>,
}

impl Upcoming<'_> {
    fn discard(self) {
        self.reference.discard();
        if let Some((_, p)) = self.first_candidate {
            p.discard();
        }
    }
}

/// How many problems an executor takes ahead on a GPU: enough that Python's start-up and
/// torch's import (4–5 s on the H100 host) are hidden behind problems of 2–3 s.
const LOOKAHEAD: usize = 2;
/// Problems taken ahead when measuring baselines.
const BASELINE_LOOKAHEAD: usize = 4;
/// The note on a record evaluated with nothing else loaded on its GPU (`lookahead` 1): an
/// out-of-memory failure there is the candidate's own.
pub const GPU_ALONE_NOTE: &str = "evaluated with nothing loaded ahead on its GPU";

/// One executor: evaluates whole problems from the queue on its device, one thing at a time
/// on the GPU (so a timed kernel never shares it), with the next workers started ahead.
fn executor<'p>(ctx: &Ctx, exec: &Exec, shared: &Shared<'_, 'p>) -> Result<()> {
    let run_dir = shared.run_dir;
    let c = ctx.config;
    let ahead = exec.gpu.is_some();
    let take_next = |upcoming: &mut std::collections::VecDeque<Upcoming<'p>>| -> Result<()> {
        // Baseline modes compile while they wait (their load is sent ahead): more of them
        // ahead hide more of the compile.
        let lookahead = c.lookahead.unwrap_or(match c.agent {
            AgentConfig::Baselines { .. } => BASELINE_LOOKAHEAD,
            _ => LOOKAHEAD,
        });
        while upcoming.len() < if ahead { lookahead } else { 1 } {
            let Some(item) = shared.pop() else {
                break;
            };
            let log = run_dir.logs_dir().join(format!(
                "{}__reference.log",
                sanitize(&item.0.to_ref().key())
            ));
            let spec = ctx.spec(
                Role::Reference,
                &std::env::temp_dir(),
                Some(log),
                exec.device,
            );
            let load = crate::measure::reference::load_request(ctx, exec, &item.1);
            let reference =
                Prestart::spawn_then(spec, c.timeouts.start, ahead, Some((load, c.timeouts.load)));
            let first_candidate = match item.2.first() {
                Some((cand, prep)) => {
                    Some(start_candidate(ctx, exec, run_dir, &item.1, cand, prep)?)
                }
                None => None,
            };
            upcoming.push_back(Upcoming {
                item,
                reference,
                first_candidate,
            });
        }
        Ok(())
    };
    let mut upcoming = std::collections::VecDeque::new();
    loop {
        take_next(&mut upcoming)?;
        let Some(Upcoming {
            item: (problem, problem_path, candidates),
            reference: this_ref,
            first_candidate,
        }) = upcoming.pop_front()
        else {
            break;
        };
        if ctx.stop.load(Ordering::SeqCst) {
            shared.interrupted.store(true, Ordering::SeqCst);
            this_ref.discard();
            if let Some((_, p)) = first_candidate {
                p.discard();
            }
            break;
        }
        // Keep the lookahead full while this problem runs.
        take_next(&mut upcoming)?;
        shared.progress.set_message(format!(
            "{} {} (reference)",
            problem.to_ref().key(),
            problem.name
        ));
        let opening = Instant::now();
        let (started, load_reply) = this_ref.take_with_reply();
        let mut reference = ReferenceSession::open(
            ctx,
            exec,
            problem,
            &problem_path,
            run_dir,
            Some(started),
            load_reply,
        );
        let mut reference_open_s = opening.elapsed().as_secs_f64();
        if let Err(RefFailure::Interrupted) = reference {
            shared.interrupted.store(true, Ordering::SeqCst);
            if let Some((_, p)) = first_candidate {
                p.discard();
            }
            break;
        }
        let mut cand_ahead = first_candidate;
        let n = candidates.len();
        for (k, (cand, prep)) in candidates.iter().enumerate() {
            if ctx.stop.load(Ordering::SeqCst) {
                shared.interrupted.store(true, Ordering::SeqCst);
                break;
            }
            shared.progress.set_message(format!(
                "{} {} {}",
                problem.to_ref().key(),
                problem.name,
                cand.name
            ));
            let mut env = shared.env_base.clone();
            let this = match cand_ahead.take() {
                Some(p) => p,
                None => start_candidate(ctx, exec, run_dir, &problem_path, cand, prep)?,
            };
            // Start the next candidate's worker now; it imports torch while this one runs.
            if k + 1 < n && reference.is_ok() {
                let (next, next_prep) = &candidates[k + 1];
                cand_ahead = Some(start_candidate(
                    ctx,
                    exec,
                    run_dir,
                    &problem_path,
                    next,
                    next_prep,
                )?);
            }
            let record = match &mut reference {
                Ok(r) => {
                    env.device_name = r.device_name.clone();
                    evaluate_candidate(
                        ctx,
                        exec,
                        problem,
                        &problem_path,
                        cand,
                        prep,
                        shared.agent,
                        r,
                        run_dir,
                        env,
                        this,
                    )?
                }
                Err(RefFailure::Failed(msg)) => {
                    this.1.discard();
                    Some(reference_error_record(
                        c,
                        exec.device,
                        run_dir,
                        problem,
                        cand,
                        shared.agent,
                        msg,
                        env,
                    ))
                }
                Err(RefFailure::Interrupted) => None,
            };
            let Some(mut record) = record else {
                shared.interrupted.store(true, Ordering::SeqCst);
                break;
            };
            // The problem's first record carries the time spent opening its reference session
            // after the previous problem (what the load ahead did not hide).
            if let Some(ph) = record.phases.as_mut() {
                ph.reference_open_s = std::mem::take(&mut reference_open_s);
            }
            run_dir.append(&record)?;
            report_line(c, shared.progress, &record);
            shared.progress.inc(1);
            // A worker that crashed or hung may have left the GPU in a bad state: check it
            // before it takes new work.
            if let (Some(gpu), true) = (&exec.gpu, needs_health_check(&record.outcome)) {
                if let Err(e) = crate::gpu::health_check(gpu) {
                    // Nothing is lost: this problem's remaining candidates and the problems
                    // taken ahead go back to the queue for the other GPUs (or a --resume).
                    let mut left = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
                    for u in upcoming.drain(..).rev() {
                        let item = (u.item.0, u.item.1.clone(), u.item.2.clone());
                        u.discard();
                        left.push_front(item);
                    }
                    if k + 1 < n {
                        left.push_front((
                            problem,
                            problem_path.clone(),
                            candidates[k + 1..].to_vec(),
                        ));
                    }
                    drop(left);
                    shared.progress.println(format!(
                        "kbench: GPU {} taken out of the run after {}: {e:#}",
                        gpu.ordinal,
                        record.problem.key()
                    ));
                    if let Ok(r) = reference {
                        r.worker.shutdown();
                    }
                    if let Some((_, p)) = cand_ahead.take() {
                        p.discard();
                    }
                    return if c.gpus.len() > 1 {
                        Ok(())
                    } else {
                        Err(e.context("no healthy GPU is left for this run; resume it with --resume once the GPU is reset"))
                    };
                }
            }
            shared
                .added
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(record);
        }
        if let Some((_dir, p)) = cand_ahead {
            p.discard();
        }
        if let Ok(r) = reference {
            r.worker.shutdown();
        }
        if shared.interrupted.load(Ordering::SeqCst) {
            break;
        }
    }
    for u in upcoming {
        u.discard();
    }
    Ok(())
}

/// Crashes and timeouts kill a process that held a CUDA context in an unknown state.
fn needs_health_check(o: &Outcome) -> bool {
    matches!(o, Outcome::Crashed { .. } | Outcome::Timeout { .. })
}

/// Starts a candidate's worker (ahead, on a GPU). A baseline mode (`warm_up`: PyTorch's own
/// code, not untrusted) is also sent its `load` ahead, so its torch.compile runs while the
/// problems before it are evaluated, paused while anything is timed.
fn start_candidate(
    ctx: &Ctx,
    exec: &Exec,
    run_dir: &RunDir,
    problem_path: &Path,
    cand: &Candidate,
    prep: &Prepared,
) -> Result<(tempfile::TempDir, Prestart)> {
    let cwd = tempfile::Builder::new()
        .prefix("kbench-cand-")
        .tempdir()
        .context("creating a private working directory for the candidate")?;
    let spec = candidate_spec(ctx, exec, run_dir, cwd.path(), prep);
    let ahead = exec.gpu.is_some();
    let load = cand.warm_up.then(|| {
        (
            Frame::new(candidate_load(ctx, exec, problem_path, cand, prep)),
            ctx.config.timeouts.load,
        )
    });
    Ok((
        cwd,
        Prestart::spawn_then(spec, ctx.config.timeouts.start, ahead, load),
    ))
}

/// How a candidate's worker is started: in `cwd`, its output in the candidate's log.
fn candidate_spec(
    ctx: &Ctx,
    exec: &Exec,
    run_dir: &RunDir,
    cwd: &Path,
    prep: &Prepared,
) -> WorkerSpec {
    ctx.spec(
        Role::Candidate,
        cwd,
        Some(run_dir.logs_dir().join(format!("{}.log", prep.key))),
        exec.device,
    )
}

fn candidate_load(
    ctx: &Ctx,
    exec: &Exec,
    problem_path: &Path,
    cand: &Candidate,
    prep: &Prepared,
) -> Value {
    let c = ctx.config;
    json!({
        "cmd": "load",
        "problem_path": problem_path,
        "candidate_path": prep.source_path,
        "device": device_for_worker(exec.device),
        "precision": c.precision.as_str(),
        "weight_seed": c.weight_seed,
        "num_threads": ctx.num_threads(exec.device),
        "build_dir": prep.build_dir,
        "warm_up": cand.warm_up,
    })
}

fn report_line(c: &RunConfig, progress: &indicatif::ProgressBar, record: &EvalRecord) {
    if c.quiet {
        return;
    }
    let line = format!(
        "{} {:<32} {:<20} {}{}",
        record.problem.key(),
        truncate(&record.problem.name, 32),
        truncate(&record.candidate.name, 20),
        record.outcome,
        record
            .timing
            .as_ref()
            .map(|t| format!("  speedup {:.3}x", t.speedup))
            .unwrap_or_default()
    );
    if progress.is_hidden() {
        eprintln!("{line}");
    } else {
        progress.println(line);
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

fn progress_bar(total: u64, quiet: bool) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(total);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} {wide_msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    // Off a terminal indicatif hides the bar itself; the run then prints per-kernel lines.
    pb
}

/// Things every evaluation needs.
pub(crate) struct Ctx<'a> {
    pub config: &'a RunConfig,
    python: &'a Path,
    info: &'a PythonInfo,
    worker_script: &'a Path,
    stop: Arc<AtomicBool>,
    /// `TORCH_CUDA_ARCH_LIST` for builds: the run's GPU architectures only, e.g. `9.0`.
    cuda_arch: Option<String>,
    builds: Option<BuildPool>,
    /// Pause workers still starting for a device while a kernel is timed on it.
    pub gates: Gates,
}

impl<'a> Ctx<'a> {
    /// The context of a command that starts only trusted reference workers, one problem at
    /// a time (`kbench audit`): no candidate builds, no timing.
    pub(crate) fn for_reference_workers(
        config: &'a RunConfig,
        info: &'a PythonInfo,
        worker_script: &'a Path,
        stop: Arc<AtomicBool>,
    ) -> Self {
        Ctx {
            config,
            python: &config.python.python,
            info,
            worker_script,
            stop,
            cuda_arch: None,
            builds: None,
            gates: Gates::default(),
        }
    }
}

impl Ctx<'_> {
    pub fn spec(
        &self,
        role: Role,
        cwd: &Path,
        log_path: Option<PathBuf>,
        device: Device,
    ) -> WorkerSpec {
        WorkerSpec {
            python: self.python.to_path_buf(),
            script: self.worker_script.to_path_buf(),
            role,
            cwd: cwd.to_path_buf(),
            env: worker_env(
                self.python,
                device,
                self.cuda_arch.as_deref(),
                &self.config.cache,
            ),
            log_path,
            max_payload: MAX_PAYLOAD,
            interrupt: Some(Arc::clone(&self.stop)),
            gate: Some(self.gates.of(device)),
        }
    }

    pub fn num_threads(&self, device: Device) -> Value {
        match device {
            Device::Cpu => json!(self.config.cpu_threads),
            Device::Cuda(_) => Value::Null,
        }
    }
}

/// One executor's device: the CPU, or one GPU with the harness's own context on it (for
/// buffers shared with workers and the comparison kernels).
pub(crate) struct Exec {
    pub device: Device,
    pub gpu: Option<Arc<Gpu>>,
    pub cmp: Option<DeviceComparator>,
    /// The core both timing workers run on while timing (see `affinity`).
    pub timing_cpu: Option<usize>,
}

impl Exec {
    fn open(device: Device, timing_cpu: Option<usize>) -> Result<Self> {
        match device {
            Device::Cpu => Ok(Self {
                device,
                gpu: None,
                cmp: None,
                timing_cpu: None,
            }),
            Device::Cuda(i) => {
                let gpu = Gpu::open(i as usize)?;
                let cmp = DeviceComparator::new(&gpu)
                    .with_context(|| format!("preparing the comparison kernels on GPU {i}"))?;
                Ok(Self {
                    device,
                    gpu: Some(gpu),
                    cmp: Some(cmp),
                    timing_cpu,
                })
            }
        }
    }
}

/// The environment of a worker: an allow-list. Nothing of kbench's own state (the run
/// directory, seeds) is passed; the interpreter's folder goes first on PATH so that `ninja`
/// from kbench's environment is found by torch's extension builder.
fn worker_env(
    python: &Path,
    device: Device,
    cuda_arch: Option<&str>,
    cache: &Path,
) -> Vec<(String, String)> {
    const PASS: &[&str] = &[
        "HOME",
        "USER",
        "LANG",
        "LC_ALL",
        "TMPDIR",
        "CUDA_HOME",
        "CUDA_PATH",
        "LD_LIBRARY_PATH",
        "CC",
        "CXX",
        "MAX_JOBS",
        "TORCH_CUDA_ARCH_LIST",
        "NVIDIA_VISIBLE_DEVICES",
        "NCCL_NVLS_ENABLE",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST",
        "NVSHMEM_DISABLE_NVLS",
        "TRITON_CACHE_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
    ];
    let mut env: Vec<(String, String)> = PASS
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    let mut path = python
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    if let Ok(p) = std::env::var("PATH") {
        path = format!("{path}:{p}");
    }
    env.push(("PATH".into(), path));
    env.push(("PYTHONUNBUFFERED".into(), "1".into()));
    if let Some(arch) = cuda_arch {
        if std::env::var_os("TORCH_CUDA_ARCH_LIST").is_none() {
            // Same value for build jobs and evaluating workers, so both produce the same
            // ninja file and a build ahead is a cache hit.
            env.push(("TORCH_CUDA_ARCH_LIST".into(), arch.to_string()));
        }
    }
    env.push(("PYTHONDONTWRITEBYTECODE".into(), "1".into()));
    // torch.compile's caches (baseline modes) in kbench's own cache, not a shared /tmp
    // folder: inductor's FX graph and autotuning caches make a repeated compile a hit.
    for (var, sub) in [
        ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
        ("TRITON_CACHE_DIR", "triton"),
    ] {
        if std::env::var_os(var).is_none() {
            env.push((var.into(), cache.join(sub).display().to_string()));
        }
    }
    match device {
        Device::Cuda(i) => {
            // Each worker sees exactly its GPU, as cuda:0.
            let visible = std::env::var("CUDA_VISIBLE_DEVICES")
                .ok()
                .and_then(|v| v.split(',').nth(i as usize).map(str::to_string))
                .unwrap_or_else(|| i.to_string());
            env.push(("CUDA_VISIBLE_DEVICES".into(), visible));
            // The CUDA context and the profiler are made while the worker starts (ahead,
            // behind earlier problems), not in the evaluation (see worker.py, _warm_cuda).
            env.push(("KBENCH_WARM_CUDA".into(), "1".into()));
        }
        Device::Cpu => env.push(("CUDA_VISIBLE_DEVICES".into(), String::new())),
    }
    env
}

pub(crate) fn device_for_worker(d: Device) -> &'static str {
    match d {
        Device::Cpu => "cpu",
        // CUDA_VISIBLE_DEVICES narrows each worker to its one GPU.
        Device::Cuda(_) => "cuda:0",
    }
}

pub(crate) fn str_field(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

/// The message of an `error` frame (or a description of an unexpected one).
pub(crate) fn error_text(reply: &Frame) -> String {
    if reply.kind() == "error" {
        let msg = str_field(&reply.header, "message");
        let tb = str_field(&reply.header, "traceback");
        if tb.is_empty() {
            msg
        } else {
            format!("{msg}\n{tb}")
        }
    } else {
        format!("unexpected answer {}", reply.header)
    }
}

pub(crate) fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

pub fn record_key(p: &Problem, agent: &str, c: &Candidate) -> String {
    kbench_record::eval_key(&p.key(), agent, &c.name, c.sample)
}

fn candidate_ref(agent: &str, c: &Candidate) -> CandidateRef {
    CandidateRef {
        agent: agent.into(),
        name: c.name.clone(),
        sample: c.sample,
        source_path: c.source_path.as_ref().map(|p| p.display().to_string()),
        sha256: c.sha256.clone(),
    }
}

#[allow(clippy::too_many_arguments)]
fn reference_error_record(
    config: &RunConfig,
    device: Device,
    run_dir: &RunDir,
    problem: &Problem,
    cand: &Candidate,
    agent: &str,
    message: &str,
    env: Environment,
) -> EvalRecord {
    let now = now_unix();
    EvalRecord {
        schema_version: SCHEMA_VERSION,
        run_id: run_dir.manifest.run_id.clone(),
        problem: problem.to_ref(),
        candidate: candidate_ref(agent, cand),
        device,
        precision: config.precision,
        profile: config.profile,
        outcome: Outcome::ReferenceError {
            message: message.to_string(),
        },
        cases: Vec::new(),
        timing: None,
        load_s: None,
        build_ahead_s: None,
        phases: None,
        gpu: None,
        wall_s: 0.0,
        started_unix_s: now,
        finished_unix_s: now,
        log_tail: String::new(),
        notes: Vec::new(),
        env,
        baselines: Default::default(),
        speed_of_light: None,
        integrity: None,
    }
}

/// Maps a worker fault in `phase` to an outcome; `None` for an interrupt (nothing recorded).
pub(crate) fn fault_outcome(fault: WorkerFault, phase: Phase) -> Option<Outcome> {
    Some(match fault {
        WorkerFault::Interrupted => return None,
        WorkerFault::Timeout { limit } => Outcome::Timeout {
            phase,
            limit_s: limit.as_secs_f64(),
        },
        WorkerFault::Died { signal, exit_code } => Outcome::Crashed {
            phase,
            signal,
            exit_code,
        },
        WorkerFault::Protocol(m) => Outcome::Integrity {
            flag: crate::judge::integrity::PROTOCOL_VIOLATION.into(),
            detail: m,
        },
        WorkerFault::Spawn(m) => Outcome::RuntimeError {
            phase: Phase::Start,
            message: m,
        },
    })
}

/// Maps a worker's `error` answer to an outcome.
pub(crate) fn error_outcome(reply: &Frame, phase: Phase) -> Outcome {
    let kind = str_field(&reply.header, "kind");
    let message = error_text(reply);
    if let Some(o) = crate::judge::integrity::non_plain_output(&reply.header, &message) {
        return o;
    }
    match kind.as_str() {
        "compile_error" => Outcome::CompileError { message },
        _ => Outcome::RuntimeError { phase, message },
    }
}

/// Where a candidate's files go: its source in the run directory and its content-addressed
/// build directory (keyed by source, torch version and device architecture).
#[derive(Clone)]
struct Prepared {
    key: String,
    source_path: PathBuf,
    build_dir: PathBuf,
}

fn prepare_candidate(
    ctx: &Ctx,
    problem: &Problem,
    cand: &Candidate,
    agent: &str,
    run_dir: &RunDir,
) -> Result<Prepared> {
    let c = ctx.config;
    let key = sanitize(&format!(
        "{}__{}__{}__{}",
        problem.to_ref().key(),
        agent,
        cand.name,
        cand.sample
    ));
    let source_path = run_dir.kernels_dir().join(format!("{key}.py"));
    std::fs::write(&source_path, &cand.source)
        .with_context(|| format!("saving candidate source {}", source_path.display()))?;
    let build_dir = extension_build_dir(
        &c.cache,
        &cand.sha256,
        &ctx.info.torch,
        c.device,
        ctx.cuda_arch.as_deref(),
    );
    std::fs::create_dir_all(&build_dir)
        .with_context(|| format!("creating {}", build_dir.display()))?;
    Ok(Prepared {
        key,
        source_path,
        build_dir,
    })
}

/// The content-addressed build folder of a candidate's extensions: keyed by its source, the
/// torch version, the device kind and the GPU architecture(s) it is built for (`arch`, as
/// TORCH_CUDA_ARCH_LIST: "9.0"), so a kernel is built once whoever loads it (evaluations,
/// builds ahead, `kbench profile`).
pub fn extension_build_dir(
    cache: &Path,
    source_sha256: &str,
    torch: &str,
    device: Device,
    arch: Option<&str>,
) -> PathBuf {
    cache.join("torch_extensions").join(
        &kbench_suites::sha256_hex(
            format!(
                "{}|{}|{}|{}",
                source_sha256,
                torch,
                device_for_worker(device),
                arch.unwrap_or("cpu")
            )
            .as_bytes(),
        )[..16],
    )
}

/// Evaluates one candidate. `Ok(None)` means the run was interrupted before a verdict.
#[allow(clippy::too_many_arguments)]
fn evaluate_candidate(
    ctx: &Ctx,
    exec: &Exec,
    problem: &Problem,
    problem_path: &Path,
    cand: &Candidate,
    prep: &Prepared,
    agent: &str,
    reference: &mut ReferenceSession,
    run_dir: &RunDir,
    env: Environment,
    started_worker: (tempfile::TempDir, Prestart),
) -> Result<Option<EvalRecord>> {
    let c = ctx.config;
    let started = now_unix();
    let t0 = Instant::now();
    let build_dir = &prep.build_dir;
    let mut phases = PhaseTimes::default();
    let (made0, inputs0) = (reference.made_s, reference.inputs_s);
    // A build ahead still running is waited for (it is this candidate's compile anyway).
    let tb = Instant::now();
    let built_ahead = ctx.builds.as_ref().and_then(|p| p.claim(build_dir));
    phases.compile_s += tb.elapsed().as_secs_f64();
    let (cwd, prestart) = started_worker;

    let mut notes = Vec::new();
    if c.lookahead == Some(1) && exec.gpu.is_some() {
        notes.push(GPU_ALONE_NOTE.to_string());
    }
    let mut cases = Vec::new();
    let mut load_s = None;
    let mut timing = None;
    let mut integrity = kbench_record::IntegrityReport::default();
    let mut log_tail = String::new();

    let outcome = 'eval: {
        let tw = Instant::now();
        let (mut started_worker, mut load_ahead) = prestart.take_with_reply();
        // A load sent ahead ran beside other problems' work (their GPU memory included): if
        // it failed, the verdict comes from a fresh worker loading now, alone.
        let ahead_failed = match &load_ahead {
            Some(Ok(r)) => r.kind() != "loaded",
            Some(Err(WorkerFault::Interrupted)) => false,
            Some(Err(_)) => true,
            None => false,
        };
        if ahead_failed {
            if let Ok(w) = started_worker {
                w.shutdown();
            }
            notes.push(
                "the load sent ahead failed beside other work; loaded again on its own".into(),
            );
            let spec = candidate_spec(ctx, exec, run_dir, cwd.path(), prep);
            started_worker = Worker::start(&spec, c.timeouts.start);
            load_ahead = None;
        }
        phases.worker_wait_s = tw.elapsed().as_secs_f64();
        let mut worker = match started_worker {
            Ok(w) => w,
            Err(f) => match fault_outcome(f, Phase::Start) {
                Some(o) => break 'eval o,
                None => return Ok(None),
            },
        };
        macro_rules! fault {
            ($f:expr, $phase:expr) => {{
                log_tail = worker.log_tail();
                match fault_outcome($f, $phase) {
                    Some(o) => break 'eval o,
                    None => return Ok(None),
                }
            }};
        }
        let tl = Instant::now();
        let reply = match load_ahead {
            // Sent ahead: what the wait for the worker did not hide is in worker_wait_s.
            Some(r) => match r {
                Ok(r) => r,
                Err(f) => fault!(f, Phase::Load),
            },
            None => {
                let load = candidate_load(ctx, exec, problem_path, cand, prep);
                match worker.request(Frame::new(load), c.timeouts.load) {
                    Ok(r) => r,
                    Err(f) => fault!(f, Phase::Load),
                }
            }
        };
        load_s = Some(
            reply
                .header
                .get("load_s")
                .and_then(Value::as_f64)
                .unwrap_or_else(|| tl.elapsed().as_secs_f64()),
        );
        phases.compile_s += tl.elapsed().as_secs_f64();
        if reply.kind() != "loaded" {
            log_tail = worker.log_tail();
            break 'eval error_outcome(&reply, Phase::Load);
        }
        if let Some(o) =
            crate::judge::integrity::probe_failure(reply.header.get("integrity"), &[], "load")
        {
            log_tail = worker.log_tail();
            break 'eval o;
        }

        let tc_all = Instant::now();
        // When the stress families began, and the reference's case-making time by then.
        let mut stress_began: Option<(Instant, f64)> = None;
        let mut stress_failure: Option<Outcome> = None;
        // Issue 6: the last random case (the inputs timing uses), the outputs of probed
        // timed calls, and each case's output hashes (candidate's, reference's) to recognise
        // an output replayed from an earlier case.
        let mut last_random: Option<Arc<RefCase>> = None;
        // Random cases already passed (device path: a failing output is compared with them).
        let mut earlier_random: Vec<Arc<RefCase>> = Vec::new();
        let mut checked_calls = Vec::new();
        let mut seen_outputs: Vec<(kbench_record::CaseRef, Vec<u64>, Vec<u64>)> = Vec::new();
        // The random trials first (KernelBench's check: a failure there ends the
        // evaluation), then timing, then one case per stress family. A stress failure is
        // recorded and the other families still run, so the record names every family that
        // fails; an error or crash there ends the evaluation but keeps the timing.
        let total = c.cases_total();
        for t in 0..=total {
            if t == c.trials {
                phases.correctness_s = tc_all.elapsed().as_secs_f64();
                // Issue 6: which kernels one call launches (CUDA), on the last random case.
                if matches!(exec.device, Device::Cuda(_)) && c.trials > 0 {
                    match profile_candidate(&mut worker, c, &cand.source, &mut integrity) {
                        Ok(Some(o)) => {
                            log_tail = worker.log_tail();
                            break 'eval o;
                        }
                        Ok(None) => {}
                        Err(f) => fault!(f, Phase::Run),
                    }
                }
                if let Some(tc) = &c.timing {
                    let tt = Instant::now();
                    let held = reference.hold_case(ctx, exec, problem, run_dir, c.trials - 1);
                    let result = match held {
                        Err(RefFailure::Interrupted) => return Ok(None),
                        Err(RefFailure::Failed(msg)) => Ok(TimingResult::ReferenceFailed(msg)),
                        Ok(()) => {
                            let gate = ctx.gates.of(exec.device);
                            gate.begin_timing();
                            let checks = crate::measure::timing::TimedChecks {
                                check_outputs: last_random
                                    .as_ref()
                                    .is_some_and(|rc| timed_check_fits(rc)),
                                allowed_mutations: last_random
                                    .as_ref()
                                    .map_or(&[][..], |rc| &rc.mutated_inputs[..]),
                                checked: &mut checked_calls,
                            };
                            let r =
                                time_pair(c, exec, &mut reference.worker, &mut worker, tc, checks);
                            gate.end_timing();
                            r
                        }
                    };
                    phases.timing_s = tt.elapsed().as_secs_f64();
                    if let (Ok(TimingResult::Measured(_)), Some(rc)) = (&result, &last_random) {
                        match judge_timed_calls(exec, c, rc, &checked_calls) {
                            Ok(Some(o)) => {
                                log_tail = worker.log_tail();
                                break 'eval o;
                            }
                            Ok(None) => {}
                            Err(e) => return Err(e),
                        }
                        integrity.checked_timed_calls = checked_calls.len() as u32;
                    }
                    match result {
                        Ok(TimingResult::Measured(t)) => timing = Some(t),
                        Ok(TimingResult::Failed(o)) => {
                            log_tail = worker.log_tail();
                            break 'eval o;
                        }
                        Ok(TimingResult::ReferenceFailed(msg)) => {
                            reference.forget_worker_case();
                            notes.push(format!("not timed: {msg}"))
                        }
                        Err(f) => fault!(f, Phase::Time),
                    }
                }
            }
            if t == total {
                break;
            }
            let case = c.case_ref(t);
            let stress = case.family != CaseFamily::Random;
            if stress && stress_began.is_none() {
                stress_began = Some((Instant::now(), reference.made_s));
            }
            let rc = match reference.case(ctx, exec, problem, run_dir, t) {
                Ok(rc) => rc,
                Err(RefFailure::Failed(message)) if stress => {
                    // The reference itself fails on these inputs: nothing to judge against.
                    let first = message.lines().next().unwrap_or_default().to_string();
                    cases.push(not_applicable_case(
                        case,
                        format!("the reference fails on it: {first}"),
                    ));
                    continue;
                }
                Err(RefFailure::Failed(message)) => {
                    log_tail = worker.log_tail();
                    break 'eval Outcome::ReferenceError { message };
                }
                Err(RefFailure::Interrupted) => return Ok(None),
            };
            if let Some(why) = &rc.not_applicable {
                cases.push(not_applicable_case(case, why.clone()));
                continue;
            }
            if stress {
                // Stands for the case if the candidate errs or crashes on it: the record
                // then shows which family did it, after every random case passed.
                let mut failed = not_applicable_case(case.clone(), String::new());
                failed.not_applicable = None;
                failed.passed = false;
                cases.push(failed);
            }
            let tc = Instant::now();
            let judged = match &rc.data {
                CaseData::Host { run_frame, .. } => {
                    let reply = match worker.request_shared(Arc::clone(run_frame), c.timeouts.run) {
                        Ok(r) => r,
                        Err(f) => fault!(f, Phase::Run),
                    };
                    let wall_s = tc.elapsed().as_secs_f64();
                    if reply.kind() != "outputs" {
                        log_tail = worker.log_tail();
                        break 'eval error_outcome(&reply, Phase::Run);
                    }
                    let outputs: Vec<HostTensor> = match reply.tensors() {
                        Ok(ts) => ts
                            .into_iter()
                            .filter(|(n, _)| n.starts_with("out:"))
                            .map(|(_, t)| t)
                            .collect(),
                        Err(e) => fault!(WorkerFault::Protocol(e.to_string()), Phase::Run),
                    };
                    if let Some(o) = count_mismatch(outputs.len(), rc.num_outputs()) {
                        log_tail = worker.log_tail();
                        break 'eval o;
                    }
                    let what = format!("case {case}");
                    if let Some(o) = crate::judge::integrity::probe_failure(
                        reply.header.get("integrity"),
                        &rc.mutated_inputs,
                        &what,
                    )
                    .or_else(|| crate::judge::integrity::unwritten_outputs(outputs.iter(), &what))
                    {
                        log_tail = worker.log_tail();
                        break 'eval o;
                    }
                    let mut judged = judge_host_case(c, &rc, &outputs, wall_s);
                    if judged.failure.is_some() {
                        if let Some(o) = replayed_output(&rc, &outputs, &seen_outputs) {
                            judged.failure = Some(o);
                        }
                    }
                    if let CaseData::Host { outputs: refs, .. } = &rc.data {
                        seen_outputs.push((
                            case.clone(),
                            outputs
                                .iter()
                                .map(crate::judge::integrity::output_hash)
                                .collect(),
                            refs.iter()
                                .map(crate::judge::integrity::output_hash)
                                .collect(),
                        ));
                    }
                    judged
                }
                CaseData::Device { .. } => {
                    match run_device_case(ctx, exec, &mut worker, &rc, tc, &earlier_random) {
                        Ok(Ok(j)) => j,
                        Ok(Err(o)) => {
                            log_tail = worker.log_tail();
                            break 'eval o;
                        }
                        Err(DeviceCaseError::Fault(f)) => fault!(f, Phase::Run),
                        Err(DeviceCaseError::Harness(e)) => return Err(e),
                    }
                }
            };
            if stress {
                cases.pop();
            } else {
                // A device case is kept only when the reference session keeps it anyway:
                // holding it here would double the GPU memory of a case too large to cache.
                let device = matches!(rc.data, CaseData::Device { .. });
                last_random = (!device || Arc::strong_count(&rc) >= 2).then(|| Arc::clone(&rc));
                if device && last_random.is_some() {
                    earlier_random.push(Arc::clone(&rc));
                }
            }
            cases.push(judged.result);
            if let Some(o) = judged.failure {
                if !stress {
                    log_tail = worker.log_tail();
                    break 'eval o;
                }
                stress_failure.get_or_insert(o);
            }
        }
        if let Some((began, made)) = stress_began {
            phases.stress_s = began.elapsed().as_secs_f64();
            phases.stress_reference_s = reference.made_s - made;
        }
        phases.correctness_s =
            (tc_all.elapsed().as_secs_f64() - phases.timing_s - phases.stress_s).max(0.0);
        if let Some(o) = stress_failure {
            log_tail = worker.log_tail();
            worker.shutdown();
            break 'eval o;
        }
        log_tail = worker.log_tail();
        worker.shutdown();
        Outcome::Ok
    };

    // The problem's speed of light on this GPU (CUDA runs on a GPU in the spec table only:
    // counting costs one extra reference forward per problem).
    let speed_of_light = match exec.device {
        Device::Cuda(i) => crate::gpu::peaks_of(i).and_then(|p| {
            reference
                .cost(ctx, run_dir)
                .map(|c| kbench_record::perf::speed_of_light(&c, &p))
        }),
        Device::Cpu => None,
    };
    phases.reference_s = (reference.made_s - made0 - phases.stress_reference_s).max(0.0);
    phases.inputs_s = reference.inputs_s - inputs0;
    // Case time includes making reference cases on demand; report the candidate's part.
    phases.correctness_s = (phases.correctness_s - phases.reference_s).max(0.0);
    let mut all_notes = reference.notes.clone();
    all_notes.append(&mut notes);
    let notes = all_notes;
    // Timed only when every random case passed: the ratios serve the random-only
    // (KernelBench-comparable) figures even when a stress family failed.
    let baselines = match (&c.baselines, &timing) {
        (Some(table), Some(t)) => table.ratios(&problem.to_ref(), &t.candidate),
        _ => Default::default(),
    };
    let mut record = EvalRecord {
        schema_version: SCHEMA_VERSION,
        run_id: run_dir.manifest.run_id.clone(),
        problem: problem.to_ref(),
        candidate: candidate_ref(agent, cand),
        device: exec.device,
        precision: c.precision,
        profile: c.profile,
        outcome,
        cases,
        timing,
        load_s,
        build_ahead_s: built_ahead.map(|b| b.seconds),
        wall_s: t0.elapsed().as_secs_f64(),
        phases: Some(phases),
        gpu: match exec.device {
            Device::Cuda(i) => Some(i),
            Device::Cpu => None,
        },
        started_unix_s: started,
        finished_unix_s: now_unix(),
        log_tail,
        notes,
        env,
        baselines,
        speed_of_light,
        integrity: Some(integrity),
    };
    // A time below the physical limit (reads and FLOPs at the GPU's peaks, L2 flushed before
    // each call) is no kernel's honest result: work skipped, results kept across calls, or
    // broken timing (issue 6, "excessive speedup").
    if let Some(o) = faster_than_light(&record) {
        record.outcome = o;
    }
    Ok(Some(record))
}

/// The outcome replacing `Ok` when the record's median time, taken with the L2 flushed, is
/// below the problem's strict speed of light by more than the slack
/// ([`EvalRecord::below_speed_of_light`]).
pub fn faster_than_light(r: &EvalRecord) -> Option<Outcome> {
    if !r.outcome.is_ok() || !r.below_speed_of_light(kbench_reports::SOL_SLACK) {
        return None;
    }
    let (t, sol) = (r.timing.as_ref()?, r.speed_of_light.as_ref()?);
    Some(Outcome::Integrity {
        flag: crate::judge::integrity::FASTER_THAN_LIGHT.into(),
        detail: format!(
            "median {:.3} us per call, but reading the inputs and weights ({:.3} MB) and doing the FLOPs ({:.3} GFLOP at the {} peak) takes at least {:.3} us on {}",
            t.candidate.median_ms * 1e3,
            (sol.cost.input_bytes + sol.cost.weight_bytes) / 1e6,
            sol.cost.flops / 1e9,
            sol.compute_peak,
            sol.strict_min_s * 1e6,
            sol.arch
        ),
    })
}

/// Whether the probed timed calls' outputs can be checked: small enough to send back over
/// the pipe (device cases: read back to the host once per probed call), and the reference
/// does not write to its inputs (then the case's inputs, and every timed call's answer,
/// are no longer those of the reference outputs kept).
fn timed_check_fits(rc: &RefCase) -> bool {
    if !rc.mutated_inputs.is_empty() {
        return false;
    }
    match &rc.data {
        CaseData::Host { .. } => true,
        CaseData::Device { outputs, .. } => {
            outputs.iter().map(|o| o.nbytes() as u64).sum::<u64>() <= TIMED_CHECK_MAX_BYTES
        }
    }
}

/// Largest total output size of a device case whose probed timed calls are checked.
const TIMED_CHECK_MAX_BYTES: u64 = 256 << 20;

/// Compares the outputs of probed timed calls with the reference outputs of the case timing
/// ran on: `timed-output-mismatch` (or `unwritten-output`) when one differs.
fn judge_timed_calls(
    exec: &Exec,
    c: &RunConfig,
    rc: &RefCase,
    checked: &[crate::measure::timing::CheckedCall],
) -> Result<Option<Outcome>> {
    if checked.is_empty() {
        return Ok(None);
    }
    let (refs, refs64): (Vec<HostTensor>, Option<Vec<HostTensor>>) = match &rc.data {
        CaseData::Host {
            outputs,
            outputs_f64,
            ..
        } => (outputs.clone(), outputs_f64.clone()),
        CaseData::Device {
            outputs,
            outputs_f64,
            ..
        } => {
            let gpu = exec.gpu.as_ref().expect("device case without a GPU");
            let read = |t: &DevTensorOwned| -> Result<HostTensor> {
                let bytes = gpu.read(&t.buf, 0, t.nbytes())?;
                Ok(HostTensor::new(t.dtype, t.shape.clone(), bytes)?)
            };
            let refs = outputs.iter().map(read).collect::<Result<Vec<_>>>()?;
            let refs64 = match outputs_f64 {
                Some(v) => Some(v.iter().map(read).collect::<Result<Vec<_>>>()?),
                None => None,
            };
            (refs, refs64)
        }
    };
    for call in checked {
        let what = format!(
            "timed call {} of round {} (inputs of {})",
            call.call, call.round, rc.case
        );
        if let Some(o) = crate::judge::integrity::unwritten_outputs(call.outputs.iter(), &what) {
            return Ok(Some(o));
        }
        let failure = if call.outputs.len() != refs.len() {
            Some(format!(
                "{} output(s) where the reference has {}",
                call.outputs.len(),
                refs.len()
            ))
        } else {
            call.outputs
                .iter()
                .zip(&refs)
                .enumerate()
                .find_map(|(k, (cand, reference))| {
                    let ref64 = gated_f64(refs64.as_deref(), k, reference.dtype());
                    match kbench_adversarial::compare(
                        cand,
                        reference,
                        ref64,
                        c.profile,
                        c.precision,
                    ) {
                        Ok(cmp) => cmp
                            .failure_outcome(&rc.case, k as u32)
                            .map(|o| o.to_string()),
                        Err(e) => Some(format!("output {k}: {e}")),
                    }
                })
        };
        if let Some(why) = failure {
            return Ok(Some(Outcome::Integrity {
                flag: crate::judge::integrity::TIMED_OUTPUT_MISMATCH.into(),
                detail: format!(
                    "{what}: passed the correctness cases but under timing returned {why}"
                ),
            }));
        }
    }
    Ok(None)
}

/// `output-replayed`: a failing case's outputs are bit for bit those the candidate returned
/// for an earlier case whose reference outputs differ (a cache keyed on something other than
/// the input values, or stale memory from the previous call).
fn replayed_output(
    rc: &RefCase,
    outputs: &[HostTensor],
    seen: &[(kbench_record::CaseRef, Vec<u64>, Vec<u64>)],
) -> Option<Outcome> {
    let CaseData::Host { outputs: refs, .. } = &rc.data else {
        return None;
    };
    let cand: Vec<u64> = outputs
        .iter()
        .map(crate::judge::integrity::output_hash)
        .collect();
    let reference: Vec<u64> = refs
        .iter()
        .map(crate::judge::integrity::output_hash)
        .collect();
    seen.iter()
        .find(|(_, c, r)| *c == cand && *r != reference)
        .map(|(earlier, _, _)| Outcome::Integrity {
            flag: crate::judge::integrity::OUTPUT_REPLAYED.into(),
            detail: format!(
                "the outputs of case {} are bit for bit those returned for case {earlier}, whose inputs and reference outputs differ (a cached or stale result)",
                rc.case
            ),
        })
}

/// `output-replayed` on the device path: output `k` of a failing case matches (under the
/// run's tolerance) the reference output `k` of an earlier random case.
fn replayed_device_output(
    gpu: &Gpu,
    c: &RunConfig,
    cand: &HostTensor,
    k: usize,
    rc: &RefCase,
    earlier: &[Arc<RefCase>],
) -> Result<Option<Outcome>> {
    for e in earlier {
        let CaseData::Device { outputs, .. } = &e.data else {
            continue;
        };
        let Some(o) = outputs.get(k) else { continue };
        if o.dtype != cand.dtype() || o.shape != cand.shape() {
            continue;
        }
        let r = HostTensor::new(o.dtype, o.shape.clone(), gpu.read(&o.buf, 0, o.nbytes())?)?;
        if kbench_adversarial::compare(cand, &r, None, c.profile, c.precision)
            .is_ok_and(|cmp| cmp.passed())
        {
            return Ok(Some(Outcome::Integrity {
                flag: crate::judge::integrity::OUTPUT_REPLAYED.into(),
                detail: format!(
                    "output {k} of case {} is the answer to case {} (within tolerance), whose inputs differ (a cached or stale result)",
                    rc.case, e.case
                ),
            }));
        }
    }
    Ok(None)
}

/// Profiles one call (CUDA) and records which kernels ran; with `--require-custom-kernels`
/// a candidate none of whose own kernels ran fails with `no-custom-kernel`.
fn profile_candidate(
    worker: &mut Worker,
    c: &RunConfig,
    source: &str,
    integrity: &mut kbench_record::IntegrityReport,
) -> Result<Option<Outcome>, WorkerFault> {
    use crate::judge::integrity as ig;
    let reply = worker.request(
        Frame::new(json!({"cmd": "profile", "forward_seed": 0})),
        c.timeouts.run,
    )?;
    if reply.kind() != "profile" {
        integrity.advisories.push(format!(
            "profile-unavailable: {}",
            error_text(&reply).lines().next().unwrap_or_default()
        ));
        return Ok(None);
    }
    let kernels = reply
        .header
        .get("kernels")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let default_stream = reply.header.get("default_stream").and_then(Value::as_i64);
    let profile = ig::kernel_profile(&kernels, default_stream, source);
    let mut advisories = Vec::new();
    let no_own = profile.own.is_empty();
    if no_own {
        advisories.push(ig::NO_CUSTOM_KERNEL.to_string());
    }
    if profile.side_stream {
        advisories.push(ig::SIDE_STREAM.to_string());
    }
    if c.precision == kbench_record::Precision::Fp32
        && kernels.iter().any(|k| {
            k.get("name")
                .and_then(Value::as_str)
                .is_some_and(ig::reduced_precision_kernel)
        })
    {
        advisories.push(ig::REDUCED_PRECISION_KERNEL.to_string());
    }
    let detail = format!(
        "one profiled call launched {} device activities: {:.0}% in the candidate's own kernels, {:.0}% in library kernels ({}), {:.0}% other",
        profile.launches,
        100.0 * profile.own_fraction,
        100.0 * profile.library_fraction,
        profile.library.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
        100.0 * profile.other_fraction
    );
    integrity.kernels = Some(profile);
    integrity.advisories.extend(advisories);
    if no_own && c.require_custom_kernels {
        return Ok(Some(Outcome::Integrity {
            flag: ig::NO_CUSTOM_KERNEL.into(),
            detail: format!(
                "--require-custom-kernels: none of the candidate's own kernels ran; {detail}"
            ),
        }));
    }
    Ok(None)
}

/// A case the candidate was not run on, with the reason.
fn not_applicable_case(case: kbench_record::CaseRef, why: String) -> CaseResult {
    CaseResult {
        case,
        passed: true,
        max_abs: 0.0,
        max_rel: 0.0,
        mismatches: 0,
        elements: 0,
        rel_l2_vs_f64: None,
        wall_s: 0.0,
        not_applicable: Some(why),
        flush: None,
    }
}

fn count_mismatch(got: usize, expected: usize) -> Option<Outcome> {
    (got != expected).then(|| Outcome::RuntimeError {
        phase: Phase::Run,
        message: format!("forward returned {got} tensor(s); the reference returns {expected}"),
    })
}

enum DeviceCaseError {
    Fault(WorkerFault),
    Harness(anyhow::Error),
}

/// Runs one case with device I/O: the inputs are copied into buffers of the candidate's
/// own (so whatever it writes there never reaches the reference's copy), its outputs land
/// in slots shaped like the reference's, and the comparison runs on the GPU.
fn run_device_case(
    ctx: &Ctx,
    exec: &Exec,
    worker: &mut Worker,
    rc: &RefCase,
    tc: Instant,
    earlier: &[Arc<RefCase>],
) -> Result<Result<Judged, Outcome>, DeviceCaseError> {
    let c = ctx.config;
    let CaseData::Device {
        args,
        inputs,
        outputs,
        outputs_f64,
    } = &rc.data
    else {
        unreachable!("run_device_case on a host case")
    };
    let gpu = exec.gpu.as_ref().expect("device case without a GPU");
    let cmp = exec.cmp.as_ref().expect("device case without a comparator");
    let harness = |e: anyhow::Error| DeviceCaseError::Harness(e);
    let mut dev_inputs = serde_json::Map::new();
    let mut copies = Vec::with_capacity(inputs.len());
    for (name, t) in inputs {
        let buf = gpu.alloc(t.nbytes()).map_err(harness)?;
        gpu.copy(&buf, &t.buf, t.nbytes()).map_err(harness)?;
        let copy = DevTensorOwned {
            buf,
            dtype: t.dtype,
            shape: t.shape.clone(),
        };
        dev_inputs.insert(name.clone(), copy.spec());
        copies.push(copy);
    }
    let mut slots = Vec::with_capacity(outputs.len());
    for o in outputs {
        let buf = gpu.alloc(o.nbytes()).map_err(harness)?;
        // NaN-filled (all ones bits) so an element the candidate never wrote cannot pass.
        gpu.fill(&buf, 0xff).map_err(harness)?;
        slots.push(DevTensorOwned {
            buf,
            dtype: o.dtype,
            shape: o.shape.clone(),
        });
    }
    let cmd = json!({
        "cmd": "run_case",
        "forward_seed": rc.forward_seed,
        "inputs": args,
        "device_inputs": dev_inputs,
        "device_outputs": slots.iter().map(DevTensorOwned::spec).collect::<Vec<_>>(),
        "poison": outputs.iter().map(|o| json!({"dtype": o.dtype.as_str(), "nbytes": o.nbytes()})).collect::<Vec<_>>(),
    });
    let reply = worker
        .request(Frame::new(cmd), c.timeouts.run)
        .map_err(DeviceCaseError::Fault)?;
    let wall_s = tc.elapsed().as_secs_f64();
    drop(copies);
    if reply.kind() != "outputs" {
        return Ok(Err(error_outcome(&reply, Phase::Run)));
    }
    let described = reply
        .header
        .get("device_outputs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(o) = count_mismatch(described.len(), outputs.len()) {
        return Ok(Err(o));
    }
    if let Some(o) = crate::judge::integrity::probe_failure(
        reply.header.get("integrity"),
        &rc.mutated_inputs,
        &format!("case {}", rc.case),
    ) {
        return Ok(Err(o));
    }
    let mut comparisons = Vec::with_capacity(outputs.len());
    let mut failure = None;
    for (k, d) in described.iter().enumerate() {
        let reference = &outputs[k];
        let dtype: Option<Dtype> = d
            .get("dtype")
            .cloned()
            .and_then(|v| serde_json::from_value(v).ok());
        let shape: Option<Vec<u64>> = d
            .get("shape")
            .cloned()
            .and_then(|v| serde_json::from_value(v).ok());
        let (Some(dtype), Some(shape)) = (dtype, shape) else {
            return Err(DeviceCaseError::Fault(WorkerFault::Protocol(format!(
                "malformed output description {d}"
            ))));
        };
        let copied = d.get("copied").and_then(Value::as_bool) == Some(true);
        let on = str_field(d, "device");
        let cmp_result = if shape != reference.shape {
            Ok(Comparison::WrongShape {
                expected: reference.shape.clone(),
                got: shape,
            })
        } else if dtype != reference.dtype {
            Ok(Comparison::WrongDtype {
                expected: reference.dtype,
                got: dtype,
            })
        } else if !copied {
            return Ok(Err(Outcome::RuntimeError {
                phase: Phase::Run,
                message: format!(
                    "output {k} is on {on}; the reference's is on the GPU (return tensors on the input's device)"
                ),
            }));
        } else {
            let ref64 = gated_f64(outputs_f64.as_deref(), k, reference.dtype).map(|t| t.view());
            cmp.compare(
                &slots[k].view(),
                &reference.view(),
                ref64.as_ref(),
                c.profile,
                c.precision,
            )
            .map_err(harness)?
        };
        match cmp_result {
            Ok(cmp) => {
                if failure.is_none() {
                    failure = cmp.failure_outcome(&rc.case, k as u32);
                }
                comparisons.push(cmp);
            }
            Err(e) => {
                failure.get_or_insert(Outcome::ReferenceError {
                    message: format!("output {k} of case {}: {e}", rc.case),
                });
            }
        }
    }
    if failure.is_some() {
        let what = format!("case {}", rc.case);
        // A failed output is read back once: still-poisoned elements name the failure.
        for (k, cmp) in comparisons.iter().enumerate() {
            if cmp.passed() || cmp.values().is_none() {
                continue;
            }
            let bytes = gpu
                .read(&slots[k].buf, 0, slots[k].nbytes())
                .map_err(harness)?;
            let t = HostTensor::new(slots[k].dtype, slots[k].shape.clone(), bytes)
                .map_err(|e| harness(e.into()))?;
            if let Some(o) = crate::judge::integrity::unwritten_outputs(std::iter::once(&t), &what)
            {
                failure = Some(o);
                break;
            }
            // An earlier case's answer (within tolerance) where this case's differs: the
            // device-path form of `output-replayed` (the host path hashes every output).
            if let Some(o) = replayed_device_output(gpu, c, &t, k, rc, earlier).map_err(harness)? {
                failure = Some(o);
                break;
            }
        }
        // On the problem's own inputs only: a stress family may be ill-conditioned enough
        // for honest fp32 code to miss by that much, which is a mismatch, not a cheat.
        if let Some(o) = (rc.case.family == CaseFamily::Random)
            .then(|| crate::judge::integrity::precision_downgrade(c.precision, &comparisons, &what))
            .flatten()
        {
            failure = Some(o);
        }
    }
    let mut result = kbench_adversarial::case_result(&rc.case, &comparisons, wall_s);
    if rc.case.family == CaseFamily::Denormal {
        // One case per candidate: both outputs are read back and counted on the host.
        let mut counts = Vec::new();
        for (k, cmp) in comparisons.iter().enumerate() {
            if cmp.values().is_none() {
                continue; // wrong shape or dtype: already a failure
            }
            let (cand, reference) = (&slots[k], &outputs[k]);
            let n = reference.nbytes();
            let c_bytes = gpu.read(&cand.buf, 0, n).map_err(harness)?;
            let r_bytes = gpu.read(&reference.buf, 0, n).map_err(harness)?;
            counts.extend(kbench_adversarial::flush_count_bytes(
                reference.dtype,
                &c_bytes,
                &r_bytes,
            ));
        }
        judge_flush(c, &rc.case, counts.into_iter(), &mut result, &mut failure);
    }
    result.passed &= failure.is_none();
    Ok(Ok(Judged { result, failure }))
}

/// The float64 output that output `k` is gated against. The gate is for floating outputs;
/// an integer output (argmax, argmin) is compared exactly and its float64 run is integer too.
fn gated_f64<T>(outputs_f64: Option<&[T]>, k: usize, dtype: Dtype) -> Option<&T> {
    outputs_f64.filter(|_| dtype.is_float()).map(|v| &v[k])
}

struct Judged {
    result: CaseResult,
    failure: Option<Outcome>,
}

/// `denormal` cases: did the candidate flush subnormal results to zero (fast-math, FTZ)?
/// The values are far below atol, so only this count shows it. Summed over the outputs into
/// the case's result; under the strict profile a flushing candidate fails.
fn judge_flush(
    c: &RunConfig,
    case: &kbench_record::CaseRef,
    counts: impl Iterator<Item = kbench_record::FlushCount>,
    result: &mut CaseResult,
    failure: &mut Option<Outcome>,
) {
    let flush = counts.reduce(|a, f| kbench_record::FlushCount {
        subnormal: a.subnormal + f.subnormal,
        zeroed: a.zeroed + f.zeroed,
    });
    if let Some(f) =
        flush.filter(|f| f.flushed() && c.profile == kbench_record::ToleranceProfile::Strict)
    {
        failure.get_or_insert(Outcome::Mismatch {
            case: case.clone(),
            output: 0,
            max_abs: result.max_abs,
            max_rel: result.max_rel,
            count: f.zeroed,
            total: f.subnormal,
            first_index: Vec::new(),
            rule: "flush-to-zero".into(),
        });
    }
    result.flush = flush;
}

/// Compares every output of one host case; the first failing output decides the outcome.
fn judge_host_case(c: &RunConfig, rc: &RefCase, outputs: &[HostTensor], wall_s: f64) -> Judged {
    let CaseData::Host {
        outputs: ref_outputs,
        outputs_f64,
        ..
    } = &rc.data
    else {
        unreachable!("judge_host_case on a device case")
    };
    let mut comparisons = Vec::with_capacity(outputs.len());
    let mut failure = None;
    for (k, (cand, reference)) in outputs.iter().zip(ref_outputs).enumerate() {
        let ref64 = gated_f64(outputs_f64.as_deref(), k, reference.dtype());
        match kbench_adversarial::compare(cand, reference, ref64, c.profile, c.precision) {
            Ok(cmp) => {
                if failure.is_none() {
                    failure = cmp.failure_outcome(&rc.case, k as u32);
                }
                comparisons.push(cmp);
            }
            Err(e) => {
                // The reference's own float64 output is unusable: a harness-side fault,
                // judged without the gate would be silently weaker, so say so loudly.
                failure.get_or_insert(Outcome::ReferenceError {
                    message: format!("output {k} of case {}: {e}", rc.case),
                });
            }
        }
    }
    if failure.is_some() {
        let what = format!("case {}", rc.case);
        // On the problem's own inputs only: a stress family may be ill-conditioned enough
        // for honest fp32 code to miss by that much, which is a mismatch, not a cheat.
        if let Some(o) = (rc.case.family == CaseFamily::Random)
            .then(|| crate::judge::integrity::precision_downgrade(c.precision, &comparisons, &what))
            .flatten()
        {
            failure = Some(o);
        }
    }
    let mut result = kbench_adversarial::case_result(&rc.case, &comparisons, wall_s);
    if rc.case.family == CaseFamily::Denormal {
        let counts = outputs
            .iter()
            .zip(ref_outputs)
            .filter_map(|(c, r)| kbench_adversarial::flush_count(c, r));
        judge_flush(c, &rc.case, counts, &mut result, &mut failure);
    }
    result.passed &= failure.is_none();
    Judged { result, failure }
}

pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{h100, one_shot_records};
    use kbench_record::perf::{speed_of_light, ProblemCost};

    #[test]
    fn a_time_below_the_speed_of_light_is_flagged_and_only_then() {
        let mut record = one_shot_records()
            .into_iter()
            .find(|r| r.timing.is_some() && r.outcome == Outcome::Ok)
            .expect("a timed correct record in the fixture run");
        // 335.2 MB of inputs at 3352 GB/s: at least 100 us.
        let cost = ProblemCost {
            flops: 0.0,
            flops_by_op: Default::default(),
            precision: "fp32".into(),
            input_bytes: 335.2e6,
            weight_bytes: 0.0,
            output_bytes: 335.2e6,
        };
        let sol = speed_of_light(&cost, &h100());
        assert!(
            (sol.strict_min_s - 100e-6).abs() < 1e-7,
            "{}",
            sol.strict_min_s
        );
        record.speed_of_light = Some(sol);
        let t = record.timing.as_mut().unwrap();
        t.l2_flush = true;
        t.candidate.median_ms = 0.050;
        let flagged = faster_than_light(&record);
        match flagged {
            Some(Outcome::Integrity { flag, detail }) => {
                assert_eq!(flag, crate::judge::integrity::FASTER_THAN_LIGHT);
                assert!(detail.contains("takes at least 99.99"), "{detail}");
            }
            other => panic!("expected the flag, got {other:?}"),
        }
        // Within the 10% slack, slower, without the L2 flush, without a speed of light, or
        // already failed: no flag.
        let t = record.timing.as_mut().unwrap();
        t.candidate.median_ms = 0.095;
        assert!(faster_than_light(&record).is_none());
        let t = record.timing.as_mut().unwrap();
        t.candidate.median_ms = 0.050;
        t.l2_flush = false;
        assert!(faster_than_light(&record).is_none());
        record.timing.as_mut().unwrap().l2_flush = true;
        let sol = record.speed_of_light.take();
        assert!(faster_than_light(&record).is_none());
        record.speed_of_light = sol;
        assert!(faster_than_light(&record).is_some());
        record.outcome = Outcome::Integrity {
            flag: "output-replayed".into(),
            detail: String::new(),
        };
        assert!(faster_than_light(&record).is_none());
    }
}
