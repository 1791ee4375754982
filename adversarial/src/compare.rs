//! Comparison of one output tensor against the reference: shape, dtype, then values.

use kbench_record::{Dtype, HostTensor, Precision, ToleranceProfile};

use crate::rule::Rule;
use crate::scan::{self, ChunkStats, GateSums, Rescue, ScanParams, CHUNK_ELEMS};
use crate::tolerance::{float64_gate, tolerance, Float64Gate, RescueScales, Tolerance};

/// Harness faults: the inputs of [`compare`] do not fit together. A wrong candidate is never
/// an error, it is a [`Comparison`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompareError {
    #[error("float64 reference has dtype {0}, expected f64: cast the reference model and inputs to float64")]
    ReferenceF64Dtype(Dtype),
    #[error("float64 reference has shape {got:?} but the reference output has shape {expected:?}")]
    ReferenceF64Shape { expected: Vec<u64>, got: Vec<u64> },
    #[error("tensor of {0} elements does not fit this machine's address space")]
    TooLarge(u64),
    #[error("probe reference (nan-inf) is {got_dtype} {got:?}, the reference output {expected_dtype} {expected:?}")]
    ProbeReference {
        expected_dtype: Dtype,
        expected: Vec<u64>,
        got_dtype: Dtype,
        got: Vec<u64>,
    },
}

/// The first element outside tolerance (lowest flat index).
#[derive(Debug, Clone, PartialEq)]
pub struct ElementMismatch {
    /// Row-major flat index.
    pub flat_index: u64,
    /// Multi-index, one entry per dimension.
    pub index: Vec<u64>,
    pub rule: Rule,
    /// Values as f64 (integers above 2⁵³ are rounded here, not in the comparison).
    pub candidate: f64,
    pub reference: f64,
}

/// How the float64 measurement is expressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateMeasure {
    /// `‖x − r64‖₂ / ‖r64‖₂`.
    RelativeL2,
    /// `‖x − r64‖₂ / √n`, used when `‖r64‖₂ = 0`.
    Rms,
}

/// Errors of the candidate and of the working-precision reference against the float64
/// reference, over the elements where all three are finite.
#[derive(Debug, Clone, PartialEq)]
pub struct Float64Check {
    /// Whether the result counts towards the verdict (only under the `strict` profile).
    pub enforced: bool,
    pub measure: GateMeasure,
    /// Elements where candidate, reference and float64 reference are all finite.
    pub elements: u64,
    pub candidate_error: f64,
    pub reference_error: f64,
    /// `max(floor, norm_factor · reference_error)`.
    pub bound: f64,
    pub passed: bool,
    /// The element farthest from the float64 reference (largest `|c − r64|`, lowest index
    /// among equals), as a multi-index. Found by a second pass, only when the check failed.
    pub worst_index: Option<Vec<u64>>,
    pub gate: Float64Gate,
}

/// Whether and how the output was measured against a float64 reference.
#[derive(Debug, Clone, PartialEq)]
pub enum Float64Status {
    /// No float64 reference under a non-strict profile, or an integer/bool output.
    NotApplicable,
    /// `strict` profile without a float64 reference: only the elementwise rule was applied.
    Skipped,
    Measured(Float64Check),
}

