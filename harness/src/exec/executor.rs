//! The executor: one per device, the only code that drives workers concurrently. It takes
//! batches from the queue, evaluates their candidates one at a time on its device (so a timed
//! kernel never shares it), and keeps the next workers starting ahead:
//!
//! - `depth` batches are taken ahead, each with its reference worker started (and sent its
//!   `load`) and its first candidates' workers started (as many as run ahead within it), on
//!   threads of their own, so Python's start-up and torch's import never hold the device up
//!   (`kbench run`); the device's gate pauses them while a kernel is timed;
//! - the next two candidates' workers of a batch start while the current one runs on a GPU
//!   (one on the CPU, and for a baseline mode's, whose `load` goes ahead);
//! - up to `keep` reference sessions stay open between batches of the same problem (the
//!   agents' service: a task's later kernels skip the model load and the reference cases);
//!   a batch marked `last` closes its session when done;
//! - with builds ahead, the device goes to whichever candidate can use it first: a batch taken
//!   ahead whose first candidate is built goes before one whose build is still under way,
//!   and a batch whose next candidate is still building waits ahead (its session kept open)
//!   while another's runs. Each verdict is the kernel's own; only the order moves.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Result;
use kbench_record::{Device, Environment, EvalRecord, Outcome};

use super::progress::{report_line, say};
use super::queue::{lock, Batch, Item, Queue, Taken};
use crate::eval::candidate::evaluate_candidate;
use crate::eval::record::reference_error_record;
use crate::eval::start::start_candidate;
use crate::eval::Unit;
use crate::judge::faults::out_of_memory;
use crate::judge::Tolerance;
use crate::measure::reference::{load_request, RefFailure, ReferenceSession};
use crate::measure::{Ctx, Station};
use crate::runlog::{sanitize, RunDir};
use crate::worker::{Prestart, Role};

/// Where the executors' records go besides the run log (already appended and fsynced).
pub(crate) trait Sink: Sync {
    /// `record` of record key `key` was appended; `eval_s` is what its evaluation took.
    fn recorded(&self, key: &str, record: &EvalRecord, eval_s: f64);
}

/// How deep an executor works ahead.
#[derive(Clone, Copy)]
pub(crate) struct Depth {
    /// Batches taken ahead of the one running, their workers starting.
    pub(crate) ahead: usize,
    /// Reference sessions kept open between batches.
    pub(crate) keep: usize,
}

/// What the executors share.
pub(crate) struct Shared<'a> {
    pub(crate) queue: &'a Queue,
    pub(crate) run_dir: &'a RunDir,
    pub(crate) env_base: &'a Environment,
    pub(crate) agent: &'a str,
    pub(crate) progress: &'a indicatif::ProgressBar,
    pub(crate) sink: &'a dyn Sink,
    /// Executors still running.
    pub(crate) alive: AtomicUsize,
    /// Reference sessions opened, and batches that found theirs open.
    pub(crate) opened: &'a AtomicU64,
    pub(crate) reused: &'a AtomicU64,
}

/// A batch taken ahead, with its workers already starting.
struct Upcoming {
    batch: Batch,
    reference: Option<Prestart>,
    /// The workers of its first candidates ([`candidates_ahead`] of them), in item order.
    first_candidates: VecDeque<(tempfile::TempDir, Prestart)>,
    /// The rest of a batch that waited for a build: its session is open (and not counted
    /// as reused again).
    waited: bool,
}

impl Upcoming {
    fn discard(mut self) {
        if let Some(r) = self.reference {
            r.discard();
        }
        discard_all(&mut self.first_candidates);
    }
}

/// A reference session an executor holds open.
struct Open {
    pkey: String,
    session: std::result::Result<ReferenceSession, String>,
    /// Time its opening took, carried by its first record (`reference_open_s`).
    open_s: f64,
}

