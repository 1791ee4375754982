//! The evaluation loop: one trusted reference worker per problem, one fresh untrusted worker
//! per candidate, verdicts computed here, one record appended per candidate.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use kbench_record::protocol::Frame;
use kbench_record::{
    CandidateRef, CaseFamily, CaseRef, CaseResult, Device, Environment, EvalRecord, HostTensor,
    Outcome, Phase, TimingSummary, SCHEMA_VERSION,
};
use kbench_suites::Problem;
use serde_json::{json, Value};

use crate::agents::{Agent, Candidate, ReferenceAgent, ReplayAgent};
use crate::build::{BuildJob, BuildPool};
use crate::config::{materialize_problem, AgentConfig, RunConfig};
use crate::python::{self, PythonInfo};
use crate::runlog::{now_unix, RunDir};
use crate::worker::{Role, Worker, WorkerFault, WorkerSpec};

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
    let info = python::probe(&config.python)?;
    if matches!(config.device, Device::Cuda(_)) && !info.cuda_available {
        anyhow::bail!(
            "--device {}: torch {} in {} cannot use CUDA (torch.cuda.is_available() is False); use --device cpu or an interpreter with a CUDA build of torch",
            config.device,
            info.torch,
            info.executable
        );
    }
    let worker_script = python::materialize_worker(&config.cache)?;
    let mut run_dir = RunDir::open(config)?;
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
    let env_base = Environment {
        kbench: env!("CARGO_PKG_VERSION").into(),
        python: info.python.clone(),
        torch: info.torch.clone(),
        device_name: String::new(),
        cuda: info.torch_cuda.clone(),
        hostname: hostname(),
    };
    let cuda_arch = match config.device {
        Device::Cuda(i) => crate::gpu::describe().ok().and_then(|gpus| {
            gpus.get(i as usize)
                .map(|g| format!("{}.{}", g.compute_capability.0, g.compute_capability.1))
        }),
        Device::Cpu => None,
    };
    let mut ctx = Ctx {
        config,
        python: &config.python.python,
        info: &info,
        worker_script: &worker_script,
        stop: Arc::clone(&stop),
        cuda_arch,
        builds: None,
    };

    // Write every pending candidate out and queue the ones with extensions for building.
    let mut prepared_plan = Vec::with_capacity(plan.len());
    let mut to_build = Vec::new();
    for (problem, candidates) in plan {
        let problem_path = materialize_problem(&config.cache, problem)?;
        let mut list = Vec::with_capacity(candidates.len());
        for cand in candidates {
            let prep = prepare_candidate(&ctx, problem, &cand, agent.name(), &run_dir)?;
            if crate::build::builds_extensions(&cand.source) {
                to_build.push(BuildJob {
                    build_dir: prep.build_dir.clone(),
                    problem_path: problem_path.clone(),
                    candidate_path: prep.source_path.clone(),
                    log_path: run_dir.logs_dir().join(format!("{}.build.log", prep.key)),
                });
            }
            list.push((cand, prep));
        }
        prepared_plan.push((problem, problem_path, list));
    }
    if config.build_jobs > 0 && !to_build.is_empty() {
        let python = config.python.python.clone();
        let script = worker_script.clone();
        let arch = ctx.cuda_arch.clone();
        let interrupt = Arc::clone(&stop);
        let spec_for: Arc<crate::build::SpecFor> = Arc::new(move |job: &BuildJob| WorkerSpec {
            python: python.clone(),
            script: script.clone(),
            role: Role::Candidate,
            cwd: job.build_dir.clone(),
            // No GPU: builds need only the compiler.
            env: worker_env(&python, Device::Cpu, arch.as_deref()),
            log_path: Some(job.log_path.clone()),
            max_payload: 1 << 20,
            interrupt: Some(Arc::clone(&interrupt)),
        });
        let pool = BuildPool::start(
            config.build_jobs.min(to_build.len()),
            spec_for,
            config.timeouts.start,
            config.timeouts.load,
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

    let mut added = Vec::new();
    let mut interrupted = false;
    'problems: for (problem, problem_path, candidates) in prepared_plan {
        if stop.load(Ordering::SeqCst) {
            interrupted = true;
            break;
        }
        progress.set_message(format!(
            "{} {} (reference)",
            problem.to_ref().key(),
            problem.name
        ));
        let mut reference = ReferenceSession::open(&ctx, problem, &problem_path, &run_dir);
        if let Err(RefFailure::Interrupted) = reference {
            interrupted = true;
            break;
        }
        for (cand, prep) in candidates {
            if stop.load(Ordering::SeqCst) {
                interrupted = true;
                break 'problems;
            }
            progress.set_message(format!(
                "{} {} {}",
                problem.to_ref().key(),
                problem.name,
                cand.name
            ));
            let mut env = env_base.clone();
            let record = match &mut reference {
                Ok(r) => {
                    env.device_name = r.device_name.clone();
                    evaluate_candidate(
                        &ctx,
                        problem,
                        &problem_path,
                        &cand,
                        &prep,
                        agent.name(),
                        r,
                        &run_dir,
                        env,
                    )?
                }
                Err(RefFailure::Failed(msg)) => Some(reference_error_record(
                    config,
                    &run_dir,
                    problem,
                    &cand,
                    agent.name(),
                    msg,
                    env,
                )),
                Err(RefFailure::Interrupted) => None,
            };
            let Some(record) = record else {
                interrupted = true;
                break 'problems;
            };
            run_dir.append(&record)?;
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
            if !config.quiet {
                if progress.is_hidden() {
                    eprintln!("{line}");
                } else {
                    progress.println(line);
                }
            }
            progress.inc(1);
            added.push(record);
        }
        if let Ok(r) = reference {
            r.worker.shutdown();
        }
    }
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
struct Ctx<'a> {
    config: &'a RunConfig,
    python: &'a Path,
    info: &'a PythonInfo,
    worker_script: &'a Path,
    stop: Arc<AtomicBool>,
    /// `TORCH_CUDA_ARCH_LIST` for builds: the GPU's own architecture only, e.g. `9.0`.
    cuda_arch: Option<String>,
    builds: Option<BuildPool>,
}

