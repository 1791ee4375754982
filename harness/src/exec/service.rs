//! The evaluation service: a long-lived engine session that many threads submit
//! `(problem, candidate)` pairs to, at any time (the LLM agents, one thread per task).
//!
//! It is `kbench run`'s engine fed from a queue instead of a fixed plan: the same executors
//! (one per `--gpus` entry, or one for the CPU), the same [`evaluate_candidate`], the same
//! run directory and log, the same build-ahead pool. What it adds is that a problem's
//! reference session (its trusted worker and its cached reference cases) stays open between
//! submissions, so a task's second and later kernels skip Python's start-up, the model load
//! and the reference cases. Open sessions are bounded per executor (least recently used
//! closed first) and closed when a task says it is done with its problem.
//!
//! Not yet here: `kbench run`'s lookahead on a GPU (the next candidate's worker, and the next
//! problem's reference, started while the current kernel runs); each kernel's candidate worker
//! starts when its job is taken, as it did when agents called `engine::run` per kernel.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use kbench_record::{Device, EvalRecord};
use kbench_suites::Problem;
use serde::Serialize;

use super::{
    build_job, check_cuda, cuda_arch_of, environment_base, evaluate_candidate, needs_health_check,
    open_execs, prepare_candidate, record_key, reference_error_record, report_line,
    start_build_pool, start_candidate, start_sampler, timing_cores_of, Ctx, Exec, Prepared,
    LOOKAHEAD,
};
use crate::agents::Candidate;
use crate::config::{materialize_problem, RunConfig};
use crate::measure::reference::{RefFailure, ReferenceSession};
use crate::runlog::RunDir;
use crate::worker::python;
use crate::worker::Gates;

/// Reference sessions an executor keeps open on the CPU. Idle workers do not disturb CPU
/// timing; the case-cache budget (`--case-cache-mb`) is shared among them.
const KEEP_CPU: usize = 4;

/// What the service did, for the run's summary.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServiceStats {
    /// Kernels submitted.
    pub submitted: u64,
    /// Kernels evaluated (a record appended to the run log).
    pub evaluated: u64,
    /// Submissions answered with a record already in the log (same kernel key).
    pub already_recorded: u64,
    /// Reference sessions opened: one reference worker started (and its model loaded) each.
    pub reference_sessions_opened: u64,
    /// Evaluations that found their problem's reference session already open.
    pub reference_sessions_reused: u64,
    /// Seconds spent evaluating (summed over executors).
    pub evaluation_s: f64,
}

#[derive(Default)]
struct Counters {
    submitted: AtomicU64,
    evaluated: AtomicU64,
    already_recorded: AtomicU64,
    opened: AtomicU64,
    reused: AtomicU64,
    evaluation_us: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> ServiceStats {
        let get = |a: &AtomicU64| a.load(Ordering::SeqCst);
        ServiceStats {
            submitted: get(&self.submitted),
            evaluated: get(&self.evaluated),
            already_recorded: get(&self.already_recorded),
            reference_sessions_opened: get(&self.opened),
            reference_sessions_reused: get(&self.reused),
            evaluation_s: get(&self.evaluation_us) as f64 / 1e6,
        }
    }
}

/// What callers and the service thread share.
#[derive(Default)]
struct State {
    counters: Counters,
    /// Why the service stopped, when it stopped on an error.
    failure: Mutex<Option<String>>,
}

type Reply = mpsc::Sender<std::result::Result<EvalRecord, String>>;

enum Msg {
    Submit {
        problem: Box<Problem>,
        cand: Box<Candidate>,
        reply: Reply,
    },
    /// The caller will not submit this problem again (soon): its session may close.
    Release(String),
}

/// A running evaluation service. Dropping it (or [`finish`](Self::finish)) lets the queued
/// work complete and stops the executors; raising the run's stop flag stops them at once,
/// and callers still waiting get an error. Every record is appended to the run log (and
/// fsynced) before its caller hears of it.
pub struct Service {
    tx: Mutex<Option<mpsc::Sender<Msg>>>,
    thread: Mutex<Option<std::thread::JoinHandle<Result<()>>>>,
    state: Arc<State>,
    stop: Arc<AtomicBool>,
}

