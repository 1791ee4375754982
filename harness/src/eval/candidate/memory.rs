//! GPU memory in one candidate's evaluation (a part of [`super::Evaluation`]): what is done
//! when a case does not fit beside the other processes on the GPU. The reference, the
//! harness's buffers or the candidate ran out of memory; each is tried once more with the
//! memory that others hold but need not hold released, so that an honest kernel's verdict
//! never rests on what the harness keeps beside it, and a kernel that takes the GPU's memory
//! cannot turn a check into "not applicable".

use std::sync::Arc;
use std::time::Instant;

use kbench_record::protocol::reply;
use kbench_record::{CaseRef, Outcome, Phase};

use super::{fault, Evaluation, Step, Stop};
use crate::eval::start::candidate_spec;
use crate::judge::case::not_applicable_case;
use crate::judge::faults::out_of_memory;
use crate::measure::device_case::{prepare_device_case, DeviceCaseError, DeviceRun, PreparedCase};
use crate::measure::reference::{RefCase, RefFailure};
use crate::worker::Worker;

impl Evaluation<'_, '_> {
    /// Remakes case `t` after the reference ran out of GPU memory making it: with the
    /// candidate's worker stopped (a kernel that holds the GPU's memory must not turn the
    /// stress families into "not applicable", nor a random case into a reference error) and
    /// the other problems' sessions' memory given back, then starts and loads the candidate
    /// again.
    /// What the reference answers alone is the case, or a failure of its own.
    pub(super) fn reference_alone(
        &mut self,
        worker: &mut Worker,
        t: u32,
    ) -> Step<std::result::Result<Arc<RefCase>, RefFailure>> {
        let (ctx, c) = (self.ctx, self.ctx.config);
        worker.kill();
        self.release_idle_sessions(SECOND_ATTEMPT);
        self.settle_after_kill();
        let made = self
            .reference
            .case(ctx, self.exec, self.unit.problem, self.run_dir, t);
        let case = c.case_ref(t);
        self.notes.push(match &made {
            Ok(_) => format!("case {case}: the reference ran out of GPU memory beside the candidate's worker; made with that worker stopped, then the candidate was started and loaded again"),
            Err(_) => format!("case {case}: the reference ran out of GPU memory even with the candidate's worker stopped"),
        });
        self.restart_candidate(worker)?;
        Ok(made)
    }

    /// Allocates device case `rc`'s buffers for the candidate after that failed for lack of
    /// GPU memory: with the candidate's worker stopped (its memory, hostile or only cached,
    /// goes back to the driver) and the reference's worker without its case and cached
    /// blocks, then starts and loads the candidate again. A candidate
    /// that takes the memory again at load fails its own call, not the harness.
    pub(super) fn prepare_alone(
        &mut self,
        worker: &mut Worker,
        rc: &RefCase,
    ) -> Step<anyhow::Result<PreparedCase>> {
        worker.kill();
        self.reference.drop_worker_case(self.ctx);
        self.release_idle_sessions(SECOND_ATTEMPT);
        self.settle_after_kill();
        let prepared = prepare_device_case(self.exec, rc);
        self.notes.push(match &prepared {
            Ok(_) => format!("case {}: the case's buffers did not fit beside the candidate's worker; allocated with that worker stopped, then the candidate was started and loaded again", rc.case),
            Err(_) => format!("case {}: the case's buffers do not fit on the GPU even with the candidate's worker stopped", rc.case),
        });
        self.restart_candidate(worker)?;
        Ok(prepared)
    }

    /// Makes the reference sessions of other problems kept open on this GPU give their
    /// memory back (their workers' cases and cached blocks, their kept cases) before
    /// `what`; noted when any had memory to give, and how many did. `kbench run` keeps none
    /// beside a batch but those waiting for a build ahead (released as they begin to wait),
    /// the service keeps its recently used problem warm: an honest candidate
    /// of level-1 problem 25 (6 GiB tensors) ran out of memory under timing on an 80 GB H100
    /// beside level-1 problem 22's idle session.
    pub(super) fn release_idle_sessions(&mut self, what: &str) -> usize {
        let n = (self.release_idle)();
        if n > 0 {
            self.notes.push(format!("{n} reference session(s) of other problems kept open on this GPU gave their memory back before {what}"));
        }
        n
    }

    /// Waits (up to 5 s) for the memory of a worker just killed to come back: the driver frees
    /// it asynchronously. Polled as the GPU's free memory, until it stops rising; one retry
    /// then decides (a reference case that does not fit alone can take tens of seconds to
    /// fail, so it is not tried again and again).
    fn settle_after_kill(&self) {
        let Some(gpu) = self.exec.gpu.as_ref() else {
            return;
        };
        let began = Instant::now();
        let mut last = gpu.mem_info().map(|(free, _)| free).unwrap_or(0);
        let mut rose = false;
        while began.elapsed().as_secs_f64() < 5.0 {
            std::thread::sleep(std::time::Duration::from_millis(200));
            let free = gpu.mem_info().map(|(free, _)| free).unwrap_or(0);
            if free <= last && (rose || began.elapsed().as_secs_f64() > 1.0) {
                break;
            }
            rose |= free > last;
            last = last.max(free);
        }
    }