/// How a batch ended.
enum Flow {
    Next,
    /// Item `k`'s build ahead was still under way while a batch taken ahead could start at
    /// once: the items from `k` on wait as a batch taken ahead of their own.
    Yield(usize),
    /// Stopped (interrupt): leave.
    Stop,
    /// The GPU failed its health check and the executor left the run: `Err` when no other
    /// executor is left to take the work.
    Unhealthy(Result<()>),
}

/// Makes every session of `idle` give its GPU memory back; how many had any to give.
fn release_all(idle: &mut [Open], ctx: &Ctx) -> usize {
    let mut released = 0;
    for o in idle {
        if let Ok(s) = &mut o.session {
            released += usize::from(s.release_while_idle(ctx));
        }
    }
    released
}

/// Crashes and timeouts kill a process that held a CUDA context in an unknown state.
fn needs_health_check(o: &Outcome) -> bool {
    matches!(o, Outcome::Crashed { .. } | Outcome::Timeout { .. })
}

/// One executor (`idx` among them) on `station`.
pub(crate) fn executor(
    ctx: &Ctx,
    station: &Station,
    idx: usize,
    depth: Depth,
    shared: &Shared,
) -> Result<()> {
    let mut ex = Executor {
        ctx,
        station,
        idx,
        depth,
        shared,
        sessions: Vec::new(),
        upcoming: VecDeque::new(),
        build_wait_s: std::cell::Cell::new(0.0),
    };
    let result = ex.run();
    for u in ex.upcoming.drain(..) {
        u.discard();
    }
    for o in std::mem::take(&mut ex.sessions) {
        ex.close(o);
    }
    result
}

struct Executor<'a> {
    ctx: &'a Ctx<'a>,
    station: &'a Station,
    idx: usize,
    depth: Depth,
    shared: &'a Shared<'a>,
    /// Open sessions, least recently used first.
    sessions: Vec<Open>,
    upcoming: VecDeque<Upcoming>,
    /// Seconds the device waited in [`Self::yields`], for the next record's `build_wait_s`.
    build_wait_s: std::cell::Cell<f64>,
}

