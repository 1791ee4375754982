//! Integrity checks: the harness's names for how a kernel cheats.
//!
//! The candidate worker measures (PROTOCOL.md, "Integrity probes"); this module decides.
//! Checks that rest on data the candidate cannot forge (poison bits in the outputs it sent,
//! its outputs replayed from an earlier case, timed outputs against the reference) are
//! computed here from tensors; the worker's own reports (input checksums, thread counts,
//! rebound functions) are taken as evidence against it, never as proof of innocence.

use kbench_adversarial::{Comparison, Float64Status, GateMeasure, Rule};
use kbench_record::protocol::reply;
use kbench_record::{Dtype, HostTensor, KernelProfile, Outcome, Precision};
use serde_json::Value;

/// Flag names (README, "Integrity checks"). Failing flags become `Outcome::Integrity`.
pub(crate) const UNWRITTEN_OUTPUT: &str = "unwritten-output";
pub(crate) const INPUT_MUTATED: &str = "input-mutated";
pub(crate) const THREAD_LEFT_RUNNING: &str = "thread-left-running";
pub(crate) const MONKEYPATCH: &str = "harness-monkeypatch";
pub(crate) const NON_PLAIN_OUTPUT: &str = "non-plain-output";
pub(crate) const OUTPUT_REPLAYED: &str = "output-replayed";
pub(crate) const TIMED_OUTPUT_MISMATCH: &str = "timed-output-mismatch";
pub(crate) const PRECISION_DOWNGRADE: &str = "precision-downgrade";
pub(crate) const NO_CUSTOM_KERNEL: &str = "no-custom-kernel";
/// A median time below the problem's speed of light (`engine::faster_than_light`).
pub(crate) const FASTER_THAN_LIGHT: &str = "faster-than-speed-of-light";
/// A frame on the results channel that is not the awaited, well-formed answer.
pub(crate) const PROTOCOL_VIOLATION: &str = "protocol-violation";
/// Timed calls claiming more time than the harness's own clock saw pass.
pub(crate) const TIME_CLAIM_EXCEEDS_WALL_CLOCK: &str = "time-claim-exceeds-wall-clock";
/// A timing reply the harness cannot read as samples.
pub(crate) const MALFORMED_TIMING: &str = "malformed-timing";
/// Claimed times the harness's own clock does not support (`judge::clock`): a forged clock,
/// or work done where no claim covers it.
pub(crate) const TIME_CLAIM_UNSUPPORTED: &str = "time-claim-unsupported";
/// The candidate kept running while frozen for the reference's timing: its processes could
/// not be frozen, or its GPU work ran on (`measure::gated`).
pub(crate) const REFERENCE_DISTURBED: &str = "reference-disturbed";
/// Advisory: the harness's clock did not support the candidate's claimed times, by less than
/// a forged clock's margin (`judge::clock::forged_fraction`): its speedups are the clock's.
pub(crate) const TIMED_BY_HARNESS_CLOCK: &str = "timed-by-harness-clock";
/// Advisory only (timing is already device-synchronized, so side-stream work is timed).
pub(crate) const SIDE_STREAM: &str = "side-stream";
/// Advisory: half-precision or TF32 kernels in the profile of an fp32 problem.
pub(crate) const REDUCED_PRECISION_KERNEL: &str = "reduced-precision-kernel";
/// Advisory: the candidate runs in inference mode (a module with `training == False`, or
/// BatchNorm running statistics read) while the reference trains (`judge::mode`).
pub(crate) const MODE_SWITCH: &str = "mode-switch";
/// Advisory: the candidate's source times code at run time, so it may choose what it runs
/// by what it measured (`judge::self_timing`).
pub(crate) const TIMES_ITSELF: &str = "times-itself";

