//! One candidate, measure → judge → record: its worker taken from the start ahead and loaded,
//! the random cases (KernelBench's check: a failure there ends the evaluation), timing, one
//! case per stress family (a failure there is recorded and the other families still run, so
//! the record names every family that fails), and the record.

mod conventions;
mod memory;
mod time;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use kbench_record::protocol::{reply, Command, Frame};
use kbench_record::{
    CaseFamily, CaseRef, Device, Environment, EvalRecord, HostTensor, IntegrityReport, ModelMode,
    Outcome, Phase, PhaseTimes, TimingSummary, SCHEMA_VERSION,
};
use serde_json::Value;

use super::record::candidate_ref;
use super::start::{candidate_load, candidate_spec, GPU_ALONE_NOTE};
use super::Unit;
use crate::judge::case::{
    count_mismatch, judge_host_case, not_applicable_case, replayed_output, Judged,
};
use crate::judge::device::judge_device_case;
use crate::judge::faults::{error_outcome, fault_outcome, out_of_memory};
use crate::judge::kernels::judge_profile;
use crate::judge::speed::faster_than_light;
use crate::judge::{integrity, mode, Tolerance};
use crate::measure::device_case::{send_device_case, DeviceCaseError};
use crate::measure::exchange::CaseLayout;
use crate::measure::mode_check::eval_mode_case;
use crate::measure::ref_failure::met_memory_cap;
use crate::measure::reference::{CaseData, RefCase, RefFailure, ReferenceSession};
use crate::measure::{Ctx, Station};
use crate::runlog::{now_unix, RunDir};
use crate::worker::{Prestart, Worker, WorkerFault};

/// Why an evaluation ended before its last step.
enum Stop {
    /// The candidate's verdict.
    Verdict(Outcome),
    /// The run was interrupted: nothing is recorded.
    Interrupted,
    /// A fault of the harness's own.
    Harness(anyhow::Error),
}

type Step<T = ()> = std::result::Result<T, Stop>;

/// A worker fault in `phase` as a stop (an interrupt records nothing).
fn fault(f: WorkerFault, phase: Phase) -> Stop {
    match fault_outcome(f, phase) {
        Some(o) => Stop::Verdict(o),
        None => Stop::Interrupted,
    }
}

/// The timed case as timing needs it.
struct TimedCase {
    layout: CaseLayout,
    forward_seed: u64,
    mutated_inputs: Vec<u64>,
    cases: crate::judge::timed::CaseErrors,
}

/// When an evaluation began, and the reference session's counters then (its phase times are
/// the difference).
struct Clock {
    started: f64,
    t0: Instant,
    made0: f64,
    inputs0: f64,
}

/// What one evaluation collects on its way to the record.
struct Evaluation<'a, 'c> {
    ctx: &'a Ctx<'c>,
    exec: &'a Station,
    unit: &'a Unit<'a>,
    reference: &'a mut ReferenceSession,
    /// Makes the other problems' reference sessions kept open on this device (the service
    /// keeps more than one) give their GPU memory back; how many had any to give. Called
    /// before a timing that needs half the GPU's memory or more and before any second
    /// attempt after running out of GPU memory ([`memory`]), so that an honest kernel's
    /// verdict never rests on what the harness keeps for later evaluations.
    release_idle: &'a mut dyn FnMut() -> usize,
    run_dir: &'a RunDir,
    tol: Tolerance,
    phases: PhaseTimes,
    notes: Vec<String>,
    cases: Vec<kbench_record::CaseResult>,
    load_s: Option<f64>,
    timing: Option<TimingSummary>,
    integrity: IntegrityReport,
    /// What timing needs of the last random case: its layout (timed calls get fresh values
    /// of it), its forward seed and the inputs the reference writes to.
    timed_case: Option<TimedCase>,
    /// The errors the candidate made on the random cases (each of which passed): what its
    /// timed calls are held to (`judge::timed`).
    random_errors: crate::judge::timed::CaseErrors,
    /// Random cases already passed (device path: a failing output is compared with them).
    earlier_random: Vec<Arc<RefCase>>,
    /// Each host case's output hashes (candidate's, reference's), to recognise an output
    /// replayed from an earlier case.
    seen_outputs: Vec<(CaseRef, Vec<u64>, Vec<u64>)>,
    /// `mode-switch`: the first evidence of inference mode, and the eval-mode re-check of a
    /// mismatch (`judge::mode`).
    mode_switch: Option<String>,
    eval_check: Option<std::result::Result<bool, String>>,
    /// The candidate worker's working folder (a restarted worker gets the same).
    cwd: std::path::PathBuf,
}

