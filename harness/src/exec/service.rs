//! The evaluation service: a long-lived engine session that many threads submit
//! `(problem, candidate)` pairs to, at any time (the LLM agents, one thread per task).
//!
//! It is `kbench run`'s engine fed as submissions come instead of from a fixed plan: the same
//! executors (one per `--gpus` entry, or one for the CPU), the same evaluation, the same run
//! directory and log, the same build-ahead pool. Each submission is a batch of one candidate,
//! and a problem's reference session (its trusted worker and its cached reference cases)
//! stays open between batches, so a task's second and later kernels skip Python's start-up,
//! the model load and the reference cases. Open sessions are bounded per executor (least
//! recently used closed first) and closed when a task says it is done with its problem.
//! Nothing is taken ahead: each kernel's candidate worker starts when its batch is taken.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use kbench_record::EvalRecord;
use kbench_suites::Problem;
use serde::Serialize;

use super::engine::{build_job, run_executors, Engine};
use super::executor::{Depth, Shared, Sink};
use super::progress::progress_bar;
use super::queue::{lock, Batch, Item, Queue};
use super::run::LOOKAHEAD;
use crate::agents::Candidate;
use crate::config::{materialize_problem, RunConfig};
use crate::eval::prepare::prepare_candidate;
use crate::eval::record::{environment_base, unjudged_record};
use crate::judge::Tolerance;
use crate::measure::Ctx;
use crate::plan::{blank_kernel, record_key, Unjudged};

/// Reference sessions an executor keeps open on the CPU. Idle workers do not disturb CPU
/// timing; the case-cache budget (`--case-cache-mb`) is shared among them.
const KEEP_CPU: usize = 4;

/// What the service did, for the run's summary.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct ServiceStats {
    /// Kernels submitted.
    pub(crate) submitted: u64,
    /// Kernels evaluated (a record appended to the run log).
    pub(crate) evaluated: u64,
    /// Submissions answered with a record already in the log (same kernel key).
    pub(crate) already_recorded: u64,
    /// Reference sessions opened: one reference worker started (and its model loaded) each.
    pub(crate) reference_sessions_opened: u64,
    /// Evaluations that found their problem's reference session already open.
    pub(crate) reference_sessions_reused: u64,
    /// Seconds spent evaluating (summed over executors).
    pub(crate) evaluation_s: f64,
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
    /// The executors' queue, while the service thread runs.
    queue: Mutex<Option<Arc<Queue>>>,
}

/// How the record that answers a submitted candidate came about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Provenance {
    /// Written for this submission: its evaluation, or a record decided without a worker.
    Evaluated,
    /// The same kernel was queued or under evaluation when it came: that evaluation
    /// answered this copy too.
    Joined,
    /// Already in the log when it came (evaluated before, or a resumed run's).
    Recorded,
}

type Answer = std::result::Result<(EvalRecord, Provenance), String>;
type Reply = mpsc::Sender<Answer>;

enum Msg {
    /// Candidates of one problem, evaluated as one batch: back to back, in order, in the
    /// problem's one reference session (the same reference worker and cached cases).
    Submit {
        problem: Box<Problem>,
        cands: Vec<(Candidate, Reply)>,
    },
    /// The caller will not submit this problem again (soon): its session may close.
    Release(String),
    /// A record decided without a worker (a task that produced no kernel, a broken problem
    /// file): written as it is.
    Unjudged { u: Box<Unjudged>, reply: Reply },
}

/// A running evaluation service. Dropping it (or [`finish`](Self::finish)) lets the queued
/// work complete and stops the executors; raising the run's stop flag stops them at once,
/// and callers still waiting get an error. Every record is appended to the run log (and
/// fsynced) before its caller hears of it.
pub(crate) struct Service {
    tx: Mutex<Option<mpsc::Sender<Msg>>>,
    thread: Mutex<Option<std::thread::JoinHandle<Result<()>>>>,
    state: Arc<State>,
    stop: Arc<AtomicBool>,
}

impl Service {
    /// Starts the engine for `config` (its device and `--gpus`, families, timing, run
    /// directory and secret; its agent names the records). Returns once the run directory is
    /// open and the executors are running.
    pub(crate) fn start(config: &RunConfig, stop: Arc<AtomicBool>) -> Result<Service> {
        Self::start_taking_ahead(config, stop, false)
    }

