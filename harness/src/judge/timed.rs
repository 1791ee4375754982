//! The outputs of probed timed calls against the reference outputs of the case timing ran on.

use kbench_record::{HostTensor, Outcome};
use serde_json::Value;

use super::case::gated_f64;
use super::{integrity, Tolerance};
use crate::measure::reference::{CaseData, DevTensorOwned, RefCase};
use crate::measure::timing::CheckedCall;
use crate::measure::Station;

/// Whether the probed timed calls' outputs can be checked: the reference does not write to
/// its inputs (then the case's inputs, and every timed call's answer, are no longer those of
/// the reference outputs kept). Outputs of any size are: a device case's go into harness
/// buffers on the GPU (until issue 24 they were read back to the host, and cases with more
/// than 256 MiB of outputs were not checked under timing at all).
pub(crate) fn timed_check_fits(rc: &RefCase) -> bool {
    rc.mutated_inputs.is_empty()
}

/// Bytes of the working-precision outputs of `rc`: what one checked timed call sends back.
pub(crate) fn timed_output_bytes(rc: &RefCase) -> u64 {
    match &rc.data {
        CaseData::Host { outputs, .. } => outputs.iter().map(|o| o.data().len() as u64).sum(),
        CaseData::Device { outputs, .. } => outputs.iter().map(|o| o.nbytes() as u64).sum(),
    }
}

/// A checked timed call of a device case: the candidate's outputs in the harness's `slots`
/// (as `described` by its worker) against the reference outputs of case `rc`, compared on
/// the GPU; `timed-output-mismatch` (or `unwritten-output`) when one differs.
pub(crate) fn judge_timed_device_call(
    tol: Tolerance,
    station: &Station,
    rc: &RefCase,
    round: u32,
    call: u32,
    described: &[Value],
    slots: &[DevTensorOwned],
) -> Option<Outcome> {
    let CaseData::Device {
        outputs,
        outputs_f64,
        ..
    } = &rc.data
    else {
        return None;
    };
    let (gpu, cmp) = (station.gpu.as_ref()?, station.cmp.as_ref()?);
    let what = format!("timed call {call} of round {round} (inputs of {})", rc.case);
    let mismatch = |why: String| Outcome::Integrity {
        flag: integrity::TIMED_OUTPUT_MISMATCH.into(),
        detail: format!("{what}: passed the correctness cases but under timing returned {why}"),
    };
    if described.len() != outputs.len() {
        return Some(mismatch(format!(
            "{} output(s) where the reference has {}",
            described.len(),
            outputs.len()
        )));
    }
    for (k, (d, reference)) in described.iter().zip(outputs).enumerate() {
        let (dtype, shape) = super::device::described_tensor(d);
        let copied = d.get("copied").and_then(Value::as_bool) == Some(true);
        if dtype != Some(reference.dtype) || shape.as_ref() != Some(&reference.shape) || !copied {
            return Some(mismatch(format!(
                "output {k} as {d} where the reference's is a {} tensor of shape {:?} on the GPU",
                reference.dtype.as_str(),
                reference.shape
            )));
        }
        let ref64 = gated_f64(outputs_f64.as_deref(), k, reference.dtype).map(|t| t.view());
        let compared = cmp.compare_with_alt(
            &slots[k].view(),
            &reference.view(),
            ref64.as_ref(),
            None,
            tol.profile,
            tol.precision,
        );
        let failure = match compared {
            Ok(Ok(c)) => c.failure_outcome(&rc.case, k as u32).map(|o| o.to_string()),
            Ok(Err(e)) => Some(format!("output {k}: {e}")),
            Err(e) => {
                return Some(Outcome::ReferenceError {
                    message: format!("comparing {what} on the GPU: {e:#}"),
                })
            }
        };
        let Some(why) = failure else { continue };
        // Read back once: elements still poisoned name the failure.
        let unwritten = gpu
            .read(&slots[k].buf, 0, slots[k].nbytes())
            .ok()
            .and_then(|bytes| HostTensor::new(slots[k].dtype, slots[k].shape.clone(), bytes).ok())
            .and_then(|t| integrity::unwritten_outputs(std::iter::once(&t), &what));
        return Some(unwritten.unwrap_or_else(|| mismatch(why)));
    }
    None
}

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