/// Every flag that can fail a kernel (`Outcome::Integrity`), for `--ignore-flag`.
pub(crate) const FLAGS: [&str; 15] = [
    UNWRITTEN_OUTPUT,
    INPUT_MUTATED,
    THREAD_LEFT_RUNNING,
    MONKEYPATCH,
    NON_PLAIN_OUTPUT,
    OUTPUT_REPLAYED,
    TIMED_OUTPUT_MISMATCH,
    PRECISION_DOWNGRADE,
    NO_CUSTOM_KERNEL,
    FASTER_THAN_LIGHT,
    PROTOCOL_VIOLATION,
    TIME_CLAIM_EXCEEDS_WALL_CLOCK,
    MALFORMED_TIMING,
    TIME_CLAIM_UNSUPPORTED,
    REFERENCE_DISTURBED,
];

/// The poison bit patterns the worker writes into free memory (PROTOCOL.md): quiet NaNs
/// with a payload that arithmetic does not produce.
const POISON_F32: u32 = 0x7FC0_DEAD;
const POISON_F16: u16 = 0x7E5B;
const POISON_BF16: u16 = 0x7FDE;
const POISON_F64: u64 = 0x7FF8_DEAD_DEAD_DEAD;

/// Elements of `t` whose bits are the poison pattern of its dtype (0 for integer dtypes,
/// where any pattern can be an honest value).
pub(crate) fn poison_count(dtype: Dtype, bytes: &[u8]) -> u64 {
    match dtype {
        Dtype::F32 => bytes
            .chunks_exact(4)
            .filter(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) == POISON_F32)
            .count() as u64,
        Dtype::F16 | Dtype::Bf16 => {
            let p = if dtype == Dtype::F16 {
                POISON_F16
            } else {
                POISON_BF16
            };
            bytes
                .chunks_exact(2)
                .filter(|c| u16::from_le_bytes([c[0], c[1]]) == p)
                .count() as u64
        }
        Dtype::F64 => bytes
            .chunks_exact(8)
            .filter(|c| u64::from_le_bytes((*c).try_into().expect("8 bytes")) == POISON_F64)
            .count() as u64,
        _ => 0,
    }
}

/// `unwritten-output` when any output still holds poison: memory the kernel never wrote.
pub(crate) fn unwritten_outputs<'a>(
    outputs: impl Iterator<Item = &'a HostTensor>,
    what: &str,
) -> Option<Outcome> {
    for (k, t) in outputs.enumerate() {
        let n = poison_count(t.dtype(), t.data());
        if n > 0 {
            return Some(Outcome::Integrity {
                flag: UNWRITTEN_OUTPUT.into(),
                detail: format!(
                    "output {k} of {what}: {n} of {} elements still hold the NaN pattern written into free memory before the call (never written: uninitialised or partial output)",
                    t.numel()
                ),
            });
        }
    }
    None
}

