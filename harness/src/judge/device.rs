//! One device case's verdict: the candidate's output slots against the reference's, compared
//! on the GPU by the harness's own kernels; a failing output is read back once to name
//! unwritten elements or an answer replayed from an earlier case.

use std::sync::Arc;

use kbench_adversarial::Comparison;
use kbench_record::protocol::reply;
use kbench_record::{CaseFamily, Dtype, HostTensor, Outcome, Phase};
use serde_json::Value;

use super::case::{count_mismatch, gated_f64, judge_flush, probe_of, Judged};
use super::faults::error_outcome;
use super::{integrity, Tolerance};
use crate::gpu::devmem::Gpu;
use crate::measure::device_case::{DeviceCaseError, DeviceRun};
use crate::measure::reference::{CaseData, RefCase};
use crate::measure::Station;
use crate::worker::{str_field, WorkerFault};

/// Judges the answer to device case `rc`; `earlier` are the random cases already passed
/// (a failing output is compared with their answers).
pub(crate) fn judge_device_case(
    tol: Tolerance,
    station: &Station,
    rc: &RefCase,
    run: &DeviceRun,
    earlier: &[Arc<RefCase>],
) -> Result<Result<Judged, Outcome>, DeviceCaseError> {
    let CaseData::Device {
        outputs,
        outputs_f64,
        outputs_alt,
        ..
    } = &rc.data
    else {
        unreachable!("judge_device_case on a host case")
    };
    let (reply, slots, wall_s) = (&run.reply, &run.slots, run.wall_s);
    let gpu = station.gpu.as_ref().expect("device case without a GPU");
    let cmp = station
        .cmp
        .as_ref()
        .expect("device case without a comparator");
    let harness = |e: anyhow::Error| DeviceCaseError::Harness(e);
    if reply.kind() != "outputs" {
        return Ok(Err(error_outcome(reply, Phase::Run)));
    }
    // The worker answers a device case with its outputs' descriptions and no payload; an
    // answer without them was not written by the worker's code (a forged frame).
    let answered: reply::Outputs = reply.reply();
    let Some(described) = answered.device_outputs.filter(|_| reply.payload.is_empty()) else {
        return Err(DeviceCaseError::Fault(WorkerFault::Protocol(
            "a device case answered without device_outputs, or with a payload".into(),
        )));
    };
    if let Some(o) = count_mismatch(described.len(), outputs.len()) {
        return Ok(Err(o));
    }
    if let Some(o) = integrity::probe_failure(
        answered.integrity.as_ref(),
        &rc.mutated_inputs,
        &format!("case {}", rc.case),
    ) {
        return Ok(Err(o));
    }
    let mut comparisons = Vec::with_capacity(outputs.len());
    let mut failure = None;
    for (k, d) in described.iter().enumerate() {
        let reference = &outputs[k];
        let (dtype, shape) = described_tensor(d);
        let (Some(dtype), Some(shape)) = (dtype, shape) else {
            return Err(DeviceCaseError::Fault(WorkerFault::Protocol(format!(
                "malformed output description {d}"
            ))));
        };
        let copied = d.get("copied").and_then(Value::as_bool) == Some(true);
        let on = str_field(d, "device");
        let cmp_result = if shape != reference.shape {
            Ok(Comparison::WrongShape {
                expected: reference.shape.clone(),
                got: shape,
            })
        } else if dtype != reference.dtype {
            Ok(Comparison::WrongDtype {
                expected: reference.dtype,
                got: dtype,
            })
        } else if !copied {
            return Ok(Err(Outcome::RuntimeError {
                phase: Phase::Run,
                message: format!(
                    "output {k} is on {on}; the reference's is on the GPU (return tensors on the input's device)"
                ),
            }));
        } else {
            let ref64 = gated_f64(outputs_f64.as_deref(), k, reference.dtype).map(|t| t.view());
            let alt = probe_of(outputs_alt.as_deref(), k).map(|t| t.view());
            cmp.compare_case(
                &slots[k].view(),
                &reference.view(),
                ref64.as_ref(),
                alt.as_ref(),
                tol.profile,
                tol.precision,
                rc.gate(tol.precision),
            )
            .map_err(harness)?
        };
        match cmp_result {
            Ok(cmp) => {
                if failure.is_none() {
                    failure = cmp.failure_outcome(&rc.case, k as u32);
                }
                comparisons.push(cmp);
            }
            Err(e) => {
                failure.get_or_insert(Outcome::ReferenceError {
                    message: format!("output {k} of case {}: {e}", rc.case),
                });
            }
        }
    }
    if failure.is_some() {
        let what = format!("case {}", rc.case);
        // A failed output is read back once: still-poisoned elements name the failure.
        for (k, cmp) in comparisons.iter().enumerate() {
            if cmp.passed() || cmp.values().is_none() {
                continue;
            }
            let bytes = gpu
                .read(&slots[k].buf, 0, slots[k].nbytes())
                .map_err(harness)?;
            let t = HostTensor::new(slots[k].dtype, slots[k].shape.clone(), bytes)
                .map_err(|e| harness(e.into()))?;
            if let Some(o) = integrity::unwritten_outputs(std::iter::once(&t), &what) {
                failure = Some(o);
                break;
            }
            // An earlier case's answer (within tolerance) where this case's differs: the
            // device-path form of `output-replayed` (the host path hashes every output).
            if let Some(o) =
                replayed_device_output(gpu, tol, &t, k, rc, earlier).map_err(harness)?
            {
                failure = Some(o);
                break;
            }
        }
        // On the problem's own inputs only: a stress family may be ill-conditioned enough
        // for honest fp32 code to miss by that much, which is a mismatch, not a cheat.
        if let Some(o) = (rc.case.family == CaseFamily::Random)
            .then(|| integrity::precision_downgrade(tol.precision, &comparisons, &what))
            .flatten()
        {
            failure = Some(o);
        }
    }
    let mut result = kbench_adversarial::case_result(&rc.case, &comparisons, wall_s);
    if rc.case.family == CaseFamily::Denormal {
        // Counted on the GPU where the outputs are; only the two counts come back.
        let mut counts = Vec::new();
        for (k, compared) in comparisons.iter().enumerate() {
            if compared.values().is_none() {
                continue; // wrong shape or dtype: already a failure
            }
            counts.extend(
                cmp.flush_count(&slots[k].view(), &outputs[k].view())
                    .map_err(harness)?,
            );
        }
        judge_flush(tol, &rc.case, counts.into_iter(), &mut result, &mut failure);
    }
    result.passed &= failure.is_none();
    Ok(Ok(Judged { result, failure }))
}

