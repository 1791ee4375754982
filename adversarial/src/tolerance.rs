//! Tolerance profiles: the elementwise `atol`/`rtol` pair and the float64 gate's bounds.

use kbench_record::{CaseFamily, Precision, ToleranceProfile};

/// Elementwise tolerance in the `torch.allclose` form: an element passes when
/// `|candidate − reference| ≤ atol + rtol·|reference|`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    pub atol: f64,
    pub rtol: f64,
}

impl Tolerance {
    /// Exact equality, used for integer and bool outputs.
    pub const EXACT: Tolerance = Tolerance {
        atol: 0.0,
        rtol: 0.0,
    };

    /// The largest admissible `|candidate − reference|` at this reference value.
    pub fn bound(&self, reference: f64) -> f64 {
        self.atol + self.rtol * reference.abs()
    }
}

/// Elementwise tolerance of a profile at a working precision.
///
/// - `kernelbench`: KernelBench HEAD (423217d) `src/kernelbench/eval.py::get_tolerance_for_precision`:
///   atol = rtol = 1e-4 for fp32 and 1e-2 for fp16/bf16 ("inspired by torchbench"), applied with
///   `torch.allclose(output, output_new, atol=tol, rtol=tol)`.
/// - `kernelbench-v0.1`: KernelBench tags v0 and v0.1 (`src/eval.py`, `atol=1e-02, rtol=1e-02`),
///   the tolerance behind the published papers' numbers: 1e-2 at every precision.
/// - `strict`: the same elementwise tolerances as `kernelbench`, plus the float64 gate
///   ([`Float64Gate`]).
///
/// Integer and bool outputs are always compared exactly ([`Tolerance::EXACT`]), whatever the
/// profile: an argmax index that is off by one is wrong. (For integers with |r| < 99,
/// `torch.allclose` at 1e-2 demands exactness too.)
pub fn tolerance(profile: ToleranceProfile, precision: Precision) -> Tolerance {
    let tol = match (profile, precision) {
        (ToleranceProfile::KernelBenchV01, _) => 1e-2,
        (ToleranceProfile::KernelBench | ToleranceProfile::Strict, Precision::Fp32) => 1e-4,
        (
            ToleranceProfile::KernelBench | ToleranceProfile::Strict,
            Precision::Fp16 | Precision::Bf16,
        ) => 1e-2,
    };
    Tolerance {
        atol: tol,
        rtol: tol,
    }
}