impl Ctx<'_> {
    fn spec(&self, role: Role, cwd: &Path, log_path: Option<PathBuf>) -> WorkerSpec {
        WorkerSpec {
            python: self.python.to_path_buf(),
            script: self.worker_script.to_path_buf(),
            role,
            cwd: cwd.to_path_buf(),
            env: worker_env(self.python, self.config.device, self.cuda_arch.as_deref()),
            log_path,
            max_payload: MAX_PAYLOAD,
            interrupt: Some(Arc::clone(&self.stop)),
        }
    }

    fn num_threads(&self) -> Value {
        match self.config.device {
            Device::Cpu => json!(self.config.cpu_threads),
            Device::Cuda(_) => Value::Null,
        }
    }
}

/// The environment of a worker: an allow-list. Nothing of kbench's own state (the run
/// directory, seeds) is passed; the interpreter's folder goes first on PATH so that `ninja`
/// from kbench's environment is found by torch's extension builder.
fn worker_env(python: &Path, device: Device, cuda_arch: Option<&str>) -> Vec<(String, String)> {
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
    match device {
        Device::Cuda(i) => {
            // Each worker sees exactly its GPU, as cuda:0.
            let visible = std::env::var("CUDA_VISIBLE_DEVICES")
                .ok()
                .and_then(|v| v.split(',').nth(i as usize).map(str::to_string))
                .unwrap_or_else(|| i.to_string());
            env.push(("CUDA_VISIBLE_DEVICES".into(), visible));
        }
        Device::Cpu => env.push(("CUDA_VISIBLE_DEVICES".into(), String::new())),
    }
    env
}

fn device_for_worker(d: Device) -> &'static str {
    match d {
        Device::Cpu => "cpu",
        // CUDA_VISIBLE_DEVICES narrows each worker to its one GPU.
        Device::Cuda(_) => "cuda:0",
    }
}

