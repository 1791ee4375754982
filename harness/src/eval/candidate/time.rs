//! Timing one candidate against its reference (a part of [`super::Evaluation`]): the
//! interleaved rounds, their checked calls (on the GPU for device cases) and the summary.

use std::time::Instant;

use super::memory::pressure_plausible;
use super::{fault, Evaluation, Step, Stop};
use crate::config::AgentConfig;
use crate::judge::faults::out_of_memory;
use crate::judge::timed::{judge_timed_calls, timed_check_fits, timed_output_bytes};
use crate::judge::timing::{summarize, CandidateRounds, TimingResult};
use crate::measure::device_case::timed_output_slots;
use crate::measure::reference::{CaseData, RefFailure};
use crate::measure::timing::{
    release_every_round, time_pair, TimedChecks, TimingRun, TimingSettings,
};
use crate::worker::Worker;
use kbench_record::{Outcome, Phase};

impl Evaluation<'_, '_> {
    /// Times the candidate against the reference on the last random case, and checks the
    /// outputs of the probed timed calls.
    pub(super) fn time(&mut self, worker: &mut Worker) -> Step {
        let (ctx, exec, c) = (self.ctx, self.exec, self.ctx.config);
        let Some(tc) = &c.timing else { return Ok(()) };
        let tt = Instant::now();
        let held =
            self.reference
                .hold_case(ctx, exec, self.unit.problem, self.run_dir, c.trials - 1);
        let mut on_device = 0;
        let result = match held {
            Err(RefFailure::Interrupted) => return Err(Stop::Interrupted),
            Err(RefFailure::Failed(msg)) => Ok(TimingResult::ReferenceFailed(msg)),
            Ok(()) => {
                let gate = ctx.gates.of(exec.device);
                gate.begin_timing();
                let last = self.last_random.as_ref();
                let fits = last.is_some_and(|rc| timed_check_fits(rc));
                let slots = match last.filter(|_| fits).map(|rc| timed_output_slots(exec, rc)) {
                    Some(Err(e)) => Err(format!("{e:#}")),
                    other => Ok(other.and_then(Result::ok).flatten()),
                };
                // On a GPU a timing whose calls cannot be checked is not run: a kernel that
                // holds the GPU's memory at the right moment must not buy unchecked timed
                // calls (fail closed). In-place problems (`timed_check_fits`) are exempt by
                // the reference's own nature, not by anything a kernel does, and the harness's
                // own baselines are trusted.
                let trusted = matches!(c.agent, AgentConfig::Baselines { .. });
                let unchecked = match (&slots, last) {
                    _ if trusted => None,
                    (Err(e), _) => Some(format!("its outputs' buffers could not be allocated ({e})")),
                    (Ok(_), None) if exec.gpu.is_some() => Some("the timed case's outputs (the candidate's own, standing for the reference's) could not be kept on the GPU".to_string()),
                    _ => None,
                };
                if let Some(why) = unchecked {
                    gate.end_timing();
                    self.phases.timing_s = tt.elapsed().as_secs_f64();
                    self.last_random = None;
                    self.notes.push(format!(
                        "not timed: the timed calls could not be checked: {why}"
                    ));
                    return Ok(());
                }
                let slots = slots.unwrap_or(None);
                let host = last.is_some_and(|rc| matches!(rc.data, CaseData::Host { .. }));
                let rounds = CandidateRounds {
                    allowed_mutations: last.map_or(&[][..], |rc| &rc.mutated_inputs[..]),
                    device: slots
                        .as_ref()
                        .zip(last)
                        .map(|(_, rc)| (self.tol, exec, &**rc)),
                };
                let total = exec.gpu_memory();
                // A device case not held here is too large to hold: released too.
                let io_bytes = self
                    .timed_case_bytes
                    .or_else(|| last.map(|rc| rc.io_bytes()))
                    .unwrap_or(u64::MAX);
                let mut release_rounds = release_every_round(io_bytes, total);
                let r = loop {
                    self.checked_calls.clear();
                    on_device = 0;
                    let checks = TimedChecks {
                        check_outputs: fits && (host || slots.is_some()),
                        output_bytes: last.map_or(0, |rc| timed_output_bytes(rc)),
                        checked: &mut self.checked_calls,
                        device_slots: slots.as_deref(),
                        checked_on_device: &mut on_device,
                        outputs: last.map_or(0, |rc| rc.num_outputs()),
                        forward_seed: last.map_or(0, |rc| rc.forward_seed),
                    };
                    let settings = TimingSettings {
                        config: tc,
                        timeout: c.timeouts.time,
                        // The harness's own baselines are trusted: see `time_pair`.
                        fresh_inputs: !trusted,
                        release_rounds,
                    };
                    let run = time_pair(
                        settings,
                        exec,
                        &mut self.reference.worker,
                        worker,
                        checks,
                        &rounds,
                    );
                    // Out of GPU memory with both workers' blocks cached between rounds: the
                    // side being timed may have lacked only what the idle side kept. Timed
                    // again (once) releasing them after every round, so an honest kernel's
                    // verdict never rests on the size estimate above.
                    // Only where memory pressure is plausible: elsewhere a kernel raising "out
                    // of memory" is judged.
                    if ran_out_of_memory(&run)
                        && !release_rounds
                        && pressure_plausible(total, io_bytes)
                    {
                        self.notes.push("timing ran out of GPU memory with the workers' memory cached between rounds; timed again, releasing it after every round".into());
                        release_rounds = true;
                        continue;
                    }
                    break run.map(|run| match run {
                        TimingRun::Complete(raw) => {
                            summarize(raw, tc.warmup, tc.l2_flush, exec.device)
                        }
                        TimingRun::Stopped(o) => TimingResult::Failed(o),
                        TimingRun::ReferenceFailed(m) => TimingResult::ReferenceFailed(m),
                    });
                };
                gate.end_timing();
                r
            }
        };
        self.phases.timing_s = tt.elapsed().as_secs_f64();
        if let (Ok(TimingResult::Measured(_)), Some(rc)) = (&result, &self.last_random) {
            if !self.checked_calls.is_empty() {
                let (refs, refs64) = rc.host_outputs(exec).map_err(Stop::Harness)?;
                if let Some(o) =
                    judge_timed_calls(self.tol, rc, &refs, refs64.as_deref(), &self.checked_calls)
                {
                    return Err(Stop::Verdict(o));
                }
            }
            self.integrity.checked_timed_calls = self.checked_calls.len() as u32 + on_device;
        }
        if self.timed_case_bytes.is_some() {
            // A stand-in's GPU memory goes back before the stress families make theirs.
            self.last_random = None;
        }
        match result.map_err(|f| fault(f, Phase::Time))? {
            TimingResult::Measured(t) => self.timing = Some(t),
            TimingResult::Failed(o) => return Err(Stop::Verdict(o)),
            TimingResult::ReferenceFailed(msg) => {
                self.reference.forget_worker_case();
                self.notes.push(format!("not timed: {msg}"))
            }
        }
        Ok(())
    }
}