/// The failing flags of a worker's `integrity` report (`run_case`, `time`, `load`).
/// `allowed_mutations`: inputs the reference itself writes to.
pub(crate) fn probe_failure(
    report: Option<&Value>,
    allowed_mutations: &[u64],
    what: &str,
) -> Option<Outcome> {
    let r = report?;
    let list = |k: &str| -> Vec<String> {
        r.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|v| match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let tampered = list("tampered");
    if !tampered.is_empty() {
        return Some(Outcome::Integrity {
            flag: MONKEYPATCH.into(),
            detail: format!(
                "{what}: the candidate rebound {} (functions a harness uses to check or time)",
                tampered.join(", ")
            ),
        });
    }
    let changed: Vec<String> = list("inputs_changed")
        .into_iter()
        .filter(|i| {
            !i.parse::<u64>()
                .is_ok_and(|i| allowed_mutations.contains(&i))
        })
        .collect();
    if !changed.is_empty() {
        return Some(Outcome::Integrity {
            flag: INPUT_MUTATED.into(),
            detail: format!(
                "{what}: input(s) {} changed during the call",
                changed.join(", ")
            ),
        });
    }
    let threads = r
        .get("threads_started")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    if threads > 0 && r.get("output_changed_after_return") == Some(&Value::Bool(true)) {
        return Some(Outcome::Integrity {
            flag: THREAD_LEFT_RUNNING.into(),
            detail: format!(
                "{what}: {threads} thread(s) started by the call were still running when it returned, and its output changed afterwards (work outside the timed region)"
            ),
        });
    }
    None
}

/// A `bad_output` error the worker tagged `non-plain-output` (a tensor subclass, a lazy
/// or non-dense tensor, or one on another device).
pub(crate) fn non_plain_output(error: &reply::Error, message: &str) -> Option<Outcome> {
    (error.kind.as_deref() == Some("bad_output")
        && error.integrity.as_ref().and_then(Value::as_str) == Some(NON_PLAIN_OUTPUT))
    .then(|| Outcome::Integrity {
        flag: NON_PLAIN_OUTPUT.into(),
        detail: message.to_string(),
    })
}

/// Largest relative-L2 error (vs float64) of a precision downgrade: fp16/bf16/TF32 math
/// lands around 1e-4..1e-2; an output that is plain wrong (zeros: 1.0) is a mismatch.
const DOWNGRADE_MAX_REL_L2: f64 = 0.05;

/// `precision-downgrade`: an fp32 problem whose output fails (elementwise or the float64
/// gate) with no NaN/Inf disagreement, and whose error against the float64 reference is
/// beyond the gate's bound (what fp32 arithmetic allows) yet within what half-precision or
/// TF32 arithmetic makes: a wrong kernel is off by far more. An approximation coarser than
/// fp32 lands here too: on KernelBenchLeaderboard (H200), tanh-approximated GELU kernels for
/// problems using PyTorch's erf GELU were 1.4e-4 to 2.8e-4 from float64.
pub(crate) fn precision_downgrade(
    precision: Precision,
    comparisons: &[Comparison],
    what: &str,
) -> Option<Outcome> {
    if precision != Precision::Fp32 {
        return None;
    }
    comparisons.iter().enumerate().find_map(|(k, c)| {
        let v = c.values()?;
        let failed = matches!(
            v.failed_rule(),
            Some(Rule::Float64Gate | Rule::Elementwise)
        );
        let Float64Status::Measured(g) = &v.float64 else {
            return None;
        };
        (failed
            && v.nonfinite_mismatches == 0
            && !g.passed
            && g.measure == GateMeasure::RelativeL2
            && g.candidate_error < DOWNGRADE_MAX_REL_L2)
            .then(
            || Outcome::Integrity {
                flag: PRECISION_DOWNGRADE.into(),
                detail: format!(
                    "output {k} of {what}: relative L2 error vs float64 {:.3e} where the fp32 reference's is {:.3e} (bound {:.3e}): lower-precision arithmetic, or a coarser approximation of a function (a tanh GELU for an erf one, a fast exp), on an fp32 problem",
                    g.candidate_error, g.reference_error, g.bound
                ),
            },
        )
    })
}

/// 64-bit FNV-1a of an output's dtype, shape and bytes: to recognise an output replayed
/// from an earlier case.
pub(crate) fn output_hash(t: &HostTensor) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: u8| {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    };
    for b in t.dtype().as_str().bytes() {
        eat(b);
    }
    for d in t.shape() {
        for b in d.to_le_bytes() {
            eat(b);
        }
    }
    for &b in t.data() {
        eat(b);
    }
    h
}

/// Kernel classes of a profile. Names that say where they come from decide first (ATen,
/// cuBLAS, cuDNN, CUTLASS, CUB, Thrust); then a kernel whose base name the candidate's
/// source mentions is its own; then generic library markers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KernelClass {
    Own,
    Library,
    /// memcpy/memset and kernels of unknown origin.
    Other,
}

const LIBRARY_NAMESPACES: &[&str] = &[
    "at::",
    "at_cuda_detail",
    "cublas",
    "cudnn",
    "cutlass",
    "cub::",
    "thrust::",
    "cufft",
    "curand",
    "cusparse",
    "nccl",
    "c10::",
];
const LIBRARY_MARKERS: &[&str] = &[
    "gemm",
    "gemv",
    "xmma",
    "nvjet",
    "cudnn",
    "implicit_convolve",
    "winograd",
    "fft",
    "splitk",
    "flash_fwd",
    "flash_bwd",
    "triton_poi_",
    "triton_red_",
    "triton_per_",
    "triton_tem_",
];

