//! Output comparison and verdicts for kbench: which candidate outputs are correct.
//!
//! Verdicts are computed here, in Rust, by code a candidate cannot reach (docs/layout.md,
//! "How it works"; docs/integrity.md, "Containment"). The CPU path reads little-endian
//! tensors ([`HostTensor`]), decodes f16/bf16 with `half`, and compares in parallel with
//! `rayon`.
//!
//! - [`tolerance`]: the `kernelbench`, `kernelbench-v0.1` and `strict` profiles.
//! - [`compare`]: shape, dtype, then values (elementwise `allclose`, the NaN/Inf rules, the
//!   strict profile's float64 gate), into a [`Comparison`]; [`compare_with_alt`] for
//!   `nan-inf` cases, with the reference's run on finite probes.
//! - [`failure_outcome`] and [`case_result`]: comparisons into record types.
//! - [`not_applicable`] and [`flush_count`]: the stress families' applicability rule and
//!   flush-to-zero detection.
//!
//! [`HostTensor`]: kbench_record::HostTensor

mod codec;
mod compare;
mod rule;
mod scan;
mod stress;
mod tolerance;
mod verdict;
mod worst;

#[cfg(test)]
mod tests;

pub use compare::{
    compare, compare_case, compare_with_alt, float64_check_of, rescue_scales, unravel_index,
    CompareError, Comparison, ElementMismatch, Float64Check, Float64Status, GateMeasure,
    ValueReport,
};
pub use rule::Rule;
pub use scan::GateSums;
pub use stress::{flush_count, flush_count_bytes, not_applicable, Stability};
pub use tolerance::{float64_gate, tolerance, Float64Gate, RescueScales, Tolerance};
pub use verdict::{case_result, failure_outcome};