    /// Starts the candidate's worker again (same folder) and loads the candidate.
    fn restart_candidate(&mut self, worker: &mut Worker) -> Step {
        let (ctx, c) = (self.ctx, self.ctx.config);
        let unit = self.unit;
        let cwd = self.cwd.clone();
        let spec = candidate_spec(
            ctx,
            self.exec,
            self.run_dir,
            &cwd,
            unit.problem_path,
            unit.cand,
            unit.prep,
        );
        *worker = Worker::start(&spec, c.timeouts.start).map_err(|f| fault(f, Phase::Start))?;
        self.load(worker, None)
    }

    /// Device case `rc`'s buffers for the candidate: when the GPU lacks the memory, once more
    /// with the candidate's worker stopped ([`Self::prepare_alone`]). `None`: they do not fit
    /// even then, and the stress case `case` is recorded as not applicable (a random case's
    /// verdict is then a reference error).
    pub(super) fn prepare(
        &mut self,
        worker: &mut Worker,
        rc: &RefCase,
        case: &CaseRef,
        stress: bool,
    ) -> Step<Option<PreparedCase>> {
        match prepare_device_case(self.exec, rc) {
            Ok(p) => return Ok(Some(p)),
            Err(e) if out_of_memory(&format!("{e:#}")) => {}
            Err(e) => return Err(Stop::Harness(e)),
        }
        let why = "the GPU cannot hold the case's buffers for the candidate beside the reference's, even with the candidate's worker stopped";
        match self.prepare_alone(worker, rc)? {
            Ok(p) => Ok(Some(p)),
            Err(e) if stress => {
                // The placeholder pushed for a stress case gives way to the reason.
                self.cases.pop();
                self.cases
                    .push(not_applicable_case(case.clone(), format!("{why}: {e:#}")));
                Ok(None)
            }
            Err(e) => Err(Stop::Verdict(Outcome::ReferenceError {
                message: format!("case {case}: {why}: {e:#}"),
            })),
        }
    }

    /// Whether the candidate's answer to device case `rc` is torch running out of GPU memory
    /// where memory pressure is plausible ([`pressure_plausible`]). Only a plain
    /// `runtime_error` whose message begins with torch's out-of-memory error counts: an
    /// answer carrying an integrity flag (a non-plain output whose class is named so) or
    /// "out of memory" only in its traceback is judged on the first attempt.
    pub(super) fn candidate_ran_out(
        &self,
        run: &Result<DeviceRun, DeviceCaseError>,
        rc: &RefCase,
    ) -> bool {
        let Ok(run) = run else { return false };
        let error: reply::Error = run.reply.reply();
        run.reply.kind() == "error"
            && error.kind.as_deref() == Some("runtime_error")
            && error.integrity.is_none()
            && torch_out_of_memory(error.message.as_deref().unwrap_or(""))
            && pressure_plausible(self.exec.gpu_memory(), rc.io_bytes())
    }

    /// Before device case `case` is run once more after the candidate ran out of GPU memory
    /// on it: the reference's worker drops its current case (timing remakes it if it needs
    /// it), and the candidate's worker is stopped (its cached and possibly fragmented memory
    /// goes back), started and loaded again. An honest kernel then has everything but the
    /// case's buffers and what the evaluation keeps to judge later cases; a kernel that runs
    /// out again is judged. The reference session's cases kept for later candidates stay:
    /// dropping them would let one kernel's error text change how the next ones are checked.
    pub(super) fn candidate_alone(&mut self, worker: &mut Worker, case: &str) -> Step {
        self.reference.drop_worker_case(self.ctx);
        worker.kill();
        self.release_idle_sessions(SECOND_ATTEMPT);
        self.settle_after_kill();
        self.notes.push(format!("case {case}: the candidate ran out of GPU memory beside the harness's buffers and the reference's worker; run again after the reference dropped its case, with the candidate's worker started afresh"));
        self.restart_candidate(worker)
    }
}

/// What the idle sessions give their memory back before, in [`Evaluation::reference_alone`],
/// [`Evaluation::prepare_alone`] and [`Evaluation::candidate_alone`].
const SECOND_ATTEMPT: &str = "the second attempt after running out of memory";

/// Whether GPU memory pressure can explain an out-of-memory error on a case of `io_bytes`
/// on a GPU of `total` bytes: a case of a sixty-fourth of the GPU or more. Elsewhere a
/// kernel raising "out of memory" is judged as it is, with no second attempt.
pub(super) fn pressure_plausible(total: u64, io_bytes: u64) -> bool {
    total > 0 && io_bytes >= total / 64
}

/// torch's own out-of-memory error at the start of a worker's error message (`<what
/// failed>: OutOfMemoryError: CUDA out of memory. ...`), not anywhere in its traceback.
fn torch_out_of_memory(message: &str) -> bool {
    let first = message.lines().next().unwrap_or_default();
    first.contains("OutOfMemoryError: CUDA out of memory")
}

#[cfg(test)]
mod tests {
    use super::torch_out_of_memory;

    #[test]
    fn only_torchs_error_on_the_first_line_is_out_of_memory() {
        let oom = "OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacity of 79.18 GiB of which 2.72 GiB is free.\nTraceback (most recent call last):\n  ...";
        assert!(torch_out_of_memory(oom));
        assert!(torch_out_of_memory(&format!("run failed: {oom}")));
        // Named in the traceback only (a comment on the raising line), or another error.
        assert!(!torch_out_of_memory("RuntimeError: boom\nTraceback:\n  x = 1  # CUDA out of memory\nOutOfMemoryError: CUDA out of memory"));
        assert!(!torch_out_of_memory(
            "RuntimeError: CUDA error: an illegal memory access was encountered"
        ));
        assert!(!torch_out_of_memory(""));
    }
}