impl Service {
    /// Starts the engine for `config` (its device and `--gpus`, families, timing, run
    /// directory and secret; its agent names the records). Returns once the run directory is
    /// open and the executors are running.
    pub fn start(config: &RunConfig, stop: Arc<AtomicBool>) -> Result<Service> {
        let (tx, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let state = Arc::new(State::default());
        let thread = {
            let config = config.clone();
            let stop = Arc::clone(&stop);
            let state = Arc::clone(&state);
            std::thread::Builder::new()
                .name("kbench-eval-service".into())
                .spawn(move || {
                    let mut ready = Some(ready_tx);
                    let r = serve(&config, &stop, &rx, &state, &mut ready);
                    match (r, ready.take()) {
                        (Err(e), Some(tx)) => {
                            let _ = tx.send(Err(e));
                            Ok(())
                        }
                        (Err(e), None) => {
                            state
                                .failure
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .get_or_insert(format!("{e:#}"));
                            Err(e)
                        }
                        (Ok(()), _) => Ok(()),
                    }
                })?
        };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Service {
                tx: Mutex::new(Some(tx)),
                thread: Mutex::new(Some(thread)),
                state,
                stop,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                bail!("the evaluation service did not start")
            }
        }
    }

    /// Evaluates one candidate of `problem` (or returns its record, when a kernel of the same
    /// key is already in the log); blocks until the record is written.
    pub fn evaluate(&self, problem: &Problem, cand: Candidate) -> Result<EvalRecord> {
        if self.stop.load(Ordering::SeqCst) {
            bail!("interrupted");
        }
        let (reply, answer) = mpsc::channel();
        self.send(Msg::Submit {
            problem: Box::new(problem.clone()),
            cand: Box::new(cand),
            reply,
        })?;
        match answer.recv() {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(msg)) => Err(anyhow!(msg)),
            Err(_) => Err(self.why_stopped()),
        }
    }

    /// Says that no more kernels of `problem` will come (its task ended): its reference
    /// session is closed once nothing of it is queued.
    pub fn release(&self, problem: &Problem) {
        let _ = self.send(Msg::Release(problem.key()));
    }

    pub fn stats(&self) -> ServiceStats {
        self.state.counters.snapshot()
    }

    /// Lets queued work finish, stops the executors and returns what was done.
    pub fn finish(&self) -> Result<ServiceStats> {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = handle {
            match h.join() {
                Ok(r) => r?,
                Err(_) => bail!("the evaluation service panicked"),
            }
        }
        Ok(self.stats())
    }

    fn send(&self, msg: Msg) -> Result<()> {
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        match tx.as_ref().map(|t| t.send(msg)) {
            Some(Ok(())) => Ok(()),
            _ => Err(self.why_stopped()),
        }
    }

    fn why_stopped(&self) -> anyhow::Error {
        if self.stop.load(Ordering::SeqCst) {
            return anyhow!("interrupted");
        }
        match &*self.state.failure.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(f) => anyhow!("the evaluation service stopped: {f}"),
            None => anyhow!("the evaluation service stopped"),
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// A submission waiting for an executor.
struct Job {
    problem: Problem,
    /// `problem.key()`.
    pkey: String,
    problem_path: PathBuf,
    cand: Candidate,
    prep: Prepared,
    /// The record key (several callers of the same key wait on one evaluation).
    key: String,
    queued: Instant,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// No more submissions: executors leave once the queue is empty.
    closing: bool,
}

struct Shared<'a> {
    queue: Mutex<Queue>,
    cv: Condvar,
    run_dir: &'a RunDir,
    env_base: &'a kbench_record::Environment,
    agent: &'static str,
    state: &'a State,
    /// Problems whose session each executor holds open.
    held: Mutex<Vec<HashSet<String>>>,
    /// Problems released by their tasks.
    released: Mutex<HashSet<String>>,
    /// Callers waiting, by record key.
    waiting: Mutex<HashMap<String, Vec<Reply>>>,
    /// Every record of the log by key (found on open, then added).
    recorded: Mutex<HashMap<String, EvalRecord>>,
    /// Executors still running.
    alive: AtomicUsize,
    /// An executor failed: everything stops (as a failing `kbench run` does).
    failed: AtomicBool,
    progress: indicatif::ProgressBar,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared<'_> {
    /// Answers everyone waiting on `key`: with the record, or (`None`: interrupted or
    /// failed) by hanging up, which they read as the service's stop.
    fn answer(&self, key: &str, record: Option<&EvalRecord>) {
        let waiters = lock(&self.waiting).remove(key).unwrap_or_default();
        if let Some(r) = record {
            for w in waiters {
                let _ = w.send(Ok(r.clone()));
            }
        }
    }

    fn fail(&self, e: anyhow::Error) {
        lock(&self.state.failure).get_or_insert(format!("{e:#}"));
        self.failed.store(true, Ordering::SeqCst);
        self.cv.notify_all();
    }
}