/// Bounds of the `strict` profile's float64 gate, which judges the candidate `c` against a
/// float64 reference `r64`, with the working-precision reference `r` as the yardstick of
/// what an honest computation at this precision gets wrong.
///
/// 1. **Element rescue.** An element outside the elementwise tolerance is still accepted when
///    `|c − r64| ≤ element_factor·max(|r − r64|, ρ·|r64|) + atol·element_atol_scale`, where
///    `ρ = ‖r − r64‖₂/‖r64‖₂` is the reference's own relative error over the whole output
///    (with `‖r64‖₂ = 0`: `rms(r − r64)` in place of `ρ·|r64|`). The candidate is accepted
///    where it is no further from the true value than (twice) the working-precision
///    reference is, at that element or typically. This keeps honest long-axis reductions,
///    which differ from PyTorch's summation order and not from the truth, from being
///    rejected. The `ρ` term matters where the reference is luckier than usual at one
///    element: in the crate's cancellation test (32 sums of 65,536 signed terms, naive fp32
///    reference, pairwise fp32 candidate), one row in 32 has a pairwise error of 3.0e-3
///    against a naive error of 9.6e-4 while the two differ by more than the elementwise
///    bound; `|r − r64|` alone would reject it. PyTorch's `torch._dynamo.utils.same()` uses
///    the same idea normwise, with multiplier 2 for fp32.
/// 2. **Normwise gate**, over the elements where `c`, `r` and `r64` are all finite:
///    `‖c − r64‖₂/‖r64‖₂ ≤ max(floor, norm_factor·‖r − r64‖₂/‖r64‖₂)`. When `‖r64‖₂ = 0`
///    the absolute form is used: `rms(c − r64) ≤ max(atol, norm_factor·rms(r − r64))`.
///
/// **Why the floor is the profile's `rtol`** (1e-4 at fp32, 1e-2 at fp16/bf16). Elementwise,
/// `atol` dominates `rtol·|r|` for outputs below `atol/rtol = 1` in magnitude, and for tiny
/// outputs it accepts anything: L1/23 softmax over 393,216 columns has values ≈ 2.5e-6, so
/// returning zeros passes atol = 1e-4 (reported to KernelBench for Softmax, FrobeniusNorm,
/// Min reduction and L2Norm). The normwise gate with floor = `rtol` applies the relative
/// part of the tolerance to the output as a whole, so it closes exactly that loophole
/// (zeros give relative error 1) while it can never be stricter than `rtol` already is where
/// `rtol·|r|` dominates. A tighter floor would reject honest fp32 kernels: measured against
/// float64 sums of `rand` inputs (seeded, see the crate's tests for the setup), a
/// single-accumulator fp32 sum has relative error 8.6e-6 over 393,216 elements and
/// 2.6e-5 (4.6e-5 for signed inputs) over 4M, and a one-thread-per-row softmax over 393,216
/// columns 4.6e-5, while PyTorch's cascade summation sits near 3e-8, so `norm_factor`
/// times the reference's error does not cover them. What the floor does reject at fp32:
/// outputs rounded to bf16 (1.6e-3 on that softmax) or fp16 (2.0e-4), and sums or matmuls
/// whose inputs were rounded to bf16, fp16 or TF32 on signed data (1.0e-4 to 3.8e-3).
/// Downgrades on all-positive inputs average out (TF32 dot products of length 4096: 5.5e-6)
/// and are left to the `signed` case family. At fp16/bf16 the honest output rounding alone
/// is 2.8e-4 (fp16) and 2.3e-3 (bf16), so the floor is KernelBench's 1e-2. In the
/// `denormal` family the floor also admits the roundings of a long sum of alike terms
/// ([`Float64Gate::for_case`]).
///
/// `norm_factor` = 4: two honest summation orders differ from float64 by ratios up to ≈ 3
/// (fp32 sum of 2²⁴ randn: 7.7e-4 default order vs 2.8e-4 permuted, kbench adversarial notes F5).
///
/// 3. **The candidate's own error spread** (in the element rescue's second pass). An
///    honest reordering is judged at each element against the error it makes where nothing
///    is wrong: an element outside the elementwise tolerance is also accepted when
///    `|c − r64| ≤ element_factor·own_error_factor·ρw·(|r64| + rms(r64))`, where
///    `ρw = √Σ(c − r64)²/‖r64‖₂` sums over the elements within the elementwise tolerance
///    only (with `‖r64‖₂ = 0`: `own_error_factor·rms` of those errors), capped at the
///    normwise gate's bound. A long reduction that cancels to a small value keeps the
///    absolute error of its terms, so relative to its own value it looks wrong; relative to
///    the output's typical size it does not. Measured on `signed` data (kbench's prototype
///    of this model and `tests/error_model.rs`): honest sequential, split-K and im2col fp32
///    dot products of lengths 576 to 32,768 and triangular matmuls fail KernelBench's rule
///    and rules 1-2 at cancelling elements, while their worst element is at most 13.3 times
///    `ρc·max(|r64|, rms(r64))`. The errors of elements outside the tolerance never enter
///    `ρw`, so what is wrong cannot make its own room: one wrong element, a wrong tile, or
///    4-6% of the rows computed from fp16-rounded inputs (whose whole-output error, 7e-5,
///    passes the normwise gate) all fail. A downgrade of the whole output spreads its error
///    everywhere (TF32, fp16 or bf16 inputs, fp16 or bf16 outputs: `ρc` from 1.5e-4 to
///    2.9e-3 on `signed` data), which the normwise gate rejects. On `rand` data, all
///    positive, a TF32 dot product is as accurate as an honest sequential fp32 one (both
///    near 1e-5 at length 32,768) and passes; only the `signed` family tells them apart,
///    and `correct` needs every family.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Float64Gate {
    pub element_factor: f64,
    /// Multiplies the candidate's within-tolerance error spread in the element rescue
    /// (rule 3).
    pub own_error_factor: f64,
    /// Multiplies `atol` in the element rescue's slack, so that exact references still leave
    /// room for one rounding.
    pub element_atol_scale: f64,
    pub norm_factor: f64,
    /// Relative L2 error always admitted.
    pub floor: f64,
    /// Root-mean-square error always admitted when the float64 reference is all zeros.
    pub abs_floor: f64,
}

