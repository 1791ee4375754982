//! Elementwise, NaN/Inf, decoding, shape/dtype, integer and outcome rules.

use kbench_record::{CaseFamily, CaseRef, Dtype, Outcome, Precision};

use super::*;
use crate::{case_result, failure_outcome, tolerance, unravel_index, Float64Status, Rule};

/// The next double towards +inf (finite, non-zero x).
fn next_up(x: f64) -> f64 {
    if x > 0.0 {
        f64::from_bits(x.to_bits() + 1)
    } else {
        f64::from_bits(x.to_bits() - 1)
    }
}

fn next_down(x: f64) -> f64 {
    -next_up(-x)
}

fn case() -> CaseRef {
    CaseRef {
        family: CaseFamily::Random,
        index: 2,
    }
}

#[test]
fn exactly_at_atol_passes_just_above_fails() {
    // r = 0: the bound is atol exactly.
    let atol = tolerance(KB, FP32).atol;
    let r = f64s(&[1], &[0.0]);
    assert!(values(&f64s(&[1], &[atol]), &r, None, KB, FP32).passed());
    assert!(values(&f64s(&[1], &[-atol]), &r, None, KB, FP32).passed());
    let v = values(&f64s(&[1], &[next_up(atol)]), &r, None, KB, FP32);
    assert!(!v.passed());
    assert_eq!(v.failed_rule(), Some(Rule::Elementwise));
    assert_eq!(v.mismatches, 1);
}

#[test]
fn exactly_at_atol_plus_rtol_passes_just_above_fails() {
    for profile in [KB, V01, STRICT] {
        let tol = tolerance(profile, FP32);
        // |r| within [bound/2, 2·bound]: r + bound is exact (Sterbenz), so c sits exactly on
        // the bound.
        let r = -tol.atol;
        let bound = tol.bound(r);
        let at = r + bound;
        assert_eq!(at - r, bound, "test precondition: exact difference");
        let reference = f64s(&[1], &[r]);
        assert!(values(&f64s(&[1], &[at]), &reference, None, profile, FP32).passed());
        let mut above = next_up(at);
        while above - r <= bound {
            above = next_up(above);
        }
        assert!(!values(&f64s(&[1], &[above]), &reference, None, profile, FP32).passed());
        // Where rtol dominates no double lies exactly on the bound: the largest c with
        // c − r ≤ bound passes and the next double up fails.
        for r in [2.0f64, -3.5, 1e6] {
            let bound = tol.bound(r);
            let mut c = r + bound;
            while c - r > bound {
                c = next_down(c);
            }
            while next_up(c) - r <= bound {
                c = next_up(c);
            }
            let reference = f64s(&[1], &[r]);
            assert!(values(&f64s(&[1], &[c]), &reference, None, profile, FP32).passed());
            let v = values(&f64s(&[1], &[next_up(c)]), &reference, None, profile, FP32);
            assert_eq!(v.failed_rule(), Some(Rule::Elementwise), "{profile} r={r}");
        }
    }
}

#[test]
fn f32_boundary_is_judged_in_f64() {
    // 1e-4 is not an f32; the f32 just below passes, the next one up fails.
    let below = 1e-4f32;
    assert!(f64::from(below) < 1e-4);
    let above = f32::from_bits(below.to_bits() + 1);
    let r = f32s(&[2], &[0.0, 0.0]);
    assert!(values(&f32s(&[2], &[below, -below]), &r, None, KB, FP32).passed());
    let v = values(&f32s(&[2], &[0.0, above]), &r, None, KB, FP32);
    assert_eq!((v.mismatches, v.first_mismatch.unwrap().flat_index), (1, 1));
}

#[test]
fn v01_is_looser_than_head() {
    let r = f32s(&[1], &[1.0]);
    let c = f32s(&[1], &[1.005]);
    assert!(!values(&c, &r, None, KB, FP32).passed());
    assert!(values(&c, &r, None, V01, FP32).passed());
    // fp16/bf16 work precision: 1e-2 under HEAD too.
    assert!(values(&c, &r, None, KB, Precision::Bf16).passed());
}

