//! Property tests: the chunked, parallel scan against a plain sequential implementation of
//! the same rules, and invariants of the comparison.

use proptest::prelude::*;

use super::*;
use crate::{tolerance, Rule, Tolerance};

/// The rules, written as plainly as possible, one element after another.
#[derive(Debug, PartialEq)]
struct Plain {
    mismatches: u64,
    nonfinite: u64,
    rescued: u64,
    max_abs: f64,
    max_rel: f64,
    first: Option<(u64, Rule)>,
    artefacts: u64,
    tol_needed: f64,
}

/// The NaN/Inf rules as the README states them (`a`: the probe value, if a probe
/// reference is given): `Ok(true)` for an accepted artefact, `Err` for a failed rule.
fn plain_nonfinite(c: f64, r: f64, a: Option<f64>, tol: Tolerance) -> Result<bool, Rule> {
    let close_to_probe = a.is_some_and(|a| {
        a.is_finite() && c.is_finite() && (c - a).abs() <= tol.atol + tol.rtol * a.abs()
    });
    if r.is_finite() {
        Err(Rule::NonfiniteInvented)
    } else if r.is_nan() && c.is_nan() || r.is_infinite() && c == r {
        Ok(false)
    } else if r.is_infinite() && c == -r {
        Err(Rule::InfSign)
    } else if !c.is_finite() {
        // NaN against ±Inf.
        if a.is_some() {
            Ok(false)
        } else {
            Err(Rule::NanInfKind)
        }
    } else if close_to_probe {
        Ok(true)
    } else if r.is_nan() {
        Err(Rule::DropsNan)
    } else {
        Err(Rule::DropsInf)
    }
}

fn plain(
    c: &[f64],
    r: &[f64],
    t: Option<&[f64]>,
    a: Option<&[f64]>,
    tol: Tolerance,
    rescue: bool,
) -> Plain {
    // The typical errors of the reference and, over the elements within tolerance, of the
    // candidate against float64, over elements where all are finite.
    let (mut n, mut ref_err2, mut within_err2, mut truth2) = (0.0, 0.0, 0.0, 0.0);
    for i in 0..c.len() {
        if let Some(t) = t.map(|t| t[i]) {
            if c[i].is_finite() && r[i].is_finite() && t.is_finite() {
                n += 1.0;
                ref_err2 += (r[i] - t) * (r[i] - t);
                if (c[i] - r[i]).abs() <= tol.atol + tol.rtol * r[i].abs() {
                    within_err2 += (c[i] - t) * (c[i] - t);
                }
                truth2 += t * t;
            }
        }
    }
    // The candidate's error counts up to the normwise gate's bound (floor 1e-4 at fp32).
    let (scale2, ref_typical) = if truth2 > 0.0 {
        (truth2, (ref_err2 / truth2).sqrt())
    } else {
        (n, (ref_err2 / n).sqrt())
    };
    let within2 = within_err2.min(1e-4f64.max(4.0 * ref_typical).powi(2) * scale2);
    // The larger of the reference's typical error and 8 times the candidate's spread at
    // the element's size plus the output's root-mean-square size.
    let typical = |t: f64| {
        if truth2 > 0.0 {
            let rho_w = (within2 / truth2).sqrt();
            (ref_typical * t.abs()).max(8.0 * rho_w * t.abs() + 8.0 * (within2 / n).sqrt())
        } else if n > 0.0 {
            ref_typical.max(8.0 * (within2 / n).sqrt())
        } else {
            0.0
        }
    };
    let mut p = Plain {
        mismatches: 0,
        nonfinite: 0,
        rescued: 0,
        max_abs: 0.0,
        max_rel: 0.0,
        first: None,
        artefacts: 0,
        tol_needed: 0.0,
    };
    for i in 0..c.len() {
        let (c, r) = (c[i], r[i]);
        if !c.is_finite() || !r.is_finite() {
            match plain_nonfinite(c, r, a.map(|a| a[i]), tol) {
                Ok(true) => {
                    let a = a.unwrap()[i];
                    p.artefacts += 1;
                    p.tol_needed = p.tol_needed.max((c - a).abs() / (1.0 + a.abs()));
                }
                Ok(false) => {}
                Err(rule) => {
                    p.mismatches += 1;
                    p.nonfinite += 1;
                    p.first.get_or_insert((i as u64, rule));
                }
            }
            continue;
        }
        let d = (c - r).abs();
        p.max_abs = p.max_abs.max(d);
        p.tol_needed = p.tol_needed.max(d / (1.0 + r.abs()));
        let rel = if r == 0.0 {
            if d == 0.0 {
                0.0
            } else {
                f64::INFINITY
            }
        } else {
            d / r.abs()
        };
        p.max_rel = p.max_rel.max(rel);
        if d > tol.atol + tol.rtol * r.abs() {
            let truth = t.map(|t| t[i]).filter(|t| t.is_finite());
            match truth {
                Some(t)
                    if rescue
                        && (c - t).abs()
                            <= 2.0 * (r - t).abs().max(typical(t)) + tol.atol * 1e-3 =>
                {
                    p.rescued += 1
                }
                _ => {
                    p.mismatches += 1;
                    p.first.get_or_insert((i as u64, Rule::Elementwise));
                }
            }
        }
    }
    p
}