    /// [`start`](Self::start), and with `ahead` each executor takes queued batches ahead as
    /// `kbench run` does (their reference and first candidate workers start while the
    /// current batch runs): for a service whose queue is kept full (`kbench serve`), where
    /// nothing would otherwise hide Python's start-up and the model loads.
    pub(crate) fn start_taking_ahead(
        config: &RunConfig,
        stop: Arc<AtomicBool>,
        ahead: bool,
    ) -> Result<Service> {
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
                    let r = serve(&config, &stop, &rx, &state, &mut ready, ahead);
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
    pub(crate) fn evaluate(&self, problem: &Problem, cand: Candidate) -> Result<EvalRecord> {
        let mut records = self.evaluate_together(problem, vec![cand])?;
        records
            .pop()
            .map(|(r, _)| r)
            .context("the evaluation service answered with no record")
    }

    /// Evaluates several candidates of `problem` as one batch: back to back on one device,
    /// in the given order, against the same open reference session (one reference worker,
    /// the same cached inputs), nothing else evaluated on that device in between. Records
    /// come back in the order given, each with how it came about; a candidate already in
    /// the log is answered from it.
    pub(crate) fn evaluate_together(
        &self,
        problem: &Problem,
        cands: Vec<Candidate>,
    ) -> Result<Vec<(EvalRecord, Provenance)>> {
        self.evaluate_each(problem, cands)?.into_iter().collect()
    }

    /// [`evaluate_together`](Self::evaluate_together), each candidate's answer on its own:
    /// every answer is waited for, so a candidate that failed does not drop the answers of
    /// those after it (their evaluations still happen, and their callers count them).
    pub(crate) fn evaluate_each(
        &self,
        problem: &Problem,
        cands: Vec<Candidate>,
    ) -> Result<Vec<Result<(EvalRecord, Provenance)>>> {
        if self.stop.load(Ordering::SeqCst) {
            bail!("interrupted");
        }
        let mut answers = Vec::new();
        let mut pairs = Vec::new();
        for cand in cands {
            let (reply, answer) = mpsc::channel();
            pairs.push((cand, reply));
            answers.push(answer);
        }
        self.send(Msg::Submit {
            problem: Box::new(problem.clone()),
            cands: pairs,
        })?;
        Ok(answers
            .into_iter()
            .map(|answer| match answer.recv() {
                Ok(Ok(r)) => Ok(r),
                Ok(Err(msg)) => Err(anyhow!(msg)),
                Err(_) => Err(self.why_stopped()),
            })
            .collect())
    }

    /// Records `u` (a problem that got no kernel, a broken problem file) without a worker,
    /// or returns its record when one of the same key is already in the log.
    pub(crate) fn record_unjudged(&self, u: Unjudged) -> Result<EvalRecord> {
        let (reply, answer) = mpsc::channel();
        self.send(Msg::Unjudged {
            u: Box::new(u),
            reply,
        })?;
        match answer.recv() {
            Ok(Ok((r, _))) => Ok(r),
            Ok(Err(msg)) => Err(anyhow!(msg)),
            Err(_) => Err(self.why_stopped()),
        }
    }

    /// Says that no more kernels of `problem` will come (its task ended): its reference
    /// session is closed once nothing of it is queued.
    pub(crate) fn release(&self, problem: &Problem) {
        let _ = self.send(Msg::Release(problem.key()));
    }

    pub(crate) fn stats(&self) -> ServiceStats {
        self.state.counters.snapshot()
    }

    /// The keys of the problems a submission would find warm: a reference session open on
    /// an executor, or a batch queued (see [`Queue::warm`]). Empty before the executors run
    /// and after they stop.
    pub(crate) fn warm_problems(&self) -> std::collections::HashSet<String> {
        lock(&self.state.queue)
            .as_ref()
            .map(|q| q.warm())
            .unwrap_or_default()
    }

    /// Lets queued work finish, stops the executors and returns what was done.
    pub(crate) fn finish(&self) -> Result<ServiceStats> {
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

/// What the service's executors report to: the callers waiting, by record key, and every
/// record of the log by key.
struct Answers<'a> {
    counters: &'a Counters,
    /// Callers waiting, by record key.
    waiting: Mutex<HashMap<String, Vec<Reply>>>,
    /// Every record of the log by key (found on open, then added).
    recorded: Mutex<HashMap<String, EvalRecord>>,
}

impl Sink for Answers<'_> {
    fn recorded(&self, key: &str, record: &EvalRecord, eval_s: f64) {
        self.counters.evaluated.fetch_add(1, Ordering::SeqCst);
        self.counters
            .evaluation_us
            .fetch_add((eval_s * 1e6) as u64, Ordering::SeqCst);
        self.settle(key, record);
    }
}

impl Answers<'_> {
    /// The answer for `key` when its record is already in the log (counted as such).
    fn already_recorded(&self, key: &str) -> Option<Answer> {
        let r = lock(&self.recorded).get(key).cloned()?;
        self.counters
            .already_recorded
            .fetch_add(1, Ordering::SeqCst);
        Some(Ok((r, Provenance::Recorded)))
    }

