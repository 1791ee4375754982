//! The device comparator against the CPU comparator on floating-point rules: exact
//! matches, noise around the tolerance, single mismatches, NaN/Inf positions, zeros,
//! subnormals, strict's rescue and the float64 gate.

use kbench_adversarial::{unravel_index, Rule};

use super::*;

#[test]
fn exact_matches() {
    let dc = gpu_or_skip("exact_matches");
    let mut rng = Rng(1);
    for dtype in FLOATS {
        for n in [1usize, 17, 1000, 4099] {
            let v: Vec<f64> = (0..n).map(|_| 4.0 * rng.sym()).collect();
            let r = floats(dtype, &[n as u64], &v);
            let t = f64s(&[n as u64], &v);
            for profile in PROFILES {
                for truth in [None, Some(&t)] {
                    let res = check(dc, &r, &r, truth, profile, precision_of(dtype));
                    let v = values(&res);
                    assert!(v.passed(), "{v:?}");
                    assert_eq!((v.mismatches, v.max_abs, v.max_rel), (0, 0.0, 0.0));
                }
            }
        }
    }
}

#[test]
fn noise_around_the_tolerance() {
    let dc = gpu_or_skip("noise_around_the_tolerance");
    let mut rng = Rng(2);
    let n = 100_003usize;
    for dtype in FLOATS {
        for precision in PRECISIONS {
            for profile in PROFILES {
                let tol = tolerance(profile, precision);
                for factor in [0.5, 1.5] {
                    let t: Vec<f64> = (0..n).map(|_| 2.0 * rng.sym()).collect();
                    let c: Vec<f64> = t
                        .iter()
                        .map(|&x| x + factor * tol.atol * rng.sym() * (1.0 + x.abs()))
                        .collect();
                    let (ct, rt, tt) = (
                        floats(dtype, &[n as u64], &c),
                        floats(dtype, &[n as u64], &t),
                        f64s(&[n as u64], &t),
                    );
                    for truth in [None, Some(&tt)] {
                        let v = values(&check(dc, &ct, &rt, truth, profile, precision));
                        assert!(v.max_abs > 0.0 && v.max_rel > 0.0);
                        if factor > 1.0 && dtype != Dtype::Bf16 {
                            assert!(v.mismatches + v.rescued > 0, "{v:?}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn single_mismatch_at_first_and_last_element() {
    let dc = gpu_or_skip("single_mismatch_at_first_and_last_element");
    let mut rng = Rng(3);
    let n = 1_000_003usize;
    let t: Vec<f64> = (0..n).map(|_| 2.0 * rng.sym()).collect();
    let tt = f64s(&[n as u64], &t);
    for dtype in FLOATS {
        let rt = floats(dtype, &[n as u64], &t);
        for at in [0, n - 1] {
            let mut c = t.clone();
            c[at] += 1.0;
            let ct = floats(dtype, &[n as u64], &c);
            for profile in PROFILES {
                for truth in [None, Some(&tt)] {
                    let res = check(dc, &ct, &rt, truth, profile, precision_of(dtype));
                    let v = values(&res);
                    assert_eq!(v.mismatches, 1, "{v:?}");
                    let m = v.first_mismatch.as_ref().unwrap();
                    assert_eq!((m.flat_index, m.rule), (at as u64, Rule::Elementwise));
                }
            }
        }
    }
    // Multi-dimensional, and mismatches in the middle of a large tensor (the lowest
    // index wins whichever thread finds it).
    let shape = [7u64, 11, 13, 1000];
    let m = shape.iter().product::<u64>() as usize;
    let t: Vec<f64> = (0..m).map(|_| rng.sym()).collect();
    let mut c = t.clone();
    for i in [987_654usize, 500_001, 500_000, 3] {
        c[i] = -c[i] - 1.0;
    }
    c[700_000] = f64::NAN;
    for dtype in FLOATS {
        let res = check(
            dc,
            &floats(dtype, &shape, &c),
            &floats(dtype, &shape, &t),
            None,
            KB,
            precision_of(dtype),
        );
        let v = values(&res);
        assert_eq!((v.mismatches, v.nonfinite_mismatches), (5, 1));
        assert_eq!(v.first_mismatch.unwrap().index, vec![0, 0, 0, 3]);
    }
}

#[test]
fn nan_and_inf_positions() {
    let dc = gpu_or_skip("nan_and_inf_positions");
    let (nan, inf) = (f64::NAN, f64::INFINITY);
    // (candidate, reference, the rule it fails or None)
    let cases = [
        (nan, nan, None),
        (nan, 1.0, Some(Rule::NonfiniteInvented)),
        (1.0, nan, Some(Rule::DropsNan)),
        (inf, inf, None),
        (-inf, -inf, None),
        (inf, -inf, Some(Rule::InfSign)),
        (-inf, inf, Some(Rule::InfSign)),
        (inf, 1.0, Some(Rule::NonfiniteInvented)),
        (1.0, -inf, Some(Rule::DropsInf)),
        (nan, inf, Some(Rule::NanInfKind)),
        (-inf, nan, Some(Rule::NanInfKind)),
        (-nan, nan, None),
    ];
    let mut rng = Rng(4);
    let n = 37usize;
    for dtype in FLOATS {
        for (cv, rv, rule) in cases {
            let passes = rule.is_none();
            let t: Vec<f64> = (0..n).map(|_| rng.sym()).collect();
            let (mut c, mut r) = (t.clone(), t.clone());
            // One among the 16-byte vectors, one in the tail of every dtype.
            for i in [5, 35] {
                c[i] = cv;
                r[i] = rv;
            }
            let (ct, rt) = (
                floats(dtype, &[n as u64], &c),
                floats(dtype, &[n as u64], &r),
            );
            let tt = f64s(&[n as u64], &t);
            for profile in PROFILES {
                for truth in [None, Some(&tt)] {
                    let res = check(dc, &ct, &rt, truth, profile, precision_of(dtype));
                    let v = values(&res);
                    assert_eq!(v.passed(), passes, "{cv} vs {rv}: {v:?}");
                    if !passes {
                        assert_eq!((v.mismatches, v.nonfinite_mismatches), (2, 2));
                        let m = v.first_mismatch.unwrap();
                        assert_eq!((m.flat_index, Some(m.rule)), (5, rule));
                    }
                }
            }
        }
        // Both rules in one tensor, and a non-finite float64 reference (the element is
        // left out of the gate; an elementwise failure there cannot be rescued).
        let t: Vec<f64> = (0..300).map(|_| rng.sym()).collect();
        let (mut c, r) = (t.clone(), t.clone());
        c[40] = nan;
        c[20] += 0.5;
        c[260] += 0.5;
        c[299] = -inf;
        let mut t64 = t.clone();
        t64[20] = nan;
        t64[100] = inf;
        let (ct, rt, tt) = (
            floats(dtype, &[300], &c),
            floats(dtype, &[300], &r),
            f64s(&[300], &t64),
        );
        for profile in PROFILES {
            let res = check(dc, &ct, &rt, Some(&tt), profile, precision_of(dtype));
            let v = values(&res);
            assert_eq!((v.mismatches, v.nonfinite_mismatches), (4, 2), "{v:?}");
            assert_eq!(v.first_mismatch.unwrap().flat_index, 20);
        }
    }
}

#[test]
fn zero_reference_and_signed_zeros() {
    let dc = gpu_or_skip("zero_reference_and_signed_zeros");
    for dtype in FLOATS {
        let r = [0.0, 0.0, 1.0, -0.0, 2.0];
        let c = [1e-6, 0.0, 1.0, 0.0, 2.0];
        let res = check(
            dc,
            &floats(dtype, &[5], &c),
            &floats(dtype, &[5], &r),
            None,
            KB,
            Precision::Fp32,
        );
        let v = values(&res);
        assert!(v.passed() && v.max_rel == f64::INFINITY, "{v:?}");
        let res = check(
            dc,
            &floats(dtype, &[5], &[-0.0, 0.0, 1.0, 0.0, 2.0]),
            &floats(dtype, &[5], &r),
            None,
            KB,
            Precision::Fp32,
        );
        let v = values(&res);
        assert!(v.passed() && v.max_rel == 0.0 && v.max_abs == 0.0, "{v:?}");
    }
    for dtype in INTS {
        let res = check(
            dc,
            &ints(dtype, &[3], &[1, 0, 1]),
            &ints(dtype, &[3], &[1, 0, 0]),
            None,
            STRICT,
            Precision::Fp32,
        );
        let v = values(&res);
        assert_eq!(
            (v.mismatches, v.max_rel, v.max_abs),
            (1, f64::INFINITY, 1.0)
        );
    }
}

#[test]
fn subnormals_are_not_flushed() {
    let dc = gpu_or_skip("subnormals_are_not_flushed");
    let n = 1001u64;
    for dtype in FLOATS {
        // The smallest subnormals of each dtype: reference k, candidate 2k + 1 ulps.
        let max_sub = match dtype {
            Dtype::F16 => 0x3ff,
            Dtype::Bf16 => 0x7f,
            _ => 0xfffff,
        };
        let r: Vec<u64> = (0..n).map(|k| (k * 7919) % max_sub).collect();
        let c: Vec<u64> = r.iter().map(|&k| (2 * k + 1).min(max_sub)).collect();
        let (ct, rt) = (bits(dtype, &[n], &c), bits(dtype, &[n], &r));
        let v = values(&check(dc, &ct, &rt, None, KB, Precision::Fp32));
        assert!(v.passed() && v.max_abs > 0.0 && v.max_rel >= 1.0, "{v:?}");
        // A float64 reference of subnormals: Σ r64² underflows to 0, so the gate
        // measures the rms error.
        let tt = bits(Dtype::F64, &[n], &r);
        for profile in PROFILES {
            let v = values(&check(dc, &ct, &rt, Some(&tt), profile, Precision::Fp32));
            assert!(matches!(v.float64, Float64Status::Measured(_)));
        }
    }
}

/// Tensors where the reference is off from float64 by `ref_err·tol` (relative) and the
/// candidate is exact, except at `special` indices: there the reference is exact and the
/// candidate off by `special_err·tol`.
fn rescue_case(
    dtype: Dtype,
    precision: Precision,
    n: usize,
    zero_truth: bool,
    special: &[usize],
    special_err: f64,
) -> (HostTensor, HostTensor, HostTensor) {
    let tol = tolerance(STRICT, precision).atol;
    let mut rng = Rng(5 + n as u64);
    let mut t = Vec::with_capacity(n);
    let (mut c, mut r) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let sign = if rng.next() & 1 == 0 { -1.0 } else { 1.0 };
        let x = if zero_truth {
            0.0
        } else {
            sign * (0.5 + rng.unit())
        };
        let s = if rng.next() & 1 == 0 { -1.0 } else { 1.0 };
        t.push(x);
        c.push(x);
        r.push(if zero_truth {
            s * 10.0 * tol
        } else {
            x * (1.0 + s * 10.0 * tol)
        });
    }
    for &i in special {
        r[i] = t[i];
        c[i] = if zero_truth {
            special_err * tol
        } else {
            t[i] * (1.0 + special_err * tol)
        };
    }
    let shape = [n as u64];
    (
        floats(dtype, &shape, &c),
        floats(dtype, &shape, &r),
        f64s(&shape, &t),
    )
}

#[test]
fn strict_rescues_elements_in_both_passes() {
    let dc = gpu_or_skip("strict_rescues_elements_in_both_passes");
    let n = 4099;
    let special = [0usize, 1, 77, 2048, 4096, 4098];
    for dtype in FLOATS {
        let precision = precision_of(dtype);
        for zero_truth in [false, true] {
            // Specials off by 5·tol: rescued only by the second pass's ρ term.
            let (c, r, t) = rescue_case(dtype, precision, n, zero_truth, &special, 5.0);
            let v = values(&check(dc, &c, &r, Some(&t), STRICT, precision));
            assert_eq!((v.mismatches, v.rescued), (0, n as u64), "{dtype}: {v:?}");
            assert!(v.passed(), "{v:?}");
            // Without the gate, every element fails.
            let v = values(&check(dc, &c, &r, Some(&t), KB, precision));
            assert_eq!((v.mismatches, v.rescued), (n as u64, 0));
            let v = values(&check(dc, &c, &r, None, STRICT, precision));
            assert_eq!(v.float64, Float64Status::Skipped);
            // Specials off by 50·tol: beyond any rescue.
            let (c, r, t) = rescue_case(dtype, precision, n, zero_truth, &special, 50.0);
            let v = values(&check(dc, &c, &r, Some(&t), STRICT, precision));
            assert_eq!(
                (v.mismatches, v.rescued),
                (special.len() as u64, (n - special.len()) as u64),
                "{dtype}: {v:?}"
            );
            assert_eq!(v.first_mismatch.unwrap().flat_index, 0);
        }
    }
}

#[test]
fn failing_float64_gate_locates_the_worst_element() {
    let dc = gpu_or_skip("failing_float64_gate_locates_the_worst_element");
    let shape = [7u64, 11, 53];
    let n = shape.iter().product::<u64>() as usize;
    let mut rng = Rng(6);
    // Exact in every float dtype: multiples of 2⁻¹⁰ below 1/4, candidate 2⁻¹⁴ above
    // (within 1e-4 elementwise, a relative L2 error of ≈ 4e-4 against float64).
    let t: Vec<f64> = (0..n)
        .map(|_| (rng.below(513) as f64 - 256.0) / 1024.0)
        .collect();
    let step = 2f64.powi(-14);
    let mut c: Vec<f64> = t.iter().map(|x| x + step).collect();
    let mut r = t.clone();
    // Element 0 is NaN in both (passes, left out of the gate): with every error equal,
    // the worst element is the lowest index among the rest.
    c[0] = f64::NAN;
    r[0] = f64::NAN;
    for dtype in [Dtype::F32, Dtype::F64] {
        let (ct, rt, tt) = (
            floats(dtype, &shape, &c),
            floats(dtype, &shape, &r),
            f64s(&shape, &t),
        );
        let v = values(&check(dc, &ct, &rt, Some(&tt), STRICT, Precision::Fp32));
        assert_eq!(v.mismatches, 0);
        assert_eq!(v.failed_rule(), Some(Rule::Float64Gate), "{v:?}");
        match &v.float64 {
            Float64Status::Measured(g) => {
                assert_eq!(g.worst_index, Some(vec![0, 0, 1]));
                assert_eq!(g.elements, n as u64 - 1);
            }
            other => panic!("{other:?}"),
        }
        // Not enforced under kernelbench, but still measured and explained.
        let v = values(&check(dc, &ct, &rt, Some(&tt), KB, Precision::Fp32));
        assert!(v.passed());
        assert!(
            matches!(&v.float64, Float64Status::Measured(g) if !g.passed && g.worst_index.is_some())
        );
    }
    // One element further off: it is the worst wherever it is.
    for at in [1usize, 2000, n - 1] {
        let mut c2 = c.clone();
        c2[at] = t[at] + step + 2f64.powi(-16);
        let (ct, rt, tt) = (
            floats(Dtype::F32, &shape, &c2),
            floats(Dtype::F32, &shape, &r),
            f64s(&shape, &t),
        );
        let v = values(&check(dc, &ct, &rt, Some(&tt), STRICT, Precision::Fp32));
        match &v.float64 {
            Float64Status::Measured(g) => {
                assert_eq!(g.worst_index, Some(unravel_index(at as u64, &shape)));
            }
            other => panic!("{other:?}"),
        }
    }
}

/// `nan-inf` cases with a probe reference: NaN/Inf interchangeable, finite candidates
/// accepted where the probe value is finite and close (counted as artefacts, first index
/// kept), rejected where it is NaN; `tol_needed` covers the artefacts.
#[test]
fn probe_reference_rules() {
    let dc = gpu_or_skip("probe_reference_rules");
    let (nan, inf) = (f64::NAN, f64::INFINITY);
    // (candidate, reference, probe value, the rule it fails or None, an artefact)
    let cases = [
        (0.5, nan, 0.5, None, true),
        (0.5, nan, nan, Some(Rule::DropsNan), false),
        (0.5, nan, -0.25, Some(Rule::DropsNan), false),
        (inf, nan, nan, None, false),
        (nan, -inf, nan, None, false),
        (0.5, inf, 0.5, None, true),
        (0.5, inf, nan, Some(Rule::DropsInf), false),
        (-inf, inf, 0.5, Some(Rule::InfSign), false),
        (nan, 0.5, 0.5, Some(Rule::NonfiniteInvented), false),
    ];
    let mut rng = Rng(9);
    let n = 37usize;
    for dtype in FLOATS {
        for (cv, rv, av, rule, artefact) in cases {
            let t: Vec<f64> = (0..n).map(|_| rng.sym()).collect();
            let (mut c, mut r, mut a) = (t.clone(), t.clone(), t.clone());
            for i in [5, 35] {
                (c[i], r[i], a[i]) = (cv, rv, av);
            }
            let shape = [n as u64];
            let (ct, rt, at) = (
                floats(dtype, &shape, &c),
                floats(dtype, &shape, &r),
                floats(dtype, &shape, &a),
            );
            for profile in PROFILES {
                let res = check_alt(dc, &ct, &rt, None, Some(&at), profile, precision_of(dtype));
                let v = values(&res);
                assert_eq!(v.failed_rule(), rule, "{cv} vs {rv} (probe {av}): {v:?}");
                assert_eq!(v.artefacts, if artefact { 2 } else { 0 }, "{v:?}");
                assert_eq!(v.first_artefact.is_some(), artefact);
                assert!(v.probed);
            }
        }
    }
}