/// Value statistics of an output whose shape and dtype matched the reference.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueReport {
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    pub profile: ToleranceProfile,
    /// The elementwise tolerance applied ([`Tolerance::EXACT`] for integers and bools).
    pub tolerance: Tolerance,
    /// Elements compared.
    pub elements: u64,
    /// Elements outside tolerance: elementwise failures not rescued by the float64 gate plus
    /// NaN/Inf rule failures.
    pub mismatches: u64,
    /// Of `mismatches`, those under a NaN/Inf rule ([`Rule::is_nonfinite`]).
    pub nonfinite_mismatches: u64,
    /// `nan-inf` family: elements where the reference is NaN/±Inf only through its own
    /// algorithm (the probe reference is finite there: the element does not depend on the
    /// injected values) and the candidate is finite and within tolerance of the probe value.
    pub artefacts: u64,
    /// The first of those (lowest flat index), as a multi-index.
    pub first_artefact: Option<Vec<u64>>,
    /// `max |c − r|/(1 + |r|)` over elements where both are finite (and `|c − a|/(1 + |a|)`
    /// over the artefacts, `a` the probe value): the smallest `t` for which
    /// `atol = rtol = t` passes every finite element. 0 when there is none.
    pub tol_needed: f64,
    /// Whether a probe reference (`nan-inf` family) was given: the relaxed NaN/Inf rules.
    pub probed: bool,
    /// Elements outside the elementwise tolerance that the strict float64 gate accepted.
    pub rescued: u64,
    /// Largest `|c − r|` over elements where both are finite.
    pub max_abs: f64,
    /// Largest `|c − r| / |r|` over elements where both are finite; `+inf` when `r = 0` and
    /// `c ≠ 0` somewhere, 0 where both are zero.
    pub max_rel: f64,
    pub first_mismatch: Option<ElementMismatch>,
    pub float64: Float64Status,
}

impl ValueReport {
    /// The rule that failed, if any: the first mismatching element's rule, else the float64
    /// gate when it is enforced and failed.
    pub fn failed_rule(&self) -> Option<Rule> {
        if let Some(m) = &self.first_mismatch {
            return Some(m.rule);
        }
        match &self.float64 {
            Float64Status::Measured(g) if g.enforced && !g.passed => Some(Rule::Float64Gate),
            _ => None,
        }
    }

    pub fn passed(&self) -> bool {
        self.failed_rule().is_none()
    }

    /// `‖c − r64‖₂ / ‖r64‖₂` when a float64 reference was given and is not all zeros.
    pub fn rel_l2_vs_f64(&self) -> Option<f64> {
        match &self.float64 {
            Float64Status::Measured(g) if g.measure == GateMeasure::RelativeL2 => {
                Some(g.candidate_error)
            }
            _ => None,
        }
    }

    /// What was not checked, or checked leniently, and why: for `EvalRecord::notes`.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.float64 == Float64Status::Skipped {
            notes.push("float64 gate skipped: no float64 reference; strict applied kernelbench's elementwise rule only".to_string());
        }
        if self.rescued > 0 {
            notes.push(format!(
                "{} of {} elements outside the elementwise tolerance were accepted by the float64 gate (no further from float64 than the reference)",
                self.rescued, self.elements
            ));
        }
        if let Some(at) = &self.first_artefact {
            notes.push(format!(
                "{} of {} elements accepted as reference artefacts (first at {at:?}): the reference is NaN/Inf there only through its own algorithm (e.g. 0·NaN in a matmul); the element does not depend on the injected NaN/Inf inputs and the candidate matches the reference run on finite probes",
                self.artefacts, self.elements
            ));
        }
        notes
    }
}

/// The result of comparing one output tensor. Checks run in order: shape, dtype, values.
// One per output and short-lived: boxing the common variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Comparison {
    WrongShape { expected: Vec<u64>, got: Vec<u64> },
    WrongDtype { expected: Dtype, got: Dtype },
    Values(ValueReport),
}

impl Comparison {
    pub fn passed(&self) -> bool {
        match self {
            Comparison::Values(v) => v.passed(),
            _ => false,
        }
    }

    pub fn failed_rule(&self) -> Option<Rule> {
        match self {
            Comparison::WrongShape { .. } => Some(Rule::Shape),
            Comparison::WrongDtype { .. } => Some(Rule::Dtype),
            Comparison::Values(v) => v.failed_rule(),
        }
    }

    pub fn values(&self) -> Option<&ValueReport> {
        match self {
            Comparison::Values(v) => Some(v),
            _ => None,
        }
    }
}

