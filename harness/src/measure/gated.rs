//! Timing a candidate against its reference one call at a time, each call's window measured
//! on the harness's own clock.
//!
//! A candidate's process is untrusted in full, its clocks and C libraries included: the time
//! it claims for a call (CUDA events, `perf_counter`) stands only as far as the harness's
//! clock supports it (`judge::clock`). So the harness drives every call:
//!
//! 0. each worker opens its phase, and on a GPU tries placements of its calls' memory and
//!    keeps its fastest (PROTOCOL.md "time_open"): the candidate first, then, with the
//!    candidate frozen and the GPU quiet, the reference; the reference's probe calls stand
//!    for all but one of the warm-up calls;
//! 1. with the candidate frozen (every process of it, `worker::freeze`), the reference draws
//!    the inputs of the next calls, several at a time (`phase_memory::stage_ahead`): fresh values
//!    from the run's secret, made as the problem's own `get_inputs()` makes them
//!    (`stage_inputs`), into source sets of buffers that only the reference and the harness
//!    hold (`measure::exchange`); both sides' output slots are poisoned before the first call
//!    (a later slot holds the call before's outputs, wrong for new values);
//! 2. for each side in turn (the order alternates from call to call): untimed opening calls
//!    on the worker's own case warm its launch path (on a GPU only where the side's previous
//!    window was not its own); the harness checks that no other
//!    context's work is running on the GPU (`gpu::quiet`), thaws the worker and opens the
//!    window: it copies the source into the side's staged inputs, flushes the L2 from its
//!    own context, sends the call, and on the answer freezes the worker again; the window
//!    closes when the freeze is asked for or, should the GPU still be busy once the freeze is
//!    confirmed, when it has gone quiet.
//!    The copy and the flush lie inside the window, the same for both sides, so a candidate
//!    sees a call's values only once its window is open;
//! 3. the candidate's outputs, in its slots, are compared with the reference's for the same
//!    inputs, and its staged inputs with the reference's.
//!
//! So the reference is timed only while the candidate cannot run, and no work of the
//! candidate's is left running on the GPU (a window of the reference during which the GPU
//! was busy is timed again); no two calls see the same input values, and the candidate
//! cannot compute a call ahead, since it sees the inputs only inside the call's window; every
//! call is checked alike, so no call can be told from another; and whatever the candidate
//! did (CPU threads, GPU work left queued) lies inside windows the harness timed.

use std::time::{Duration, Instant};

use kbench_record::protocol::reply::{TimeOpened, TimedCall};
use kbench_record::protocol::{Command, Frame};
use kbench_record::Outcome;

use super::exchange::{CaseLayout, Exchange, Side};
use super::Station;
use crate::config::TimingConfig;
use crate::gpu::quiet::{Quiet, QuietProbe};
use crate::worker::{error_text, Worker, WorkerFault};

/// How a timing runs.
#[derive(Clone, Copy)]
pub(crate) struct GatedSettings<'a> {
    pub(crate) config: &'a TimingConfig,
    /// Limit of each request.
    pub(crate) timeout: Duration,
    /// Both workers give their allocator's free blocks back after every call: a case whose
    /// tensors are a large share of the GPU (see [`release_every_call`]).
    pub(crate) release_calls: bool,
    /// Longest wait for a freeze to be confirmed, and for the GPU to go quiet.
    pub(crate) freeze_limit: Duration,
    pub(crate) quiet_limit: Duration,
}

/// Timed calls per side in a round of the paired speedup: two, one of each order (the
/// calls below alternate which side goes first).
pub(crate) const CALLS_PER_ROUND: u32 = 2;

/// Whether `KBENCH_TIMING_TRACE` is set: timing then says on stderr where its seconds went
/// (each window, and each timing's parts). Read once per process.
pub(crate) fn timing_trace() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("KBENCH_TIMING_TRACE").is_some())
}

/// At most this many times a reference call is timed again after a window the GPU was busy
/// in; beyond, the timing stops with the candidate's verdict.
pub(crate) const RETIMES: u32 = 3;

pub(crate) use super::timed_calls::{CallTime, RawGated};

/// How a timing ended.
pub(crate) enum GatedRun {
    Complete(RawGated),
    /// The candidate's answer to a call was judged failing; timing stopped there.
    Stopped(Outcome),
    /// The reference could not be timed; the candidate keeps its verdict, untimed.
    ReferenceFailed(String),
}