#[test]
fn nan_and_inf_must_match_position_and_sign() {
    let nan = f32::NAN;
    let inf = f32::INFINITY;
    let pass = |c: f32, r: f32| values(&f32s(&[1], &[c]), &f32s(&[1], &[r]), None, KB, FP32);
    use Rule::*;
    for (c, r, rule) in [
        (nan, nan, None),
        (-nan, nan, None),
        (inf, inf, None),
        (-inf, -inf, None),
        (nan, 1.0, Some(NonfiniteInvented)),
        (1.0, nan, Some(DropsNan)),
        (inf, -inf, Some(InfSign)),
        (-inf, inf, Some(InfSign)),
        (inf, 1.0, Some(NonfiniteInvented)),
        (1.0, inf, Some(DropsInf)),
        (-inf, f32::MAX, Some(NonfiniteInvented)),
        (f32::MAX, inf, Some(DropsInf)),
        (nan, inf, Some(NanInfKind)),
        (inf, nan, Some(NanInfKind)),
    ] {
        let v = pass(c, r);
        assert_eq!(v.failed_rule(), rule, "candidate {c} vs reference {r}");
        assert!(!v.probed && v.artefacts == 0);
        if rule.is_some() {
            assert_eq!(v.nonfinite_mismatches, 1);
        }
    }
}

#[test]
fn matched_specials_are_left_out_of_the_maxima() {
    let r = f32s(
        &[5],
        &[f32::NAN, f32::INFINITY, 1.0, f32::NEG_INFINITY, 4.0],
    );
    let c = f32s(
        &[5],
        &[f32::NAN, f32::INFINITY, 1.00005, f32::NEG_INFINITY, 4.0],
    );
    let v = values(&c, &r, None, KB, FP32);
    assert!(v.passed());
    assert_eq!(v.elements, 5);
    assert_eq!(v.max_abs, f64::from(1.00005f32) - 1.0);
    assert_eq!(v.max_rel, v.max_abs);
    // An unmatched NaN fails without poisoning the maxima.
    let c = f32s(&[5], &[1.0, f32::INFINITY, 1.0, f32::NEG_INFINITY, 4.0]);
    let v = values(&c, &r, None, KB, FP32);
    assert_eq!((v.mismatches, v.max_abs, v.max_rel), (1, 0.0, 0.0));
}

#[test]
fn max_rel_against_zero() {
    let r = f32s(&[3], &[0.0, 0.0, 2.0]);
    // Equal zeros: relative error 0 (−0 equals +0).
    let v = values(&f32s(&[3], &[-0.0, 0.0, 2.0]), &r, None, KB, FP32);
    assert_eq!((v.max_rel, v.max_abs), (0.0, 0.0));
    // Non-zero against zero: relative error is +inf even inside atol.
    let v = values(&f32s(&[3], &[0.0, 1e-5, 2.0]), &r, None, KB, FP32);
    assert!(v.passed());
    assert_eq!(v.max_rel, f64::INFINITY);
}

#[test]
fn f16_decoding_covers_subnormals_inf_and_nan() {
    let p = Precision::Fp16;
    // Little-endian: 0x3C00 is 1.0; a byte-swapped decoder would read 0x003C, a subnormal.
    let v = values(&f16_bits(&[0x3C00]), &f16_bits(&[0x0000]), None, KB, p);
    assert_eq!(v.max_abs, 1.0);
    // Smallest subnormal 2⁻²⁴ and largest subnormal (1023·2⁻²⁴).
    let v = values(&f16_bits(&[0x0001]), &f16_bits(&[0x0000]), None, KB, p);
    assert_eq!(v.max_abs, 2f64.powi(-24));
    let v = values(&f16_bits(&[0x83FF]), &f16_bits(&[0x0000]), None, KB, p);
    assert_eq!(v.max_abs, 1023.0 * 2f64.powi(-24));
    // Largest finite, 65504.
    let v = values(&f16_bits(&[0x7BFF]), &f16_bits(&[0xFBFF]), None, KB, p);
    assert_eq!(v.max_abs, 131008.0);
    // ±Inf: 0x7C00 / 0xFC00.
    assert!(values(&f16_bits(&[0x7C00]), &f16_bits(&[0x7C00]), None, KB, p).passed());
    let v = values(&f16_bits(&[0xFC00]), &f16_bits(&[0x7C00]), None, KB, p);
    assert_eq!(v.failed_rule(), Some(Rule::InfSign));
    // NaNs with different payloads and signs match each other, not infinity.
    assert!(values(&f16_bits(&[0x7E00]), &f16_bits(&[0xFC01]), None, KB, p).passed());
    let v = values(&f16_bits(&[0x7C01]), &f16_bits(&[0x7C00]), None, KB, p);
    assert_eq!(v.failed_rule(), Some(Rule::NanInfKind));
}

