//! The outputs of probed timed calls against the reference outputs of the case timing ran on.

use kbench_record::{HostTensor, Outcome};

use super::case::gated_f64;
use super::{integrity, Tolerance};
use crate::measure::reference::{CaseData, RefCase};
use crate::measure::timing::CheckedCall;

/// Whether the probed timed calls' outputs can be checked: small enough to send back over
/// the pipe (device cases: read back to the host once per probed call), and the reference
/// does not write to its inputs (then the case's inputs, and every timed call's answer,
/// are no longer those of the reference outputs kept).
pub(crate) fn timed_check_fits(rc: &RefCase) -> bool {
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

/// Bytes of the working-precision outputs of `rc`: what one checked timed call sends back.
pub(crate) fn timed_output_bytes(rc: &RefCase) -> u64 {
    match &rc.data {
        CaseData::Host { outputs, .. } => outputs.iter().map(|o| o.data().len() as u64).sum(),
        CaseData::Device { outputs, .. } => outputs.iter().map(|o| o.nbytes() as u64).sum(),
    }
}

/// Largest total output size of a device case whose probed timed calls are checked.
const TIMED_CHECK_MAX_BYTES: u64 = 256 << 20;

/// Compares the outputs of probed timed calls with the reference outputs of the case timing
/// ran on: `timed-output-mismatch` (or `unwritten-output`) when one differs.
pub(crate) fn judge_timed_calls(
    tol: Tolerance,
    rc: &RefCase,
    refs: &[HostTensor],
    refs64: Option<&[HostTensor]>,
    checked: &[CheckedCall],
) -> Option<Outcome> {
    for call in checked {
        let what = format!(
            "timed call {} of round {} (inputs of {})",
            call.call, call.round, rc.case
        );
        if let Some(o) = integrity::unwritten_outputs(call.outputs.iter(), &what) {
            return Some(o);
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
                .zip(refs)
                .enumerate()
                .find_map(|(k, (cand, reference))| {
                    let ref64 = gated_f64(refs64, k, reference.dtype());
                    match kbench_adversarial::compare(
                        cand,
                        reference,
                        ref64,
                        tol.profile,
                        tol.precision,
                    ) {
                        Ok(cmp) => cmp
                            .failure_outcome(&rc.case, k as u32)
                            .map(|o| o.to_string()),
                        Err(e) => Some(format!("output {k}: {e}")),
                    }
                })
        };
        if let Some(why) = failure {
            return Some(Outcome::Integrity {
                flag: integrity::TIMED_OUTPUT_MISMATCH.into(),
                detail: format!(
                    "{what}: passed the correctness cases but under timing returned {why}"
                ),
            });
        }
    }
    None
}
