//! The NaN/Inf rules with and without a probe reference (`nan-inf` family), the reference
//! artefacts they accept, `tol_needed`, and what the case result says about them.

use kbench_record::{CaseFamily, CaseRef, Precision};

use super::*;
use crate::{case_result, compare_with_alt, tolerance, Rule};

const NAN: f32 = f32::NAN;
const INF: f32 = f32::INFINITY;

/// One element `c` against reference `r` with probe value `a` (`None`: no probe reference),
/// padded with 99 matching elements so that the element sits in a block of its own.
fn judge(c: f32, r: f32, a: Option<f32>) -> ValueReport {
    let n = 100usize;
    let mut cv = vec![1.5f32; n];
    let mut rv = cv.clone();
    let mut av = cv.clone();
    (cv[70], rv[70]) = (c, r);
    av[70] = a.unwrap_or(0.0);
    let alt = a.map(|_| f32s(&[n as u64], &av));
    match compare_with_alt(
        &f32s(&[n as u64], &cv),
        &f32s(&[n as u64], &rv),
        None,
        alt.as_ref(),
        KB,
        FP32,
    )
    .unwrap()
    {
        Comparison::Values(v) => v,
        other => panic!("expected values, got {other:?}"),
    }
}

fn nan_inf_case() -> CaseRef {
    CaseRef {
        family: CaseFamily::NanInf,
        index: 0,
    }
}

#[test]
fn reference_finite_candidate_nonfinite_is_invented_with_or_without_probe() {
    for c in [NAN, INF, -INF] {
        for a in [None, Some(1.5), Some(NAN)] {
            let v = judge(c, 1.5, a);
            assert_eq!(v.failed_rule(), Some(Rule::NonfiniteInvented), "{c} {a:?}");
            assert_eq!((v.nonfinite_mismatches, v.artefacts), (1, 0));
        }
    }
}

#[test]
fn reference_nan_with_probe() {
    // NaN or either infinity passes.
    for c in [NAN, INF, -INF] {
        assert!(judge(c, NAN, Some(NAN)).passed(), "{c}");
    }
    // A finite candidate passes where the probe value is finite and close: an artefact.
    let v = judge(2.0, NAN, Some(2.00005));
    assert!(v.passed(), "{v:?}");
    assert_eq!(v.artefacts, 1);
    assert_eq!(v.first_artefact, Some(vec![70]));
    assert!(v.notes().iter().any(|n| n.contains("reference artefacts")));
    // ...and fails where the element depends on the injected values (probe NaN) or the
    // candidate is not within tolerance of the probe value.
    for a in [NAN, 2.5, INF] {
        let v = judge(2.0, NAN, Some(a));
        assert_eq!(v.failed_rule(), Some(Rule::DropsNan), "probe {a}");
        assert_eq!(v.artefacts, 0);
    }
}

#[test]
fn reference_inf_with_probe() {
    assert!(judge(INF, INF, Some(NAN)).passed());
    // A rewrite may meet Inf − Inf: NaN passes against ±Inf.
    assert!(judge(NAN, -INF, Some(NAN)).passed());
    let v = judge(-INF, INF, Some(3.0));
    assert_eq!(v.failed_rule(), Some(Rule::InfSign));
    let v = judge(3.0, INF, Some(3.0));
    assert!(v.passed() && v.artefacts == 1, "{v:?}");
    let v = judge(3.0, -INF, Some(NAN));
    assert_eq!(v.failed_rule(), Some(Rule::DropsInf));
}

#[test]
fn without_probe_the_rules_are_strict_and_named() {
    assert_eq!(judge(0.0, NAN, None).failed_rule(), Some(Rule::DropsNan));
    assert_eq!(judge(0.0, INF, None).failed_rule(), Some(Rule::DropsInf));
    assert_eq!(judge(-INF, INF, None).failed_rule(), Some(Rule::InfSign));
    assert_eq!(judge(INF, NAN, None).failed_rule(), Some(Rule::NanInfKind));
    assert_eq!(judge(NAN, -INF, None).failed_rule(), Some(Rule::NanInfKind));
    assert!(judge(NAN, NAN, None).passed());
    // The probe reference alone changes nothing where both are finite.
    let v = judge(1.6, 1.5, Some(1.6));
    assert_eq!(v.failed_rule(), Some(Rule::Elementwise));
    assert!(!judge(0.0, NAN, None).probed && judge(0.0, NAN, Some(NAN)).probed);
}

#[test]
fn probe_reference_must_match_the_reference() {
    let r = f32s(&[2], &[1.0, NAN]);
    let wrong = f32s(&[3], &[1.0, 1.0, 1.0]);
    let err = compare_with_alt(&r, &r, None, Some(&wrong), KB, FP32).unwrap_err();
    assert!(err.to_string().contains("probe reference"), "{err}");
    let f64_alt = f64s(&[2], &[1.0, 1.0]);
    assert!(compare_with_alt(&r, &r, None, Some(&f64_alt), KB, FP32).is_err());
}