/// The service thread: sets the engine up as `engine::run` does, runs the executors and
/// feeds them from the submissions.
fn serve(
    config: &RunConfig,
    stop: &Arc<AtomicBool>,
    rx: &mpsc::Receiver<Msg>,
    state: &State,
    ready: &mut Option<mpsc::Sender<Result<()>>>,
) -> Result<()> {
    let timing_cores = timing_cores_of(config);
    let info = python::probe_cached(&config.python)?;
    check_cuda(config, &info)?;
    let worker_script = python::materialize_worker(&config.cache)?;
    let keep = if config.gpus.is_empty() {
        KEEP_CPU
    } else {
        // As many problems per GPU as `kbench run` keeps loaded ahead on it.
        config.lookahead.unwrap_or(LOOKAHEAD).max(1)
    };
    // The case cache is bounded for the whole service: each open session gets its share.
    let mut config = config.clone();
    config.case_cache_bytes /= keep as u64;
    let config = &config;
    let run_dir = super::run_dir::open(config)?;
    let env_base = environment_base(&info);
    let mut ctx = Ctx {
        config,
        python: &config.python.python,
        info: &info,
        worker_script: &worker_script,
        stop: Arc::clone(stop),
        cuda_arch: cuda_arch_of(config),
        builds: None,
        gates: Gates::default(),
    };
    if config.build_jobs > 0 {
        ctx.builds = Some(start_build_pool(
            config,
            &worker_script,
            ctx.cuda_arch.clone(),
            stop,
            config.build_jobs,
        ));
    }
    let ctx = ctx;
    let execs = open_execs(config, timing_cores)?;
    let sampler = start_sampler(config, &run_dir);
    let agent = config.agent.name();
    let recorded = run_dir
        .existing
        .iter()
        .map(|r| (r.key(), r.clone()))
        .collect();
    let shared = Shared {
        queue: Mutex::new(Queue::default()),
        cv: Condvar::new(),
        run_dir: &run_dir,
        env_base: &env_base,
        agent,
        state,
        held: Mutex::new(vec![HashSet::new(); execs.len()]),
        released: Mutex::new(HashSet::new()),
        waiting: Mutex::new(HashMap::new()),
        recorded: Mutex::new(recorded),
        alive: AtomicUsize::new(execs.len()),
        failed: AtomicBool::new(false),
        progress: super::progress_bar(0, true),
    };
    if let Some(tx) = ready.take() {
        let _ = tx.send(Ok(()));
    }
    std::thread::scope(|scope| {
        for (idx, exec) in execs.iter().enumerate() {
            let (ctx, shared) = (&ctx, &shared);
            scope.spawn(move || {
                if let Err(e) = executor(ctx, exec, idx, keep, shared) {
                    shared.fail(e);
                }
                shared.alive.fetch_sub(1, Ordering::SeqCst);
                shared.cv.notify_all();
            });
        }
        intake(&ctx, &shared, rx);
        lock(&shared.queue).closing = true;
        shared.cv.notify_all();
    });
    // Whatever is still queued (stopped, or no executor left) is answered by hanging up.
    let left: Vec<Job> = lock(&shared.queue).jobs.drain(..).collect();
    for job in left {
        shared.answer(&job.key, None);
    }
    lock(&shared.waiting).clear();
    if let Some(s) = sampler {
        s.stop();
    }
    if let Some(pool) = ctx.builds {
        pool.shutdown();
    }
    match lock(&state.failure).clone() {
        Some(f) if shared.failed.load(Ordering::SeqCst) => Err(anyhow!(f)),
        _ => Ok(()),
    }
}

