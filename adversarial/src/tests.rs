//! Unit tests of the comparison rules, profiles and the float64 gate.

mod error_model;
mod gate;
mod nonfinite;
mod proptests;
mod rules;

use half::{bf16, f16};
use kbench_record::{Dtype, HostTensor, Precision, ToleranceProfile};

use crate::compare::{compare_chunked, Comparison, ValueReport};
use crate::CompareError;

pub(crate) const FP32: Precision = Precision::Fp32;
pub(crate) const KB: ToleranceProfile = ToleranceProfile::KernelBench;
pub(crate) const V01: ToleranceProfile = ToleranceProfile::KernelBenchV01;
pub(crate) const STRICT: ToleranceProfile = ToleranceProfile::Strict;

/// splitmix64: a small seeded generator, so tests need no RNG crate and are reproducible.
pub(crate) struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 24 random bits, like `torch.rand` in fp32.
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
}

pub(crate) fn f32s(shape: &[u64], v: &[f32]) -> HostTensor {
    HostTensor::from_f32(shape.to_vec(), v).unwrap()
}

pub(crate) fn f64s(shape: &[u64], v: &[f64]) -> HostTensor {
    HostTensor::from_f64(shape.to_vec(), v).unwrap()
}

pub(crate) fn f16_bits(v: &[u16]) -> HostTensor {
    let data = v.iter().flat_map(|b| b.to_le_bytes()).collect();
    HostTensor::new(Dtype::F16, vec![v.len() as u64], data).unwrap()
}

pub(crate) fn bf16_bits(v: &[u16]) -> HostTensor {
    let data = v.iter().flat_map(|b| b.to_le_bytes()).collect();
    HostTensor::new(Dtype::Bf16, vec![v.len() as u64], data).unwrap()
}

pub(crate) fn f16s(v: &[f32]) -> HostTensor {
    f16_bits(
        &v.iter()
            .map(|&x| f16::from_f32(x).to_bits())
            .collect::<Vec<_>>(),
    )
}

pub(crate) fn bf16s(v: &[f32]) -> HostTensor {
    bf16_bits(
        &v.iter()
            .map(|&x| bf16::from_f32(x).to_bits())
            .collect::<Vec<_>>(),
    )
}

pub(crate) fn ints(dtype: Dtype, v: &[i64]) -> HostTensor {
    let data: Vec<u8> = v
        .iter()
        .flat_map(|&x| match dtype {
            Dtype::I64 => x.to_le_bytes().to_vec(),
            Dtype::I32 => (x as i32).to_le_bytes().to_vec(),
            Dtype::I16 => (x as i16).to_le_bytes().to_vec(),
            Dtype::I8 | Dtype::U8 | Dtype::Bool => vec![x as u8],
            _ => unreachable!("not an integer dtype"),
        })
        .collect();
    HostTensor::new(dtype, vec![v.len() as u64], data).unwrap()
}

/// Compares with the production chunk size.
pub(crate) fn cmp(
    c: &HostTensor,
    r: &HostTensor,
    r64: Option<&HostTensor>,
    profile: ToleranceProfile,
    precision: Precision,
) -> Result<Comparison, CompareError> {
    crate::compare(c, r, r64, profile, precision)
}

/// Compares and unwraps the value report (shape and dtype must match).
pub(crate) fn values(
    c: &HostTensor,
    r: &HostTensor,
    r64: Option<&HostTensor>,
    profile: ToleranceProfile,
    precision: Precision,
) -> ValueReport {
    match cmp(c, r, r64, profile, precision).unwrap() {
        Comparison::Values(v) => v,
        other => panic!("expected a value comparison, got {other:?}"),
    }
}

/// Compares with a given chunk size (to exercise chunk boundaries on small tensors).
pub(crate) fn values_chunked(
    c: &HostTensor,
    r: &HostTensor,
    r64: Option<&HostTensor>,
    profile: ToleranceProfile,
    precision: Precision,
    chunk: usize,
) -> ValueReport {
    values_alt_chunked(c, r, r64, None, profile, precision, chunk)
}

/// [`values_chunked`] with a `nan-inf` probe reference.
pub(crate) fn values_alt_chunked(
    c: &HostTensor,
    r: &HostTensor,
    r64: Option<&HostTensor>,
    alt: Option<&HostTensor>,
    profile: ToleranceProfile,
    precision: Precision,
    chunk: usize,
) -> ValueReport {
    match compare_chunked(
        c,
        r,
        r64,
        alt,
        (profile, precision, crate::float64_gate(precision)),
        chunk,
    )
    .unwrap()
    {
        Comparison::Values(v) => v,
        other => panic!("expected a value comparison, got {other:?}"),
    }
}