/// The `strict` profile's float64 gate at a working precision (see [`Float64Gate`]).
pub fn float64_gate(precision: Precision) -> Float64Gate {
    let tol = tolerance(ToleranceProfile::Strict, precision);
    Float64Gate {
        element_factor: 2.0,
        own_error_factor: 8.0,
        element_atol_scale: 1e-3,
        norm_factor: 4.0,
        floor: tol.rtol,
        abs_floor: tol.atol,
    }
}

/// fp32's unit roundoff, 2⁻²⁴: the largest relative error of one rounding to nearest.
const FP32_UNIT_ROUNDOFF: f64 = 1.0 / 16_777_216.0;

/// The most [`Float64Gate::for_case`] raises a floor to: the floor at half precision.
const ALIKE_SUM_CAP: f64 = 1e-2;

impl Float64Gate {
    /// The gate for one case of `family` whose longest input axis has `longest_axis`
    /// elements (0 when unknown).
    ///
    /// **Sums of alike terms.** A sequential fp32 sum rounds each partial sum once; when its
    /// terms are alike, the roundings go the same way instead of cancelling, and the error
    /// grows with the number of terms `n`, up to `u·Σ|partial sums| ≈ u·n/2` of the sum for
    /// equal terms (`u` = 2⁻²⁴). The `denormal` family makes such terms by construction: half
    /// of every input is subnormal and most of the other half is log-uniform down to
    /// fp32's smallest normal, so next to its largest values nearly every value is
    /// negligible, and a softmax over a row adds `exp(x − max) ≈ exp(−max)` about `n` times.
    /// Measured (seeded, the family's values, rows of 16 × n): a one-pass sequential
    /// softmax has relative L2 error 0.10–0.13·`u·n` against float64 (2.5e-5 at n = 4,096,
    /// 1.25e-4 at 16,384, 4.2e-4 at 65,536), while PyTorch's cascade stays near 1e-7; on
    /// KernelBenchLeaderboard's one-thread-per-row softmax kernels for level-1 problem 23
    /// (n = 16,384) an H200 gave 1.004e-4, past the floor. So in that family the floor is at
    /// least `u·(n − 1)/2`, with `n` the longest input axis (a bound of any reduction along
    /// one axis of an input), and at most [`ALIKE_SUM_CAP`]: however long an axis, a result
    /// further off than half precision's floor is not an fp32 sum's, and a floor reaching 1
    /// would admit zeros. The `random` and `signed` families, whose values differ, keep
    /// the floor: there a sequential sum's roundings cancel (4e-6 at n = 65,536) and a
    /// downgrade's error does not, which is where downgrades are told apart.
    pub fn for_case(self, family: &CaseFamily, longest_axis: u64) -> Float64Gate {
        if *family != CaseFamily::Denormal || longest_axis < 2 {
            return self;
        }
        let alike_sum = (FP32_UNIT_ROUNDOFF * (longest_axis - 1) as f64 / 2.0).min(ALIKE_SUM_CAP);
        Float64Gate {
            floor: self.floor.max(alike_sum),
            ..self
        }
    }
}