/// Mostly ordinary values, with zeros, subnormals, extremes, NaN and ±Inf mixed in.
fn any_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        8 => -10.0f32..10.0,
        1 => Just(0.0f32),
        1 => Just(-0.0f32),
        1 => prop_oneof![Just(f32::NAN), Just(f32::INFINITY), Just(f32::NEG_INFINITY)],
        1 => prop_oneof![Just(1e-40f32), Just(-1.4e-45f32), Just(f32::MAX), Just(f32::MIN)],
        1 => any::<u32>().prop_map(f32::from_bits),
    ]
}

/// Reference values and, per element, how the candidate departs from it. Per case, a
/// defect rate from 0 to 1/2: low rates leave whole 64-element blocks clean, so the
/// vectorised fast path and its fallbacks are both exercised.
fn pair() -> impl Strategy<Value = (Vec<f32>, Vec<f32>)> {
    (
        prop_oneof![Just(0u32), Just(2), Just(20), Just(300), Just(5000)],
        0usize..1000,
    )
        .prop_flat_map(|(per_10k, len)| {
            prop::collection::vec(
                (
                    prop_oneof![6 => -10.0f32..10.0, 1 => -1e-3f32..1e-3, 1 => any_f32()],
                    -4e-5f32..4e-5,
                    0u32..10_000,
                    any_f32(),
                    0u8..4,
                ),
                len,
            )
            .prop_map(move |v| {
                let r: Vec<f32> = v.iter().map(|e| e.0).collect();
                let c = v
                    .iter()
                    .map(|&(r, noise, roll, special, how)| {
                        let ordinary = if r.is_finite() {
                            r + noise * r.abs().max(1.0)
                        } else {
                            r
                        };
                        if roll >= per_10k {
                            return ordinary;
                        }
                        match how {
                            0 => special,
                            1 => r + (1e-3 + 1e-3 * r.abs()),
                            2 => -r,
                            _ => r * (1.0 + 1e-4),
                        }
                    })
                    .collect();
                (c, r)
            })
        })
}