/// Evaluates one candidate. `Ok(None)` means the run was interrupted before a verdict.
/// `release_idle`: makes the reference sessions of other problems kept open on this device
/// give their GPU memory back, returning how many there were (see [`Evaluation`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn evaluate_candidate(
    ctx: &Ctx,
    exec: &Station,
    unit: &Unit,
    reference: &mut ReferenceSession,
    run_dir: &RunDir,
    env: Environment,
    started_worker: (tempfile::TempDir, Prestart),
    release_idle: &mut dyn FnMut() -> usize,
) -> Result<Option<EvalRecord>> {
    let c = ctx.config;
    let started = now_unix();
    let t0 = Instant::now();
    let (made0, inputs0) = (reference.made_s, reference.inputs_s);
    let mut ev = Evaluation {
        ctx,
        exec,
        unit,
        reference,
        release_idle,
        run_dir,
        tol: Tolerance {
            profile: c.profile,
            precision: c.precision,
        },
        phases: PhaseTimes::default(),
        notes: Vec::new(),
        cases: Vec::new(),
        load_s: None,
        timing: None,
        integrity: IntegrityReport::default(),
        timed_case: None,
        random_errors: Default::default(),
        earlier_random: Vec::new(),
        seen_outputs: Vec::new(),
        mode_switch: None,
        eval_check: None,
        cwd: std::path::PathBuf::new(),
    };
    // A build ahead still running is waited for (it is this candidate's compile anyway).
    let tb = Instant::now();
    let built_ahead = ctx
        .builds
        .as_ref()
        .and_then(|p| p.claim(&unit.prep.build_dir));
    ev.phases.compile_s += tb.elapsed().as_secs_f64();
    if c.keeps_gpu_alone(exec.gpu.is_some()) {
        ev.notes.push(GPU_ALONE_NOTE.to_string());
    }
    let (cwd, prestart) = started_worker;
    ev.cwd = cwd.path().to_path_buf();
    let mut log_tail = String::new();
    let ended = match ev.start(prestart, cwd.path()) {
        Ok((mut worker, load_ahead)) => {
            let ended = ev.drive(&mut worker, load_ahead);
            log_tail = worker.log_tail();
            let ended = past_memory_cap(ended, &worker, &log_tail);
            if ended.is_ok() {
                worker.shutdown();
            }
            ended
        }
        Err(stop) => Err(stop),
    };
    let outcome = match ended {
        Ok(None) => Outcome::Ok,
        // A stress family failed; the rest ran.
        Ok(Some(o)) | Err(Stop::Verdict(o)) => o,
        Err(Stop::Interrupted) => return Ok(None),
        Err(Stop::Harness(e)) => return Err(e),
    };
    let clock = Clock {
        started,
        t0,
        made0,
        inputs0,
    };
    let build_ahead_s = built_ahead.map(|b| b.seconds);
    Ok(Some(ev.record(
        outcome,
        clock,
        build_ahead_s,
        env,
        log_tail,
    )))
}