/// One correctness case as the reference produced it.
struct RefCase {
    case: CaseRef,
    /// A ready `run_case` command carrying the inputs, shared by all candidates.
    run_frame: Arc<Frame>,
    outputs: Vec<HostTensor>,
    outputs_f64: Option<Vec<HostTensor>>,
}

/// The trusted reference of one problem: its worker, and the cases it produced.
///
/// Cases are made on demand. They are kept in memory while the whole set fits the case
/// budget (`--case-cache-mb`), so the many candidates of a problem share one reference
/// computation; a problem whose cases do not fit keeps none and remakes each case for each
/// candidate (same seeds, same inputs), so host memory stays bounded by one case.
struct ReferenceSession {
    worker: Worker,
    cached: Vec<Arc<RefCase>>,
    caching: bool,
    cached_bytes: u64,
    device_name: String,
    notes: Vec<String>,
    problem_file: String,
    problem_sha: String,
}

enum RefFailure {
    Failed(String),
    Interrupted,
}

impl ReferenceSession {
    fn open(
        ctx: &Ctx,
        problem: &Problem,
        problem_path: &Path,
        run_dir: &RunDir,
    ) -> Result<Self, RefFailure> {
        let fail = |what: &str, fault: WorkerFault, w: Option<&Worker>| {
            if fault == WorkerFault::Interrupted {
                return RefFailure::Interrupted;
            }
            let tail = w.map(|w| w.log_tail()).unwrap_or_default();
            RefFailure::Failed(format!(
                "reference worker for {} ({}) {what}: {fault}\n{tail}",
                problem.file,
                problem.to_ref().key()
            ))
        };
        let c = ctx.config;
        let log = run_dir.logs_dir().join(format!(
            "{}__reference.log",
            sanitize(&problem.to_ref().key())
        ));
        let cwd = std::env::temp_dir();
        let mut worker = Worker::start(
            &ctx.spec(Role::Reference, &cwd, Some(log)),
            c.timeouts.start,
        )
        .map_err(|f| fail("did not start", f, None))?;
        let load = json!({
            "cmd": "load",
            "problem_path": problem_path,
            "device": device_for_worker(c.device),
            "precision": c.precision.as_str(),
            "weight_seed": c.weight_seed,
            "want_f64": c.profile == kbench_record::ToleranceProfile::Strict,
            "num_threads": ctx.num_threads(),
        });
        let reply = worker
            .request(Frame::new(load), c.timeouts.load)
            .map_err(|f| fail("failed to load the problem", f, Some(&worker)))?;
        if reply.kind() != "loaded" {
            return Err(RefFailure::Failed(format!(
                "problem {} could not be loaded: {}",
                problem.file,
                error_text(&reply)
            )));
        }
        let device_name = str_field(&reply.header, "device_name");
        let mut notes = Vec::new();
        if c.profile == kbench_record::ToleranceProfile::Strict
            && reply.header.get("f64_available").and_then(Value::as_bool) != Some(true)
        {
            notes.push(format!(
                "no float64 reference ({}); the strict profile's float64 gate was skipped",
                str_field(&reply.header, "f64_error")
            ));
        }
        Ok(Self {
            worker,
            cached: Vec::new(),
            caching: true,
            cached_bytes: 0,
            device_name,
            problem_file: problem.file.clone(),
            problem_sha: problem.sha256.clone(),
            notes,
        })
    }
}

