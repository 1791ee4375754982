//! Stress case families: whether a family applies to a problem (decided by rule from the
//! reference's own behaviour, never from a list), and flush-to-zero detection for the
//! `denormal` family. The families themselves are listed once, in `kbench_record::FAMILIES`.

use half::{bf16, f16};
use kbench_record::{CaseFamily, Dtype, FlushCount, HostTensor};
use rayon::prelude::*;

use crate::tolerance::Tolerance;

/// How far two computations of the reference's outputs are apart, as the reference worker
/// measures it: `max_excess` is the largest `|a − b| − rtol·|b|` over elements finite in
/// both (an element is within tolerance when this is at most `atol`), `nan_mismatch` counts
/// elements whose NaN/Inf pattern differs.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Stability {
    pub max_excess: Option<f64>,
    pub nan_mismatch: u64,
    pub elements: u64,
    /// `‖a − b‖₂/‖b‖₂` over the elements finite in both (largest over outputs), where the
    /// worker measured it (the float64 comparison).
    pub rel_l2: Option<f64>,
}

impl Stability {
    /// Beyond the tolerance: a NaN/Inf pattern that differs, or under the strict profile's
    /// error model (`floor`: its normwise gate's floor) a whole output further apart than
    /// the floor, else an element beyond the elementwise tolerance.
    fn beyond(&self, tol: Tolerance, floor: Option<f64>) -> bool {
        self.nan_mismatch > 0
            || match (floor, self.rel_l2) {
                (Some(floor), Some(rel)) => rel > floor,
                _ => self.max_excess.is_some_and(|e| e > tol.atol),
            }
    }

    fn describe(&self, tol: Tolerance, floor: Option<f64>) -> String {
        let mut parts = Vec::new();
        if let (Some(floor), Some(rel)) = (floor, self.rel_l2) {
            if rel > floor {
                parts.push(format!(
                    "relative L2 distance {rel:.3e} over the whole output, beyond the float64 gate's floor {floor:.0e}"
                ));
            }
        } else if let Some(e) = self.max_excess.filter(|&e| e > tol.atol) {
            parts.push(format!(
                "|a − b| exceeds atol + rtol·|b| by up to {:.3e} (atol {:.0e})",
                e - tol.atol,
                tol.atol
            ));
        }
        if self.nan_mismatch > 0 {
            parts.push(format!(
                "{} of {} elements differ in NaN/Inf",
                self.nan_mismatch, self.elements
            ));
        }
        parts.join("; ")
    }
}

/// Why a stress case does not apply to a problem, or `None` when it does. `random` always
/// applies (it is KernelBench's own check). A stress case does not apply when
///
/// 1. it changed none of the problem's inputs (`transformed == 0`: no floating-point input
///    tensors, e.g. a problem taking only indices, or only labels the worker keeps);
/// 2. the reference disagrees with itself: two runs on the same inputs differ beyond the
///    profile's tolerance (`repeat`);
/// 3. the working-precision reference and the float64 reference disagree beyond the
///    profile's tolerance (`f64`): the problem itself is ill-conditioned under these inputs
///    (e.g. fp32 overflows where float64 does not), so no kernel can be judged on them.
///    Under the strict profile (`floor`: its float64 gate's floor) that means a differing
///    NaN/Inf pattern or the whole output further than the floor: an fp32 reference off from
///    float64 only where a long reduction cancels is what the gate's error model expects of
///    every fp32 computation, and the family is what tells a downgrade from an honest kernel
///    there.
pub fn not_applicable(
    family: &CaseFamily,
    transformed: Option<u64>,
    repeat: Option<&Stability>,
    f64: Option<&Stability>,
    tol: Tolerance,
    floor: Option<f64>,
) -> Option<String> {
    if *family == CaseFamily::Random {
        return None;
    }
    if transformed == Some(0) {
        return Some(
            "the family changes none of the problem's inputs (it has no floating-point input tensors, or only ones whose values it keeps: -1, 0 and 1 labels or masks)"
                .into(),
        );
    }
    if let Some(r) = repeat.filter(|r| r.beyond(tol, None)) {
        return Some(format!(
            "the reference is not stable under it: two runs on the same inputs differ ({})",
            r.describe(tol, None)
        ));
    }
    if let Some(r) = f64.filter(|r| r.beyond(tol, floor)) {
        return Some(format!(
            "the reference is ill-conditioned under it: the working-precision and float64 references differ ({})",
            r.describe(tol, floor)
        ));
    }
    None
}

