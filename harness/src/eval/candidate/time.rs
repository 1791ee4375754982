//! Timing one candidate against its reference (a part of [`super::Evaluation`]): every call
//! driven and clocked by the harness (`measure::gated`), every call's outputs checked, and
//! the summary with the harness clock's check of the candidate's claims.

use std::time::{Duration, Instant};

use super::memory::pressure_plausible;
use super::{fault, Evaluation, Step, Stop, TimedCase};
use crate::config::TimingConfig;
use crate::judge::faults::out_of_memory;
use crate::judge::timed::TimedCheck;
use crate::judge::timing::{summarize, CandidateCalls, TimingResult};
use crate::measure::gated::{time_gated, GatedCase, GatedRun, GatedSettings, RawGated};
use crate::measure::phase_memory::release_every_call;
use crate::measure::reference::RefFailure;
use crate::worker::{Worker, WorkerFault};
use kbench_record::{Outcome, Phase};

/// Longest wait for a worker's freeze to be confirmed: a process inside a long system call
/// freezes when it returns.
const FREEZE_LIMIT: Duration = Duration::from_secs(5);
/// Timings of one candidate at most, when the harness's clock does not support its claims.
const TIMINGS: u32 = 3;
/// What the other problems' sessions give their memory back before, for a large timing.
const TIMING_HALF_THE_GPU: &str = "a timing that needs half the GPU's memory or more";
/// Longest wait for the GPU to go quiet with both workers frozen (a queue of work the
/// candidate left draining).
const QUIET_LIMIT: Duration = Duration::from_secs(10);