/// Takes submissions until the callers hang up, the run is stopped or no executor is left.
fn intake(ctx: &Ctx, shared: &Shared, rx: &mpsc::Receiver<Msg>) {
    let c = ctx.config;
    loop {
        if ctx.stop.load(Ordering::SeqCst)
            || shared.failed.load(Ordering::SeqCst)
            || shared.alive.load(Ordering::SeqCst) == 0
        {
            if shared.alive.load(Ordering::SeqCst) == 0 && !ctx.stop.load(Ordering::SeqCst) {
                lock(&shared.state.failure)
                    .get_or_insert_with(|| "no healthy device is left".to_string());
            }
            return;
        }
        let msg = match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(m) => m,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        let (problem, cand, reply) = match msg {
            Msg::Release(pkey) => {
                lock(&shared.released).insert(pkey);
                shared.cv.notify_all();
                continue;
            }
            Msg::Submit {
                problem,
                cand,
                reply,
            } => (*problem, *cand, reply),
        };
        shared
            .state
            .counters
            .submitted
            .fetch_add(1, Ordering::SeqCst);
        let key = record_key(&problem, shared.agent, &cand);
        if let Some(r) = lock(&shared.recorded).get(&key) {
            shared
                .state
                .counters
                .already_recorded
                .fetch_add(1, Ordering::SeqCst);
            let _ = reply.send(Ok(r.clone()));
            continue;
        }
        {
            let mut waiting = lock(&shared.waiting);
            if let Some(w) = waiting.get_mut(&key) {
                // The same kernel is queued or being evaluated: one evaluation answers both.
                w.push(reply);
                continue;
            }
            waiting.insert(key.clone(), vec![reply]);
        }
        let prepared = materialize_problem(&c.cache, &problem).and_then(|problem_path| {
            let prep = prepare_candidate(ctx, &problem, &cand, shared.agent, shared.run_dir)?;
            Ok((problem_path, prep))
        });
        let (problem_path, prep) = match prepared {
            Ok(p) => p,
            Err(e) => {
                let waiters = lock(&shared.waiting).remove(&key).unwrap_or_default();
                for w in waiters {
                    let _ = w.send(Err(format!("{e:#}")));
                }
                continue;
            }
        };
        // Its extension builds on the CPU pool while it waits for an executor.
        if let Some(pool) = &ctx.builds {
            if crate::worker::build::builds_extensions(&cand.source) {
                pool.submit(build_job(shared.run_dir, &problem_path, &prep));
            }
        }
        let pkey = problem.key();
        lock(&shared.released).remove(&pkey);
        lock(&shared.queue).jobs.push_back(Job {
            problem,
            pkey,
            problem_path,
            cand,
            prep,
            key,
            queued: Instant::now(),
        });
        shared.cv.notify_all();
    }
}

/// A reference session an executor holds open.
struct Open {
    pkey: String,
    session: std::result::Result<ReferenceSession, String>,
    /// Time its opening took, carried by its first record (`reference_open_s`).
    open_s: f64,
}

impl Open {
    fn close(self) {
        if let Ok(s) = self.session {
            s.worker.shutdown();
        }
    }
}

/// How long a job may wait while jobs of problems with open sessions go ahead of it.
const MAX_BYPASS: Duration = Duration::from_secs(20);

/// Which queued job executor `idx` takes: one of a problem it holds open, else one of a
/// problem no other executor holds, else the oldest (an idle GPU opens a second session
/// rather than wait). A job that has waited `MAX_BYPASS` goes first, so a problem with many
/// trajectories cannot hold a device for itself.
fn pick(q: &Queue, idx: usize, mine: &[Open], shared: &Shared) -> Option<usize> {
    let held = lock(&shared.held);
    choose(
        q.jobs.iter().map(|j| (j.pkey.as_str(), j.queued.elapsed())),
        |k| mine.iter().any(|o| o.pkey == k),
        |k| {
            held.iter()
                .enumerate()
                .any(|(e, set)| e != idx && set.contains(k))
        },
    )
}