impl Executor<'_> {
    fn stopped(&self) -> bool {
        self.ctx.stop.load(Ordering::SeqCst) || self.shared.queue.failed()
    }

    fn run(&mut self) -> Result<()> {
        loop {
            // Close the sessions of released problems with nothing queued.
            let closable = self.shared.queue.closable();
            if !closable.is_empty() {
                let upcoming = &self.upcoming;
                let (gone, kept) = std::mem::take(&mut self.sessions)
                    .into_iter()
                    .partition(|o| closable.contains(&o.pkey) && !awaited(upcoming, &o.pkey));
                self.sessions = kept;
                for o in gone {
                    self.close(o);
                }
            }
            if self.stopped() {
                return Ok(());
            }
            self.fill()?;
            let current = match self.take_upcoming() {
                Some(u) => u,
                None => match self.take(true) {
                    Taken::Batch(b) => Upcoming {
                        batch: *b,
                        reference: None,
                        first_candidates: VecDeque::new(),
                        waited: false,
                    },
                    Taken::Nothing => continue,
                    Taken::Leave => return Ok(()),
                },
            };
            if self.stopped() {
                current.discard();
                return Ok(());
            }
            // Keep the lookahead full while this batch runs.
            self.fill()?;
            match self.batch(current)? {
                Flow::Next | Flow::Yield(_) => {}
                Flow::Stop => return Ok(()),
                Flow::Unhealthy(r) => return r,
            }
        }
    }

    /// The first batch taken ahead that can start without waiting for a build ahead, else
    /// the first: builds end out of the order they are needed in (on an H100 host with 15 at
    /// once, KernelBenchLeaderboard's level-2 builds took 23-93 s), and the GPU would idle
    /// while batches behind the one waiting are built.
    fn take_upcoming(&mut self) -> Option<Upcoming> {
        let first = match &self.ctx.builds {
            Some(pool) if self.upcoming.len() > 1 => {
                pool.ready_now(&firsts(&self.upcoming)).unwrap_or(0)
            }
            _ => 0,
        };
        self.upcoming.remove(first)
    }

    /// Whether `item`, next in its batch, waits for a batch taken ahead: its build ahead is
    /// still under way, and the first of those batches' first items to become ready (or
    /// already ready) is not it. Waits for one to be ready, so that the device goes to
    /// whichever can use it first. `None`: stopped while waiting.
    fn yields(&self, item: &Item) -> Option<bool> {
        let Some(pool) = &self.ctx.builds else {
            return Some(false);
        };
        if self.upcoming.is_empty() || pool.ready_now(&[&item.prep.build_dir]).is_some() {
            return Some(false);
        }
        let mut dirs = vec![item.prep.build_dir.as_path()];
        dirs.extend(firsts(&self.upcoming));
        let t = Instant::now();
        let first = pool.first_ready(&dirs, &self.ctx.stop);
        self.build_wait_s
            .set(self.build_wait_s.get() + t.elapsed().as_secs_f64());
        first.map(|i| i > 0)
    }

    fn take(&self, wait: bool) -> Taken {
        let mine: Vec<&str> = self.sessions.iter().map(|o| o.pkey.as_str()).collect();
        let queue = self.shared.queue;
        let taken = queue.take(self.idx, &mine, wait, &self.ctx.stop);
        if matches!(taken, Taken::Leave) && queue.cut_off() {
            // Past --stop-starting-after: the queued problems will not be evaluated now,
            // so their builds ahead are not started either.
            if let Some(pool) = &self.ctx.builds {
                pool.drop_queued_for(&queue.queued_problem_paths());
            }
        }
        taken
    }

    /// Takes batches ahead up to the depth, starting their workers.
    fn fill(&mut self) -> Result<()> {
        let (ctx, station, run_dir) = (self.ctx, self.station, self.shared.run_dir);
        let c = ctx.config;
        while self.upcoming.len() < self.depth.ahead {
            let Taken::Batch(batch) = self.take(false) else {
                break;
            };
            let batch = *batch;
            let reference = (!self.sessions.iter().any(|o| o.pkey == batch.pkey)).then(|| {
                let log = run_dir.logs_dir().join(format!(
                    "{}__reference.log",
                    sanitize(&batch.problem.to_ref().key())
                ));
                let spec = ctx.spec(
                    Role::Reference,
                    &std::env::temp_dir(),
                    Some(log),
                    station.device,
                );
                let load = load_request(ctx, station, &batch.problem_path);
                Prestart::spawn_then(spec, c.timeouts.start, Some((load, c.timeouts.load)))
            });
            // As many candidates' workers as the batch keeps ahead while it runs, so that its
            // second kernel does not wait for a worker started only when the first began (on
            // the published set, 0.9-5.8 s for the second sample of a problem whose first was
            // quick). A later one that cannot be started now is started at its turn.
            let mut first_candidates = VecDeque::new();
            let gpu = station.gpu.is_some();
            let ahead = candidates_ahead(&batch, gpu, c.keeps_gpu_alone(gpu));
            for (k, item) in batch.items.iter().take(ahead).enumerate() {
                match start_candidate(
                    ctx,
                    station,
                    run_dir,
                    &batch.problem_path,
                    &item.cand,
                    &item.prep,
                ) {
                    Ok(p) => first_candidates.push_back(p),
                    Err(e) if k == 0 => return Err(e),
                    Err(_) => break,
                }
            }
            self.upcoming.push_back(Upcoming {
                batch,
                reference,
                first_candidates,
                waited: false,
            });
        }
        Ok(())
    }

    fn close(&self, o: Open) {
        self.shared.queue.unhold(self.idx, &o.pkey);
        if let Ok(s) = o.session {
            s.worker.shutdown();
        }
    }

    /// The batch's reference session: the one held open, or a new one (from the worker
    /// started ahead, if any). `None`: interrupted.
    fn session(
        &mut self,
        pkey: &str,
        reference: Option<Prestart>,
        batch: &Batch,
        waited: bool,
    ) -> Option<Open> {
        if let Some(p) = self.sessions.iter().position(|o| o.pkey == pkey) {
            if let Some(r) = reference {
                r.discard();
            }
            if !waited {
                self.shared.reused.fetch_add(1, Ordering::SeqCst);
            }
            return Some(self.sessions.remove(p));
        }
        // The least recently used first, but never one a batch taken ahead holds items of
        // (a batch that waited for its build).
        while self.sessions.len() >= self.depth.keep {
            let Some(i) = self
                .sessions
                .iter()
                .position(|o| !awaited(&self.upcoming, &o.pkey))
            else {
                break;
            };
            let o = self.sessions.remove(i);
            self.close(o);
        }
        let opening = Instant::now();
        let (started, load_reply) = match reference.map(Prestart::take_with_reply) {
            Some((s, l)) => (Some(s), l),
            None => (None, None),
        };
        let open = |started, load_reply| {
            ReferenceSession::open(
                self.ctx,
                self.station,
                &batch.problem,
                &batch.problem_path,
                self.shared.run_dir,
                started,
                load_reply,
            )
        };
        let mut session = open(started, load_reply);
        // A reference that ran out of GPU memory loading beside the other problems' sessions
        // kept open: loaded once more by a fresh worker after they gave their memory back,
        // so that what the executor keeps warm never costs a problem its reference.
        if matches!(&session, Err(RefFailure::Failed(m)) if out_of_memory(m))
            && release_all(&mut self.sessions, self.ctx) > 0
        {
            session = open(None, None).map(|mut s| {
                s.notes.push("the reference ran out of GPU memory loading beside other problems' sessions kept open on this GPU; loaded again once they gave their memory back".into());
                s
            });
        }
        self.shared.opened.fetch_add(1, Ordering::SeqCst);
        let session = match session {
            Ok(s) => Ok(s),
            Err(RefFailure::Failed(m)) => Err(m),
            Err(RefFailure::Interrupted) => return None,
        };
        self.shared.queue.hold(self.idx, pkey);
        Some(Open {
            pkey: pkey.to_string(),
            session,
            open_s: opening.elapsed().as_secs_f64(),
        })
    }

    /// Evaluates a batch's candidates in order, the next one's worker starting ahead.
    fn batch(&mut self, current: Upcoming) -> Result<Flow> {
        let Upcoming {
            batch,
            reference,
            first_candidates,
            waited,
        } = current;
        let problem = &batch.problem;
        let t0 = Instant::now();
        self.shared.progress.set_message(format!(
            "{} {} (reference)",
            problem.to_ref().key(),
            problem.name
        ));
        let Some(mut open) = self.session(&batch.pkey, reference, &batch, waited) else {
            let mut first_candidates = first_candidates;
            discard_all(&mut first_candidates);
            return Ok(Flow::Stop);
        };
        // Workers of the next candidates, started ahead in item order (the front is the
        // next item's).
        let mut cand_ahead = first_candidates;
        // The sessions of other problems kept open beside this batch, lent to its
        // evaluations so that one that runs out of GPU memory can have them give it back.
        let mut idle = std::mem::take(&mut self.sessions);
        let flow = self.evaluate_items(&batch, &mut open, &mut idle, &mut cand_ahead, t0);
        self.sessions = idle;
        if let Ok(Flow::Yield(k)) = flow {
            // The rest of the batch waits ahead with its session kept open and its workers
            // started (`cand_ahead`'s front is item `k`'s), first in line once it is ready.
            // While it waits the session gives its GPU memory back (its worker's case and
            // cached blocks, its kept cases), so that it holds what a reference started
            // ahead holds: other problems' kernels run beside it.
            if let Ok(s) = &mut open.session {
                s.release_while_idle(self.ctx);
            }
            let mut rest = batch;
            rest.items.drain(..k);
            self.sessions.push(open);
            self.upcoming.push_front(Upcoming {
                batch: rest,
                reference: None,
                first_candidates: cand_ahead,
                waited: true,
            });
            return flow;
        }
        discard_all(&mut cand_ahead);
        // The session stays open for the problem's next batch unless this one was its last,
        // or the executor stops here.
        match flow {
            Ok(Flow::Next) if !batch.last => self.sessions.push(open),
            _ => self.close(open),
        }
        flow
    }

    /// Evaluates and records the batch's items in order until one stops the batch: an
    /// interrupt, or a GPU that fails its health check. `t0`: when the batch began.
    fn evaluate_items(
        &mut self,
        batch: &Batch,
        open: &mut Open,
        idle: &mut [Open],
        cand_ahead: &mut VecDeque<(tempfile::TempDir, Prestart)>,
        mut t0: Instant,
    ) -> Result<Flow> {
        let (ctx, station, shared) = (self.ctx, self.station, self.shared);
        let problem = &batch.problem;
        let gpu = station.gpu.is_some();
        let depth = candidates_ahead(batch, gpu, ctx.config.keeps_gpu_alone(gpu));
        for (k, item) in batch.items.iter().enumerate() {
            if ctx.stop.load(Ordering::SeqCst) {
                return Ok(Flow::Stop);
            }
            // (A problem whose reference failed loads nothing: its records come at once.)
            if open.session.is_ok() {
                match self.yields(item) {
                    Some(true) => return Ok(Flow::Yield(k)),
                    Some(false) => {}
                    None => return Ok(Flow::Stop),
                }
            }
            shared.progress.set_message(format!(
                "{} {} {}",
                problem.to_ref().key(),
                problem.name,
                item.cand.name
            ));
            let record = match self.evaluate_item(batch, k, open, idle, cand_ahead, depth)? {
                // A verdict reached once a stop was asked for may come from workers the same
                // signal killed (Slurm signals every process of the job): it is not
                // recorded, and `--resume` evaluates the kernel again.
                Some(r) if !ctx.stop.load(Ordering::SeqCst) => r,
                // Interrupted before a verdict: nothing recorded.
                _ => return Ok(Flow::Stop),
            };
            let record = self.record(item, open, record, &mut t0)?;
            if let Some(flow) = self.check_health(batch, k, &record) {
                return Ok(flow);
            }
        }
        Ok(Flow::Next)
    }

    /// Evaluates item `k` of the batch with the device held: the device is this
    /// evaluation's alone, so a profile an agent asks for (ncu replays kernels) waits for
    /// it, and no evaluation starts while one runs. `None`: interrupted.
    fn evaluate_item(
        &self,
        batch: &Batch,
        k: usize,
        open: &mut Open,
        idle: &mut [Open],
        cand_ahead: &mut VecDeque<(tempfile::TempDir, Prestart)>,
        depth: usize,
    ) -> Result<Option<EvalRecord>> {
        let env = self.shared.env_base.clone();
        let device = device_lock(self.station.device);
        let held = lock(&device);
        let evaluated = self.evaluate_held(batch, k, open, idle, cand_ahead, depth, env);
        drop(held);
        evaluated
    }

    /// [`Self::evaluate_item`]'s work once the device is held: the item's worker (started
    /// ahead, or now), the next ones' started while it runs, then its verdict (or the
    /// reference's failure, as its record). `idle`: the other problems' sessions kept open
    /// on this device, which give their GPU memory back when the evaluation runs out.
    #[allow(clippy::too_many_arguments)]
    fn evaluate_held(
        &self,
        batch: &Batch,
        k: usize,
        open: &mut Open,
        idle: &mut [Open],
        cand_ahead: &mut VecDeque<(tempfile::TempDir, Prestart)>,
        depth: usize,
        mut env: Environment,
    ) -> Result<Option<EvalRecord>> {
        let (ctx, station, shared) = (self.ctx, self.station, self.shared);
        let c = ctx.config;
        let run_dir = shared.run_dir;
        let item = &batch.items[k];
        let this = match cand_ahead.pop_front() {
            Some(p) => p,
            None => start_candidate(
                ctx,
                station,
                run_dir,
                &batch.problem_path,
                &item.cand,
                &item.prep,
            )?,
        };
        self.start_next_candidates(batch, k, open, cand_ahead, depth);
        let unit = Unit {
            problem: &batch.problem,
            problem_path: &batch.problem_path,
            cand: &item.cand,
            prep: &item.prep,
            agent: shared.agent,
        };
        Ok(match &mut open.session {
            Ok(r) => {
                env.device_name = r.device_name.clone();
                env.gpu_uuid = station.gpu_uuid.clone();
                let mut release_idle = || release_all(idle, ctx);
                evaluate_candidate(
                    ctx,
                    station,
                    &unit,
                    r,
                    run_dir,
                    env,
                    this,
                    &mut release_idle,
                )?
            }
            Err(msg) => {
                this.1.discard();
                let tol = Tolerance {
                    profile: c.profile,
                    precision: c.precision,
                };
                Some(reference_error_record(
                    tol,
                    station.device,
                    run_dir,
                    &unit,
                    msg,
                    env,
                    c.baselines.as_deref(),
                ))
            }
        })
    }

    /// Starts the workers of the candidates after item `k`, up to `depth` ahead, so they
    /// import torch while it runs.
    fn start_next_candidates(
        &self,
        batch: &Batch,
        k: usize,
        open: &Open,
        cand_ahead: &mut VecDeque<(tempfile::TempDir, Prestart)>,
        depth: usize,
    ) {
        let (ctx, station, run_dir) = (self.ctx, self.station, self.shared.run_dir);
        let n = batch.items.len();
        while open.session.is_ok() && cand_ahead.len() < depth && k + 1 + cand_ahead.len() < n {
            let next = &batch.items[k + 1 + cand_ahead.len()];
            // A later candidate that cannot be started now is started (and fails,
            // with its own record) when its turn comes, not at this one's cost.
            match start_candidate(
                ctx,
                station,
                run_dir,
                &batch.problem_path,
                &next.cand,
                &next.prep,
            ) {
                Ok(p) => cand_ahead.push_back(p),
                Err(_) => break,
            }
        }
    }

    /// Appends an item's record to the run log, reports it and hands it to the sink with
    /// the time since `t0` (the previous record, or the batch's start), which it resets.
    fn record(
        &self,
        item: &Item,
        open: &mut Open,
        mut record: EvalRecord,
        t0: &mut Instant,
    ) -> Result<EvalRecord> {
        let shared = self.shared;
        // A session's first record carries the time spent opening it (what the load
        // ahead did not hide).
        if let Some(ph) = record.phases.as_mut() {
            ph.reference_open_s = std::mem::take(&mut open.open_s);
            ph.build_wait_s = self.build_wait_s.take();
        }
        shared.run_dir.append(&record)?;
        report_line(self.ctx.config.quiet, shared.progress, &record);
        shared.progress.inc(1);
        shared
            .sink
            .recorded(&item.key, &record, t0.elapsed().as_secs_f64());
        *t0 = Instant::now();
        Ok(record)
    }

    /// A worker that crashed or hung may have left the GPU in a bad state: it is checked
    /// before it takes new work. `Some`: it failed, and the executor leaves the run, item
    /// `k`'s successors and the batches taken ahead back in the queue.
    fn check_health(&mut self, batch: &Batch, k: usize, record: &EvalRecord) -> Option<Flow> {
        let (station, shared) = (self.station, self.shared);
        if let (Some(gpu), true) = (&station.gpu, needs_health_check(&record.outcome)) {
            if let Err(e) = crate::gpu::health_check(gpu) {
                self.put_back(batch, k);
                say(
                    shared.progress,
                    format!(
                        "kbench: GPU {} taken out of the run after {}: {e:#}",
                        gpu.ordinal,
                        record.problem.key()
                    ),
                );
                return Some(Flow::Unhealthy(
                    if shared.alive.load(Ordering::SeqCst) <= 1 {
                        Err(e.context("no healthy GPU is left for this run; resume it with --resume once the GPU is reset"))
                    } else {
                        Ok(())
                    },
                ));
            }
        }
        None
    }

    /// Nothing is lost when the executor leaves: the batch's candidates after item `k` and
    /// the batches taken ahead go back to the queue for the other GPUs (or a --resume).
    fn put_back(&mut self, batch: &Batch, k: usize) {
        let n = batch.items.len();
        let mut back: Vec<Batch> = Vec::new();
        if k + 1 < n {
            let mut rest = batch.clone();
            rest.items = batch.items[k + 1..].to_vec();
            back.push(rest);
        }
        for u in self.upcoming.drain(..) {
            back.push(u.batch.clone());
            u.discard();
        }
        self.shared.queue.push_front(back);
    }
}