/// Verdicts timing needs while it runs, supplied by the judge.
pub(crate) trait CallJudge {
    /// The candidate's answer to call `call`: an error, or what its probes report.
    fn answer(&self, reply: &Frame, call: u32) -> Option<Outcome>;
    /// Its outputs and inputs after call `call`, against the reference's.
    fn outputs(&self, reply: &Frame, call: u32, exchange: &Exchange) -> Option<Outcome>;
    /// Its claim for call `call` against the window the harness measured.
    fn sample(&self, claimed: Result<f64, String>, wall_ms: f64, call: u32) -> Option<Outcome>;
    /// The candidate kept running while frozen (its processes, or its GPU work).
    fn disturbed(&self, detail: String) -> Outcome;
    /// Whether the timed calls so far (warm-up calls left out) settle the timing: it stops
    /// there, before the last of the case's calls.
    fn settled(&self, raw: &RawGated) -> bool;
}

/// The timed case: its layout, its forward seed, and each call's input seed (warm-up calls
/// first).
pub(crate) struct GatedCase<'a> {
    pub(crate) layout: &'a CaseLayout,
    pub(crate) forward_seed: u64,
    pub(crate) input_seeds: &'a [u64],
}

/// Runs the calls of `case` on both workers (module docs). `candidate_dir` is the candidate
/// worker's private folder (its exchange file on the CPU).
pub(crate) fn time_gated(
    settings: GatedSettings<'_>,
    station: &Station,
    reference: &mut Worker,
    candidate: &mut Worker,
    case: GatedCase<'_>,
    judge: &dyn CallJudge,
    candidate_dir: &std::path::Path,
) -> Result<GatedRun, WorkerFault> {
    let opened = Instant::now();
    let sets = super::phase_memory::stage_ahead(
        case.layout.bytes().0,
        case.input_seeds.len(),
        settings.release_calls,
    );
    let exchange = match Exchange::new(
        station,
        case.layout,
        candidate_dir,
        sets,
        settings.release_calls,
    ) {
        Ok(e) => e,
        Err(e) => {
            return Ok(GatedRun::ReferenceFailed(format!(
                "allocating the timing's buffers: {e:#}"
            )))
        }
    };
    let probe = match station.gpu.as_ref().map(QuietProbe::new).transpose() {
        Ok(p) => p,
        Err(e) => {
            return Ok(GatedRun::ReferenceFailed(format!(
                "allocating the GPU probe: {e:#}"
            )))
        }
    };
    let mut run = Run {
        s: settings,
        exchange: &exchange,
        probe: probe.as_ref(),
        judge,
        raw: RawGated {
            reference_clock: String::new(),
            candidate_clock: String::new(),
            reference: Vec::new(),
            candidate: Vec::new(),
            opening: 0,
            freeze: candidate.freeze_method(),
            retimed: 0,
            candidate_busy: 0,
            staging_s: 0.0,
        },
        spent: Spent::default(),
        candidate_unprobed: true,
        warmup_skipped: 0,
        waits: Default::default(),
    };
    let open = |side| {
        let cpu = station.timing_cpu;
        Frame::command(&exchange.open_command(side, case.layout, case.forward_seed, cpu))
    };
    // On a GPU time_open tries placements of the calls' memory (PROTOCOL.md "time_open"). The
    // candidate opens first; it is then frozen and the GPU left quiet before the reference
    // opens: its work during the reference's probe could steer the reference somewhere slow.
    let reply = candidate.request(open(Side::Candidate), settings.timeout)?;
    if reply.kind() != "time_opened" {
        let o = judge.answer(&reply, 0).unwrap_or_else(|| {
            judge.disturbed(format!("answered time_open with {}", reply.kind()))
        });
        return Ok(GatedRun::Stopped(o));
    }
    let tid = reply.reply::<TimeOpened>().tid;
    run.waits
        .find(Side::Candidate, &candidate.freezer().handle(), tid);
    if run.probe.is_some() {
        if let Err(stop) = run
            .freeze(candidate, Side::Candidate)
            .and_then(|()| run.quiet().map(drop))
        {
            let _ = candidate.thaw();
            return stopped(stop);
        }
    }
    let reference_failed = |why: String| {
        let _ = candidate.thaw();
        Ok(GatedRun::ReferenceFailed(format!(
            "reference timing: {why}"
        )))
    };
    // The reference's placement probe ran its case's call: those calls stand for all but one
    // of the phase's warm-up calls (one still warms the windows' own path), on both sides.
    let opened_ref = match reference.request(open(Side::Reference), settings.timeout) {
        Ok(r) if r.kind() == "time_opened" => r.reply::<TimeOpened>(),
        Ok(r) => return reference_failed(error_text(&r)),
        Err(f) => return reference_failed(f.to_string()),
    };
    let probe_calls = opened_ref.calls.unwrap_or(0);
    run.waits.find(
        Side::Reference,
        &reference.freezer().handle(),
        opened_ref.tid,
    );
    run.warmup_skipped =
        (settings.config.warmup.saturating_sub(1) as u64).min(probe_calls) as usize;
    let case = GatedCase {
        input_seeds: &case.input_seeds[run.warmup_skipped..],
        ..case
    };
    let started = Instant::now();
    if timing_trace() {
        eprintln!(
            "gated timing: opened after {:?}, probe calls {probe_calls}, warm-up calls skipped {}",
            opened.elapsed(),
            run.warmup_skipped
        );
    }
    let result = run.calls(reference, candidate, &case);
    if timing_trace() {
        eprintln!(
            "gated timing: {:?} in all, {:?}",
            started.elapsed(),
            run.spent
        );
    }
    // Thawed however the timing ended: a frozen reference is used again by the next
    // candidate, and a frozen candidate could not be told to exit.
    let _ = reference.thaw();
    let _ = candidate.thaw();
    // Closing is best effort: the reference's answer matters (it is used again), the
    // candidate's does not.
    // Both at once: each close is a full collection in its worker (0.1-0.2 s with torch
    // imported), and they were a third of level-1 problem 10's timing on an H200.
    let close = || Frame::command(&Command::TimeClose { release: None });
    let candidate_closing = if matches!(result, Ok(GatedRun::Stopped(_)) | Err(_)) {
        None
    } else {
        candidate.send(close()).ok()
    };
    let ref_closed = reference.request(close(), settings.timeout);
    if let Some(id) = candidate_closing {
        let _ = candidate.answer(id, settings.timeout);
    }
    match (result, ref_closed) {
        (Ok(GatedRun::Complete(_)), Ok(r)) if r.kind() != "time_closed" => Ok(
            GatedRun::ReferenceFailed(format!("reference timing: {}", error_text(&r))),
        ),
        (Ok(GatedRun::Complete(_)), Err(f)) => {
            Ok(GatedRun::ReferenceFailed(format!("reference timing: {f}")))
        }
        (result, _) => result,
    }
}