/// A timing that stopped because one side ran out of memory (the candidate's forward, or
/// the reference's), not for anything the kernel got wrong.
fn ran_out_of_memory(run: &Result<TimingRun, crate::worker::WorkerFault>) -> bool {
    match run {
        Ok(TimingRun::Stopped(Outcome::RuntimeError { message, .. })) => out_of_memory(message),
        Ok(TimingRun::ReferenceFailed(m)) => out_of_memory(m),
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
            Ok(TimingRun::Stopped(Outcome::RuntimeError {
                phase: Phase::Time,
                message: message.into(),
            }))
        };
        assert!(ran_out_of_memory(&runtime(oom)));
        assert!(ran_out_of_memory(&Ok(TimingRun::ReferenceFailed(format!(
            "reference worker failed timing: {oom}"
        )))));
        assert!(!ran_out_of_memory(&runtime("ValueError: bad shape")));
        assert!(!ran_out_of_memory(&Ok(TimingRun::ReferenceFailed(
            "reference worker crashed".into()
        ))));
        // A kernel that fails the timed checks is judged, whatever its message says.
        assert!(!ran_out_of_memory(&Ok(TimingRun::Stopped(
            Outcome::Integrity {
                flag: "timed-output-mismatch".into(),
                detail: "out of memory".into(),
            }
        ))));
        assert!(!ran_out_of_memory(&Err(WorkerFault::Interrupted)));
    }
}
