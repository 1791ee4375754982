//! The fp32 error model of the strict profile: honest reorderings of a dot product pass
//! where they cancel, downgrades of its precision fail, whole or in part.
//!
//! The data follow kbench's `signed` family (standard normal × a per-element scale in
//! [0.1, 10]), under which an fp32 dot product of length K cancels to a value much smaller
//! than its terms at some elements; the float64 truth is the exact sum of the fp32 products'
//! inputs in f64.

use super::*;
use crate::{Float64Status, Rule};

impl Rng {
    /// Standard normal by Box-Muller, times a scale in [0.1, 10].
    fn signed(&mut self) -> f32 {
        let (u1, u2) = (
            f64::from(self.uniform()).max(1e-12),
            f64::from(self.uniform()),
        );
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        (z * (0.1 + 9.9 * f64::from(self.uniform()))) as f32
    }
}

/// TF32: 10 explicit mantissa bits, round to nearest even (what tensor cores read).
fn round_tf32(x: f32) -> f32 {
    let b = x.to_bits();
    let lsb = (b >> 13) & 1;
    f32::from_bits(b.wrapping_add(0x0FFF + lsb) & !0x1FFF)
}

fn round_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// `rows × cols` dot products of length `k` over `signed` data.
struct Dots {
    shape: [u64; 2],
    a: Vec<Vec<f32>>,
    b: Vec<Vec<f32>>,
}

impl Dots {
    fn new(rows: usize, cols: usize, k: usize, seed: u64) -> Dots {
        let mut rng = Rng(seed);
        let mut draw = |n: usize| -> Vec<Vec<f32>> {
            (0..n)
                .map(|_| (0..k).map(|_| rng.signed()).collect())
                .collect()
        };
        let a = draw(rows);
        let b = draw(cols);
        Dots {
            shape: [rows as u64, cols as u64],
            a,
            b,
        }
    }

    /// Every element by `dot(row, col)`, row-major.
    fn each(&self, dot: impl Fn(usize, &[f32], &[f32]) -> f32) -> Vec<f32> {
        let mut out = vec![];
        for (i, x) in self.a.iter().enumerate() {
            for y in &self.b {
                out.push(dot(i, x, y));
            }
        }
        out
    }

    fn truth(&self) -> HostTensor {
        let mut out = vec![];
        for x in &self.a {
            for y in &self.b {
                out.push(
                    x.iter()
                        .zip(y)
                        .map(|(&p, &q)| f64::from(p) * f64::from(q))
                        .sum(),
                );
            }
        }
        f64s(&self.shape, &out)
    }
}

/// One fp32 accumulator, in order (a thread per output element).
fn sequential(x: &[f32], y: &[f32]) -> f32 {
    x.iter().zip(y).fold(0.0f32, |s, (&p, &q)| s + p * q)
}

/// Pairwise over blocks of 32 (the reference: a blocked library matmul).
fn blocked(x: &[f32], y: &[f32]) -> f32 {
    if x.len() <= 32 {
        sequential(x, y)
    } else {
        let h = x.len() / 2;
        blocked(&x[..h], &y[..h]) + blocked(&x[h..], &y[h..])
    }
}

/// `parts` sequential partial sums added at the end (split-K).
fn split_k(x: &[f32], y: &[f32], parts: usize) -> f32 {
    let n = x.len() / parts;
    (0..parts)
        .map(|p| sequential(&x[p * n..(p + 1) * n], &y[p * n..(p + 1) * n]))
        .fold(0.0f32, |s, v| s + v)
}

fn rounded(x: &[f32], round: fn(f32) -> f32) -> Vec<f32> {
    x.iter().map(|&v| round(v)).collect()
}

fn setup(d: &Dots) -> (HostTensor, HostTensor) {
    (f32s(&d.shape, &d.each(|_, x, y| blocked(x, y))), d.truth())
}

#[test]
fn honest_reorderings_pass_where_kernelbench_rejects_them() {
    let d = Dots::new(24, 24, 4096, 61);
    let (r, r64) = setup(&d);
    let mut failed_kernelbench = 0;
    for (name, parts) in [("sequential", 1), ("split-K 4", 4), ("split-K 16", 16)] {
        let c = f32s(&d.shape, &d.each(|_, x, y| split_k(x, y, parts)));
        let kb = values(&c, &r, Some(&r64), KB, FP32);
        let v = values(&c, &r, Some(&r64), STRICT, FP32);
        assert!(v.passed(), "{name}: {}", Comparison::Values(v.clone()));
        assert_eq!(v.rescued, kb.mismatches, "{name}");
        if !kb.passed() {
            failed_kernelbench += 1;
        }
    }
    // The data defeat KernelBench's elementwise rule for the sequential kernel at least.
    assert!(failed_kernelbench >= 1);
}

#[test]
fn precision_downgrades_fail() {
    let d = Dots::new(24, 24, 4096, 62);
    let (r, r64) = setup(&d);
    for (name, round) in [
        ("tf32 inputs", round_tf32 as fn(f32) -> f32),
        ("fp16 inputs", round_f16),
        ("bf16 inputs", |x| half::bf16::from_f32(x).to_f32()),
    ] {
        let c = d.each(|_, x, y| sequential(&rounded(x, round), &rounded(y, round)));
        let v = values(&f32s(&d.shape, &c), &r, Some(&r64), STRICT, FP32);
        assert!(!v.passed(), "{name}");
        let Float64Status::Measured(g) = &v.float64 else {
            panic!("measured")
        };
        assert!(!g.passed, "{name}: the whole output is too far: {g:?}");
    }
    // The output rounded to fp16.
    let c: Vec<f32> = d
        .each(|_, x, y| blocked(x, y))
        .into_iter()
        .map(round_f16)
        .collect();
    assert!(!values(&f32s(&d.shape, &c), &r, Some(&r64), STRICT, FP32).passed());
}

#[test]
fn a_partial_downgrade_fails_though_the_whole_output_is_close() {
    // 2 of 48 rows (4%) computed from fp16-rounded inputs, the rest honestly.
    let d = Dots::new(48, 24, 4096, 63);
    let (r, r64) = setup(&d);
    let c = d.each(|i, x, y| {
        if i < 2 {
            sequential(&rounded(x, round_f16), &rounded(y, round_f16))
        } else {
            sequential(x, y)
        }
    });
    let v = values(&f32s(&d.shape, &c), &r, Some(&r64), STRICT, FP32);
    let Float64Status::Measured(g) = &v.float64 else {
        panic!("measured")
    };
    assert!(g.passed, "the normwise gate alone would pass it: {g:?}");
    assert_eq!(v.failed_rule(), Some(Rule::Elementwise));
    let first = v.first_mismatch.as_ref().unwrap();
    assert!(first.index[0] < 2, "{first:?}");
}

#[test]
fn a_wrong_tile_fails() {
    // An 8×8 tile off by 1e-3 relative in an otherwise honest output.
    let d = Dots::new(32, 32, 1024, 64);
    let (r, r64) = setup(&d);
    let mut c = d.each(|_, x, y| sequential(x, y));
    for i in 0..8 {
        for j in 0..8 {
            c[i * 32 + j] *= 1.001;
        }
    }
    let v = values(&f32s(&d.shape, &c), &r, Some(&r64), STRICT, FP32);
    assert_eq!(v.failed_rule(), Some(Rule::Elementwise));
    assert!(v.mismatches >= 32, "{}", v.mismatches);
}