#[test]
fn bf16_decoding_covers_subnormals_inf_and_nan() {
    let p = Precision::Bf16;
    let v = values(&bf16_bits(&[0x3F80]), &bf16_bits(&[0x0000]), None, KB, p);
    assert_eq!(v.max_abs, 1.0);
    // Smallest subnormal 2⁻¹³³.
    let v = values(&bf16_bits(&[0x0001]), &bf16_bits(&[0x8000]), None, KB, p);
    assert_eq!(v.max_abs, 2f64.powi(-133));
    // Largest finite ≈ 3.39e38, as f32::MAX rounded to 8 significant bits.
    let v = values(&bf16_bits(&[0x7F7F]), &bf16_bits(&[0x0000]), None, KB, p);
    assert_eq!(v.max_abs, f64::from(f32::from_bits(0x7F7F_0000)));
    assert!(values(&bf16_bits(&[0xFF80]), &bf16_bits(&[0xFF80]), None, KB, p).passed());
    let v = values(&bf16_bits(&[0x7F80]), &bf16_bits(&[0xFF80]), None, KB, p);
    assert_eq!(v.failed_rule(), Some(Rule::InfSign));
    assert!(values(&bf16_bits(&[0x7FC0]), &bf16_bits(&[0xFFC1]), None, KB, p).passed());
    let v = values(&bf16_bits(&[0x7FC0]), &bf16_bits(&[0x3F80]), None, KB, p);
    assert_eq!(v.failed_rule(), Some(Rule::NonfiniteInvented));
}

#[test]
fn half_precision_values_round_trip_through_helpers() {
    let xs = [0.5f32, -3.25, 1000.0, 6.1e-5];
    assert!(values(&f16s(&xs), &f16s(&xs), None, KB, Precision::Fp16).passed());
    assert!(values(&bf16s(&xs), &bf16s(&xs), None, KB, Precision::Bf16).passed());
    // bf16 spacing in [512, 1024) is 4; the bound at 1000 is 1e-2 + 1e-2·1000 = 10.01.
    let r = bf16s(&[1000.0]);
    let v = values(&bf16s(&[1008.0]), &r, None, KB, Precision::Bf16);
    assert_eq!(v.max_abs, 8.0);
    assert!(v.passed());
    let v = values(&bf16s(&[1012.0]), &r, None, KB, Precision::Bf16);
    assert_eq!(v.max_abs, 12.0);
    assert!(!v.passed());
}

#[test]
fn shape_is_checked_before_dtype_and_values() {
    let r = f32s(&[2, 3], &[0.0; 6]);
    let c = f32s(&[3, 2], &[0.0; 6]);
    assert_eq!(
        cmp(&c, &r, None, KB, FP32).unwrap(),
        Comparison::WrongShape {
            expected: vec![2, 3],
            got: vec![3, 2]
        }
    );
    // Same elements, extra dimension: still the wrong shape (KernelBench compares shapes).
    let c = f32s(&[1, 6], &[0.0; 6]);
    assert_eq!(
        cmp(&c, &r, None, KB, FP32).unwrap().failed_rule(),
        Some(Rule::Shape)
    );
    // Wrong shape and wrong dtype: shape wins.
    let c = f16s(&[0.0; 5]);
    assert_eq!(
        cmp(&c, &r, None, KB, FP32).unwrap().failed_rule(),
        Some(Rule::Shape)
    );
    // Scalars.
    let s = f32s(&[], &[1.0]);
    assert!(cmp(&s, &s, None, KB, FP32).unwrap().passed());
    assert_eq!(
        cmp(&f32s(&[1], &[1.0]), &s, None, KB, FP32)
            .unwrap()
            .failed_rule(),
        Some(Rule::Shape)
    );
}

#[test]
fn dtype_must_equal_the_references() {
    let r = f32s(&[3], &[1.0, 2.0, 3.0]);
    let c = f64s(&[3], &[1.0, 2.0, 3.0]);
    let cmp_result = cmp(&c, &r, None, V01, FP32).unwrap();
    assert_eq!(
        cmp_result,
        Comparison::WrongDtype {
            expected: Dtype::F32,
            got: Dtype::F64
        }
    );
    assert!(!cmp_result.passed());
    let c = f16s(&[1.0, 2.0, 3.0]);
    assert_eq!(
        cmp(&c, &r, None, V01, FP32).unwrap().failed_rule(),
        Some(Rule::Dtype)
    );
}