/// What a timing that stopped early comes to.
fn stopped(stop: Stop) -> Result<GatedRun, WorkerFault> {
    match stop {
        Stop::Verdict(o) => Ok(GatedRun::Stopped(*o)),
        Stop::Reference(m) => Ok(GatedRun::ReferenceFailed(m)),
        Stop::Fault(f) => Err(f),
    }
}

/// The state of one timing.
struct Run<'a> {
    s: GatedSettings<'a>,
    exchange: &'a Exchange,
    probe: Option<&'a QuietProbe>,
    judge: &'a dyn CallJudge,
    raw: RawGated,
    spent: Spent,
    /// The candidate has been thawed since the GPU was last found quiet with it frozen: only
    /// then can its work be running when the reference's window opens.
    candidate_unprobed: bool,
    /// Warm-up calls the placement probe stood for.
    warmup_skipped: usize,
    /// Each side's timing thread, whose waits for a CPU each window records.
    waits: super::host_wait::HostWait,
}

/// Where a timing's seconds went outside the timed calls themselves, printed with
/// `KBENCH_TIMING_TRACE` (the cost of the protections, taken apart).
#[derive(Default, Debug)]
struct Spent {
    /// The reference drawing calls' inputs.
    draw: Duration,
    opening: Duration,
    quiet: Duration,
    stage: Duration,
    windows: Duration,
    freeze: Duration,
    judge: Duration,
    release: Duration,
}