impl ReferenceSession {
    /// Case `t` of the `random` family: from the cache, or made now by the reference worker
    /// (which then holds it as its current case, the one timing uses).
    fn case(&mut self, ctx: &Ctx, run_dir: &RunDir, t: u32) -> Result<Arc<RefCase>, RefFailure> {
        if let Some(rc) = self.cached.get(t as usize) {
            return Ok(Arc::clone(rc));
        }
        let c = ctx.config;
        let sha = &self.problem_sha;
        let case = CaseRef {
            family: CaseFamily::Random,
            index: t,
        };
        let seed = run_dir
            .secret
            .derive(&format!("input/{sha}/{}/{t}", case.family));
        let forward_seed = run_dir
            .secret
            .derive(&format!("forward/{sha}/{}/{t}", case.family));
        let reply = match self.worker.request(
            Frame::new(json!({"cmd": "make_case", "seed": seed, "forward_seed": forward_seed})),
            c.timeouts.run,
        ) {
            Ok(r) => r,
            Err(WorkerFault::Interrupted) => return Err(RefFailure::Interrupted),
            Err(f) => {
                return Err(RefFailure::Failed(format!(
                    "reference worker for {} failed on case {case}: {f}\n{}",
                    self.problem_file,
                    self.worker.log_tail()
                )))
            }
        };
        if reply.kind() != "case" {
            return Err(RefFailure::Failed(format!(
                "reference of {} failed on case {case}: {}",
                self.problem_file,
                error_text(&reply)
            )));
        }
        if let Some(e) = reply.header.get("f64_error").and_then(Value::as_str) {
            let note = format!("case {case}: float64 reference failed ({e}); gate skipped");
            if !self.notes.contains(&note) {
                self.notes.push(note);
            }
        }
        let tensors = reply
            .tensors()
            .map_err(|e| RefFailure::Failed(format!("reference sent a malformed case: {e}")))?;
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        let mut outputs_f64 = Vec::new();
        for (name, t) in tensors {
            if name.starts_with("in:") {
                inputs.push((name, t));
            } else if name.starts_with("out64:") {
                outputs_f64.push(t);
            } else if name.starts_with("out:") {
                outputs.push(t);
            }
        }
        let arg_list = reply.header.get("inputs").cloned().unwrap_or(json!([]));
        let refs: Vec<(String, &HostTensor)> = inputs.iter().map(|(n, t)| (n.clone(), t)).collect();
        let run_frame = Arc::new(Frame::with_tensors(
            json!({"cmd": "run_case", "forward_seed": forward_seed, "inputs": arg_list}),
            &refs,
        ));
        drop(refs);
        drop(inputs);
        let outputs_f64 =
            (outputs_f64.len() == outputs.len() && !outputs_f64.is_empty()).then_some(outputs_f64);
        let bytes = run_frame.payload.len() as u64
            + outputs.iter().map(|o| o.data().len() as u64).sum::<u64>()
            + outputs_f64
                .iter()
                .flatten()
                .map(|o| o.data().len() as u64)
                .sum::<u64>();
        let rc = Arc::new(RefCase {
            case,
            run_frame,
            outputs,
            outputs_f64,
        });
        // Keep the case while the whole set (estimated from this case) fits the budget.
        if self.caching
            && t as usize == self.cached.len()
            && self.cached_bytes + bytes * u64::from(c.trials - t) <= c.case_cache_bytes
        {
            self.cached_bytes += bytes;
            self.cached.push(Arc::clone(&rc));
        } else if self.caching {
            self.caching = false;
            self.cached.clear();
            self.cached_bytes = 0;
        }
        Ok(rc)
    }
}

fn str_field(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

/// The message of an `error` frame (or a description of an unexpected one).
fn error_text(reply: &Frame) -> String {
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

fn sanitize(s: &str) -> String {
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

fn reference_error_record(
    config: &RunConfig,
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
        device: config.device,
        precision: config.precision,
        profile: config.profile,
        outcome: Outcome::ReferenceError {
            message: message.to_string(),
        },
        cases: Vec::new(),
        timing: None,
        load_s: None,
        build_ahead_s: None,
        wall_s: 0.0,
        started_unix_s: now,
        finished_unix_s: now,
        log_tail: String::new(),
        notes: Vec::new(),
        env,
    }
}

/// Maps a worker fault in `phase` to an outcome; `None` for an interrupt (nothing recorded).
fn fault_outcome(fault: WorkerFault, phase: Phase) -> Option<Outcome> {
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
            flag: "protocol-violation".into(),
            detail: m,
        },
        WorkerFault::Spawn(m) => Outcome::RuntimeError {
            phase: Phase::Start,
            message: m,
        },
    })
}