/// A candidate's failure that its worker's memory cap explains (its group's memory events
/// say the kernel killed it at its cap, or an allocation was refused at its address-space
/// limit) becomes [`Outcome::MemoryCap`]: its own outcome, never correct.
fn past_memory_cap(
    ended: Step<Option<Outcome>>,
    worker: &Worker,
    log_tail: &str,
) -> Step<Option<Outcome>> {
    let failure = match &ended {
        Ok(Some(o)) | Err(Stop::Verdict(o)) => o,
        _ => return ended,
    };
    let (phase, said) = match failure {
        Outcome::Crashed { phase, .. } | Outcome::Timeout { phase, .. } => (*phase, ""),
        Outcome::RuntimeError { phase, message } => (*phase, message.as_str()),
        Outcome::CompileError { message } => (Phase::Load, message.as_str()),
        _ => return ended,
    };
    match worker.memory_cap_met(&format!("{said}\n{log_tail}")) {
        Some(cap) => Err(Stop::Verdict(Outcome::MemoryCap {
            phase,
            limit_bytes: cap.limit_bytes,
            message: format!(
                "the candidate's worker {}",
                cap.text(&format!(" in its {phase} phase"))
            ),
        })),
        None => ended,
    }
}

impl Evaluation<'_, '_> {
    /// The candidate's worker, started ahead: a load sent ahead ran beside other problems'
    /// work (their GPU memory included); if it failed, the verdict comes from a fresh worker
    /// loading now, alone.
    fn start(
        &mut self,
        prestart: Prestart,
        cwd: &Path,
    ) -> Step<(Worker, Option<Result<Frame, WorkerFault>>)> {
        let c = self.ctx.config;
        let tw = Instant::now();
        let (mut started_worker, mut load_ahead) = prestart.take_with_reply();
        let ahead_failed = match &load_ahead {
            Some(Ok(r)) => r.kind() != "loaded",
            Some(Err(WorkerFault::Interrupted)) => false,
            Some(Err(_)) => true,
            None => false,
        };
        // With the GPU kept alone the load ran beside no other problem: its failure is its
        // own, and loading again would only double a compile timeout (max-autotune on level
        // 3 runs for minutes).
        let ahead_failed = ahead_failed && !c.keeps_gpu_alone(self.exec.gpu.is_some());
        if ahead_failed {
            if let Ok(w) = started_worker {
                w.shutdown();
            }
            self.notes.push(
                "the load sent ahead failed beside other work; loaded again on its own".into(),
            );
            let unit = self.unit;
            let spec = candidate_spec(
                self.ctx,
                self.exec,
                self.run_dir,
                cwd,
                unit.problem_path,
                unit.cand,
                unit.prep,
            );
            started_worker = Worker::start(&spec, c.timeouts.start);
            load_ahead = None;
        }
        self.phases.worker_wait_s = tw.elapsed().as_secs_f64();
        let worker = started_worker.map_err(|f| fault(f, Phase::Start))?;
        Ok((worker, load_ahead))
    }

    /// Everything the candidate's worker does: load, cases, timing. `Ok(Some(_))`: a stress
    /// family failed (the first failure found), every case ran.
    fn drive(
        &mut self,
        worker: &mut Worker,
        load_ahead: Option<Result<Frame, WorkerFault>>,
    ) -> Step<Option<Outcome>> {
        let c = self.ctx.config;
        self.load(worker, load_ahead)?;
        let tc_all = Instant::now();
        // When the stress families began, and the reference's case-making time by then.
        let mut stress_began: Option<(Instant, f64)> = None;
        let mut stress_failure: Option<Outcome> = None;
        let total = c.cases_total();
        for t in 0..=total {
            if t == c.trials {
                self.phases.correctness_s = tc_all.elapsed().as_secs_f64();
                if c.timing.is_some() {
                    self.time(worker)?;
                    let t_as = Instant::now();
                    self.time_as(worker);
                    self.phases.time_as_s = t_as.elapsed().as_secs_f64();
                }
                // Which kernels one call launches (CUDA), on the last random case. After
                // timing: a profiler session leaves the CUDA API of the process it ran in
                // slower (its callbacks stay subscribed), and only the candidate's is profiled.
                if matches!(self.exec.device, Device::Cuda(_)) && c.trials > 0 {
                    let t_profile = Instant::now();
                    let profiled = self.profile_kernels(worker);
                    self.phases.profile_s = t_profile.elapsed().as_secs_f64();
                    profiled?;
                }
            }
            if t == total {
                break;
            }
            let case = c.case_ref(t);
            if case.family != CaseFamily::Random && stress_began.is_none() {
                stress_began = Some((Instant::now(), self.reference.made_s));
            }
            let random = case.family == CaseFamily::Random;
            let step = self.case(worker, t, case);
            self.recheck_in_eval_mode(worker, &step, random);
            if let Some(o) = step? {
                stress_failure.get_or_insert(o);
            }
        }
        if let Some((began, made)) = stress_began {
            self.phases.stress_s = began.elapsed().as_secs_f64();
            self.phases.stress_reference_s = self.reference.made_s - made;
        }
        let apart = self.phases.timing_s
            + self.phases.stress_s
            + self.phases.time_as_s
            + self.phases.profile_s;
        self.phases.correctness_s = (tc_all.elapsed().as_secs_f64() - apart).max(0.0);
        Ok(stress_failure)
    }