impl<'a> Evaluation<'a, '_> {
    /// Times the candidate against the reference on fresh inputs of the timed case's layout.
    pub(super) fn time(&mut self, worker: &mut Worker) -> Step {
        let c = self.ctx.config;
        let Some(tc) = &c.timing else { return Ok(()) };
        let Some(timed) = self.timed_case.take() else {
            return Ok(());
        };
        let tt = Instant::now();
        // A timing that needs half the GPU's memory or more (its workers then release theirs
        // after every call): the other problems' sessions kept open beside it (the service
        // keeps its recently used problem warm) give theirs back first, before the reference
        // remakes its timed case.
        let (inputs, outputs) = timed.layout.bytes();
        if release_every_call(inputs, outputs, self.exec.gpu_memory()) {
            self.release_idle_sessions(TIMING_HALF_THE_GPU);
        }
        let mut held = self.hold_timed_case();
        if matches!(&held, Err(RefFailure::Failed(m)) if out_of_memory(m))
            && self.release_idle_sessions(
                "the reference made its timed case again after running out of memory",
            ) > 0
        {
            held = self.hold_timed_case();
        }
        let result = match held {
            Err(RefFailure::Interrupted) => return Err(Stop::Interrupted),
            Err(RefFailure::Failed(msg)) => Ok(TimingResult::ReferenceFailed(msg)),
            Ok(()) => self.time_under_gate(worker, tc, &timed),
        };
        self.phases.timing_s = tt.elapsed().as_secs_f64();
        self.keep_timing(result)
    }

    /// Makes the timed case the reference's current one: its opening calls run on it.
    fn hold_timed_case(&mut self) -> Result<(), RefFailure> {
        let (ctx, exec, c) = (self.ctx, self.exec, self.ctx.config);
        let tt = Instant::now();
        let held =
            self.reference
                .hold_case(ctx, exec, self.unit.problem, self.run_dir, c.trials - 1);
        if crate::measure::gated::timing_trace() {
            eprintln!("timing: holding the case took {:?}", tt.elapsed());
        }
        held
    }

    /// Times the pair with the device's gate in timing mode (the workers started ahead pause).
    fn time_under_gate(
        &mut self,
        worker: &mut Worker,
        tc: &TimingConfig,
        timed: &TimedCase,
    ) -> Result<TimingResult, WorkerFault> {
        let gate = self.ctx.gates.of(self.exec.device);
        gate.begin_timing();
        let r = self.time_until_settled(worker, tc, timed);
        gate.end_timing();
        r
    }

    /// Times the pair until a timing settles it: timed again once, on new values, releasing
    /// memory after every call, when it ran out of GPU memory with memory cached or with other
    /// problems' sessions holding memory they then gave back; timed again, on new values,
    /// while the harness's clock does not support the claims (up to [`TIMINGS`]).
    fn time_until_settled(
        &mut self,
        worker: &mut Worker,
        tc: &TimingConfig,
        timed: &TimedCase,
    ) -> Result<TimingResult, WorkerFault> {
        let exec = self.exec;
        let mut timing = 0u32;
        let mut seeds = self.timed_input_seeds(tc, timing);
        let mut pooled: Option<RawGated> = None;
        let judge = CandidateCalls {
            check: self.timed_check(tc, timed),
            layout: &timed.layout,
            device: exec.device,
            min_calls: std::cell::Cell::new(tc.min_timed_calls as usize),
        };
        let total = exec.gpu_memory();
        let io_bytes = timed.layout.io_bytes();
        let (inputs, outputs) = timed.layout.bytes();
        let mut release_calls = release_every_call(inputs, outputs, total);
        let mut retried = false;
        // The host's builds ahead, frozen from the first timing again for the clock on.
        let mut quiet: Option<crate::worker::host_builds::Paused> = None;
        let result = loop {
            let run = self.time_gated_once(worker, tc, timed, &seeds, &judge, release_calls);
            // Out of GPU memory: the side being timed may have lacked only what the idle side
            // kept cached between calls, or what the other problems' sessions kept open beside
            // this evaluation held. Timed again (once) without them, releasing the workers'
            // memory after every call, so that an honest kernel's verdict never rests on the
            // size estimate above or on what the harness keeps. On new values: a kernel that
            // raised "out of memory" on purpose must not see the same inputs twice. Only where
            // memory pressure is plausible (elsewhere a kernel raising "out of memory" is
            // judged), and only when something was held: else the verdict stands.
            if ran_out_of_memory(&run) && !retried && pressure_plausible(total, io_bytes) {
                retried = true;
                let idle = self.release_idle_sessions("timing again after running out of memory");
                if !release_calls || idle > 0 {
                    self.notes.push(if release_calls {
                        "timing ran out of GPU memory; timed again on new values".to_string()
                    } else {
                        "timing ran out of GPU memory with the workers' memory cached between calls; timed again on new values, releasing it after every call".to_string()
                    });
                    release_calls = true;
                    // Labels past the clock's timings (1 to TIMINGS - 1): drawn for no other.
                    seeds = self.timed_input_seeds(tc, TIMINGS + timing);
                    continue;
                }
            }
            let result = run.map(|run| self.summarize_pooled(run, tc, &mut pooled));
            // Claims the harness's clock did not support: timed again, on new values, up to
            // TIMINGS in all, each time judged on the calls of every timing so far together
            // (more pairs, a narrower interval), never on a later timing alone, which would
            // give a forgery as many draws as timings. A host busy with other work for a
            // while (2 cores shared with other runs) lengthens an honest kernel's windows in
            // one timing and not in the next; a forged clock forges every timing, and its
            // excess stays.
            //
            // Equally a timing whose check could not tell (`clock::inconclusive`: a median
            // excess beyond what is allowed, an interval reaching below it): too few pairs,
            // or a few windows of a busy host, must not let a forgery pass as supported.
            //
            // The timings again run with the host's builds ahead frozen
            // (`worker::host_builds`): an honest kernel timed beside 16 cores of compilers
            // had stalls in most of its windows, through all three timings, and was failed.
            if let Ok(result) = &result {
                if let Some(note) = clock_retime_note(result, timing + 1) {
                    let paused = quiet.get_or_insert_with(crate::worker::host_builds::pause);
                    self.notes.push(if paused.held {
                        format!("{note}; the host's builds paused ({} running)", paused.builds)
                    } else {
                        format!("{note}; the host's builds not paused (frozen for other timings long enough lately)")
                    });
                    timing += 1;
                    seeds = self.timed_input_seeds(tc, timing);
                    // A timing after the first runs every call: it is judged pooled with
                    // the ones before, and a short one would weigh little against them.
                    judge.min_calls.set(usize::MAX);
                    continue;
                }
            }
            break result;
        };
        if quiet.as_ref().is_some_and(|p| p.ran_out()) {
            self.notes.push(format!(
                "the host's builds ran again after {} s, before the timings again ended",
                crate::worker::host_builds::PAUSE_MAX.as_secs()
            ));
        }
        drop(quiet);
        self.notes.extend(judge.check.absolute_arm_note());
        result
    }

    /// The input seeds of timing number `timing`: each timing's calls get values of their
    /// own, so a timing repeated sees none of the values of the one before.
    fn timed_input_seeds(&self, tc: &TimingConfig, timing: u32) -> Vec<u64> {
        let sha = &self.unit.problem.sha256;
        (0..tc.warmup + tc.timed_calls)
            .map(|i| {
                let label = if timing == 0 {
                    format!("timed-input/{sha}/{i}")
                } else {
                    format!("timed-input/{sha}/timing-{timing}/{i}")
                };
                self.run_dir.secret.derive(&label)
            })
            .collect()
    }

    /// The check of every timed call's outputs; the first call and about one in eight of the
    /// others (by the secret) have their inputs compared byte for byte after the call.
    fn timed_check<'t>(&self, tc: &TimingConfig, timed: &'t TimedCase) -> TimedCheck<'t>
    where
        'a: 't,
    {
        let sha = &self.unit.problem.sha256;
        let input_checks: Vec<bool> = (0..tc.warmup + tc.timed_calls)
            .map(|i| {
                i == 0
                    || i == tc.warmup
                    || self
                        .run_dir
                        .secret
                        .derive(&format!("timed-input-check/{sha}/{i}"))
                        .is_multiple_of(8)
            })
            .collect();
        TimedCheck::new(
            self.tol,
            self.exec,
            timed.cases,
            &timed.layout,
            &timed.mutated_inputs,
            input_checks,
        )
    }

    /// One timing of the pair, every call driven and clocked by the harness.
    fn time_gated_once(
        &mut self,
        worker: &mut Worker,
        tc: &TimingConfig,
        timed: &TimedCase,
        seeds: &[u64],
        judge: &CandidateCalls,
        release_calls: bool,
    ) -> Result<GatedRun, WorkerFault> {
        let (exec, c) = (self.exec, self.ctx.config);
        let settings = GatedSettings {
            config: tc,
            timeout: c.timeouts.time,
            release_calls,
            freeze_limit: FREEZE_LIMIT,
            quiet_limit: QUIET_LIMIT,
        };
        let case = GatedCase {
            layout: &timed.layout,
            forward_seed: timed.forward_seed,
            input_seeds: seeds,
        };
        let t_gated = Instant::now();
        let run = time_gated(
            settings,
            exec,
            &mut self.reference.worker,
            worker,
            case,
            judge,
            &self.cwd,
        );
        if crate::measure::gated::timing_trace() {
            eprintln!("timing: time_gated took {:?}", t_gated.elapsed());
        }
        run
    }

    /// A timing's summary, judged on its calls and those of every timing before it
    /// (`pooled`, which it joins).
    fn summarize_pooled(
        &mut self,
        run: GatedRun,
        tc: &TimingConfig,
        pooled: &mut Option<RawGated>,
    ) -> TimingResult {
        match run {
            GatedRun::Complete(raw) => {
                self.phases.staging_s += raw.staging_s;
                let raw = match pooled.take() {
                    Some(mut earlier) => {
                        earlier.extend(raw);
                        earlier
                    }
                    None => raw,
                };
                *pooled = Some(raw.clone());
                summarize(raw, tc.warmup, tc.l2_flush, self.exec.device)
            }
            GatedRun::Stopped(o) => TimingResult::Failed(o),
            GatedRun::ReferenceFailed(m) => TimingResult::ReferenceFailed(m),
        }
    }

    /// Keeps the timing's summary, or stops on its verdict; a reference that failed timing
    /// leaves the candidate untimed, with a note.
    fn keep_timing(&mut self, result: Result<TimingResult, WorkerFault>) -> Step {
        match result.map_err(|f| fault(f, Phase::Time))? {
            TimingResult::Measured(t) => {
                self.integrity.checked_timed_calls = t.candidate.samples_ms.len() as u32;
                let by_harness = t.harness_clock.as_ref();
                if let Some(h) = by_harness.filter(|h| !h.candidate_claimed_ms.is_empty()) {
                    self.integrity
                        .advisories
                        .push(crate::judge::integrity::TIMED_BY_HARNESS_CLOCK.to_string());
                    let why = if h.supported {
                        "could not be told supported"
                    } else {
                        "were not supported"
                    };
                    self.notes.push(format!(
                        "timed by the harness's clock (speedup {:.3}x): the candidate's claimed times {why} (median excess {:.4} ms, 99% interval from {:.4} ms, {:.4} ms allowed; a forged clock's margin not reached)",
                        t.speedup, h.excess_ms, h.excess_low_ms, h.allowed_ms
                    ));
                }
                self.timing = Some(*t);
            }
            TimingResult::Unsupported(t, o) => {
                self.integrity.checked_timed_calls = t.candidate.samples_ms.len() as u32;
                self.timing = Some(*t);
                return Err(Stop::Verdict(o));
            }
            TimingResult::Failed(o) => return Err(Stop::Verdict(o)),
            TimingResult::ReferenceFailed(msg) => {
                self.reference.forget_worker_case();
                self.notes.push(format!("not timed: {msg}"))
            }
        }
        Ok(())
    }
}