/// Maps a worker's `error` answer to an outcome.
fn error_outcome(reply: &Frame, phase: Phase) -> Outcome {
    let kind = str_field(&reply.header, "kind");
    let message = error_text(reply);
    match kind.as_str() {
        "compile_error" => Outcome::CompileError { message },
        _ => Outcome::RuntimeError { phase, message },
    }
}

/// Where a candidate's files go: its source in the run directory and its content-addressed
/// build directory (keyed by source, torch version and device architecture).
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
    let arch = ctx.cuda_arch.as_deref().unwrap_or("cpu");
    let build_dir = c.cache.join("torch_extensions").join(
        &kbench_suites::sha256_hex(
            format!(
                "{}|{}|{}|{}",
                cand.sha256,
                ctx.info.torch,
                device_for_worker(c.device),
                arch
            )
            .as_bytes(),
        )[..16],
    );
    std::fs::create_dir_all(&build_dir)
        .with_context(|| format!("creating {}", build_dir.display()))?;
    Ok(Prepared {
        key,
        source_path,
        build_dir,
    })
}

/// Evaluates one candidate. `Ok(None)` means the run was interrupted before a verdict.
#[allow(clippy::too_many_arguments)]
fn evaluate_candidate(
    ctx: &Ctx,
    problem: &Problem,
    problem_path: &Path,
    cand: &Candidate,
    prep: &Prepared,
    agent: &str,
    reference: &mut ReferenceSession,
    run_dir: &RunDir,
    env: Environment,
) -> Result<Option<EvalRecord>> {
    let c = ctx.config;
    let started = now_unix();
    let t0 = Instant::now();
    let key = &prep.key;
    let source_path = &prep.source_path;
    let build_dir = &prep.build_dir;
    // A build ahead still running is waited for (it is this candidate's compile anyway).
    let built_ahead = ctx.builds.as_ref().and_then(|p| p.claim(build_dir));
    let cwd = tempfile::Builder::new()
        .prefix("kbench-cand-")
        .tempdir()
        .context("creating a private working directory for the candidate")?;

    let mut notes = Vec::new();
    let mut cases = Vec::new();
    let mut load_s = None;
    let mut timing = None;
    let mut log_tail = String::new();

    let outcome = 'eval: {
        let spec = ctx.spec(
            Role::Candidate,
            cwd.path(),
            Some(run_dir.logs_dir().join(format!("{key}.log"))),
        );
        let mut worker = match Worker::start(&spec, c.timeouts.start) {
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
        let load = json!({
            "cmd": "load",
            "problem_path": problem_path,
            "candidate_path": source_path,
            "device": device_for_worker(c.device),
            "precision": c.precision.as_str(),
            "weight_seed": c.weight_seed,
            "num_threads": ctx.num_threads(),
            "build_dir": build_dir,
        });
        let tl = Instant::now();
        let reply = match worker.request(Frame::new(load), c.timeouts.load) {
            Ok(r) => r,
            Err(f) => fault!(f, Phase::Load),
        };
        load_s = Some(tl.elapsed().as_secs_f64());
        if reply.kind() != "loaded" {
            log_tail = worker.log_tail();
            break 'eval error_outcome(&reply, Phase::Load);
        }

        for t in 0..c.trials {
            let rc = match reference.case(ctx, run_dir, t) {
                Ok(rc) => rc,
                Err(RefFailure::Failed(message)) => {
                    log_tail = worker.log_tail();
                    break 'eval Outcome::ReferenceError { message };
                }
                Err(RefFailure::Interrupted) => return Ok(None),
            };
            let tc = Instant::now();
            let reply = match worker.request_shared(Arc::clone(&rc.run_frame), c.timeouts.run) {
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
            if outputs.len() != rc.outputs.len() {
                log_tail = worker.log_tail();
                break 'eval Outcome::RuntimeError {
                    phase: Phase::Run,
                    message: format!(
                        "forward returned {} tensor(s); the reference returns {}",
                        outputs.len(),
                        rc.outputs.len()
                    ),
                };
            }
            let judged = judge_case(c, &rc, &outputs, wall_s);
            cases.push(judged.result);
            if let Some(o) = judged.failure {
                log_tail = worker.log_tail();
                break 'eval o;
            }
        }

        if let Some(tc) = &c.timing {
            match time_pair(ctx, &mut reference.worker, &mut worker, tc) {
                Ok(TimingResult::Measured(t)) => timing = Some(t),
                Ok(TimingResult::Failed(o)) => {
                    log_tail = worker.log_tail();
                    break 'eval o;
                }
                Ok(TimingResult::ReferenceFailed(msg)) => notes.push(format!("not timed: {msg}")),
                Err(f) => fault!(f, Phase::Time),
            }
        }
        log_tail = worker.log_tail();
        worker.shutdown();
        Outcome::Ok
    };

    let mut all_notes = reference.notes.clone();
    all_notes.append(&mut notes);
    let notes = all_notes;
    Ok(Some(EvalRecord {
        schema_version: SCHEMA_VERSION,
        run_id: run_dir.manifest.run_id.clone(),
        problem: problem.to_ref(),
        candidate: candidate_ref(agent, cand),
        device: c.device,
        precision: c.precision,
        profile: c.profile,
        outcome,
        cases,
        timing,
        load_s,
        build_ahead_s: built_ahead.map(|b| b.seconds),
        wall_s: t0.elapsed().as_secs_f64(),
        started_unix_s: started,
        finished_unix_s: now_unix(),
        log_tail,
        notes,
        env,
    }))
}