/// What ended the calls early.
enum Stop {
    /// The candidate's verdict.
    Verdict(Box<Outcome>),
    /// The reference could not be timed.
    Reference(String),
    Fault(WorkerFault),
}

impl From<WorkerFault> for Stop {
    fn from(f: WorkerFault) -> Self {
        Stop::Fault(f)
    }
}

type Step<T> = Result<T, Stop>;

fn reference_failed<T>(what: impl std::fmt::Display) -> Step<T> {
    Err(Stop::Reference(format!("reference timing: {what}")))
}

fn verdict<T>(o: Outcome) -> Step<T> {
    Err(Stop::Verdict(Box::new(o)))
}

impl Run<'_> {
    fn calls(
        &mut self,
        reference: &mut Worker,
        candidate: &mut Worker,
        case: &GatedCase<'_>,
    ) -> Result<GatedRun, WorkerFault> {
        match self.all_calls(reference, candidate, case) {
            Ok(()) => Ok(GatedRun::Complete(std::mem::replace(
                &mut self.raw,
                RawGated {
                    reference_clock: String::new(),
                    candidate_clock: String::new(),
                    reference: Vec::new(),
                    candidate: Vec::new(),
                    opening: 0,
                    freeze: "",
                    retimed: 0,
                    candidate_busy: 0,
                    staging_s: 0.0,
                },
            ))),
            Err(stop) => stopped(stop),
        }
    }

    fn all_calls(
        &mut self,
        reference: &mut Worker,
        candidate: &mut Worker,
        case: &GatedCase<'_>,
    ) -> Step<()> {
        let tc = self.s.config;
        self.freeze(candidate, Side::Candidate)?;
        self.freeze(reference, Side::Reference)?;
        let warmup = tc.warmup as usize - self.warmup_skipped;
        let mut opening = tc.opening_calls(None);
        let mut reference_warm = Vec::new();
        let sets = self.exchange.sets();
        for i in 0..case.input_seeds.len() {
            let call = i as u32;
            let set = i % sets;
            if i == warmup && warmup > 0 {
                opening = tc.opening_calls(Some(&reference_warm));
            }
            if self.s.release_calls {
                // Each call after a release allocates its outputs afresh: an untimed call
                // takes that cost (its blocks are then cached for the timed one).
                opening = opening.max(1);
            }
            let drew = set == 0;
            if drew {
                let ahead = &case.input_seeds[i..(i + sets).min(case.input_seeds.len())];
                self.stage(reference, ahead)?;
            }
            if i == 0 {
                // Once: a later call's slot holds the call before's outputs, wrong for new
                // values, so an output left unwritten fails the comparison anyway.
                self.exchange
                    .poison_outputs()
                    .or_else(|e| reference_failed(format!("poisoning the output slots: {e:#}")))?;
            }
            let order = if i % 2 == 0 {
                [Side::Reference, Side::Candidate]
            } else {
                [Side::Candidate, Side::Reference]
            };
            let mut times = [None, None];
            let mut cand_reply = None;
            for (place, side) in order.into_iter().enumerate() {
                // On a GPU the opening calls warm a side's host launch path after the other
                // side's process ran on the timing core. The order alternates, so the first
                // side of a call follows its own window of the call before, with nothing but
                // the harness in between (unless the reference drew inputs there): it opens
                // without them, and each side still opens one of each two consecutive windows.
                // On the CPU every window opens: there a worker's call time follows how much
                // the same process ran just before (`bench/self_speedup`).
                let follows_own = self.probe.is_some() && place == 0 && i > 0 && !drew;
                let opening = if follows_own && !self.s.release_calls {
                    0
                } else {
                    opening
                };
                match side {
                    Side::Reference => {
                        let mut tries = 0;
                        let t = loop {
                            let (reply, t, disturbed) =
                                self.window(reference, Side::Reference, call, set, opening)?;
                            if disturbed.is_none() {
                                break self.reference_sample(&reply, t)?;
                            }
                            tries += 1;
                            self.raw.retimed += 1;
                            if tries > RETIMES {
                                let why = disturbed.unwrap_or_default();
                                return verdict(self.judge.disturbed(format!(
                                    "the GPU was busy in {tries} windows of the reference's timed call {call} while the candidate was frozen ({why})"
                                )));
                            }
                            // The source set is as drawn (only the staged copy is the
                            // reference's to write): the next window copies it in again.
                        };
                        if i < warmup {
                            reference_warm.push(t.claimed_ms);
                        }
                        times[0] = Some(t);
                    }
                    Side::Candidate => {
                        let (reply, t, _) =
                            self.window(candidate, Side::Candidate, call, set, opening)?;
                        if let Some(o) = self.judge.answer(&reply, call) {
                            return verdict(o);
                        }
                        let claimed = parse_sample(&reply);
                        if let Some(o) = self.judge.sample(claimed.clone(), t.wall_ms, call) {
                            return verdict(o);
                        }
                        let timed: TimedCall = reply.reply();
                        self.raw.candidate_clock = timed.clock.unwrap_or_default();
                        times[1] = Some(CallTime {
                            claimed_ms: claimed.unwrap_or(0.0),
                            ..t
                        });
                        cand_reply = Some(reply);
                    }
                }
            }
            let t_judge = Instant::now();
            if let Some(reply) = &cand_reply {
                if let Some(o) = self.judge.outputs(reply, call, self.exchange) {
                    return verdict(o);
                }
            }
            self.spent.judge += t_judge.elapsed();
            if self.s.release_calls {
                let t = Instant::now();
                self.release(reference, Side::Reference)?;
                self.release(candidate, Side::Candidate)?;
                self.spent.release += t.elapsed();
            }
            if i >= warmup {
                if let [Some(r), Some(c)] = times {
                    self.raw.reference.push(r);
                    self.raw.candidate.push(c);
                }
                if i + 1 < case.input_seeds.len() && self.judge.settled(&self.raw) {
                    break;
                }
            }
        }
        self.raw.opening = opening;
        Ok(())
    }

    /// The reference draws the inputs of the next calls, one source set per seed of
    /// `seeds` (thawed for it, frozen again after).
    fn stage(&mut self, reference: &mut Worker, seeds: &[u64]) -> Step<()> {
        let t = Instant::now();
        self.thaw(reference, Side::Reference)?;
        let seeds = seeds.to_vec();
        let stage = Frame::command(&Command::StageInputs { seeds });
        let reply = reference.request(stage, self.s.timeout);
        self.freeze(reference, Side::Reference)?;
        let drawing = t.elapsed();
        self.spent.draw += drawing;
        self.raw.staging_s += drawing.as_secs_f64();
        match reply {
            Ok(r) if r.kind() == "staged" => Ok(()),
            Ok(r) => reference_failed(error_text(&r)),
            Err(f) => reference_failed(f),
        }
    }

    /// One side's window for call `call`, on source set `set`: opening calls (untimed), the
    /// L2 flush, a quiet GPU, then the timed request. Returns the answer, the times (the
    /// claim read later), and for the reference why its window was disturbed.
    fn window(
        &mut self,
        worker: &mut Worker,
        side: Side,
        call: u32,
        set: usize,
        opening: u32,
    ) -> Step<(Frame, CallTime, Option<String>)> {
        let gpu = self.probe.is_some();
        let t_open = Instant::now();
        // On a GPU the worker stays thawed from its opening calls into its window: the call's
        // values are copied in only once the window is open, so it has nothing to compute on
        // before, and each window saves a freeze and a thaw. On the CPU the values are copied
        // in before the thaw, and it must not run in between.
        let stays_thawed = gpu && opening > 0;
        if opening > 0 {
            self.thaw(worker, side)?;
            let round_warmup = Some(opening);
            let warm_up = Frame::command(&Command::TimedCall {
                round_warmup,
                staged_set: None,
            });
            let reply = worker.request(warm_up, self.s.timeout);
            if !stays_thawed {
                self.freeze(worker, side)?;
            }
            match (reply, side) {
                (Ok(r), _) if r.kind() == "opened" => {}
                (Ok(r), Side::Reference) => return reference_failed(error_text(&r)),
                (Err(f), Side::Reference) => return reference_failed(f),
                (Ok(r), Side::Candidate) => {
                    let o = self.judge.answer(&r, call).unwrap_or_else(|| {
                        self.judge
                            .disturbed(format!("answered its opening calls with {}", r.kind()))
                    });
                    return verdict(o);
                }
                (Err(f), Side::Candidate) => return Err(Stop::Fault(f)),
            }
        }
        self.spent.opening += t_open.elapsed();
        // Before the reference's window: nothing of anyone else's may be running on the GPU.
        // Only a frozen candidate's work can be (the reference synchronizes before it
        // answers), and only if the candidate ran since the GPU was last found quiet: every
        // window of the candidate's ends with the GPU quiet (below), and a frozen process
        // queues nothing. The candidate's own window needs no such check: work it left
        // running would only lengthen its own window.
        let mut disturbed = None;
        let t_quiet = Instant::now();
        let pre = if side == Side::Reference && self.candidate_unprobed {
            self.quiet()?
        } else {
            None
        };
        self.spent.quiet += t_quiet.elapsed();
        if let Some(pre) = pre {
            if pre.was_busy() && side == Side::Reference {
                disturbed = Some(format!(
                    "busy for {:.1} ms before the window",
                    pre.waited.as_secs_f64() * 1e3
                ));
            }
        }
        // On a GPU the inputs are copied in and the L2 flushed inside the window: a frozen
        // candidate's GPU work could otherwise compute on them before its window opened. On
        // the CPU nothing of a frozen candidate runs, and the copy stays outside.
        let flush = self.s.config.l2_flush;
        let stage = |this: &Self| {
            this.exchange
                .stage_and_flush(side, set, call, flush)
                .or_else(|e| reference_failed(format!("staging the call's inputs: {e:#}")))
        };
        if !gpu {
            let t = Instant::now();
            stage(self)?;
            self.spent.stage += t.elapsed();
        }
        // Thawed just before the window opens: the kernel's cost of waking the worker's
        // processes (more of them in a sandbox) is no part of either side's call.
        if !stays_thawed {
            self.thaw(worker, side)?;
        }
        // Read outside the window, the worker idle: a few microseconds of files.
        let waited = self.waits.read(side);
        let t0 = Instant::now();
        if gpu {
            stage(self)?;
        }
        let t_staged = t0.elapsed();
        let t_thawed = t0.elapsed();
        let staged_set = Some(self.exchange.staged_set(call)).filter(|&s| s > 0);
        let timed_call = Command::TimedCall {
            round_warmup: None,
            staged_set,
        };
        let reply = worker.request(Frame::command(&timed_call), self.s.timeout);
        // The window closes when the freeze is asked for: a running task stops at its next
        // return to user space (microseconds), and confirming that every task has stopped
        // (sleeping ones must be woken to stop, more of them in a sandbox) is the kernel's
        // time, not the worker's. The next window opens only once the freeze is confirmed.
        let mut wall = t0.elapsed();
        // The harness's own statistics, a few microseconds before the freeze is asked for:
        // after it, its spin confirming the freeze would count. The worker's after the freeze.
        let harness_wait_ms = super::host_wait::HostWait::harness_since(waited);
        self.spent.windows += wall;
        let t_freeze = Instant::now();
        self.freeze(worker, side)?;
        self.spent.freeze += t_freeze.elapsed();
        let worker_wait_ms = self.waits.worker_since(side, waited);
        if timing_trace() {
            eprintln!(
                "gated {side:?} call {call}: staged {:?} thawed {:?} answered {:?} frozen {:?} waited {harness_wait_ms:.3} + {worker_wait_ms:.3} ms",
                t_staged,
                t_thawed,
                wall,
                t0.elapsed()
            );
        }
        let t_quiet = Instant::now();
        let post = self.quiet()?;
        self.spent.quiet += t_quiet.elapsed();
        if post.is_some() {
            // Quiet now (the wait below), with both workers frozen.
            self.candidate_unprobed = false;
        }
        if let Some(post) = post {
            if post.was_busy() {
                // Work left running after the answer: the window lasts until it is done.
                wall += post.waited;
                match side {
                    Side::Candidate => self.raw.candidate_busy += 1,
                    Side::Reference => {
                        disturbed.get_or_insert_with(|| {
                            format!(
                                "busy for {:.1} ms after the window",
                                post.waited.as_secs_f64() * 1e3
                            )
                        });
                    }
                }
            }
        }
        let reply = match (reply, side) {
            (Ok(r), _) => r,
            (Err(f), Side::Reference) => return reference_failed(f),
            (Err(f), Side::Candidate) => return Err(Stop::Fault(f)),
        };
        let t = CallTime {
            claimed_ms: 0.0,
            wall_ms: wall.as_secs_f64() * 1e3,
            harness_wait_ms,
            worker_wait_ms,
        };
        Ok((reply, t, disturbed))
    }

    fn reference_sample(&mut self, reply: &Frame, t: CallTime) -> Step<CallTime> {
        if reply.kind() != "timed_call" {
            return reference_failed(error_text(reply));
        }
        match parse_sample(reply) {
            Ok(ms) => {
                self.raw.reference_clock = reply.reply::<TimedCall>().clock.unwrap_or_default();
                Ok(CallTime {
                    claimed_ms: ms,
                    ..t
                })
            }
            Err(e) => reference_failed(e),
        }
    }

    /// Waits for a quiet GPU (nothing on the CPU). A GPU that stays busy while both workers
    /// are frozen is the candidate's doing: its verdict.
    fn quiet(&self) -> Step<Option<Quiet>> {
        let Some(probe) = self.probe else {
            return Ok(None);
        };
        match probe.wait_quiet(self.s.quiet_limit) {
            Ok(Some(q)) => Ok(Some(q)),
            Ok(None) => verdict(self.judge.disturbed(format!(
                "the GPU stayed busy for {:.1} s with both workers frozen: work of the candidate's kept running (a kernel left spinning, or a queue it filled)",
                self.s.quiet_limit.as_secs_f64()
            ))),
            Err(e) => reference_failed(format!("probing the GPU: {e:#}")),
        }
    }

    fn freeze(&self, worker: &Worker, side: Side) -> Step<()> {
        match (worker.freeze(self.s.freeze_limit), side) {
            (Ok(_), _) => Ok(()),
            (Err(e), Side::Candidate) => verdict(
                self.judge
                    .disturbed(format!("the candidate could not be frozen: {e}")),
            ),
            (Err(e), Side::Reference) => reference_failed(format!("freezing the reference: {e}")),
        }
    }

    fn thaw(&mut self, worker: &Worker, side: Side) -> Step<()> {
        if side == Side::Candidate {
            self.candidate_unprobed = true;
        }
        worker
            .thaw()
            .or_else(|e| reference_failed(format!("thawing a worker: {e}")))
    }

    fn release(&mut self, worker: &mut Worker, side: Side) -> Step<()> {
        self.thaw(worker, side)?;
        let reply = worker.request(Frame::command(&Command::Release), self.s.timeout);
        self.freeze(worker, side)?;
        match (reply, side) {
            (Ok(r), _) if r.kind() == "released" => Ok(()),
            (Ok(r), Side::Reference) => reference_failed(error_text(&r)),
            (Err(f), Side::Reference) => reference_failed(f),
            (Ok(r), Side::Candidate) => verdict(self.judge.answer(&r, 0).unwrap_or_else(|| {
                self.judge
                    .disturbed(format!("answered a release with {}", r.kind()))
            })),
            (Err(f), Side::Candidate) => Err(Stop::Fault(f)),
        }
    }
}

/// The claimed time of a call's answer: a finite, positive number of milliseconds.
pub(crate) fn parse_sample(reply: &Frame) -> Result<f64, String> {
    if reply.kind() != "timed_call" {
        return Err(format!(
            "expected a timed call's answer, got {}",
            error_text(reply)
        ));
    }
    match reply.reply::<TimedCall>().sample_ms {
        Some(ms) if ms.is_finite() && ms > 0.0 => Ok(ms),
        Some(ms) => Err(format!("sample {ms} ms is not a positive time")),
        None => Err("the answer carries no sample".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn a_claim_must_be_a_positive_finite_time() {
        let reply = |v: Value| Frame::new(json!({"type": "timed_call", "sample_ms": v}));
        assert_eq!(parse_sample(&reply(json!(0.25))), Ok(0.25));
        assert!(parse_sample(&reply(json!(0.0))).is_err());
        assert!(parse_sample(&reply(json!(-1.0))).is_err());
        assert!(parse_sample(&reply(json!("fast"))).is_err());
        assert!(parse_sample(&Frame::new(json!({"type": "error", "message": "x"}))).is_err());
    }
}