/// Why the pair is timed again after `done` timings, judged on all of them together: the
/// harness's clock did not support the claims, or could not tell (see
/// [`crate::judge::clock::inconclusive`]); `None` when the result stands or [`TIMINGS`]
/// are done.
fn clock_retime_note(result: &TimingResult, done: u32) -> Option<String> {
    if done >= TIMINGS {
        return None;
    }
    let (t, what) = match result {
        TimingResult::Unsupported(t, _) => (t, "did not support the claims of"),
        TimingResult::Measured(t) if t.harness_clock.as_ref().is_some_and(|h| !h.supported) => {
            (t, "did not support the claims of")
        }
        TimingResult::Measured(t)
            if t.harness_clock
                .as_ref()
                .is_some_and(crate::judge::clock::inconclusive) =>
        {
            (t, "could not tell whether it supports the claims of")
        }
        _ => return None,
    };
    let h = t.harness_clock.as_ref()?;
    Some(format!(
        "timed again: the harness's clock {what} {done} timing(s) (median excess {:.3} ms, 99% interval from {:.3} ms, {:.3} ms allowed)",
        h.excess_ms, h.excess_low_ms, h.allowed_ms
    ))
}

/// A timing that stopped because one side ran out of memory (the candidate's forward, or
/// the reference's), not for anything the kernel got wrong.
fn ran_out_of_memory(run: &Result<GatedRun, crate::worker::WorkerFault>) -> bool {
    match run {
        Ok(GatedRun::Stopped(Outcome::RuntimeError { message, .. })) => out_of_memory(message),
        Ok(GatedRun::ReferenceFailed(m)) => out_of_memory(m),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::WorkerFault;

    #[test]
    fn only_running_out_of_memory_times_again() {
        let oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB. GPU 0 has a total capacity of 79.18 GiB of which 3.99 GiB is free.";
        let runtime = |message: &str| {
            Ok(GatedRun::Stopped(Outcome::RuntimeError {
                phase: Phase::Time,
                message: message.into(),
            }))
        };
        assert!(ran_out_of_memory(&runtime(oom)));
        assert!(ran_out_of_memory(&Ok(GatedRun::ReferenceFailed(format!(
            "reference worker failed timing: {oom}"
        )))));
        assert!(!ran_out_of_memory(&runtime("ValueError: bad shape")));
        assert!(!ran_out_of_memory(&Ok(GatedRun::ReferenceFailed(
            "reference worker crashed".into()
        ))));
        // A kernel that fails the timed checks is judged, whatever its message says.
        assert!(!ran_out_of_memory(&Ok(GatedRun::Stopped(
            Outcome::Integrity {
                flag: "timed-output-mismatch".into(),
                detail: "out of memory".into(),
            }
        ))));
        assert!(!ran_out_of_memory(&Err(WorkerFault::Interrupted)));
    }

    /// Ten pairs of a clock forged to half, one reference window of a busy host: the check
    /// cannot tell, so the pair is timed again (twice at most); an honest pair is not.
    #[test]
    fn a_timing_the_clock_could_not_tell_is_timed_again() {
        use crate::measure::gated::{CallTime, RawGated};
        let timing = |forged: f64| {
            let calls = |claim: f64| -> Vec<CallTime> {
                (0..20)
                    .map(|i| CallTime {
                        claimed_ms: claim,
                        wall_ms: 1.7 + 0.01 * (i % 3) as f64,
                        harness_wait_ms: f64::NAN,
                        worker_wait_ms: f64::NAN,
                    })
                    .collect()
            };
            let mut reference = calls(1.4);
            reference[14].wall_ms += 6.0;
            let raw = RawGated {
                reference_clock: "perf_counter".into(),
                candidate_clock: "perf_counter".into(),
                reference,
                candidate: calls(1.4 * forged),
                opening: 1,
                freeze: "cgroup",
                retimed: 0,
                candidate_busy: 0,
                staging_s: 0.0,
            };
            summarize(raw, 1, false, kbench_record::Device::Cpu)
        };
        let forged = timing(0.5);
        assert!(
            matches!(forged, TimingResult::Measured(_)),
            "supported by its interval"
        );
        let note = clock_retime_note(&forged, 1).expect("timed again");
        assert!(note.contains("could not tell"), "{note}");
        assert!(clock_retime_note(&forged, 2).is_some());
        assert!(
            clock_retime_note(&forged, TIMINGS).is_none(),
            "three timings at most"
        );
        assert!(clock_retime_note(&timing(1.0), 1).is_none());
    }
}