    /// Loads the candidate (or takes the answer to the load sent ahead).
    fn load(
        &mut self,
        worker: &mut Worker,
        load_ahead: Option<Result<Frame, WorkerFault>>,
    ) -> Step {
        let (ctx, c) = (self.ctx, self.ctx.config);
        let unit = self.unit;
        let tl = Instant::now();
        let reply = match load_ahead {
            // Sent ahead: what the wait for the worker did not hide is in worker_wait_s.
            Some(r) => r,
            None => {
                let load = candidate_load(ctx, self.exec, unit.problem_path, unit.cand, unit.prep);
                worker.request(Frame::command(&load), c.timeouts.load)
            }
        }
        .map_err(|f| fault(f, Phase::Load))?;
        let loaded: reply::Loaded = reply.reply();
        self.load_s = Some(loaded.load_s.unwrap_or_else(|| tl.elapsed().as_secs_f64()));
        self.phases.compile_s += tl.elapsed().as_secs_f64();
        if reply.kind() != "loaded" {
            return Err(Stop::Verdict(error_outcome(&reply, Phase::Load)));
        }
        match integrity::probe_failure(loaded.integrity.as_ref(), &[], "load") {
            Some(o) => Err(Stop::Verdict(o)),
            None => {
                self.observe_mode(loaded.integrity.as_ref(), "after load");
                Ok(())
            }
        }
    }

    /// Keeps the first evidence of inference mode in a worker report (train runs whose
    /// reference trains only).
    fn observe_mode(&mut self, report: Option<&Value>, what: &str) {
        if self.mode_switch.is_none()
            && self.ctx.config.model_mode == ModelMode::Train
            && self.reference.trains
        {
            self.mode_switch = mode::evidence(report, what);
        }
    }

    /// A candidate's first wrong answer in a run whose models train (KernelBench's
    /// convention): is it correct with both models as constructed in eval mode? (The first
    /// random case, once.) Asked of every such candidate, not only those the `mode-switch`
    /// advisory saw: a kernel that branches on `self.training` and never calls `.eval()`
    /// shows nothing before its answer.
    /// `random`: the wrong answer was to a random case (a stress case's failure says nothing
    /// of the module mode: the eval-mode case is a random one, which the candidate passed).
    fn recheck_in_eval_mode(
        &mut self,
        worker: &mut Worker,
        step: &Step<Option<Outcome>>,
        random: bool,
    ) {
        // A mismatch, or one small enough to read as a precision downgrade.
        let wrong = |o: &Outcome| match o {
            Outcome::Mismatch { .. } => true,
            Outcome::Integrity { flag, .. } => flag == integrity::PRECISION_DOWNGRADE,
            _ => false,
        };
        let mismatch = match step {
            Err(Stop::Verdict(o)) | Ok(Some(o)) => wrong(o),
            _ => false,
        };
        let unseen = random && self.ctx.config.model_mode == ModelMode::Train;
        if !mismatch || !(unseen || self.mode_switch.is_some()) || self.eval_check.is_some() {
            return;
        }
        let sha = &self.unit.problem.sha256;
        let secret = &self.run_dir.secret;
        let outputs = eval_mode_case(
            self.reference,
            worker,
            secret.derive(&format!("input/{sha}/random/0")),
            secret.derive(&format!("forward/{sha}/random/0")),
            self.ctx.config.timeouts.run,
        );
        self.eval_check =
            Some(outputs.map(|o| mode::eval_outputs_match(self.tol, &o.candidate, &o.reference)));
    }