/// `output-replayed` on the device path: output `k` of a failing case matches (under the
/// run's tolerance) the reference output `k` of an earlier random case.
fn replayed_device_output(
    gpu: &Gpu,
    tol: Tolerance,
    cand: &HostTensor,
    k: usize,
    rc: &RefCase,
    earlier: &[Arc<RefCase>],
) -> anyhow::Result<Option<Outcome>> {
    for e in earlier {
        let CaseData::Device { outputs, .. } = &e.data else {
            continue;
        };
        let Some(o) = outputs.get(k) else { continue };
        if o.dtype != cand.dtype() || o.shape != cand.shape() {
            continue;
        }
        let r = HostTensor::new(o.dtype, o.shape.clone(), gpu.read(&o.buf, 0, o.nbytes())?)?;
        if kbench_adversarial::compare(cand, &r, None, tol.profile, tol.precision)
            .is_ok_and(|cmp| cmp.passed())
        {
            return Ok(Some(Outcome::Integrity {
                flag: integrity::OUTPUT_REPLAYED.into(),
                detail: format!(
                    "output {k} of case {} is the answer to case {} (within tolerance), whose inputs differ (a cached or stale result)",
                    rc.case, e.case
                ),
            }));
        }
    }
    Ok(None)
}

/// The dtype and shape a worker's output description (`device_outputs`, `checked_device`)
/// gives, each None when missing or malformed.
pub(crate) fn described_tensor(d: &Value) -> (Option<Dtype>, Option<Vec<u64>>) {
    let field = |k: &str| d.get(k).cloned();
    (
        field("dtype").and_then(|v| serde_json::from_value(v).ok()),
        field("shape").and_then(|v| serde_json::from_value(v).ok()),
    )
}