/// Whether a batch taken ahead is of problem `pkey` (the rest of a batch that waited for a
/// build): its session is kept open for it.
fn awaited(upcoming: &VecDeque<Upcoming>, pkey: &str) -> bool {
    upcoming.iter().any(|u| u.batch.pkey == pkey)
}

/// The build folders of the batches' first items, one a batch, in order (an empty path,
/// never built ahead, for a batch without items).
fn firsts(upcoming: &VecDeque<Upcoming>) -> Vec<&std::path::Path> {
    upcoming
        .iter()
        .map(|u| {
            u.batch
                .items
                .first()
                .map_or(std::path::Path::new(""), |i| i.prep.build_dir.as_path())
        })
        .collect()
}

/// Candidate workers started ahead within a batch. Two on a GPU: on 30 published kernels
/// evaluated from a warm build cache in 1.8 s each (H100, 2026-11-27), one worker ahead,
/// paused while each kernel was timed, was not ready in time for 7 of them (0.43 s a kernel
/// on average, a fifth of the pass); each costs a CUDA context (about half a GiB) while it
/// waits. One on the CPU, where starting workers share the few cores with the evaluation,
/// and for a baseline mode's candidates, whose `load` (torch.compile) is sent ahead: two
/// such compiles at once would compete for the host. None when the GPU is kept `alone`
/// ([`RunConfig::keeps_gpu_alone`](crate::config::RunConfig::keeps_gpu_alone)), whose
/// records say that nothing else was loaded on it: a baseline mode's compile ahead would be.
fn candidates_ahead(batch: &Batch, gpu: bool, alone: bool) -> usize {
    if alone {
        0
    } else if !gpu || batch.items.iter().any(|i| i.cand.warm_up) {
        1
    } else {
        2
    }
}

fn discard_all(ahead: &mut VecDeque<(tempfile::TempDir, Prestart)>) {
    for (_, p) in ahead.drain(..) {
        p.discard();
    }
}

/// One lock per device of this process: held by the executor for the whole of an evaluation
/// on it, and by anything else that must have the device to itself (the agents' `kbench
/// profile` feedback), so neither disturbs the other's timing.
pub(crate) fn device_lock(device: Device) -> Arc<Mutex<()>> {
    static LOCKS: std::sync::OnceLock<Mutex<std::collections::HashMap<Device, Arc<Mutex<()>>>>> =
        std::sync::OnceLock::new();
    let map = LOCKS.get_or_init(Default::default);
    let mut m = lock(map);
    Arc::clone(m.entry(device).or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_ahead_two_on_a_gpu_one_on_the_cpu_none_when_the_gpu_is_kept_alone() {
        let batch = Batch::fake(3, "m.py", "L3/m.py");
        assert_eq!(candidates_ahead(&batch, true, false), 2);
        assert_eq!(candidates_ahead(&batch, false, false), 1);
        assert_eq!(candidates_ahead(&batch, true, true), 0);
    }
}