    /// Profiles one call and records which kernels it launched.
    fn profile_kernels(&mut self, worker: &mut Worker) -> Step {
        let c = self.ctx.config;
        let reply = worker
            .request(
                Frame::command(&Command::Profile { forward_seed: 0 }),
                c.timeouts.run,
            )
            .map_err(|f| fault(f, Phase::Run))?;
        match judge_profile(
            &reply,
            c.precision,
            c.require_custom_kernels,
            &self.unit.cand.source,
            &mut self.integrity,
        ) {
            Some(o) => Err(Stop::Verdict(o)),
            None => Ok(()),
        }
    }

    /// Case `t`: its reference, the candidate's answer, the verdict. A random case's failure
    /// ends the evaluation; a stress case's is returned.
    fn case(&mut self, worker: &mut Worker, t: u32, case: CaseRef) -> Step<Option<Outcome>> {
        let (ctx, exec) = (self.ctx, self.exec);
        let stress = case.family != CaseFamily::Random;
        let t_case = Instant::now();
        let mut made = self
            .reference
            .case(ctx, exec, self.unit.problem, self.run_dir, t);
        // Out of GPU memory beside the candidate's worker (a random case's reference error
        // would leave a kernel that takes the GPU's memory unjudged) or beside the other
        // problems' sessions kept open: made again without them. Not past the reference
        // worker's own memory cap, which neither changes.
        if matches!(&made, Err(RefFailure::Failed(m)) if out_of_memory(m) && !met_memory_cap(m)) {
            made = self.reference_alone(worker, t)?;
        }
        let rc = match made {
            Ok(rc) => rc,
            // Past the memory cap the run gave it: the problem's error at this cap, named with
            // the option that raises it, not a case the reference cannot take.
            Err(RefFailure::Failed(message)) if met_memory_cap(&message) => {
                return Err(Stop::Verdict(Outcome::ReferenceError { message }))
            }
            Err(RefFailure::Failed(message)) if stress => {
                // The reference itself fails on these inputs: nothing to judge against.
                let first = message.lines().next().unwrap_or_default().to_string();
                let mut na =
                    not_applicable_case(case, format!("the reference fails on it: {first}"));
                let spent = t_case.elapsed().as_secs_f64();
                na.times = Some(kbench_record::CaseTimes {
                    reference_s: spent,
                    total_s: spent,
                    ..Default::default()
                });
                self.cases.push(na);
                return Ok(None);
            }
            Err(RefFailure::Failed(message)) => {
                return Err(Stop::Verdict(Outcome::ReferenceError { message }))
            }
            Err(RefFailure::Interrupted) => return Err(Stop::Interrupted),
        };
        if let Some(why) = &rc.not_applicable {
            self.cases.push(not_applicable_case(case, why.clone()));
            return Ok(None);
        }
        if stress {
            // Stands for the case if the candidate errs or crashes on it: the record then
            // shows which family did it, after every random case passed.
            let mut failed = not_applicable_case(case.clone(), String::new());
            failed.not_applicable = None;
            failed.passed = false;
            self.cases.push(failed);
        }
        let tc = Instant::now();
        let reference_s = (tc - t_case).as_secs_f64();
        let mut answered: Option<Instant> = None;
        // Whether the reference session keeps the case (it holds a clone).
        let cached = Arc::strong_count(&rc) >= 2;
        let mut judged = match &rc.data {
            CaseData::Host { run_frame, .. } => {
                let reply = worker
                    .request_shared(Arc::clone(run_frame), ctx.config.timeouts.run)
                    .map_err(|f| fault(f, Phase::Run))?;
                answered = Some(Instant::now());
                self.host_case(&rc, &case, &reply, tc.elapsed().as_secs_f64())?
            }
            CaseData::Device { .. } => {
                // Once more, on a fresh worker with what others hold released, after the
                // candidate ran out of GPU memory on a large case (see memory.rs).
                let mut retried = false;
                let sent = loop {
                    let Some(prepared) = self.prepare(worker, &rc, &case, stress)? else {
                        return Ok(None);
                    };
                    let sent = send_device_case(ctx, worker, prepared, tc);
                    if !retried && self.candidate_ran_out(&sent, &rc) {
                        retried = true;
                        drop(sent); // the first attempt's output slots
                        self.candidate_alone(worker, &case.to_string())?;
                        continue;
                    }
                    break sent;
                };
                let judged = sent.and_then(|run| {
                    answered = Some(Instant::now());
                    let answered: reply::Outputs = run.reply.reply();
                    self.observe_mode(answered.integrity.as_ref(), &format!("case {case}"));
                    judge_device_case(self.tol, exec, &rc, &run, &self.earlier_random)
                });
                match judged {
                    Ok(Ok(j)) => j,
                    Ok(Err(o)) => return Err(Stop::Verdict(o)),
                    Err(DeviceCaseError::Fault(f)) => return Err(fault(f, Phase::Run)),
                    Err(DeviceCaseError::Harness(e)) => return Err(Stop::Harness(e)),
                }
            }
        };
        if stress {
            self.cases.pop();
        } else {
            // A device case is kept only when the reference session keeps it anyway: holding
            // it here would double the GPU memory of a case too large to cache.
            if matches!(rc.data, CaseData::Device { .. }) && cached {
                self.earlier_random.push(Arc::clone(&rc));
            }
            if judged.failure.is_none() {
                self.random_errors
                    .add(judged.result.tol_needed, judged.result.max_abs);
                // Timing draws fresh values of the last random case's layout.
                self.timed_case = match CaseLayout::of(&rc) {
                    Ok(layout) => Some(TimedCase {
                        layout,
                        forward_seed: rc.forward_seed,
                        mutated_inputs: rc.mutated_inputs.clone(),
                        cases: self.random_errors,
                    }),
                    Err(e) => return Err(Stop::Harness(e)),
                };
            }
        }
        let done = Instant::now();
        let answered = answered.unwrap_or(done);
        judged.result.times = Some(kbench_record::CaseTimes {
            reference_s,
            candidate_s: (answered - tc).as_secs_f64(),
            judge_s: (done - answered).as_secs_f64(),
            total_s: (done - t_case).as_secs_f64(),
        });
        if let Some(a) = &judged.result.artefacts {
            self.notes.push(format!(
                "case {case}: {} element(s) accepted as reference artefacts (first at {:?} of output {}): the reference is NaN/Inf there only through its own algorithm (e.g. 0·NaN in a matmul), and the candidate matches the reference run with finite probes in place of the injected NaN/Inf",
                a.count, a.first_index, a.output
            ));
        }
        self.cases.push(judged.result);
        match judged.failure {
            Some(o) if !stress => Err(Stop::Verdict(o)),
            failure => Ok(failure),
        }
    }

