//! Every test builds tensors on the host and compares them with the CPU comparator;
//! with a GPU it uploads them and asserts that [`DeviceComparator::compare`] gives the
//! same [`Comparison`] (float64-gate sums to a relative 1e-9). Without a GPU the GPU
//! half is skipped (the CPU expectations, which check that each case exercises what it
//! claims, still run).
//!
//! This file holds the shared helpers and the build and decoding tests; `float_rules.rs`
//! the floating-point rules (tolerance, NaN/Inf, zeros, subnormals, strict's rescue and
//! float64 gate), `sizes_and_dtypes.rs` the shape and dtype checks, sizes, integers, random
//! mixtures and throughput, `flush.rs` the denormal family's flush count.

use std::sync::OnceLock;
use std::time::Instant;

use kbench_adversarial::{tolerance, CompareError, Comparison, Float64Status, ValueReport};
use kbench_record::{Dtype, HostTensor, Precision, ToleranceProfile};

use super::compile::{compile_cubin, compile_ptx, nvrtc_present, FLUSH_KERNELS, KERNELS};
use super::stats::{decode, f16_to_f64};
use super::*;
use crate::gpu::devmem::{DevBuf, Gpu};

mod float_rules;
mod flush;
mod host_emulation;
mod sizes_and_dtypes;

const KB: ToleranceProfile = ToleranceProfile::KernelBench;
const V01: ToleranceProfile = ToleranceProfile::KernelBenchV01;
const STRICT: ToleranceProfile = ToleranceProfile::Strict;
const PROFILES: [ToleranceProfile; 3] = [KB, V01, STRICT];
const PRECISIONS: [Precision; 3] = [Precision::Fp32, Precision::Fp16, Precision::Bf16];
const FLOATS: [Dtype; 4] = [Dtype::F32, Dtype::F16, Dtype::Bf16, Dtype::F64];
const INTS: [Dtype; 6] = [
    Dtype::I64,
    Dtype::I32,
    Dtype::I16,
    Dtype::I8,
    Dtype::U8,
    Dtype::Bool,
];

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [-1, 1).
    fn sym(&mut self) -> f64 {
        2.0 * self.unit() - 1.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len() as u64) as usize]
    }
}

/// The comparator on GPU 0, built once per test process; `None` without a GPU.
fn comparator() -> Option<&'static DeviceComparator> {
    static DC: OnceLock<Option<DeviceComparator>> = OnceLock::new();
    DC.get_or_init(|| {
        if crate::gpu::inventory::inventory().count() == 0 {
            return None;
        }
        let gpu = Gpu::open(0).expect("opening GPU 0");
        let name = cudarc::driver::result::device::get(0)
            .and_then(cudarc::driver::result::device::get_name)
            .unwrap_or_default();
        let started = Instant::now();
        let dc = DeviceComparator::new(&gpu).expect("building the device comparator");
        println!(
            "devcmp: comparator for {name} built in {:.0} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
        Some(dc)
    })
    .as_ref()
}

/// The comparator, or `None` after printing that the GPU half of `test` is skipped.
fn gpu_or_skip(test: &str) -> Option<&'static DeviceComparator> {
    let dc = comparator();
    if dc.is_none() {
        println!("devcmp::{test}: skipped on the GPU (no GPU); CPU expectations checked");
    }
    dc
}

fn precision_of(dtype: Dtype) -> Precision {
    match dtype {
        Dtype::F16 => Precision::Fp16,
        Dtype::Bf16 => Precision::Bf16,
        _ => Precision::Fp32,
    }
}

/// f32 to binary16 by truncation (any f16 value serves a test).
fn f16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let a = x.abs();
    if x.is_nan() {
        sign | 0x7e00
    } else if a >= 65520.0 {
        sign | 0x7c00
    } else if a >= 6.103_515_6e-5 {
        let e = ((b >> 23) & 0xff) as u16 + 15 - 127;
        sign | (e << 10) | ((b >> 13) & 0x3ff) as u16
    } else {
        sign | (a / 5.960_464_5e-8) as u16
    }
}

fn encode(dtype: Dtype, v: &[f64]) -> Vec<u8> {
    v.iter()
        .flat_map(|&x| match dtype {
            Dtype::F64 => x.to_le_bytes().to_vec(),
            Dtype::F32 => (x as f32).to_le_bytes().to_vec(),
            Dtype::F16 => f16_bits(x as f32).to_le_bytes().to_vec(),
            Dtype::Bf16 => (((x as f32).to_bits() >> 16) as u16).to_le_bytes().to_vec(),
            _ => unreachable!("not a float dtype"),
        })
        .collect()
}