impl std::fmt::Display for Comparison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Comparison::WrongShape { expected, got } => {
                write!(f, "wrong shape: expected {expected:?}, got {got:?}")
            }
            Comparison::WrongDtype { expected, got } => {
                write!(f, "wrong dtype: expected {expected}, got {got}")
            }
            Comparison::Values(v) => {
                match v.failed_rule() {
                    None => write!(f, "pass")?,
                    Some(rule) => write!(f, "fail ({rule})")?,
                }
                write!(
                    f,
                    ": {}/{} elements outside tolerance (atol {:e}, rtol {:e}), max abs {:.3e}, max rel {:.3e}",
                    v.mismatches, v.elements, v.tolerance.atol, v.tolerance.rtol, v.max_abs, v.max_rel
                )?;
                if let Some(m) = &v.first_mismatch {
                    write!(
                        f,
                        ", first at {:?}: {} vs {}",
                        m.index, m.candidate, m.reference
                    )?;
                }
                match &v.float64 {
                    Float64Status::NotApplicable => Ok(()),
                    Float64Status::Skipped => write!(f, "; float64 gate skipped"),
                    Float64Status::Measured(g) => {
                        let what = match g.measure {
                            GateMeasure::RelativeL2 => "rel L2",
                            GateMeasure::Rms => "rms",
                        };
                        write!(
                            f,
                            "; vs float64: {what} {:.3e} (reference {:.3e}, bound {:.3e}{})",
                            g.candidate_error,
                            g.reference_error,
                            g.bound,
                            if g.enforced { "" } else { ", not enforced" }
                        )
                    }
                }
            }
        }
    }
}

/// Row-major multi-index of `flat` in `shape` (an empty shape is a scalar: `[]`).
pub fn unravel_index(flat: u64, shape: &[u64]) -> Vec<u64> {
    let mut index = vec![0; shape.len()];
    let mut rest = flat;
    for (slot, &dim) in index.iter_mut().zip(shape).rev() {
        if dim > 0 {
            *slot = rest % dim;
            rest /= dim;
        }
    }
    index
}

/// Compares one candidate output with the reference output.
///
/// - Shape first (exact, as KernelBench's `output.shape != output_new.shape`), then dtype
///   (the candidate must return the reference's dtype), then values.
/// - Floats: `|c − r| ≤ atol + rtol·|r|` (`torch.allclose`), evaluated in f64 after exact
///   decoding, with the [`tolerance`] of `profile` at `precision`. NaN and ±Inf must match in
///   position and sign: NaN against NaN passes; a finite candidate against NaN fails
///   (`drops-nan`), against ±Inf too (`drops-inf`); the other infinity fails (`inf-sign`),
///   NaN against ±Inf too (`nan-inf-kind`), and NaN/±Inf against a finite reference fails
///   (`nonfinite-invented`). Unlike `torch.allclose` (`equal_nan=False`), matching NaNs
///   pass: a reference that produces NaN is judged by the case rules, not made unsolvable
///   here. [`compare_with_alt`] relaxes this for `nan-inf` cases.
/// - Integers and bools: exact.
/// - `reference_f64` (the reference computed in float64, same shape, dtype f64) feeds the
///   strict profile's float64 gate ([`Float64Gate`]); under other profiles it is measured and
///   reported but not enforced. Without it, `strict` applies the elementwise rule only and
///   says so ([`Float64Status::Skipped`]).
///
/// Runs in parallel (rayon) over chunks of 65,536 elements; results do not depend on the
/// number of threads. One pass over the bytes; a second pass only for a strict candidate
/// with elements the first pass could not rescue (the rescue's `ρ` term needs the
/// reference's overall error first), and one to locate the worst element when the float64
/// check fails. On the 2-core development VM (SSE2 code): 23 GiB/s for fp32, 12.5 GiB/s
/// for bf16 (bytes of both tensors), 22 GiB/s for strict fp32 with its float64 reference.
pub fn compare(
    candidate: &HostTensor,
    reference: &HostTensor,
    reference_f64: Option<&HostTensor>,
    profile: ToleranceProfile,
    precision: Precision,
) -> Result<Comparison, CompareError> {
    compare_with_alt(
        candidate,
        reference,
        reference_f64,
        None,
        profile,
        precision,
    )
}