    /// The candidate's answer to a host case, judged.
    fn host_case(
        &mut self,
        rc: &RefCase,
        case: &CaseRef,
        reply: &Frame,
        wall_s: f64,
    ) -> Step<Judged> {
        if reply.kind() != "outputs" {
            return Err(Stop::Verdict(error_outcome(reply, Phase::Run)));
        }
        let outputs: Vec<HostTensor> = match reply.tensors() {
            Ok(ts) => ts
                .into_iter()
                .filter(|(n, _)| n.starts_with("out:"))
                .map(|(_, t)| t)
                .collect(),
            Err(e) => return Err(fault(WorkerFault::Protocol(e.to_string()), Phase::Run)),
        };
        if let Some(o) = count_mismatch(outputs.len(), rc.num_outputs()) {
            return Err(Stop::Verdict(o));
        }
        let what = format!("case {case}");
        let report = reply.reply::<reply::Outputs>().integrity;
        self.observe_mode(report.as_ref(), &what);
        if let Some(o) = integrity::probe_failure(report.as_ref(), &rc.mutated_inputs, &what)
            .or_else(|| integrity::unwritten_outputs(outputs.iter(), &what))
        {
            return Err(Stop::Verdict(o));
        }
        let mut judged = judge_host_case(self.tol, rc, &outputs, wall_s);
        if judged.failure.is_some() {
            if let Some(o) = replayed_output(rc, &outputs, &self.seen_outputs) {
                judged.failure = Some(o);
            }
        }
        if let CaseData::Host { outputs: refs, .. } = &rc.data {
            self.seen_outputs.push((
                case.clone(),
                outputs.iter().map(integrity::output_hash).collect(),
                refs.iter().map(integrity::output_hash).collect(),
            ));
        }
        Ok(judged)
    }

