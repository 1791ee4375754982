//! One case's verdict from the candidate's outputs and the reference's (host tensors), the
//! denormal flush count, and `output-replayed` across cases.

use kbench_record::{CaseFamily, CaseResult, Dtype, HostTensor, Outcome, Phase};

use super::integrity;
use super::Tolerance;
use crate::measure::reference::{CaseData, RefCase};

/// A case the candidate was not run on, with the reason.
pub(crate) fn not_applicable_case(case: kbench_record::CaseRef, why: String) -> CaseResult {
    CaseResult {
        case,
        passed: true,
        max_abs: 0.0,
        max_rel: 0.0,
        mismatches: 0,
        elements: 0,
        rel_l2_vs_f64: None,
        wall_s: 0.0,
        not_applicable: Some(why),
        flush: None,
        tol_needed: None,
        artefacts: None,
        detail: None,
        times: None,
    }
}

pub(crate) fn count_mismatch(got: usize, expected: usize) -> Option<Outcome> {
    (got != expected).then(|| Outcome::RuntimeError {
        phase: Phase::Run,
        message: format!("forward returned {got} tensor(s); the reference returns {expected}"),
    })
}

/// The float64 output that output `k` is gated against. The gate is for floating outputs;
/// an integer output (argmax, argmin) is compared exactly and its float64 run is integer too.
pub(crate) fn gated_f64<T>(outputs_f64: Option<&[T]>, k: usize, dtype: Dtype) -> Option<&T> {
    outputs_f64.filter(|_| dtype.is_float()).map(|v| &v[k])
}

/// The probe reference of output `k` (`nan-inf` cases only): with it the NaN/Inf rules
/// accept reference artefacts (README, "NaN and Inf").
pub(crate) fn probe_of<T>(outputs_alt: Option<&[Option<T>]>, k: usize) -> Option<&T> {
    outputs_alt.and_then(|v| v.get(k)).and_then(Option::as_ref)
}

pub(crate) struct Judged {
    pub(crate) result: CaseResult,
    pub(crate) failure: Option<Outcome>,
}

/// `denormal` cases: did the candidate flush subnormal results to zero (fast-math, FTZ)?
/// The values are far below atol, so only this count shows it. Summed over the outputs into
/// the case's result; under the strict profile a flushing candidate fails.
pub(crate) fn judge_flush(
    tol: Tolerance,
    case: &kbench_record::CaseRef,
    counts: impl Iterator<Item = kbench_record::FlushCount>,
    result: &mut CaseResult,
    failure: &mut Option<Outcome>,
) {
    let flush = counts.reduce(|a, f| kbench_record::FlushCount {
        subnormal: a.subnormal + f.subnormal,
        zeroed: a.zeroed + f.zeroed,
    });
    if let Some(f) =
        flush.filter(|f| f.flushed() && tol.profile == kbench_record::ToleranceProfile::Strict)
    {
        failure.get_or_insert(Outcome::Mismatch {
            case: case.clone(),
            output: 0,
            max_abs: result.max_abs,
            max_rel: result.max_rel,
            count: f.zeroed,
            total: f.subnormal,
            first_index: Vec::new(),
            rule: "flush-to-zero".into(),
        });
    }
    result.flush = flush;
}

/// Compares every output of one host case; the first failing output decides the outcome.
pub(crate) fn judge_host_case(
    tol: Tolerance,
    rc: &RefCase,
    outputs: &[HostTensor],
    wall_s: f64,
) -> Judged {
    let CaseData::Host {
        outputs: ref_outputs,
        outputs_f64,
        outputs_alt,
        ..
    } = &rc.data
    else {
        unreachable!("judge_host_case on a device case")
    };
    let mut comparisons = Vec::with_capacity(outputs.len());
    let mut failure = None;
    for (k, (cand, reference)) in outputs.iter().zip(ref_outputs).enumerate() {
        let ref64 = gated_f64(outputs_f64.as_deref(), k, reference.dtype());
        let alt = probe_of(outputs_alt.as_deref(), k);
        match kbench_adversarial::compare_case(
            cand,
            reference,
            ref64,
            alt,
            tol.profile,
            tol.precision,
            rc.gate(tol.precision),
        ) {
            Ok(cmp) => {
                if failure.is_none() {
                    failure = cmp.failure_outcome(&rc.case, k as u32);
                }
                comparisons.push(cmp);
            }
            Err(e) => {
                // The reference's own float64 output is unusable: a harness-side fault,
                // judged without the gate would be silently weaker, so say so loudly.
                failure.get_or_insert(Outcome::ReferenceError {
                    message: format!("output {k} of case {}: {e}", rc.case),
                });
            }
        }
    }
    if failure.is_some() {
        let what = format!("case {}", rc.case);
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
        let counts = outputs
            .iter()
            .zip(ref_outputs)
            .filter_map(|(c, r)| kbench_adversarial::flush_count(c, r));
        judge_flush(tol, &rc.case, counts, &mut result, &mut failure);
    }
    result.passed &= failure.is_none();
    Judged { result, failure }
}

/// `output-replayed`: a failing case's outputs are bit for bit those the candidate returned
/// for an earlier case whose reference outputs differ (a cache keyed on something other than
/// the input values, or stale memory from the previous call).
pub(crate) fn replayed_output(
    rc: &RefCase,
    outputs: &[HostTensor],
    seen: &[(kbench_record::CaseRef, Vec<u64>, Vec<u64>)],
) -> Option<Outcome> {
    let CaseData::Host { outputs: refs, .. } = &rc.data else {
        return None;
    };
    let cand: Vec<u64> = outputs.iter().map(integrity::output_hash).collect();
    let reference: Vec<u64> = refs.iter().map(integrity::output_hash).collect();
    seen.iter()
        .find(|(_, c, r)| *c == cand && *r != reference)
        .map(|(earlier, _, _)| Outcome::Integrity {
            flag: integrity::OUTPUT_REPLAYED.into(),
            detail: format!(
                "the outputs of case {} are bit for bit those returned for case {earlier}, whose inputs and reference outputs differ (a cached or stale result)",
                rc.case
            ),
        })
}