/// [`compare`] for a `nan-inf` case, with its probe reference `alt` (same dtype and shape
/// as `reference`): the reference's value at each element with the injected non-finite
/// inputs replaced by finite probes, NaN where the element depends on them. With it the
/// NaN/Inf rules are those of the README's "NaN and Inf": a finite candidate where the
/// reference is NaN/±Inf passes when `alt` is finite there and the candidate within
/// tolerance of it (a reference artefact, counted in [`ValueReport::artefacts`]); NaN
/// against ±Inf passes. `alt = None` is exactly [`compare`].
pub fn compare_with_alt(
    candidate: &HostTensor,
    reference: &HostTensor,
    reference_f64: Option<&HostTensor>,
    alt: Option<&HostTensor>,
    profile: ToleranceProfile,
    precision: Precision,
) -> Result<Comparison, CompareError> {
    compare_case(
        candidate,
        reference,
        reference_f64,
        alt,
        profile,
        precision,
        float64_gate(precision),
    )
}

/// [`compare_with_alt`] under a case's own float64 gate (see [`Float64Gate::for_case`]).
pub fn compare_case(
    candidate: &HostTensor,
    reference: &HostTensor,
    reference_f64: Option<&HostTensor>,
    alt: Option<&HostTensor>,
    profile: ToleranceProfile,
    precision: Precision,
    gate: Float64Gate,
) -> Result<Comparison, CompareError> {
    compare_chunked(
        candidate,
        reference,
        reference_f64,
        alt,
        (profile, precision, gate),
        CHUNK_ELEMS,
    )
}

pub(crate) fn compare_chunked(
    candidate: &HostTensor,
    reference: &HostTensor,
    reference_f64: Option<&HostTensor>,
    alt: Option<&HostTensor>,
    (profile, precision, gate): (ToleranceProfile, Precision, Float64Gate),
    chunk_elems: usize,
) -> Result<Comparison, CompareError> {
    if let Some(a) = alt {
        if a.dtype() != reference.dtype() || a.shape() != reference.shape() {
            return Err(CompareError::ProbeReference {
                expected_dtype: reference.dtype(),
                expected: reference.shape().to_vec(),
                got_dtype: a.dtype(),
                got: a.shape().to_vec(),
            });
        }
    }
    if let Some(r64) = reference_f64 {
        if r64.dtype() != Dtype::F64 {
            return Err(CompareError::ReferenceF64Dtype(r64.dtype()));
        }
        if r64.shape() != reference.shape() {
            return Err(CompareError::ReferenceF64Shape {
                expected: reference.shape().to_vec(),
                got: r64.shape().to_vec(),
            });
        }
    }
    if candidate.shape() != reference.shape() {
        return Ok(Comparison::WrongShape {
            expected: reference.shape().to_vec(),
            got: candidate.shape().to_vec(),
        });
    }
    if candidate.dtype() != reference.dtype() {
        return Ok(Comparison::WrongDtype {
            expected: reference.dtype(),
            got: candidate.dtype(),
        });
    }
    let dtype = reference.dtype();
    let numel = usize::try_from(reference.numel())
        .map_err(|_| CompareError::TooLarge(reference.numel()))?;
    let is_float = dtype.is_float();
    let tol = if is_float {
        tolerance(profile, precision)
    } else {
        Tolerance::EXACT
    };
    let strict = profile == ToleranceProfile::Strict;
    let truth = reference_f64.filter(|_| is_float);
    let alt = alt.filter(|_| is_float);
    let mut params = ScanParams {
        tol,
        rescue: (strict && truth.is_some()).then_some(Rescue {
            factor: gate.element_factor,
            slack: tol.atol * gate.element_atol_scale,
            scales: RescueScales::FIRST_PASS,
        }),
    };
    let run = |params: &ScanParams| {
        scan::scan(
            dtype,
            candidate.data(),
            reference.data(),
            truth.map(HostTensor::data),
            alt.map(HostTensor::data),
            numel,
            params,
            chunk_elems,
        )
    };
    let mut stats = run(&params);
    // Second pass, only for candidates with elements the first pass could not rescue: now
    // that the typical errors are known, an element may be as far from float64 as the
    // reference typically is, or as the candidate's own error spread allows (see
    // `Float64Gate`).
    if let Some(rescue) = params.rescue.as_mut() {
        if stats.elementwise_failures > 0 && stats.gate.elements > 0 {
            rescue.scales = rescue_scales(&gate, &stats.gate);
            stats = run(&params);
        }
    }
    let shape = reference.shape();
    let float64 = match truth {
        Some(t) => {
            let mut check = float64_check(&stats, gate, strict);
            if !check.passed {
                let worst = crate::worst::worst_vs_f64(
                    dtype,
                    candidate.data(),
                    reference.data(),
                    t.data(),
                    numel,
                    chunk_elems,
                );
                check.worst_index = worst.map(|(flat, _)| unravel_index(flat, shape));
            }
            Float64Status::Measured(check)
        }
        None if strict && is_float => Float64Status::Skipped,
        None => Float64Status::NotApplicable,
    };
    Ok(Comparison::Values(ValueReport {
        dtype,
        shape: shape.to_vec(),
        profile,
        tolerance: tol,
        elements: stats.elements,
        mismatches: stats.elementwise_failures + stats.nonfinite_mismatches,
        nonfinite_mismatches: stats.nonfinite_mismatches,
        artefacts: stats.artefacts,
        first_artefact: stats.first_artefact.map(|f| unravel_index(f, shape)),
        tol_needed: stats.tol_needed,
        probed: alt.is_some(),
        rescued: stats.rescued,
        max_abs: stats.max_abs,
        max_rel: stats.max_rel,
        first_mismatch: stats.first.map(|(flat, rule, c, r)| ElementMismatch {
            flat_index: flat,
            index: unravel_index(flat, shape),
            rule,
            candidate: c,
            reference: r,
        }),
        float64,
    }))
}