#[test]
fn bad_float64_reference_is_a_harness_error() {
    let r = f32s(&[2], &[1.0, 2.0]);
    assert_eq!(
        cmp(&r, &r, Some(&r), STRICT, FP32).unwrap_err(),
        CompareError::ReferenceF64Dtype(Dtype::F32)
    );
    let r64 = f64s(&[1, 2], &[1.0, 2.0]);
    assert!(matches!(
        cmp(&r, &r, Some(&r64), STRICT, FP32).unwrap_err(),
        CompareError::ReferenceF64Shape { .. }
    ));
}

#[test]
fn first_mismatch_is_the_lowest_index_across_chunks() {
    let shape = [3u64, 4, 5];
    let n = 60;
    let r: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut c = r.clone();
    // Failures in several chunks, the lowest one not at a chunk start.
    for i in [59, 41, 17, 23, 13] {
        c[i] += 1.0;
    }
    c[30] = f32::NAN;
    let (c, r) = (f32s(&shape, &c), f32s(&shape, &r));
    for chunk in [1, 2, 3, 4, 7, 16, 64, 1 << 16] {
        let v = values_chunked(&c, &r, None, KB, FP32, chunk);
        let m = v.first_mismatch.clone().unwrap();
        assert_eq!(m.flat_index, 13, "chunk {chunk}");
        assert_eq!(m.index, vec![0, 2, 3]);
        assert_eq!(
            (m.candidate, m.reference, m.rule),
            (14.0, 13.0, Rule::Elementwise)
        );
        assert_eq!((v.mismatches, v.nonfinite_mismatches), (6, 1));
        assert_eq!(v.max_abs, 1.0);
    }
}

#[test]
fn unravel_is_row_major() {
    assert_eq!(unravel_index(0, &[]), Vec::<u64>::new());
    assert_eq!(unravel_index(7, &[8]), vec![7]);
    assert_eq!(unravel_index(23, &[2, 3, 4]), vec![1, 2, 3]);
    assert_eq!(unravel_index(4, &[2, 3, 4]), vec![0, 1, 0]);
}

#[test]
fn integers_are_exact() {
    for dtype in [Dtype::I64, Dtype::I32, Dtype::I16, Dtype::I8] {
        let r = ints(dtype, &[3, -7, 0, 100]);
        assert!(values(&r, &r, None, V01, FP32).passed(), "{dtype}");
        let v = values(&ints(dtype, &[3, -7, 1, 101]), &r, None, V01, FP32);
        assert_eq!(v.tolerance, crate::Tolerance::EXACT);
        assert_eq!((v.mismatches, v.max_abs), (2, 1.0), "{dtype}");
        assert_eq!(v.max_rel, f64::INFINITY);
        assert_eq!(v.first_mismatch.unwrap().flat_index, 2);
        assert_eq!(v.float64, Float64Status::NotApplicable);
    }
    // No overflow in the difference, no rounding through f64 in the test.
    let r = ints(Dtype::I64, &[i64::MAX, i64::MIN, 1 << 60]);
    let v = values(
        &ints(Dtype::I64, &[i64::MIN, i64::MIN, (1 << 60) + 1]),
        &r,
        None,
        KB,
        FP32,
    );
    assert_eq!(v.mismatches, 2);
    assert_eq!(v.max_abs, 2f64.powi(64));
    // u8 reads 0xFF as 255, i8 as −1.
    let v = values(
        &ints(Dtype::U8, &[255]),
        &ints(Dtype::U8, &[0]),
        None,
        KB,
        FP32,
    );
    assert_eq!(v.max_abs, 255.0);
    let v = values(
        &ints(Dtype::I8, &[-1]),
        &ints(Dtype::I8, &[0]),
        None,
        KB,
        FP32,
    );
    assert_eq!(v.max_abs, 1.0);
}

#[test]
fn bools_are_exact_truth_values() {
    let r = ints(Dtype::Bool, &[1, 0, 1, 0]);
    assert!(values(&ints(Dtype::Bool, &[1, 0, 2, 0]), &r, None, V01, FP32).passed());
    let v = values(&ints(Dtype::Bool, &[1, 1, 1, 0]), &r, None, V01, FP32);
    assert_eq!(
        (v.mismatches, v.failed_rule()),
        (1, Some(Rule::Elementwise))
    );
    // A float64 reference is ignored for bool outputs.
    let r64 = f64s(&[4], &[1.0, 0.0, 1.0, 0.0]);
    let v = values(&r, &r, Some(&r64), STRICT, FP32);
    assert_eq!(v.float64, Float64Status::NotApplicable);
}

