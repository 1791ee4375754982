//! The strict profile's float64 gate: what it accepts and what it rejects.

use kbench_record::{CaseFamily, CaseRef, Outcome, Precision};

use super::*;
use crate::{failure_outcome, Float64Status, GateMeasure, Rule};

fn naive_sum(v: &[f32]) -> f32 {
    v.iter().fold(0.0f32, |s, &x| s + x)
}

/// Pairwise (cascade) summation with 128-element leaves, like PyTorch's CPU reductions.
fn pairwise_sum(v: &[f32]) -> f32 {
    if v.len() <= 128 {
        naive_sum(v)
    } else {
        let (a, b) = v.split_at(v.len() / 2);
        pairwise_sum(a) + pairwise_sum(b)
    }
}

fn exact_sum(v: &[f32]) -> f64 {
    v.iter().map(|&x| f64::from(x)).sum()
}

fn round_bf16(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

fn round_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// L1/23 (softmax over dim=1 of `torch.rand(4096, 393216)`), two rows of it: the float64
/// truth, PyTorch-like fp32 (cascade sum), and a one-accumulator fp32 kernel.
struct Softmax {
    shape: [u64; 2],
    truth: Vec<f64>,
    torch: Vec<f32>,
    one_accumulator: Vec<f32>,
}

fn softmax_rows(rows: usize, cols: usize) -> Softmax {
    let mut rng = Rng(23);
    let (mut truth, mut torch, mut one_accumulator) = (vec![], vec![], vec![]);
    for _ in 0..rows {
        let x: Vec<f32> = (0..cols).map(|_| rng.uniform()).collect();
        let m = x.iter().copied().fold(f32::MIN, f32::max);
        let e64: Vec<f64> = x.iter().map(|&v| f64::from(v - m).exp()).collect();
        let s64: f64 = e64.iter().sum();
        truth.extend(e64.iter().map(|e| e / s64));
        let e32: Vec<f32> = x.iter().map(|&v| (v - m).exp()).collect();
        let (sp, sn) = (pairwise_sum(&e32), naive_sum(&e32));
        torch.extend(e32.iter().map(|e| e / sp));
        one_accumulator.extend(e32.iter().map(|e| e / sn));
    }
    Softmax {
        shape: [rows as u64, cols as u64],
        truth,
        torch,
        one_accumulator,
    }
}

#[test]
fn zeros_for_a_tiny_softmax_pass_kernelbench_but_not_strict() {
    let s = softmax_rows(2, 393_216);
    let r = f32s(&s.shape, &s.torch);
    let r64 = f64s(&s.shape, &s.truth);
    let zeros = f32s(&s.shape, &vec![0.0; s.torch.len()]);
    // Every value is ≈ 2.5e-6, far below atol: elementwise, zeros are "correct".
    assert!(s.torch.iter().all(|&v| v < 1e-5));
    assert!(values(&zeros, &r, Some(&r64), KB, FP32).passed());
    assert!(values(&zeros, &r, Some(&r64), V01, FP32).passed());
    let v = values(&zeros, &r, Some(&r64), STRICT, FP32);
    assert_eq!(v.failed_rule(), Some(Rule::Float64Gate));
    assert_eq!(v.mismatches, 0);
    assert_eq!(v.rel_l2_vs_f64(), Some(1.0));
    // Same at half precision: the floor is 1e-2, zeros are 1.0 off.
    let v = values(&zeros, &r, Some(&r64), STRICT, Precision::Bf16);
    assert_eq!(v.failed_rule(), Some(Rule::Float64Gate));
    // A constant 1/cols has the right mean but is still rejected.
    let uniform = f32s(&s.shape, &vec![1.0 / 393_216.0; s.torch.len()]);
    assert!(!values(&uniform, &r, Some(&r64), STRICT, FP32).passed());
}

#[test]
fn strict_accepts_honest_softmax_kernels() {
    let s = softmax_rows(2, 393_216);
    let r = f32s(&s.shape, &s.torch);
    let r64 = f64s(&s.shape, &s.truth);
    // The reference itself.
    let v = values(&r, &r, Some(&r64), STRICT, FP32);
    assert!(v.passed());
    let torch_err = v.rel_l2_vs_f64().unwrap();
    assert!(torch_err < 1e-6, "{torch_err}");
    // One thread per row, one fp32 accumulator over 393,216 columns: honest, less accurate.
    let c = f32s(&s.shape, &s.one_accumulator);
    let v = values(&c, &r, Some(&r64), STRICT, FP32);
    let err = v.rel_l2_vs_f64().unwrap();
    assert!(err > 10.0 * torch_err && err < 1e-4, "{err}");
    assert!(v.passed(), "{}", Comparison::Values(v.clone()));
}

#[test]
fn strict_rejects_softmax_computed_in_half_precision() {
    let s = softmax_rows(2, 393_216);
    let r = f32s(&s.shape, &s.torch);
    let r64 = f64s(&s.shape, &s.truth);
    for round in [round_bf16 as fn(f32) -> f32, round_f16] {
        let c: Vec<f32> = s.torch.iter().map(|&x| round(x)).collect();
        let c = f32s(&s.shape, &c);
        assert!(values(&c, &r, Some(&r64), KB, FP32).passed());
        let v = values(&c, &r, Some(&r64), STRICT, FP32);
        assert_eq!(v.failed_rule(), Some(Rule::Float64Gate));
        assert!(v.rel_l2_vs_f64().unwrap() > 1e-4);
    }
}

/// Row sums with heavy cancellation: ±a pairs (|a| < 50) plus small positive noise, so the
/// result (≈ 16) is tiny next to the partial sums and summation order decides the error.
struct Sums {
    truth: Vec<f64>,
    naive: Vec<f32>,
    pairwise: Vec<f32>,
    bf16_inputs: Vec<f32>,
}

fn cancelling_sums(rows: usize, n: usize) -> Sums {
    let mut rng = Rng(47);
    let mut s = Sums {
        truth: vec![],
        naive: vec![],
        pairwise: vec![],
        bf16_inputs: vec![],
    };
    for _ in 0..rows {
        let half: Vec<f32> = (0..n / 2).map(|_| 100.0 * (rng.uniform() - 0.5)).collect();
        let mut v: Vec<f32> = half
            .iter()
            .copied()
            .chain(half.iter().map(|a| -a))
            .collect();
        // Fisher–Yates, then noise.
        for i in (1..v.len()).rev() {
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
        for x in &mut v {
            *x += 5e-4 * rng.uniform();
        }
        s.truth.push(exact_sum(&v));
        s.naive.push(naive_sum(&v));
        s.pairwise.push(pairwise_sum(&v));
        let vb: Vec<f32> = v.iter().map(|&x| round_bf16(x)).collect();
        s.bf16_inputs.push(pairwise_sum(&vb));
    }
    s
}

#[test]
fn strict_accepts_an_honest_sum_that_kernelbench_rejects() {
    // r64: exact sums; r: naive fp32 (a sloppy reference); c: pairwise fp32 (honest, better).
    let rows = 32;
    let s = cancelling_sums(rows, 1 << 16);
    let shape = [rows as u64, 1];
    let (r, c, r64) = (
        f32s(&shape, &s.naive),
        f32s(&shape, &s.pairwise),
        f64s(&shape, &s.truth),
    );
    let kb = values(&c, &r, Some(&r64), KB, FP32);
    assert!(
        kb.mismatches > 0,
        "test data must defeat the elementwise rule"
    );
    assert!(!kb.passed());
    let strict = values(&c, &r, Some(&r64), STRICT, FP32);
    assert!(strict.passed(), "{}", Comparison::Values(strict.clone()));
    assert_eq!(strict.rescued, kb.mismatches);
    let Float64Status::Measured(g) = &strict.float64 else {
        panic!("float64 gate not measured")
    };
    assert!(g.candidate_error < g.reference_error);
    assert_eq!(strict.notes().len(), 1);
    assert!(strict.notes()[0].contains("accepted by the float64 gate"));
}

#[test]
fn strict_rejects_a_sum_over_bf16_rounded_inputs() {
    let rows = 32;
    let s = cancelling_sums(rows, 1 << 16);
    let shape = [rows as u64, 1];
    let (r, c, r64) = (
        f32s(&shape, &s.pairwise),
        f32s(&shape, &s.bf16_inputs),
        f64s(&shape, &s.truth),
    );
    let v = values(&c, &r, Some(&r64), STRICT, FP32);
    assert!(!v.passed());
    assert_eq!(v.rescued, 0);
}

#[test]
fn rescue_needs_the_reference_to_be_off_too() {
    // The reference is exact here, so an element outside tolerance is not rescued.
    let r = f32s(&[2], &[1.0, 2.0]);
    let r64 = f64s(&[2], &[1.0, 2.0]);
    let c = f32s(&[2], &[1.001, 2.0]);
    let v = values(&c, &r, Some(&r64), STRICT, FP32);
    assert_eq!((v.rescued, v.mismatches), (0, 1));
    assert_eq!(v.failed_rule(), Some(Rule::Elementwise));
    // The reference is off by 0.002 at [0]; the candidate half as far: rescued.
    let r64 = f64s(&[2], &[0.998, 2.0]);
    let c = f32s(&[2], &[0.999, 2.0]);
    let v = values(&c, &r, Some(&r64), STRICT, FP32);
    assert_eq!((v.rescued, v.mismatches), (1, 0));
    // ...but never under the KernelBench profiles.
    assert_eq!(values(&c, &r, Some(&r64), KB, FP32).mismatches, 1);
}

#[test]
fn nan_positions_are_not_rescued() {
    let r = f32s(&[2], &[f32::NAN, 1.0]);
    let r64 = f64s(&[2], &[0.5, 1.0]);
    let c = f32s(&[2], &[0.5, 1.0]);
    let v = values(&c, &r, Some(&r64), STRICT, FP32);
    assert_eq!(v.failed_rule(), Some(Rule::DropsNan));
}

#[test]
fn strict_without_float64_reference_is_kernelbench_plus_a_note() {
    let s = softmax_rows(1, 393_216);
    let r = f32s(&s.shape, &s.torch);
    let zeros = f32s(&s.shape, &vec![0.0; s.torch.len()]);
    let v = values(&zeros, &r, None, STRICT, FP32);
    assert!(v.passed());
    assert_eq!(v.float64, Float64Status::Skipped);
    assert_eq!(v.rel_l2_vs_f64(), None);
    assert!(v.notes()[0].starts_with("float64 gate skipped"));
    let kb = values(&zeros, &r, None, KB, FP32);
    assert_eq!(kb.float64, Float64Status::NotApplicable);
    assert!(kb.notes().is_empty());
}

#[test]
fn other_profiles_measure_but_do_not_enforce() {
    let s = softmax_rows(1, 393_216);
    let (r, r64) = (f32s(&s.shape, &s.torch), f64s(&s.shape, &s.truth));
    let zeros = f32s(&s.shape, &vec![0.0; s.torch.len()]);
    let v = values(&zeros, &r, Some(&r64), KB, FP32);
    assert!(v.passed());
    let Float64Status::Measured(g) = &v.float64 else {
        panic!("float64 gate not measured")
    };
    assert!(!g.enforced && !g.passed);
    assert_eq!(v.rel_l2_vs_f64(), Some(1.0));
}

#[test]
fn all_zero_truth_uses_the_absolute_form() {
    let r = f32s(&[4], &[0.0; 4]);
    let r64 = f64s(&[4], &[0.0; 4]);
    let c = f32s(&[4], &[1e-5, -1e-5, 0.0, 5e-5]);
    let v = values(&c, &r, Some(&r64), STRICT, FP32);
    assert!(v.passed());
    let Float64Status::Measured(g) = &v.float64 else {
        panic!("float64 gate not measured")
    };
    assert_eq!(g.measure, GateMeasure::Rms);
    assert_eq!(g.bound, 1e-4);
    assert_eq!(v.rel_l2_vs_f64(), None);
}

#[test]
fn gate_failure_outcome_points_at_the_worst_element() {
    let r = f32s(&[2, 2], &[1e-6, 2e-6, 3e-6, 4e-6]);
    let r64 = f64s(&[2, 2], &[1e-6, 2e-6, 3e-6, 4e-6]);
    let c = f32s(&[2, 2], &[1e-6, 2e-6, 0.0, 4e-6]);
    let cmp_result = cmp(&c, &r, Some(&r64), STRICT, FP32).unwrap();
    let case = CaseRef {
        family: CaseFamily::Small,
        index: 0,
    };
    let Some(Outcome::Mismatch {
        count,
        total,
        first_index,
        rule,
        ..
    }) = failure_outcome(&cmp_result, &case, 0)
    else {
        panic!("expected a mismatch")
    };
    assert_eq!((count, total, rule.as_str()), (0, 4, "float64 gate"));
    assert_eq!(first_index, vec![1, 0]);
    assert!(cmp_result.to_string().contains("float64 gate"));
}

#[test]
fn gate_statistics_do_not_depend_on_chunking() {
    let s = softmax_rows(1, 10_000);
    let (r, r64) = (f32s(&s.shape, &s.torch), f64s(&s.shape, &s.truth));
    let c = f32s(&s.shape, &s.one_accumulator);
    let whole = values_chunked(&c, &r, Some(&r64), STRICT, FP32, 1 << 16);
    for chunk in [1, 7, 1000, 4096] {
        let v = values_chunked(&c, &r, Some(&r64), STRICT, FP32, chunk);
        let (Float64Status::Measured(a), Float64Status::Measured(b)) = (&whole.float64, &v.float64)
        else {
            panic!("float64 gate not measured")
        };
        approx::assert_relative_eq!(
            a.candidate_error,
            b.candidate_error,
            epsilon = 0.0,
            max_relative = 1e-12
        );
        assert_eq!(a.worst_index, b.worst_index);
        assert_eq!((whole.max_abs, whole.max_rel), (v.max_abs, v.max_rel));
    }
}