fn floats(dtype: Dtype, shape: &[u64], v: &[f64]) -> HostTensor {
    HostTensor::new(dtype, shape.to_vec(), encode(dtype, v)).unwrap()
}

fn f64s(shape: &[u64], v: &[f64]) -> HostTensor {
    floats(Dtype::F64, shape, v)
}

/// Raw bit patterns (the low `size` bytes of each).
fn bits(dtype: Dtype, shape: &[u64], v: &[u64]) -> HostTensor {
    let data = v
        .iter()
        .flat_map(|b| b.to_le_bytes()[..dtype.size()].to_vec())
        .collect();
    HostTensor::new(dtype, shape.to_vec(), data).unwrap()
}

fn ints(dtype: Dtype, shape: &[u64], v: &[i64]) -> HostTensor {
    bits(
        dtype,
        shape,
        &v.iter().map(|&x| x as u64).collect::<Vec<_>>(),
    )
}

fn dev<'a>(h: &HostTensor, buf: &'a DevBuf) -> DevTensor<'a> {
    DevTensor {
        buf,
        dtype: h.dtype(),
        shape: h.shape().to_vec(),
    }
}

fn same_f64(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Equal up to summation order: relative difference at most 1e-9, no absolute slack (or
/// both NaN, as when a sum overflows to inf and the error is inf/inf).
fn close(a: f64, b: f64) -> bool {
    same_f64(a, b) || approx::relative_eq!(a, b, epsilon = 0.0, max_relative = 1e-9)
}

/// Field by field: everything identical except the float64 gate's errors and bound,
/// which come from float sums and may differ by summation order.
fn assert_same(
    got: &std::result::Result<Comparison, CompareError>,
    want: &std::result::Result<Comparison, CompareError>,
    what: &str,
) {
    let (g, w) = match (got, want) {
        (Ok(Comparison::Values(g)), Ok(Comparison::Values(w))) => (g, w),
        _ => {
            assert_eq!(got, want, "{what}");
            return;
        }
    };
    let ctx = format!("{what}\n  gpu: {g:?}\n  cpu: {w:?}");
    assert_eq!(g.dtype, w.dtype, "dtype: {ctx}");
    assert_eq!(g.shape, w.shape, "shape: {ctx}");
    assert_eq!(g.profile, w.profile, "profile: {ctx}");
    assert_eq!(g.tolerance, w.tolerance, "tolerance: {ctx}");
    assert_eq!(g.elements, w.elements, "elements: {ctx}");
    assert_eq!(g.mismatches, w.mismatches, "mismatches: {ctx}");
    assert_eq!(
        g.nonfinite_mismatches, w.nonfinite_mismatches,
        "nonfinite: {ctx}"
    );
    assert_eq!(g.rescued, w.rescued, "rescued: {ctx}");
    assert_eq!(g.artefacts, w.artefacts, "artefacts: {ctx}");
    assert_eq!(g.first_artefact, w.first_artefact, "first artefact: {ctx}");
    assert_eq!(g.probed, w.probed, "probed: {ctx}");
    assert!(same_f64(g.tol_needed, w.tol_needed), "tol_needed: {ctx}");
    assert!(same_f64(g.max_abs, w.max_abs), "max_abs: {ctx}");
    assert!(same_f64(g.max_rel, w.max_rel), "max_rel: {ctx}");
    match (&g.first_mismatch, &w.first_mismatch) {
        (None, None) => {}
        (Some(a), Some(b)) => {
            assert_eq!(a.flat_index, b.flat_index, "first index: {ctx}");
            assert_eq!(a.index, b.index, "first multi-index: {ctx}");
            assert_eq!(a.rule, b.rule, "first rule: {ctx}");
            assert!(same_f64(a.candidate, b.candidate), "first c: {ctx}");
            assert!(same_f64(a.reference, b.reference), "first r: {ctx}");
        }
        _ => panic!("first mismatch: {ctx}"),
    }
    match (&g.float64, &w.float64) {
        (Float64Status::Measured(a), Float64Status::Measured(b)) => {
            assert_eq!(a.enforced, b.enforced, "gate enforced: {ctx}");
            assert_eq!(a.measure, b.measure, "gate measure: {ctx}");
            assert_eq!(a.elements, b.elements, "gate elements: {ctx}");
            assert!(close(a.candidate_error, b.candidate_error), "gate c: {ctx}");
            assert!(close(a.reference_error, b.reference_error), "gate r: {ctx}");
            assert!(close(a.bound, b.bound), "gate bound: {ctx}");
            assert_eq!(a.passed, b.passed, "gate verdict: {ctx}");
            assert_eq!(a.worst_index, b.worst_index, "worst index: {ctx}");
            assert_eq!(a.gate, b.gate, "gate: {ctx}");
        }
        (a, b) => assert_eq!(a, b, "float64 status: {ctx}"),
    }
    assert_eq!(g.failed_rule(), w.failed_rule(), "verdict: {ctx}");
    assert_eq!(g.passed(), w.passed(), "verdict: {ctx}");
}

/// The CPU comparison of these tensors; with a GPU, asserts the device comparison is
/// the same.
fn check(
    dc: Option<&DeviceComparator>,
    c: &HostTensor,
    r: &HostTensor,
    t: Option<&HostTensor>,
    profile: ToleranceProfile,
    precision: Precision,
) -> std::result::Result<Comparison, CompareError> {
    check_alt(dc, c, r, t, None, profile, precision)
}

/// [`check`] with a `nan-inf` probe reference `a`.
fn check_alt(
    dc: Option<&DeviceComparator>,
    c: &HostTensor,
    r: &HostTensor,
    t: Option<&HostTensor>,
    a: Option<&HostTensor>,
    profile: ToleranceProfile,
    precision: Precision,
) -> std::result::Result<Comparison, CompareError> {
    let cpu = kbench_adversarial::compare_with_alt(c, r, t, a, profile, precision);
    if let Some(dc) = dc {
        let up = |h: &HostTensor| dc.gpu.upload(h.data()).expect("uploading a tensor");
        let (cb, rb, tb, ab) = (up(c), up(r), t.map(up), a.map(up));
        let td = t.zip(tb.as_ref()).map(|(h, b)| dev(h, b));
        let ad = a.zip(ab.as_ref()).map(|(h, b)| dev(h, b));
        let gpu = dc
            .compare_case(
                &dev(c, &cb),
                &dev(r, &rb),
                td.as_ref(),
                ad.as_ref(),
                profile,
                precision,
                kbench_adversarial::float64_gate(precision),
            )
            .expect("the device comparison ran");
        let what = format!(
            "{} {:?} vs {} {:?}, float64 reference {}, probe reference {}, {profile} at {precision}",
            c.dtype(),
            c.shape(),
            r.dtype(),
            r.shape(),
            t.is_some(),
            a.is_some()
        );
        assert_same(&gpu, &cpu, &what);
    }
    cpu
}

fn values(res: &std::result::Result<Comparison, CompareError>) -> ValueReport {
    match res {
        Ok(Comparison::Values(v)) => v.clone(),
        other => panic!("expected a value report, got {other:?}"),
    }
}

#[test]
fn kernels_compile_with_nvrtc() {
    if !nvrtc_present() {
        println!("devcmp::kernels_compile_with_nvrtc: skipped (libnvrtc not found)");
        return;
    }
    let (cubin, log) =
        compile_cubin("sm_90", &["--ptxas-options=-v"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(cubin.starts_with(b"\x7fELF"), "a CUBIN is an ELF image");
    for line in log
        .lines()
        .filter(|l| l.contains("registers") || l.contains("spill") || l.contains("entry"))
    {
        println!("devcmp: ptxas: {line}");
    }
    let ptx = compile_ptx().unwrap_or_else(|e| panic!("{e}"));
    let src = ptx.to_src();
    for (_, _, name) in KERNELS {
        assert!(src.contains(name), "{name} in the PTX");
    }
    for (_, name) in FLUSH_KERNELS {
        assert!(src.contains(name), "{name} in the PTX");
    }
    // No contraction: the tolerance test must round like the Rust code.
    assert!(!src.contains("fma.rn.f64"), "no f64 FMA in the PTX");
}

#[test]
fn host_decoding_matches_the_encodings() {
    assert_eq!(f16_to_f64(0x3c00), 1.0);
    assert_eq!(f16_to_f64(0xc000), -2.0);
    assert_eq!(f16_to_f64(0x0001), 2f64.powi(-24));
    assert_eq!(f16_to_f64(0x7bff), 65504.0);
    assert_eq!(f16_to_f64(0xfc00), f64::NEG_INFINITY);
    assert!(f16_to_f64(0x7e00).is_nan());
    assert!(f16_to_f64(0x8000).is_sign_negative());
    assert_eq!(f16_bits(1.5), 0x3e00);
    assert_eq!(f16_bits(2f32.powi(-24)), 0x0001);
    assert_eq!(decode(Dtype::Bf16, &0x3f80u16.to_le_bytes()), 1.0);
    assert_eq!(decode(Dtype::I8, &[0xff]), -1.0);
    assert_eq!(decode(Dtype::U8, &[0xff]), 255.0);
    assert_eq!(decode(Dtype::Bool, &[7]), 1.0);
    assert_eq!(
        decode(Dtype::I64, &i64::MIN.to_le_bytes()),
        -(2f64.powi(63))
    );
}