    /// `record` of `key` is in the log: known from now on, and sent to whoever waits for it
    /// (the first waiter's submission started the evaluation; the others joined it).
    fn settle(&self, key: &str, record: &EvalRecord) {
        // Under `waiting`'s lock, as `take_in` looks: a copy that comes now finds the record
        // or its evaluation, never neither (which would evaluate it twice).
        let waiters = {
            let mut waiting = lock(&self.waiting);
            lock(&self.recorded).insert(key.to_string(), record.clone());
            waiting.remove(key).unwrap_or_default()
        };
        for (i, w) in waiters.into_iter().enumerate() {
            let how = if i == 0 {
                Provenance::Evaluated
            } else {
                Provenance::Joined
            };
            let _ = w.send(Ok((record.clone(), how)));
        }
    }
}

/// The service thread: sets the engine up as `kbench run` does, runs the executors and
/// feeds them from the submissions.
fn serve(
    config: &RunConfig,
    stop: &Arc<AtomicBool>,
    rx: &mpsc::Receiver<Msg>,
    state: &State,
    ready: &mut Option<mpsc::Sender<Result<()>>>,
    ahead: bool,
) -> Result<()> {
    let engine = Engine::prepare(config, true)?;
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
    // The agent writes its kernels as it goes: each problem is a task, each kernel joins the
    // plan as it is recorded.
    let planned = crate::plan::planned_tasks(&config.problems, &config.broken);
    let run_dir = super::run_dir::open(config, planned)?;
    // Said even with --quiet: a line skipped may be a forgery.
    for note in &run_dir.notes {
        eprintln!("kbench: {note}");
    }
    let env_base = environment_base(&engine.info, &engine.jail.containment, engine.bounds());
    let mut ctx = engine.ctx(config, stop);
    if config.build_jobs > 0 {
        ctx.builds = Some(engine.build_pool(config, stop, config.build_jobs));
    }
    let ctx = ctx;
    let (stations, sampler) = engine.stations(config, &run_dir)?;
    let agent = config.agent.name();
    let answers = Answers {
        counters: &state.counters,
        waiting: Mutex::new(HashMap::new()),
        recorded: Mutex::new(
            run_dir
                .existing
                .iter()
                .map(|r| (r.key(), r.clone()))
                .collect(),
        ),
    };
    let queue = Arc::new(Queue::new(stations.len()));
    *lock(&state.queue) = Some(Arc::clone(&queue));
    let progress = progress_bar(0, true);
    let shared = Shared {
        queue: &queue,
        run_dir: &run_dir,
        env_base: &env_base,
        agent,
        progress: &progress,
        sink: &answers,
        alive: AtomicUsize::new(stations.len()),
        opened: &state.counters.opened,
        reused: &state.counters.reused,
    };
    if let Some(tx) = ready.take() {
        let _ = tx.send(Ok(()));
    }
    let depth = Depth {
        ahead: if ahead {
            super::run::lookahead(config)
        } else {
            0
        },
        keep,
    };
    let on_error = |e: &anyhow::Error| {
        lock(&state.failure).get_or_insert(format!("{e:#}"));
    };
    run_executors(&ctx, &stations, depth, &shared, &on_error, || {
        intake(&ctx, &shared, &answers, state, rx);
        queue.close();
    });
    // Whatever is still queued (stopped, or no executor left) is answered by hanging up.
    queue.drain();
    lock(&state.queue).take();
    lock(&answers.waiting).clear();
    if let Some(s) = sampler {
        s.stop();
    }
    if let Some(pool) = ctx.builds {
        pool.shutdown();
    }
    match lock(&state.failure).clone() {
        Some(f) if queue.failed() => Err(anyhow!(f)),
        _ => Ok(()),
    }
}