/// Smallest positive normal value of a float dtype.
fn smallest_normal(dtype: Dtype) -> Option<f64> {
    Some(match dtype {
        Dtype::F32 => f64::from(f32::MIN_POSITIVE),
        Dtype::F16 => f64::from(f16::MIN_POSITIVE),
        Dtype::Bf16 => f64::from(bf16::MIN_POSITIVE),
        Dtype::F64 => f64::MIN_POSITIVE,
        _ => return None,
    })
}

/// One element of a little-endian float tensor, as f64 (exact for every float dtype).
fn decode(dtype: Dtype, b: &[u8]) -> f64 {
    match dtype {
        Dtype::F32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        Dtype::F16 => f64::from(f16::from_le_bytes([b[0], b[1]])),
        Dtype::Bf16 => f64::from(bf16::from_le_bytes([b[0], b[1]])),
        _ => f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
    }
}

/// Subnormal values of `reference` (nonzero, below its dtype's smallest normal) and how many
/// of them `candidate` holds as exactly zero at the same position. `None` for non-float
/// outputs or mismatched shapes and dtypes (the comparison reports those).
pub fn flush_count(candidate: &HostTensor, reference: &HostTensor) -> Option<FlushCount> {
    if candidate.shape() != reference.shape() || candidate.dtype() != reference.dtype() {
        return None;
    }
    flush_count_bytes(reference.dtype(), candidate.data(), reference.data())
}