#[test]
fn tol_needed_is_the_smallest_passing_tolerance() {
    // |c − r|/(1 + |r|): 0.03/(1 + 2) = 0.01 and 0.004/(1 + 0) = 0.004.
    let r = f64s(&[3], &[2.0, 0.0, f64::NAN]);
    let c = f64s(&[3], &[2.03, 0.004, f64::NAN]);
    let v = values(&c, &r, None, KB, FP32);
    assert!(
        (v.tol_needed - 0.03 / 3.0).abs() < 1e-15,
        "{}",
        v.tol_needed
    );
    // At that tolerance every element passes, just below it one fails.
    let t = v.tol_needed;
    for (scale, passes) in [(1.0 + 1e-12, true), (1.0 - 1e-9, false)] {
        let bound = |r: f64| t * scale + t * scale * r.abs();
        assert_eq!((2.03f64 - 2.0).abs() <= bound(2.0), passes);
    }
    // Artefacts count against the probe value.
    let v = judge(2.0, NAN, Some(2.00005));
    let expected = (2.00005f32 - 2.0) as f64 / (1.0 + f64::from(2.00005f32));
    assert!((v.tol_needed - expected).abs() < 1e-12);
}

#[test]
fn case_result_reports_artefacts_detail_and_tol_needed() {
    let case = nan_inf_case();
    let pass = Comparison::Values(judge(2.0, NAN, Some(2.0)));
    let res = case_result(&case, std::slice::from_ref(&pass), 0.0);
    assert!(res.passed);
    let a = res.artefacts.expect("artefacts recorded");
    assert_eq!((a.count, a.output, a.first_index.clone()), (1, 0, vec![70]));
    assert_eq!(res.tol_needed, Some(0.0));
    assert!(res.detail.is_none());

    let drop = Comparison::Values(judge(0.0, NAN, Some(NAN)));
    let res = case_result(&case, &[pass, drop], 0.0);
    assert!(!res.passed);
    // No tolerance makes a dropped NaN pass.
    assert_eq!(res.tol_needed, None);
    let d = res.detail.expect("a NaN/Inf failure is explained");
    assert!(d.starts_with("drops-nan: the reference is NaN at index [70] of output 1, where the output depends on an injected NaN/Inf input"), "{d}");
    assert!(d.contains("the candidate returned 0.0"), "{d}");

    let invented = Comparison::Values(judge(INF, 1.5, None));
    let d = case_result(&case, &[invented], 0.0).detail.unwrap();
    assert!(
        d.starts_with("nonfinite-invented: the reference is finite (1.5)"),
        "{d}"
    );
    assert!(d.contains("returned +Inf"), "{d}");

    // An elementwise failure keeps its tolerance figure.
    let off = Comparison::Values(judge(1.6, 1.5, None));
    let res = case_result(&case, &[off], 0.0);
    assert!(!res.passed && res.detail.is_none());
    let t = res.tol_needed.unwrap();
    assert!((t - (1.6f32 - 1.5f32) as f64 / 2.5).abs() < 1e-12, "{t}");
}

#[test]
fn artefacts_stay_out_of_the_float64_gate() {
    // Strict, with a float64 reference that is NaN where the reference is: the artefact
    // passes and adds nothing to the gate's sums (only the finite elements are gated).
    let r = f32s(&[3], &[1.0, NAN, 2.0]);
    let c = f32s(&[3], &[1.0, 0.5, 2.0]);
    let alt = f32s(&[3], &[1.0, 0.5, 2.0]);
    let r64 = f64s(&[3], &[1.0, f64::NAN, 2.0]);
    let v = match compare_with_alt(&c, &r, Some(&r64), Some(&alt), STRICT, FP32).unwrap() {
        Comparison::Values(v) => v,
        other => panic!("{other:?}"),
    };
    assert!(v.passed(), "{v:?}");
    assert_eq!(v.artefacts, 1);
    match &v.float64 {
        crate::Float64Status::Measured(g) => assert_eq!(g.elements, 2),
        other => panic!("{other:?}"),
    }
    // Without the probe reference the same candidate fails, and is not rescued.
    let v = values(&c, &r, Some(&r64), STRICT, FP32);
    assert_eq!(v.failed_rule(), Some(Rule::DropsNan));
    let _ = tolerance(STRICT, Precision::Fp32);
}

#[test]
fn rule_codes_round_trip() {
    for rule in [
        Rule::Elementwise,
        Rule::NonfiniteInvented,
        Rule::DropsNan,
        Rule::DropsInf,
        Rule::InfSign,
        Rule::NanInfKind,
    ] {
        assert_eq!(Rule::from_code(rule.code()), Some(rule));
        assert_eq!(rule.is_nonfinite(), rule != Rule::Elementwise);
    }
    assert_eq!(Rule::from_code(6), None);
}