fn widen(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

/// Tiny chunks, chunks around the 64-element block, and the production size.
fn chunk_size() -> impl Strategy<Value = usize> {
    prop_oneof![1usize..70, 60usize..400, Just(1usize << 16)]
}

fn decode_f16(bits: &[u16]) -> Vec<f64> {
    bits.iter()
        .map(|&b| half::f16::from_bits(b).to_f64())
        .collect()
}

fn decode_bf16(bits: &[u16]) -> Vec<f64> {
    bits.iter()
        .map(|&b| half::bf16::from_bits(b).to_f64())
        .collect()
}

/// 16-bit patterns: arbitrary references, candidates equal or a few steps away, with a
/// per-case rate of arbitrary replacements.
fn half_pair() -> impl Strategy<Value = (Vec<u16>, Vec<u16>)> {
    (
        prop_oneof![Just(0u32), Just(20), Just(1000), Just(5000)],
        0usize..1000,
    )
        .prop_flat_map(|(per_10k, len)| {
            prop::collection::vec(
                (
                    prop_oneof![3 => 0x0000u16..0x4000, 1 => 0x8000u16..0xC000, 1 => any::<u16>()],
                    prop_oneof![4 => Just(0i32), 1 => -2i32..3],
                    0u32..10_000,
                    any::<u16>(),
                ),
                len,
            )
            .prop_map(move |v| {
                let r: Vec<u16> = v.iter().map(|e| e.0).collect();
                let c = v
                    .iter()
                    .map(|&(r, step, roll, other)| {
                        if roll < per_10k {
                            other
                        } else {
                            (i32::from(r) + step).clamp(0, 0xFFFF) as u16
                        }
                    })
                    .collect();
                (c, r)
            })
        })
}

/// f32 values spread over magnitudes (subnormal to huge, around 4·atol), and candidates
/// placed at multiples of the tolerance bound, including just around 1.
fn f32_boundary_pair() -> impl Strategy<Value = (Vec<f32>, Vec<f32>)> {
    prop::collection::vec(
        (
            prop_oneof![4 => -20i32..20, 1 => -149i32..128],
            1.0f32..2.0,
            any::<bool>(),
            prop_oneof![
                Just(0.0f64),
                0.0f64..2.0,
                Just(1.0 - 1e-9),
                Just(1.0 + 1e-9),
                Just(1.0)
            ],
        ),
        0..800,
    )
    .prop_map(|v| {
        let tol = tolerance(KB, FP32);
        v.iter()
            .map(|&(e, m, neg, k)| {
                let r = (m * 2f32.powi(e)) * if neg { -1.0 } else { 1.0 };
                let r = if r.is_finite() { r } else { f32::MAX };
                let c = (f64::from(r) + k * tol.bound(f64::from(r))) as f32;
                (if c.is_finite() { c } else { r }, r)
            })
            .unzip()
    })
}

/// References below 4·atol, where f32 differences can be inexact, and candidates on either
/// side of `r ± bound(r)`, down to the neighbouring f32.
fn tiny_pair(atol: f64) -> impl Strategy<Value = (Vec<f32>, Vec<f32>)> {
    (prop_oneof![Just(0u32), Just(30), Just(1000)], 0usize..600).prop_flat_map(
        move |(per_10k, len)| {
            prop::collection::vec(
                (
                    -4.0f64..4.0,
                    0.0f64..1.0,
                    any::<bool>(),
                    0u32..10_000,
                    -1i32..=1,
                ),
                len,
            )
            .prop_map(move |v| {
                v.iter()
                    .map(|&(x, k, up, roll, step)| {
                        let r = (x * atol) as f32;
                        let bound = atol + atol * f64::from(r).abs();
                        // Mostly well inside the bound; at a per-case rate, on it.
                        let k = if roll < per_10k { 1.0 } else { 0.99 * k };
                        let target = f64::from(r) + if up { k * bound } else { -k * bound };
                        let c = target as f32;
                        let c = match step {
                            1 if roll < per_10k => f32::from_bits(c.to_bits() + 1),
                            -1 if roll < per_10k && c != 0.0 => f32::from_bits(c.to_bits() - 1),
                            _ => c,
                        };
                        (c, r)
                    })
                    .unzip()
            })
        },
    )
}

fn profile() -> impl Strategy<Value = kbench_record::ToleranceProfile> {
    prop_oneof![Just(KB), Just(V01), Just(STRICT)]
}

proptest! {
    #[test]
    fn chunked_parallel_scan_equals_the_sequential_rules(
        (c, r) in pair(),
        truth_noise in prop::collection::vec(-1e-3f64..1e-3, 1000),
        chunk in chunk_size(),
        profile in profile(),
        with_truth in any::<bool>(),
        with_alt in any::<bool>(),
    ) {
        let n = r.len() as u64;
        let truth: Vec<f64> = r.iter().zip(&truth_noise).map(|(&x, e)| f64::from(x) + e).collect();
        let r64 = with_truth.then(|| f64s(&[n], &truth));
        // A probe reference: the candidate's own value (an artefact where the reference is
        // not finite), NaN (the element depends on the injected values), or far off.
        let alt: Vec<f32> = c.iter().enumerate().map(|(i, &x)| match i % 3 {
            0 => x,
            1 => f32::NAN,
            _ => x + 1.0,
        }).collect();
        let alt_t = with_alt.then(|| f32s(&[n], &alt));
        let v = values_alt_chunked(&f32s(&[n], &c), &f32s(&[n], &r), r64.as_ref(), alt_t.as_ref(), profile, FP32, chunk);
        let tol = tolerance(profile, FP32);
        let rescue = with_truth && profile == STRICT;
        let alt64 = widen(&alt);
        let expected = plain(&widen(&c), &widen(&r), with_truth.then_some(&truth[..]), with_alt.then_some(&alt64[..]), tol, rescue);
        let got = Plain {
            mismatches: v.mismatches,
            nonfinite: v.nonfinite_mismatches,
            rescued: v.rescued,
            max_abs: v.max_abs,
            max_rel: v.max_rel,
            first: v.first_mismatch.as_ref().map(|m| (m.flat_index, m.rule)),
            artefacts: v.artefacts,
            tol_needed: v.tol_needed,
        };
        prop_assert_eq!(got, expected);
        prop_assert_eq!(v.elements, n);
        // The same values stored as f64 take the f64 fast path, with the same verdicts.
        let alt_t64 = with_alt.then(|| f64s(&[n], &alt64));
        let v64 = values_alt_chunked(&f64s(&[n], &widen(&c)), &f64s(&[n], &widen(&r)), r64.as_ref(), alt_t64.as_ref(), profile, FP32, chunk);
        prop_assert_eq!(
            (v64.mismatches, v64.nonfinite_mismatches, v64.rescued, v64.max_abs, v64.max_rel, v64.artefacts, v64.tol_needed),
            (v.mismatches, v.nonfinite_mismatches, v.rescued, v.max_abs, v.max_rel, v.artefacts, v.tol_needed)
        );
        prop_assert_eq!(v64.first_mismatch.map(|m| (m.flat_index, m.rule)), v.first_mismatch.as_ref().map(|m| (m.flat_index, m.rule)));
        // Chunk size changes nothing but the order of float sums.
        let whole = values_alt_chunked(&f32s(&[n], &c), &f32s(&[n], &r), r64.as_ref(), alt_t.as_ref(), profile, FP32, 1 << 16);
        prop_assert_eq!(whole.failed_rule(), v.failed_rule());
        let first = |v: &crate::ValueReport| v.first_mismatch.as_ref().map(|m| (m.flat_index, m.index.clone()));
        prop_assert_eq!(first(&whole), first(&v));
    }

    #[test]
    fn an_output_always_matches_itself(
        bits in prop::collection::vec(any::<u32>(), 0..200),
        profile in profile(),
    ) {
        let v: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
        let t = f32s(&[v.len() as u64], &v);
        let rep = values(&t, &t, None, profile, FP32);
        prop_assert!(rep.passed());
        prop_assert_eq!((rep.max_abs, rep.max_rel), (0.0, 0.0));
        let halves: Vec<u16> = bits.iter().map(|&b| b as u16).collect();
        prop_assert!(values(&f16_bits(&halves), &f16_bits(&halves), None, profile, Precision::Fp16).passed());
        prop_assert!(values(&bf16_bits(&halves), &bf16_bits(&halves), None, profile, Precision::Bf16).passed());
    }

    #[test]
    fn perturbations_within_half_the_tolerance_pass(
        r in prop::collection::vec(-1e6f64..1e6, 1..200),
        frac in prop::collection::vec(-0.5f64..0.5, 200),
        profile in profile(),
    ) {
        let tol = tolerance(profile, FP32);
        let up: Vec<f64> = r.iter().zip(&frac).map(|(&x, f)| x + f * tol.bound(x)).collect();
        let down: Vec<f64> = r.iter().zip(&frac).map(|(&x, f)| x - f * tol.bound(x)).collect();
        let n = [r.len() as u64];
        let rt = f64s(&n, &r);
        prop_assert!(values(&f64s(&n, &up), &rt, None, profile, FP32).passed());
        prop_assert!(values(&f64s(&n, &down), &rt, None, profile, FP32).passed());
        // The same through f32 storage: rounding to f32 costs far less than the other half.
        let (r32, up32): (Vec<f32>, Vec<f32>) = r.iter().zip(&frac)
            .map(|(&x, f)| {
                let x = x as f32;
                (x, (f64::from(x) + f * tol.bound(f64::from(x))) as f32)
            })
            .unzip();
        prop_assert!(values(&f32s(&n, &up32), &f32s(&n, &r32), None, profile, FP32).passed());
    }

    #[test]
    fn max_abs_is_the_brute_force_maximum((c, r) in pair(), chunk in chunk_size()) {
        let n = [r.len() as u64];
        let v = values_chunked(&f32s(&n, &c), &f32s(&n, &r), None, KB, FP32, chunk);
        let brute = c.iter().zip(&r)
            .filter(|(c, r)| c.is_finite() && r.is_finite())
            .map(|(&c, &r)| (f64::from(c) - f64::from(r)).abs())
            .fold(0.0, f64::max);
        prop_assert_eq!(v.max_abs, brute);
    }

    #[test]
    fn the_verdict_is_symmetric_for_finite_equal_magnitudes(
        r in prop::collection::vec(-100.0f32..100.0, 1..100),
        k in 0.0f64..3.0,
    ) {
        // c = r ± k·bound(r): the sign of the error does not matter.
        let tol = tolerance(KB, FP32);
        let n = [r.len() as u64];
        let rt: Vec<f64> = r.iter().map(|&x| f64::from(x)).collect();
        let plus: Vec<f64> = rt.iter().map(|&x| x + k * tol.bound(x)).collect();
        let minus: Vec<f64> = rt.iter().map(|&x| x - k * tol.bound(x)).collect();
        let a = values(&f64s(&n, &plus), &f64s(&n, &rt), None, KB, FP32);
        let b = values(&f64s(&n, &minus), &f64s(&n, &rt), None, KB, FP32);
        prop_assert_eq!(a.passed(), b.passed());
        prop_assert_eq!(a.mismatches, b.mismatches);
    }

    #[test]
    fn half_precision_scan_equals_the_sequential_rules(
        (c, r) in half_pair(),
        chunk in chunk_size(),
        profile in profile(),
        bf16 in any::<bool>(),
    ) {
        let (precision, ct, rt, cd, rd) = if bf16 {
            (Precision::Bf16, bf16_bits(&c), bf16_bits(&r), decode_bf16(&c), decode_bf16(&r))
        } else {
            (Precision::Fp16, f16_bits(&c), f16_bits(&r), decode_f16(&c), decode_f16(&r))
        };
        let v = values_chunked(&ct, &rt, None, profile, precision, chunk);
        let expected = plain(&cd, &rd, None, None, tolerance(profile, precision), false);
        prop_assert_eq!(
            (v.mismatches, v.nonfinite_mismatches, v.max_abs, v.max_rel, v.tol_needed),
            (expected.mismatches, expected.nonfinite, expected.max_abs, expected.max_rel, expected.tol_needed)
        );
        prop_assert_eq!(v.first_mismatch.map(|m| (m.flat_index, m.rule)), expected.first);
    }

    #[test]
    fn f32_scan_is_exact_at_the_tolerance_boundary(
        (c, r) in f32_boundary_pair(),
        chunk in chunk_size(),
    ) {
        let n = [r.len() as u64];
        let v = values_chunked(&f32s(&n, &c), &f32s(&n, &r), None, KB, FP32, chunk);
        let expected = plain(&widen(&c), &widen(&r), None, None, tolerance(KB, FP32), false);
        prop_assert_eq!(
            (v.mismatches, v.max_abs, v.max_rel, v.tol_needed),
            (expected.mismatches, expected.max_abs, expected.max_rel, expected.tol_needed)
        );
        prop_assert_eq!(v.first_mismatch.map(|m| (m.flat_index, m.rule)), expected.first);
    }

    #[test]
    fn f32_scan_is_exact_for_tiny_references(
        (c, r) in prop_oneof![tiny_pair(1e-4), tiny_pair(1e-2)],
        chunk in chunk_size(),
    ) {
        let n = [r.len() as u64];
        for profile in [KB, V01] {
            let v = values_chunked(&f32s(&n, &c), &f32s(&n, &r), None, profile, FP32, chunk);
            let expected = plain(&widen(&c), &widen(&r), None, None, tolerance(profile, FP32), false);
            prop_assert_eq!(
                (v.mismatches, v.max_abs, v.max_rel, v.tol_needed),
                (expected.mismatches, expected.max_abs, expected.max_rel, expected.tol_needed)
            );
            prop_assert_eq!(v.first_mismatch.map(|m| (m.flat_index, m.rule)), expected.first);
        }
    }

    #[test]
    fn half_precision_scan_is_exact_across_magnitudes(
        v in prop::collection::vec((-0.9f32..0.9, -0.09f32..0.09, 0i32..30), 0..600),
        bf16 in any::<bool>(),
        chunk in chunk_size(),
    ) {
        // Both values under atol = 1e-2 (fp16/bf16 precision), of very different magnitudes:
        // all pass, and f32 differences between them need not be exact.
        let atol = 1e-2f32;
        let (r, c): (Vec<f32>, Vec<f32>) =
            v.iter().map(|&(x, y, m)| (x * atol, y * atol * 2f32.powi(-m))).unzip();
        let (precision, ct, rt) = if bf16 {
            (Precision::Bf16, bf16s(&c), bf16s(&r))
        } else {
            (Precision::Fp16, f16s(&c), f16s(&r))
        };
        let decode = |t: &kbench_record::HostTensor| -> Vec<f64> {
            t.data().chunks_exact(2).map(|b| {
                let bits = u16::from_le_bytes([b[0], b[1]]);
                if bf16 { half::bf16::from_bits(bits).to_f64() } else { half::f16::from_bits(bits).to_f64() }
            }).collect()
        };
        let v = values_chunked(&ct, &rt, None, KB, precision, chunk);
        let expected = plain(&decode(&ct), &decode(&rt), None, None, tolerance(KB, precision), false);
        prop_assert_eq!(v.mismatches, 0);
        prop_assert_eq!((v.max_abs, v.max_rel, v.tol_needed), (expected.max_abs, expected.max_rel, expected.tol_needed));
    }
}