/// [`pick`] over `(problem key, time queued)`, oldest first.
fn choose<'k>(
    jobs: impl Iterator<Item = (&'k str, Duration)> + Clone,
    mine: impl Fn(&str) -> bool,
    others: impl Fn(&str) -> bool,
) -> Option<usize> {
    let mut all = jobs.clone().peekable();
    let (_, oldest) = *all.peek()?;
    if oldest >= MAX_BYPASS {
        return Some(0);
    }
    jobs.clone()
        .position(|(k, _)| mine(k))
        .or_else(|| jobs.clone().position(|(k, _)| !others(k)))
        .or(Some(0))
}

/// One executor of the service: one evaluation at a time on its device (so a timed kernel
/// never shares it), keeping up to `keep` problems' reference sessions open.
fn executor(ctx: &Ctx, exec: &Exec, idx: usize, keep: usize, shared: &Shared) -> Result<()> {
    let c = ctx.config;
    let run_dir = shared.run_dir;
    let counters = &shared.state.counters;
    let mut sessions: Vec<Open> = Vec::new(); // least recently used first
    let close = |o: Open, sessions_held: &Mutex<Vec<HashSet<String>>>| {
        lock(sessions_held)[idx].remove(&o.pkey);
        o.close();
    };
    let result = loop {
        // Close the sessions of released problems with nothing queued.
        {
            let released = lock(&shared.released).clone();
            if !released.is_empty() {
                let queued: HashSet<String> = lock(&shared.queue)
                    .jobs
                    .iter()
                    .map(|j| j.pkey.clone())
                    .collect();
                let (gone, kept): (Vec<Open>, Vec<Open>) = sessions
                    .drain(..)
                    .partition(|o| released.contains(&o.pkey) && !queued.contains(&o.pkey));
                sessions = kept;
                for o in gone {
                    close(o, &shared.held);
                }
            }
        }
        if ctx.stop.load(Ordering::SeqCst) || shared.failed.load(Ordering::SeqCst) {
            break Ok(());
        }
        let job = {
            let mut q = lock(&shared.queue);
            match pick(&q, idx, &sessions, shared) {
                Some(i) => q.jobs.remove(i),
                None if q.closing => break Ok(()),
                None => {
                    let _ = shared
                        .cv
                        .wait_timeout(q, Duration::from_millis(500))
                        .unwrap_or_else(|e| e.into_inner());
                    None
                }
            }
        };
        let Some(job) = job else { continue };
        let t0 = Instant::now();
        let mut open = match sessions.iter().position(|o| o.pkey == job.pkey) {
            Some(p) => {
                counters.reused.fetch_add(1, Ordering::SeqCst);
                sessions.remove(p)
            }
            None => {
                while sessions.len() >= keep {
                    close(sessions.remove(0), &shared.held);
                }
                let opening = Instant::now();
                let session = ReferenceSession::open(
                    ctx,
                    exec,
                    &job.problem,
                    &job.problem_path,
                    run_dir,
                    None,
                    None,
                );
                counters.opened.fetch_add(1, Ordering::SeqCst);
                let session = match session {
                    Ok(s) => Ok(s),
                    Err(RefFailure::Failed(m)) => Err(m),
                    Err(RefFailure::Interrupted) => {
                        shared.answer(&job.key, None);
                        break Ok(());
                    }
                };
                lock(&shared.held)[idx].insert(job.pkey.clone());
                Open {
                    pkey: job.pkey.clone(),
                    session,
                    open_s: opening.elapsed().as_secs_f64(),
                }
            }
        };
        let mut env = shared.env_base.clone();
        // The device is this evaluation's alone: a profile an agent asks for (ncu replays
        // kernels) waits for it, and no evaluation starts while one runs.
        let device = device_lock(exec.device);
        let held = device.lock().unwrap_or_else(|e| e.into_inner());
        let evaluated = (|| -> Result<Option<EvalRecord>> {
            let this =
                start_candidate(ctx, exec, run_dir, &job.problem_path, &job.cand, &job.prep)?;
            Ok(match &mut open.session {
                Ok(r) => {
                    env.device_name = r.device_name.clone();
                    evaluate_candidate(
                        ctx,
                        exec,
                        &job.problem,
                        &job.problem_path,
                        &job.cand,
                        &job.prep,
                        shared.agent,
                        r,
                        run_dir,
                        env,
                        this,
                    )?
                }
                Err(msg) => {
                    this.1.discard();
                    Some(reference_error_record(
                        c,
                        exec.device,
                        run_dir,
                        &job.problem,
                        &job.cand,
                        shared.agent,
                        msg,
                        env,
                    ))
                }
            })
        })();
        drop(held);
        let record = match evaluated {
            Ok(Some(r)) => r,
            Ok(None) => {
                // Interrupted before a verdict: nothing recorded, the caller hears so.
                shared.answer(&job.key, None);
                close(open, &shared.held);
                break Ok(());
            }
            Err(e) => {
                shared.answer(&job.key, None);
                close(open, &shared.held);
                break Err(e);
            }
        };
        let mut record = record;
        if let Some(ph) = record.phases.as_mut() {
            ph.reference_open_s = std::mem::take(&mut open.open_s);
        }
        if let Err(e) = run_dir.append(&record) {
            shared.answer(&job.key, None);
            close(open, &shared.held);
            break Err(e);
        }
        report_line(c, &shared.progress, &record);
        counters.evaluated.fetch_add(1, Ordering::SeqCst);
        counters
            .evaluation_us
            .fetch_add(t0.elapsed().as_micros() as u64, Ordering::SeqCst);
        lock(&shared.recorded).insert(job.key.clone(), record.clone());
        shared.answer(&job.key, Some(&record));
        sessions.push(open);
        // A worker that crashed or hung may have left the GPU in a bad state: check it
        // before it takes new work; the queue stays for the other GPUs.
        if let (Some(gpu), true) = (&exec.gpu, needs_health_check(&record.outcome)) {
            if let Err(e) = crate::gpu::health_check(gpu) {
                shared.progress.println(format!(
                    "kbench: GPU {} taken out of the run after {}: {e:#}",
                    gpu.ordinal,
                    record.problem.key()
                ));
                if shared.alive.load(Ordering::SeqCst) <= 1 {
                    break Err(e.context(
                        "no healthy GPU is left for this run; resume it with --resume once the GPU is reset",
                    ));
                }
                break Ok(());
            }
        }
    };
    for o in sessions {
        close(o, &shared.held);
    }
    result
}