struct Judged {
    result: CaseResult,
    failure: Option<Outcome>,
}

/// Compares every output of one case; the first failing output decides the outcome.
fn judge_case(c: &RunConfig, rc: &RefCase, outputs: &[HostTensor], wall_s: f64) -> Judged {
    let mut comparisons = Vec::with_capacity(outputs.len());
    let mut failure = None;
    for (k, (cand, reference)) in outputs.iter().zip(&rc.outputs).enumerate() {
        let ref64 = rc.outputs_f64.as_ref().map(|v| &v[k]);
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
    let mut result = kbench_adversarial::case_result(&rc.case, &comparisons, wall_s);
    result.passed &= failure.is_none();
    Judged { result, failure }
}

enum TimingResult {
    Measured(TimingSummary),
    /// The candidate broke a timing rule.
    Failed(Outcome),
    /// The reference could not be timed; the candidate keeps its verdict, untimed.
    ReferenceFailed(String),
}

/// Times reference and candidate in alternating rounds on the same inputs (the last case),
/// so that drift (clocks, temperature, other load) hits both alike.
fn time_pair(
    ctx: &Ctx,
    reference: &mut Worker,
    candidate: &mut Worker,
    tc: &crate::config::TimingConfig,
) -> Result<TimingResult, WorkerFault> {
    let c = ctx.config;
    let mut ref_samples = Vec::with_capacity(tc.timed_calls as usize);
    let mut cand_samples = Vec::with_capacity(tc.timed_calls as usize);
    let (mut ref_wall, mut cand_wall) = (0.0f64, 0.0f64);
    let mut ref_clock = String::new();
    let mut cand_clock = String::new();
    let per_round = tc.timed_calls.div_ceil(tc.rounds);
    let mut left = tc.timed_calls;
    let mut round = 0u32;
    while left > 0 {
        let n = per_round.min(left);
        left -= n;
        let warmup = if round == 0 {
            tc.warmup
        } else {
            tc.warmup.min(1)
        };
        let cmd = json!({"cmd": "time", "warmup": warmup, "trials": n, "l2_flush": tc.l2_flush, "forward_seed": 0});
        let order = if round.is_multiple_of(2) {
            [true, false]
        } else {
            [false, true]
        };
        for is_ref in order {
            let t = Instant::now();
            if is_ref {
                let reply = match reference.request(Frame::new(cmd.clone()), c.timeouts.time) {
                    Ok(r) => r,
                    Err(f) => {
                        return Ok(TimingResult::ReferenceFailed(format!(
                            "reference timing: {f}"
                        )))
                    }
                };
                ref_wall += t.elapsed().as_secs_f64();
                match parse_samples(&reply, n) {
                    Ok((clock, s)) => {
                        ref_clock = clock;
                        ref_samples.extend(s);
                    }
                    Err(e) => {
                        return Ok(TimingResult::ReferenceFailed(format!(
                            "reference timing: {e}"
                        )))
                    }
                }
            } else {
                let reply = candidate.request(Frame::new(cmd.clone()), c.timeouts.time)?;
                let wall = t.elapsed().as_secs_f64();
                cand_wall += wall;
                if reply.kind() == "error" {
                    return Ok(TimingResult::Failed(error_outcome(&reply, Phase::Time)));
                }
                match parse_samples(&reply, n) {
                    Ok((clock, s)) => {
                        // The harness's own clock bounds what the candidate claims.
                        let claimed: f64 = s.iter().sum::<f64>() / 1e3;
                        if claimed > wall * 1.01 + 1e-3 {
                            return Ok(TimingResult::Failed(Outcome::Integrity {
                                flag: "time-claim-exceeds-wall-clock".into(),
                                detail: format!(
                                    "{n} timed calls claimed {claimed:.6} s but the timing phase took {wall:.6} s by the harness's clock"
                                ),
                            }));
                        }
                        cand_clock = clock;
                        cand_samples.extend(s);
                    }
                    Err(e) => {
                        return Ok(TimingResult::Failed(Outcome::Integrity {
                            flag: "malformed-timing".into(),
                            detail: e,
                        }))
                    }
                }
            }
        }
        round += 1;
    }
    let stats =
        |clock: String, s: Vec<f64>, wall: f64| kbench_reports::timing_stats(&clock, s, wall);
    let (reference, candidate) = match (
        stats(ref_clock, ref_samples, ref_wall),
        stats(cand_clock, cand_samples, cand_wall),
    ) {
        (Ok(r), Ok(c)) => (r, c),
        (Err(e), _) => {
            return Ok(TimingResult::ReferenceFailed(format!(
                "reference samples: {e}"
            )))
        }
        (_, Err(e)) => {
            return Ok(TimingResult::Failed(Outcome::Integrity {
                flag: "malformed-timing".into(),
                detail: e.to_string(),
            }))
        }
    };
    let Some(kbench_reports::Speedup {
        median: speedup,
        mean: speedup_mean,
    }) = kbench_reports::speedup(&reference, &candidate)
    else {
        return Ok(TimingResult::Failed(Outcome::Integrity {
            flag: "malformed-timing".into(),
            detail: format!(
                "no finite speedup from reference {} ms and candidate {} ms",
                reference.median_ms, candidate.median_ms
            ),
        }));
    };
    Ok(TimingResult::Measured(TimingSummary {
        reference,
        candidate,
        speedup,
        speedup_mean,
        warmup: tc.warmup,
        l2_flush: tc.l2_flush && matches!(c.device, Device::Cuda(_)),
        rounds: round,
    }))
}

/// Checks a timing answer: the right number of finite, positive samples.
fn parse_samples(reply: &Frame, expected: u32) -> Result<(String, Vec<f64>), String> {
    if reply.kind() != "timing" {
        return Err(format!(
            "expected timing samples, got {}",
            error_text(reply)
        ));
    }
    let samples: Vec<f64> = reply
        .header
        .get("samples_ms")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    if samples.len() != expected as usize {
        return Err(format!(
            "{} samples for {expected} timed calls",
            samples.len()
        ));
    }
    if let Some(bad) = samples.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
        return Err(format!("sample {bad} ms is not a positive time"));
    }
    Ok((str_field(&reply.header, "clock"), samples))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}