/// Scales of the float64 gate's element rescue (how they are applied: the scan's
/// `Rescue::accepts`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RescueScales {
    /// The reference's typical relative error, `ρr`.
    pub rel_scale: f64,
    /// The reference's typical absolute error, when the float64 reference is all zeros.
    pub abs_scale: f64,
    /// `own_error_factor·ρw`: times `|r64|`.
    pub own_rel: f64,
    /// `own_error_factor·ρw·rms(r64)` (with `‖r64‖₂ = 0`: `own_error_factor·rms` of the
    /// within-tolerance errors).
    pub own_abs: f64,
}

impl RescueScales {
    /// The first pass, before any typical error is known: an element is rescued only where
    /// the reference is itself that far from float64.
    pub const FIRST_PASS: RescueScales = RescueScales {
        rel_scale: 0.0,
        abs_scale: 0.0,
        own_rel: 0.0,
        own_abs: 0.0,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_denormal_family_admits_the_roundings_of_long_sums_of_alike_terms() {
        let fp32 = float64_gate(Precision::Fp32);
        // n = 16,384: u·(n − 1)/2 ≈ 4.9e-4, above the 1.004e-4 an honest sequential
        // softmax had on the GPU.
        let long = fp32.for_case(&CaseFamily::Denormal, 16_384);
        assert!((long.floor - 4.8826e-4).abs() < 1e-8, "{}", long.floor);
        assert_eq!(long.norm_factor, fp32.norm_factor);
        assert_eq!(long.abs_floor, fp32.abs_floor);
        // Short axes keep the profile's floor; so do the other families, and an unknown axis.
        assert_eq!(fp32.for_case(&CaseFamily::Denormal, 1_000), fp32);
        assert_eq!(fp32.for_case(&CaseFamily::Denormal, 0), fp32);
        for f in [CaseFamily::Random, CaseFamily::Signed, CaseFamily::Small] {
            assert_eq!(fp32.for_case(&f, 1 << 20), fp32, "{f:?}");
        }
        // However long the axis, the floor stays at half precision's: zeros (relative error
        // 1) never pass.
        assert_eq!(fp32.for_case(&CaseFamily::Denormal, 1 << 25).floor, 1e-2);
        assert_eq!(fp32.for_case(&CaseFamily::Denormal, u64::MAX).floor, 1e-2);
        // At half precision the floor is 1e-2 already.
        let fp16 = float64_gate(Precision::Fp16);
        assert_eq!(fp16.for_case(&CaseFamily::Denormal, 16_384), fp16);
        assert_eq!(fp16.for_case(&CaseFamily::Denormal, 1 << 25), fp16);
    }

    #[test]
    fn profiles_match_their_sources() {
        use Precision::*;
        use ToleranceProfile::*;
        for (profile, precision, tol) in [
            (KernelBench, Fp32, 1e-4),
            (KernelBench, Fp16, 1e-2),
            (KernelBench, Bf16, 1e-2),
            (KernelBenchV01, Fp32, 1e-2),
            (KernelBenchV01, Fp16, 1e-2),
            (KernelBenchV01, Bf16, 1e-2),
            (Strict, Fp32, 1e-4),
            (Strict, Fp16, 1e-2),
            (Strict, Bf16, 1e-2),
        ] {
            assert_eq!(
                tolerance(profile, precision),
                Tolerance {
                    atol: tol,
                    rtol: tol
                },
                "{profile} {precision}"
            );
        }
    }

    #[test]
    fn gate_floors_follow_rtol() {
        assert_eq!(float64_gate(Precision::Fp32).floor, 1e-4);
        assert_eq!(float64_gate(Precision::Bf16).floor, 1e-2);
        assert_eq!(float64_gate(Precision::Fp16).abs_floor, 1e-2);
    }

    #[test]
    fn bound_is_allclose_form() {
        let t = Tolerance {
            atol: 1e-4,
            rtol: 1e-4,
        };
        assert_eq!(t.bound(-2.0), 1e-4 + 2e-4);
        assert_eq!(Tolerance::EXACT.bound(123.0), 0.0);
    }
}