/// One lock per device of this process: held by the service's executor for the whole of an
/// evaluation on it, and by anything else that must have the device to itself (the agents'
/// `kbench profile` feedback), so neither disturbs the other's timing.
pub fn device_lock(device: Device) -> Arc<Mutex<()>> {
    static LOCKS: std::sync::OnceLock<Mutex<HashMap<Device, Arc<Mutex<()>>>>> =
        std::sync::OnceLock::new();
    let map = LOCKS.get_or_init(Default::default);
    let mut m = map.lock().unwrap_or_else(|e| e.into_inner());
    Arc::clone(m.entry(device).or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executors_take_their_own_problems_first_then_free_ones_then_the_oldest() {
        let s = Duration::from_secs(1);
        let jobs = [("p1", 3 * s), ("p2", 2 * s), ("p3", s)];
        let held_by = |keys: &'static [&'static str]| move |k: &str| keys.contains(&k);
        // Nothing open anywhere: first come, first served.
        assert_eq!(
            choose(jobs.into_iter(), held_by(&[]), held_by(&[])),
            Some(0)
        );
        // This executor holds p3 open: p3's job goes first.
        assert_eq!(
            choose(jobs.into_iter(), held_by(&["p3"]), held_by(&[])),
            Some(2)
        );
        // Another executor (GPU) holds p1: this one takes p2, leaving p1 to it.
        assert_eq!(
            choose(jobs.into_iter(), held_by(&[]), held_by(&["p1"])),
            Some(1)
        );
        // Every problem is held elsewhere: an idle device still takes the oldest.
        assert_eq!(
            choose(jobs.into_iter(), held_by(&[]), held_by(&["p1", "p2", "p3"])),
            Some(0)
        );
        // A job waiting too long goes first, whatever is open.
        let late = [("p1", MAX_BYPASS), ("p3", s)];
        assert_eq!(
            choose(late.into_iter(), held_by(&["p3"]), held_by(&[])),
            Some(0)
        );
        assert_eq!(choose([].into_iter(), held_by(&[]), held_by(&[])), None);
    }
}