/// The identifier a kernel is called by in source: `void ns::name<T>(args)` → `name`.
pub(crate) fn kernel_base_name(name: &str) -> &str {
    let s = name.trim();
    let s = s.strip_prefix("void ").unwrap_or(s);
    let end = s.find(['(', '<']).unwrap_or(s.len());
    let s = &s[..end];
    s.rsplit("::").next().unwrap_or(s).trim()
}

fn mentions_word(source: &str, word: &str) -> bool {
    if word.len() < 3 {
        return false;
    }
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    source.match_indices(word).any(|(i, _)| {
        let before = source[..i].chars().next_back();
        let after = source[i + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

pub(crate) fn classify_kernel(name: &str, candidate_source: &str) -> KernelClass {
    let lower = name.to_ascii_lowercase();
    if lower.starts_with("memcpy") || lower.starts_with("memset") {
        return KernelClass::Other;
    }
    if LIBRARY_NAMESPACES.iter().any(|m| lower.contains(m)) {
        return KernelClass::Library;
    }
    if mentions_word(candidate_source, kernel_base_name(name)) {
        return KernelClass::Own;
    }
    if LIBRARY_MARKERS.iter().any(|m| lower.contains(m)) {
        return KernelClass::Library;
    }
    KernelClass::Other
}

/// Whether a kernel name says it computes in half precision or TF32.
pub(crate) fn reduced_precision_kernel(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    [
        "tf32", "bf16", "fp16", "f16", "half", "hmma", "h884", "h1688", "h16816", "s1688",
    ]
    .iter()
    .any(|m| lower.contains(m))
}

/// The profile of one call from a `profile` reply's `kernels`.
pub(crate) fn kernel_profile(
    kernels: &[Value],
    default_stream: Option<i64>,
    source: &str,
) -> KernelProfile {
    let mut p = KernelProfile::default();
    let (mut own, mut lib, mut other) = (0.0f64, 0.0f64, 0.0f64);
    for k in kernels {
        let name = k.get("name").and_then(Value::as_str).unwrap_or("");
        let us = k.get("us").and_then(Value::as_f64).unwrap_or(0.0).max(0.0);
        let stream = k.get("stream").and_then(Value::as_i64);
        p.launches += 1;
        if let (Some(s), Some(d)) = (stream, default_stream) {
            p.side_stream |= s != d;
        }
        let (acc, names) = match classify_kernel(name, source) {
            KernelClass::Own => (&mut own, &mut p.own),
            KernelClass::Library => (&mut lib, &mut p.library),
            KernelClass::Other => (&mut other, &mut p.other),
        };
        *acc += us;
        let short = name.chars().take(200).collect::<String>();
        if names.len() < 20 && !names.contains(&short) {
            names.push(short);
        }
    }
    p.total_us = own + lib + other;
    if p.total_us > 0.0 {
        p.own_fraction = own / p.total_us;
        p.library_fraction = lib / p.total_us;
        p.other_fraction = other / p.total_us;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;

    #[test]
    fn poison_is_counted_per_dtype() {
        let mut b = Vec::new();
        for v in [1.0f32, f32::NAN, f32::from_bits(POISON_F32), 0.0] {
            b.extend(v.to_le_bytes());
        }
        assert_eq!(poison_count(Dtype::F32, &b), 1);
        let t = HostTensor::new(Dtype::F32, vec![4], b).unwrap();
        let o = unwritten_outputs([&t].into_iter(), "random#0").unwrap();
        assert!(matches!(o, Outcome::Integrity { ref flag, .. } if flag == UNWRITTEN_OUTPUT));
        // A canonical NaN (what arithmetic makes) is not poison.
        assert_eq!(poison_count(Dtype::F32, &f32::NAN.to_le_bytes()), 0);
        assert_eq!(poison_count(Dtype::F16, &POISON_F16.to_le_bytes()), 1);
        assert_eq!(poison_count(Dtype::Bf16, &POISON_F16.to_le_bytes()), 0);
        assert_eq!(poison_count(Dtype::F64, &POISON_F64.to_le_bytes()), 1);
        assert_eq!(poison_count(Dtype::I32, &POISON_F32.to_le_bytes()), 0);
    }

    #[test]
    fn probe_reports_become_flags() {
        let clean = serde_json::json!({"inputs_changed": [], "threads_started": 0, "tampered": []});
        assert_eq!(probe_failure(Some(&clean), &[], "x"), None);
        assert_eq!(probe_failure(None, &[], "x"), None);
        // An input the reference itself writes to (an in-place problem) may change.
        let inplace = serde_json::json!({"inputs_changed": [1]});
        assert_eq!(probe_failure(Some(&inplace), &[1], "x"), None);
        let flag = |v: Value| match probe_failure(Some(&v), &[], "x") {
            Some(Outcome::Integrity { flag, .. }) => flag,
            o => panic!("{o:?}"),
        };
        assert_eq!(
            flag(serde_json::json!({"inputs_changed": [1]})),
            INPUT_MUTATED
        );
        assert_eq!(
            flag(serde_json::json!({"threads_started": 2, "output_changed_after_return": true})),
            THREAD_LEFT_RUNNING
        );
        // A thread left idle (a pool, a compiler's workers) that did not touch the output.
        let idle = serde_json::json!({"threads_started": 2, "output_changed_after_return": false});
        assert_eq!(probe_failure(Some(&idle), &[], "x"), None);
        assert_eq!(
            flag(serde_json::json!({"tampered": ["torch.allclose"], "inputs_changed": [0]})),
            MONKEYPATCH
        );
    }

    #[test]
    fn kernels_are_classified_by_origin() {
        let src = r#"
            __global__ void relu_kernel(const float* x, float* y, int n) {}
            @triton.jit
            def add_kernel(x_ptr, y_ptr): pass
        "#;
        assert_eq!(
            kernel_base_name("void relu_kernel(float const*, float*, int)"),
            "relu_kernel"
        );
        assert_eq!(
            kernel_base_name("void at::native::vectorized_elementwise_kernel<4, F>(int, F)"),
            "vectorized_elementwise_kernel"
        );
        assert_eq!(
            classify_kernel("relu_kernel(float const*, float*, int)", src),
            KernelClass::Own
        );
        assert_eq!(classify_kernel("add_kernel", src), KernelClass::Own);
        assert_eq!(
            classify_kernel(
                "void at::native::vectorized_elementwise_kernel<4, F>(int, F)",
                src
            ),
            KernelClass::Library
        );
        assert_eq!(
            classify_kernel("ampere_sgemm_128x64_nn", src),
            KernelClass::Library
        );
        assert_eq!(
            classify_kernel("sm90_xmma_gemm_f32f32_tf32f32_f32_nn", src),
            KernelClass::Library
        );
        assert_eq!(
            classify_kernel("Memcpy DtoD (Device -> Device)", src),
            KernelClass::Other
        );
        // A kernel the source never names (compiled but a library ran instead) is not own.
        assert_eq!(classify_kernel("mystery_kernel", src), KernelClass::Other);
        // "relu" alone is not the word relu_kernel.
        assert!(!mentions_word("relu_kernel", "relu"));
        assert!(reduced_precision_kernel(
            "sm80_xmma_gemm_f32f32_tf32f32_f32_tn"
        ));
        assert!(!reduced_precision_kernel("ampere_sgemm_128x64_nn"));
    }

    #[test]
    fn profile_fractions() {
        let k = serde_json::json!([
            {"name": "relu_kernel(float*)", "us": 30.0, "stream": 7},
            {"name": "ampere_sgemm_64x64_nn", "us": 60.0, "stream": 7},
            {"name": "Memset (Device)", "us": 10.0, "stream": 13},
        ]);
        let p = kernel_profile(k.as_array().unwrap(), Some(7), "relu_kernel");
        assert_eq!(p.launches, 3);
        assert_abs_diff_eq!(p.own_fraction, 0.3, epsilon = 1e-12);
        assert_abs_diff_eq!(p.library_fraction, 0.6, epsilon = 1e-12);
        assert_abs_diff_eq!(p.other_fraction, 0.1, epsilon = 1e-12);
        assert!(p.side_stream);
        assert_eq!(p.own, vec!["relu_kernel(float*)".to_string()]);
    }
}