#[test]
fn empty_tensors_pass() {
    let e = f32s(&[0, 3], &[]);
    let v = values(&e, &e, None, STRICT, FP32);
    assert!(v.passed());
    assert_eq!(v.elements, 0);
}

#[test]
fn failures_become_outcomes() {
    let r = f32s(&[2, 2], &[0.0, 1.0, 2.0, 3.0]);
    assert_eq!(
        failure_outcome(&cmp(&r, &r, None, KB, FP32).unwrap(), &case(), 0),
        None
    );

    let shape = cmp(&f32s(&[4], &[0.0; 4]), &r, None, KB, FP32).unwrap();
    assert_eq!(
        failure_outcome(&shape, &case(), 1),
        Some(Outcome::WrongShape {
            case: case(),
            output: 1,
            expected: vec![2, 2],
            got: vec![4]
        })
    );
    let dtype = cmp(&f64s(&[2, 2], &[0.0; 4]), &r, None, KB, FP32).unwrap();
    assert_eq!(
        dtype.failure_outcome(&case(), 0),
        Some(Outcome::WrongDtype {
            case: case(),
            output: 0,
            expected: "f32".into(),
            got: "f64".into()
        })
    );

    let c = f32s(&[2, 2], &[0.5, 1.0, 2.0, f32::NAN]);
    let mismatch = cmp(&c, &r, None, KB, FP32).unwrap();
    let outcome = failure_outcome(&mismatch, &case(), 0).unwrap();
    assert_eq!(
        outcome,
        Outcome::Mismatch {
            case: case(),
            output: 0,
            max_abs: 0.5,
            // +inf (0.5 against 0) is written as f64::MAX: JSON has no infinity.
            max_rel: f64::MAX,
            count: 2,
            total: 4,
            first_index: vec![0, 0],
            rule: "elementwise".into()
        }
    );
    let json = serde_json::to_string(&outcome).unwrap();
    assert_eq!(serde_json::from_str::<Outcome>(&json).unwrap(), outcome);
}

#[test]
fn case_results_aggregate_outputs() {
    let r = f32s(&[2], &[1.0, 2.0]);
    let ok = cmp(&r, &r, None, KB, FP32).unwrap();
    let bad = cmp(&f32s(&[2], &[1.5, 0.0]), &r, None, KB, FP32).unwrap();
    let shape = cmp(&f32s(&[1], &[1.0]), &r, None, KB, FP32).unwrap();
    let res = case_result(&case(), &[ok.clone(), bad, shape], 0.25);
    assert!(!res.passed);
    assert_eq!(
        (res.mismatches, res.elements, res.max_abs, res.max_rel),
        (2, 4, 2.0, 1.0)
    );
    assert_eq!(res.rel_l2_vs_f64, None);
    assert_eq!(res.wall_s, 0.25);
    assert!(case_result(&case(), &[ok.clone(), ok], 0.0).passed);
    assert!(!case_result(&case(), &[], 0.0).passed);
}

#[test]
fn max_abs_is_exact_when_f32_rounding_hides_a_new_maximum() {
    // Block 0 sets the running maximum d1 = F + 2⁻⁶⁰ (F = 9e-5 as f32); block 1 holds
    // d2 = F + u/4 > d1 (u = ulp(F)), which rounds to F in f32. Only an exact check sees it.
    let f = 9e-5f32;
    let u = f32::from_bits(f.to_bits() + 1) - f;
    let (r1, c1) = (2f32.powi(-60), -f);
    let (r2, c2) = (0.75 * u, f + u);
    let (d1, d2) = (f64::from(r1) - f64::from(c1), f64::from(c2) - f64::from(r2));
    assert!(d2 > d1 && d2 - d1 < f64::from(u) / 2.0, "test construction");
    assert_eq!(d2 as f32, f, "d2 must round to F in f32");
    let n = 256;
    let (mut c, mut r) = (vec![0.0f32; n], vec![0.0f32; n]);
    (c[0], r[0]) = (c1, r1);
    (c[64], r[64]) = (c2, r2);
    let v = values(
        &f32s(&[n as u64], &c),
        &f32s(&[n as u64], &r),
        None,
        KB,
        FP32,
    );
    assert!(v.passed());
    assert_eq!(v.max_abs, d2);
}