/// The normwise part of the float64 gate (see [`Float64Gate`]).
fn float64_check(stats: &ChunkStats, gate: Float64Gate, enforced: bool) -> Float64Check {
    float64_check_of(&stats.gate, gate, enforced)
}

/// The normwise part of the float64 gate from its sums, whoever accumulated them: the CPU
/// scan here, or the harness's GPU comparison kernel, so both paths give the same verdict.
pub fn float64_check_of(g: &GateSums, gate: Float64Gate, enforced: bool) -> Float64Check {
    let (measure, scale, floor) = if g.truth2 > 0.0 {
        (GateMeasure::RelativeL2, g.truth2.sqrt(), gate.floor)
    } else {
        (GateMeasure::Rms, (g.elements as f64).sqrt(), gate.abs_floor)
    };
    let (candidate_error, reference_error) = if g.elements == 0 {
        (0.0, 0.0)
    } else {
        (g.cand_err2.sqrt() / scale, g.ref_err2.sqrt() / scale)
    };
    let bound = floor.max(gate.norm_factor * reference_error);
    Float64Check {
        enforced,
        measure,
        elements: g.elements,
        candidate_error,
        reference_error,
        bound,
        passed: candidate_error <= bound,
        worst_index: None,
        gate,
    }
}

/// Scales of the element rescue's second pass, from the first pass's sums: the relative
/// error typical of the reference, and the candidate's own error spread over the elements
/// within the elementwise tolerance (see [`Float64Gate`], rules 1 and 3). One function for
/// the CPU scan and the harness's GPU comparison kernel, so both give the same verdict.
pub fn rescue_scales(gate: &Float64Gate, g: &GateSums) -> RescueScales {
    if g.elements == 0 {
        return RescueScales::FIRST_PASS;
    }
    let n = g.elements as f64;
    let k = gate.own_error_factor;
    // The spread counts only as far as the normwise gate admits an error: a candidate
    // whose whole output is too far from float64 fails there, and its elements are not
    // made to look rescued by the very error that fails it.
    let check = float64_check_of(g, *gate, true);
    let scale2 = if g.truth2 > 0.0 { g.truth2 } else { n };
    let within2 = g.within_err2.min(check.bound * check.bound * scale2);
    let own_abs = k * (within2 / n).sqrt();
    if g.truth2 > 0.0 {
        RescueScales {
            rel_scale: (g.ref_err2 / g.truth2).sqrt(),
            abs_scale: 0.0,
            own_rel: k * (within2 / g.truth2).sqrt(),
            own_abs,
        }
    } else {
        RescueScales {
            rel_scale: 0.0,
            abs_scale: (g.ref_err2 / n).sqrt(),
            own_rel: 0.0,
            own_abs,
        }
    }
}