    /// The record: the speed of light, the phase times, the notes, the baseline ratios, and
    /// the speed-of-light check on the result.
    fn record(
        self,
        outcome: Outcome,
        clock: Clock,
        build_ahead_s: Option<f64>,
        env: Environment,
        log_tail: String,
    ) -> EvalRecord {
        let Clock {
            started,
            t0,
            made0,
            inputs0,
        } = clock;
        let Evaluation {
            ctx,
            exec,
            unit,
            reference,
            run_dir,
            mut phases,
            mut notes,
            cases,
            load_s,
            timing,
            mut integrity,
            mode_switch,
            eval_check,
            ..
        } = self;
        let c = ctx.config;
        // The problem's speed of light on this GPU (CUDA runs on a GPU in the spec table
        // only: counting costs one extra reference forward per problem).
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
        match mode_switch {
            Some(detail) => mode::record(&mut integrity, &mut all_notes, detail, eval_check),
            None => mode::record_unseen(&mut integrity, &mut all_notes, eval_check),
        }
        if let Some((line, text)) = crate::judge::self_timing::scan(&unit.cand.source) {
            integrity
                .advisories
                .push(crate::judge::integrity::TIMES_ITSELF.to_string());
            all_notes.push(crate::judge::self_timing::note(line, &text));
        }
        // Timed only when every random case passed: the ratios serve the random-only
        // (KernelBench-comparable) figures even when a stress family failed.
        let baselines = match (&c.baselines, &timing) {
            (Some(table), Some(t)) => {
                table.ratios(&unit.problem.to_ref(), &t.candidate, &t.reference)
            }
            _ => Default::default(),
        };
        let baselines_missing =
            super::record::missing_baselines(c.baselines.as_deref(), &unit.problem.to_ref());
        let mut record = EvalRecord {
            schema_version: SCHEMA_VERSION,
            run_id: run_dir.manifest.run_id.clone(),
            problem: unit.problem.to_ref(),
            candidate: candidate_ref(unit.agent, unit.cand),
            device: exec.device,
            precision: c.precision,
            profile: c.profile,
            model_mode: c.model_mode,
            outcome,
            cases,
            timing,
            load_s,
            build_ahead_s,
            wall_s: t0.elapsed().as_secs_f64(),
            phases: Some(phases),
            gpu: match exec.device {
                Device::Cuda(i) => Some(i),
                Device::Cpu => None,
            },
            started_unix_s: started,
            finished_unix_s: now_unix(),
            log_tail,
            notes: all_notes,
            env,
            baselines,
            baselines_missing,
            speed_of_light,
            integrity: Some(integrity),
            cost: unit.cand.cost.clone(),
        };
        // A time below the physical limit (reads and FLOPs at the GPU's peaks, L2 flushed
        // before each call) is no kernel's honest result: work skipped, results kept across
        // calls, or broken timing (docs/integrity.md, "excessive speedup").
        if let Some(o) = faster_than_light(&record) {
            record.outcome = o;
        }
        record
    }
}
