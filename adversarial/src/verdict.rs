//! From comparisons to the record types: `Outcome` for a failed output, `CaseResult` per case.

use kbench_record::{ArtefactCount, CaseRef, CaseResult, Outcome};

use crate::compare::{Comparison, Float64Status, ValueReport};
use crate::rule::Rule;

/// JSON has no infinity (serde_json writes `null`, which does not read back as f64), so
/// records carry `f64::MAX` where a statistic is `+inf` (e.g. `max_rel` against a zero).
fn json_finite(x: f64) -> f64 {
    if x.is_nan() {
        f64::MAX
    } else {
        x.clamp(-f64::MAX, f64::MAX)
    }
}

/// The outcome of a failed comparison of output `output` in `case`; `None` when it passed.
///
/// `WrongShape` and `WrongDtype` map one to one. Value failures become `Mismatch` with the
/// rule's name (`"elementwise"`, `"drops-nan"` and the other NaN/Inf rules, `"float64 gate"`); for a float64 gate
/// failure no element is outside the elementwise tolerance, so `count` is 0 and
/// `first_index` is the element farthest from the float64 reference. Infinite statistics
/// are written as `f64::MAX` (JSON cannot hold them).
pub fn failure_outcome(comparison: &Comparison, case: &CaseRef, output: u32) -> Option<Outcome> {
    let rule = comparison.failed_rule()?;
    Some(match comparison {
        Comparison::WrongShape { expected, got } => Outcome::WrongShape {
            case: case.clone(),
            output,
            expected: expected.clone(),
            got: got.clone(),
        },
        Comparison::WrongDtype { expected, got } => Outcome::WrongDtype {
            case: case.clone(),
            output,
            expected: expected.as_str().to_string(),
            got: got.as_str().to_string(),
        },
        Comparison::Values(v) => {
            let first_index = match (&v.first_mismatch, &v.float64) {
                (Some(m), _) => m.index.clone(),
                (None, Float64Status::Measured(g)) if rule == Rule::Float64Gate => {
                    g.worst_index.clone().unwrap_or_default()
                }
                _ => Vec::new(),
            };
            Outcome::Mismatch {
                case: case.clone(),
                output,
                max_abs: json_finite(v.max_abs),
                max_rel: json_finite(v.max_rel),
                count: v.mismatches,
                total: v.elements,
                first_index,
                rule: rule.as_str().to_string(),
            }
        }
    })
}

impl Comparison {
    /// See [`failure_outcome`].
    pub fn failure_outcome(&self, case: &CaseRef, output: u32) -> Option<Outcome> {
        failure_outcome(self, case, output)
    }
}

/// A value in words: `NaN`, `+Inf`, `-Inf` or the number.
fn word(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{x:?}")
    }
}

/// Why output `k` failed a NaN/Inf rule, in words (`None` for the other rules).
fn nonfinite_detail(v: &ValueReport, k: usize) -> Option<String> {
    let m = v
        .first_mismatch
        .as_ref()
        .filter(|m| m.rule.is_nonfinite())?;
    let at = format!("at index {:?} of output {k}", m.index);
    let (c, r) = (word(m.candidate), word(m.reference));
    let why = match m.rule {
        Rule::DropsNan | Rule::DropsInf if v.probed => format!(
            "the reference is {r} {at}, where the output depends on an injected NaN/Inf input (the reference run on finite probes changes there); the candidate returned {c}"
        ),
        Rule::DropsNan | Rule::DropsInf => {
            format!("the reference is {r} {at}; the candidate returned {c}")
        }
        Rule::NonfiniteInvented => {
            format!("the reference is finite ({r}) {at}; the candidate returned {c}")
        }
        Rule::InfSign => format!("the reference is {r} {at}; the candidate returned {c}"),
        _ => format!(
            "the reference is {r} {at}; the candidate returned {c} (NaN and Inf are interchangeable only in the nan-inf family)"
        ),
    };
    Some(format!(
        "{}: {why} ({} of {} elements fail a NaN/Inf rule)",
        m.rule, v.nonfinite_mismatches, v.elements
    ))
}

/// One case's result over all its outputs (in output order): passed when there is at least
/// one output and every output passed; maxima and sums over the outputs whose shape and dtype matched;
/// `rel_l2_vs_f64` is the largest over outputs that had a float64 reference. Infinite
/// statistics are written as `f64::MAX`. `tol_needed` is the largest over the outputs, and
/// `None` when an output failed on shape, dtype or a NaN/Inf rule (no tolerance passes it);
/// `artefacts` sums the outputs' reference artefacts; `detail` explains the first NaN/Inf
/// rule failure.
pub fn case_result(case: &CaseRef, outputs: &[Comparison], wall_s: f64) -> CaseResult {
    let values = outputs.iter().filter_map(Comparison::values);
    let mut result = CaseResult {
        case: case.clone(),
        passed: !outputs.is_empty() && outputs.iter().all(Comparison::passed),
        max_abs: 0.0,
        max_rel: 0.0,
        mismatches: 0,
        elements: 0,
        rel_l2_vs_f64: None,
        wall_s,
        not_applicable: None,
        flush: None,
        tol_needed: None,
        artefacts: None,
        detail: None,
        times: None,
    };
    let untolerable = outputs.iter().any(|c| {
        c.failed_rule()
            .is_some_and(|r| matches!(r, Rule::Shape | Rule::Dtype) || r.is_nonfinite())
    });
    for (k, c) in outputs.iter().enumerate() {
        let Some(v) = c.values() else { continue };
        if result.detail.is_none() {
            result.detail = nonfinite_detail(v, k);
        }
        if let Some(first) = &v.first_artefact {
            let a = result.artefacts.get_or_insert(ArtefactCount {
                count: 0,
                output: k as u32,
                first_index: first.clone(),
            });
            a.count += v.artefacts;
        }
        if !untolerable {
            let t = json_finite(v.tol_needed);
            result.tol_needed = Some(result.tol_needed.map_or(t, |m: f64| m.max(t)));
        }
    }
    for v in values {
        result.max_abs = result.max_abs.max(json_finite(v.max_abs));
        result.max_rel = result.max_rel.max(json_finite(v.max_rel));
        result.mismatches += v.mismatches;
        result.elements += v.elements;
        if let Some(e) = v.rel_l2_vs_f64() {
            let e = json_finite(e);
            result.rel_l2_vs_f64 = Some(result.rel_l2_vs_f64.map_or(e, |m: f64| m.max(e)));
        }
    }
    result
}