/// [`flush_count`] over raw little-endian bytes of one dtype (e.g. read back from a GPU),
/// streaming: no copy of the values is made.
pub fn flush_count_bytes(dtype: Dtype, candidate: &[u8], reference: &[u8]) -> Option<FlushCount> {
    let tiny = smallest_normal(dtype)?;
    let size = dtype.size();
    if candidate.len() != reference.len() {
        return None;
    }
    // Outputs reach billions of elements (6.4 GB on L1/20): counted in parallel, in chunks
    // of whole elements, and summed.
    const CHUNK: usize = 1 << 20;
    let count = |(c, r): (&[u8], &[u8])| {
        let mut out = FlushCount {
            subnormal: 0,
            zeroed: 0,
        };
        for (c, r) in c.chunks_exact(size).zip(r.chunks_exact(size)) {
            let r = decode(dtype, r);
            if r != 0.0 && r.abs() < tiny {
                out.subnormal += 1;
                if decode(dtype, c) == 0.0 {
                    out.zeroed += 1;
                }
            }
        }
        out
    };
    let out = candidate
        .par_chunks(CHUNK * size)
        .zip(reference.par_chunks(CHUNK * size))
        .map(count)
        .reduce(
            || FlushCount {
                subnormal: 0,
                zeroed: 0,
            },
            |a, b| FlushCount {
                subnormal: a.subnormal + b.subnormal,
                zeroed: a.zeroed + b.zeroed,
            },
        );
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOL: Tolerance = Tolerance {
        atol: 1e-4,
        rtol: 1e-4,
    };

    fn f32s(v: &[f32]) -> HostTensor {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        HostTensor::new(Dtype::F32, vec![v.len() as u64], bytes).unwrap()
    }

    #[test]
    fn random_always_applies_and_stress_cases_need_a_stable_reference() {
        let wild = Stability {
            max_excess: Some(1.0),
            nan_mismatch: 0,
            elements: 10,
            rel_l2: None,
        };
        let calm = Stability {
            max_excess: Some(-1e-3),
            nan_mismatch: 0,
            elements: 10,
            rel_l2: None,
        };
        let nan = Stability {
            max_excess: None,
            nan_mismatch: 3,
            elements: 10,
            rel_l2: None,
        };
        assert_eq!(
            not_applicable(
                &CaseFamily::Random,
                Some(0),
                Some(&wild),
                Some(&wild),
                TOL,
                None
            ),
            None
        );
        let why = not_applicable(&CaseFamily::Signed, Some(0), None, None, TOL, None).unwrap();
        assert!(why.contains("none of the problem's inputs"), "{why}");
        let why =
            not_applicable(&CaseFamily::Large, Some(1), Some(&wild), None, TOL, None).unwrap();
        assert!(why.contains("two runs"), "{why}");
        let why = not_applicable(
            &CaseFamily::Large,
            Some(1),
            Some(&calm),
            Some(&nan),
            TOL,
            None,
        )
        .unwrap();
        assert!(why.contains("float64") && why.contains("3 of 10"), "{why}");
        assert_eq!(
            not_applicable(
                &CaseFamily::Small,
                Some(2),
                Some(&calm),
                Some(&calm),
                TOL,
                None
            ),
            None
        );
        // Exactly at atol is within tolerance (allclose uses <=).
        let edge = Stability {
            max_excess: Some(1e-4),
            ..calm
        };
        assert_eq!(
            not_applicable(&CaseFamily::Small, Some(2), Some(&edge), None, TOL, None),
            None
        );
    }

    #[test]
    fn strict_judges_the_float64_distance_by_the_whole_output() {
        // Off at a cancelling element (elementwise beyond atol) but close as a whole: the
        // family applies under strict, not under the elementwise rule.
        let cancelling = Stability {
            max_excess: Some(3e-4),
            nan_mismatch: 0,
            elements: 256,
            rel_l2: Some(2e-7),
        };
        let f = Some(1e-4);
        let fam = &CaseFamily::Signed;
        assert_eq!(
            not_applicable(fam, Some(2), None, Some(&cancelling), TOL, f),
            None
        );
        let why = not_applicable(fam, Some(2), None, Some(&cancelling), TOL, None).unwrap();
        assert!(why.contains("exceeds atol"), "{why}");
        // Far as a whole, or a NaN pattern that differs: not applicable under strict either.
        let far = Stability {
            rel_l2: Some(3e-3),
            ..cancelling
        };
        let why = not_applicable(fam, Some(2), None, Some(&far), TOL, f).unwrap();
        assert!(why.contains("relative L2 distance 3.000e-3"), "{why}");
        let nan = Stability {
            nan_mismatch: 1,
            ..cancelling
        };
        assert!(not_applicable(fam, Some(2), None, Some(&nan), TOL, f).is_some());
        // Without the measurement (an older worker), the elementwise rule stands.
        let unmeasured = Stability {
            rel_l2: None,
            ..cancelling
        };
        assert!(not_applicable(fam, Some(2), None, Some(&unmeasured), TOL, f).is_some());
    }

    #[test]
    fn flush_to_zero_is_counted_on_subnormal_reference_values_only() {
        let sub = f32::MIN_POSITIVE / 8.0;
        let reference = f32s(&[sub, -sub, 1.0, 0.0, sub * 2.0]);
        let honest = f32s(&[sub, -sub, 1.0, 0.0, sub * 2.0]);
        let flushed = f32s(&[0.0, -0.0, 1.0, 0.0, 0.0]);
        assert_eq!(
            flush_count(&honest, &reference),
            Some(FlushCount {
                subnormal: 3,
                zeroed: 0
            })
        );
        assert_eq!(
            flush_count(&flushed, &reference),
            Some(FlushCount {
                subnormal: 3,
                zeroed: 3
            })
        );
        // Too few subnormal values to say.
        assert!(!flush_count(&flushed, &reference).unwrap().flushed());
        let many_ref = f32s(&[sub; 32]);
        let many_zero = f32s(&[0.0; 32]);
        assert!(flush_count(&many_zero, &many_ref).unwrap().flushed());
        assert!(!flush_count(&many_ref, &many_ref).unwrap().flushed());
        let ints = HostTensor::new(Dtype::I64, vec![1], vec![0; 8]).unwrap();
        assert_eq!(flush_count(&ints, &ints), None);
    }

    #[test]
    fn flush_count_spans_parallel_chunks_exactly() {
        // 2.5 chunks of f32: subnormals at every 7th element, the candidate zeroes every
        // third of them; chunk edges must neither drop nor double-count an element.
        let n = (1usize << 20) * 5 / 2 + 3;
        let tiny = f32::MIN_POSITIVE / 4.0;
        let r: Vec<u8> = (0..n)
            .flat_map(|i| (if i % 7 == 0 { tiny } else { 1.0 }).to_le_bytes())
            .collect();
        let c: Vec<u8> = (0..n)
            .flat_map(|i| {
                (if i % 21 == 0 {
                    0.0
                } else if i % 7 == 0 {
                    tiny
                } else {
                    1.0f32
                })
                .to_le_bytes()
            })
            .collect();
        let got = flush_count_bytes(Dtype::F32, &c, &r).unwrap();
        assert_eq!(got.subnormal as usize, n.div_ceil(7));
        assert_eq!(got.zeroed as usize, n.div_ceil(21));
    }
}