/// Takes submissions until the callers hang up, the run is stopped or no executor is left.
fn intake(ctx: &Ctx, shared: &Shared, answers: &Answers, state: &State, rx: &mpsc::Receiver<Msg>) {
    let c = ctx.config;
    loop {
        if ctx.stop.load(Ordering::SeqCst)
            || shared.queue.failed()
            || shared.alive.load(Ordering::SeqCst) == 0
        {
            if shared.alive.load(Ordering::SeqCst) == 0 && !ctx.stop.load(Ordering::SeqCst) {
                lock(&state.failure).get_or_insert_with(|| "no healthy device is left".to_string());
            }
            return;
        }
        let msg = match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(m) => m,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        let (problem, cands) = match msg {
            Msg::Release(pkey) => {
                shared.queue.release(pkey);
                continue;
            }
            Msg::Unjudged { u, reply } => {
                let _ = reply.send(unjudged(ctx, shared, answers, &u));
                continue;
            }
            Msg::Submit { problem, cands } => (*problem, cands),
        };
        let problem_path = match materialize_problem(&c.cache, &problem) {
            Ok(p) => p,
            Err(e) => {
                for (_, reply) in cands {
                    let _ = reply.send(Err(format!("{e:#}")));
                }
                continue;
            }
        };
        let mut items = Vec::new();
        for (cand, reply) in cands {
            if let Some(item) = take_in(ctx, shared, answers, &problem, &problem_path, cand, reply)
            {
                items.push(item);
            }
        }
        if items.is_empty() {
            continue;
        }
        shared.queue.push(Batch {
            pkey: problem.key(),
            problem,
            problem_path,
            items,
            queued: Instant::now(),
            last: false,
        });
    }
}

/// One submitted candidate: answered at once (a blank kernel, a record already in the log,
/// a failed preparation), joined to the same kernel's evaluation already under way, or
/// prepared as an item of its batch.
fn take_in(
    ctx: &Ctx,
    shared: &Shared,
    answers: &Answers,
    problem: &Problem,
    problem_path: &std::path::Path,
    cand: Candidate,
    reply: Reply,
) -> Option<Item> {
    answers.counters.submitted.fetch_add(1, Ordering::SeqCst);
    // An empty kernel is no kernel: recorded as such, no worker started.
    if let Some(u) = blank_kernel(problem, shared.agent, &cand) {
        let _ = reply.send(unjudged(ctx, shared, answers, &u));
        return None;
    }
    let key = record_key(problem, shared.agent, &cand);
    {
        // `waiting` first, then `recorded`, as `settle` takes them.
        let mut waiting = lock(&answers.waiting);
        if let Some(known) = answers.already_recorded(&key) {
            let _ = reply.send(known);
            return None;
        }
        if let Some(w) = waiting.get_mut(&key) {
            // The same kernel is queued or being evaluated: one evaluation answers both.
            w.push(reply);
            return None;
        }
        waiting.insert(key.clone(), vec![reply]);
    }
    let prep = match prepare_candidate(ctx, problem, &cand, shared.agent, shared.run_dir) {
        Ok(p) => p,
        Err(e) => {
            let waiters = lock(&answers.waiting).remove(&key).unwrap_or_default();
            for w in waiters {
                let _ = w.send(Err(format!("{e:#}")));
            }
            return None;
        }
    };
    // Its extension builds on the CPU pool while it waits for an executor.
    if crate::worker::build::builds_extensions(&cand.source) {
        if let Some(pch) = &ctx.jail.pch {
            pch.start(&shared.run_dir.logs_dir().join("pch.log"));
        }
        if let Some(pool) = &ctx.builds {
            pool.submit(build_job(shared.run_dir, problem_path, &prep));
        }
    }
    Some(Item { cand, prep, key })
}

/// Writes the record of `u` (or finds it in the log) and answers with it.
fn unjudged(ctx: &Ctx, shared: &Shared, answers: &Answers, u: &Unjudged) -> Answer {
    if let Some(known) = answers.already_recorded(&u.key) {
        return known;
    }
    let c = ctx.config;
    let tol = Tolerance {
        profile: c.profile,
        precision: c.precision,
    };
    let env = shared.env_base.clone();
    let record = unjudged_record(
        tol,
        c.device,
        shared.run_dir,
        shared.agent,
        u,
        env,
        c.baselines.as_deref(),
    );
    shared
        .run_dir
        .append(&record)
        .map_err(|e| format!("{e:#}"))?;
    answers.settle(&u.key, &record);
    Ok((record, Provenance::Evaluated))
}
