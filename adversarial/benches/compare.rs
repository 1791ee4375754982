//! Throughput of `compare` on large outputs, next to a plain parallel read of the same bytes
//! (the memory-bandwidth ceiling on this machine).
//!
//! Throughput counts the bytes read: candidate + reference (+ float64 reference).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use kbench_adversarial::compare;
use kbench_record::{Dtype, HostTensor, Precision, ToleranceProfile};
use rayon::prelude::*;

const MIB: usize = 1 << 20;

/// splitmix64 step: deterministic data without an RNG crate.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn uniform(i: u64) -> f32 {
    (mix(i) >> 40) as f32 / (1u64 << 24) as f32
}

/// Reference values in [0, 1), candidate within 1e-6 of them (a passing candidate: the
/// common case, every element on the fast path), and the float64 reference.
fn tensors(dtype: Dtype, bytes: usize) -> (HostTensor, HostTensor, HostTensor) {
    let n = bytes / dtype.size();
    let r: Vec<f32> = (0..n as u64).into_par_iter().map(uniform).collect();
    let c: Vec<f32> = r
        .par_iter()
        .enumerate()
        .map(|(i, &x)| x + 1e-6 * (uniform(i as u64 ^ 0xABCD) - 0.5))
        .collect();
    let encode = |v: &[f32]| -> Vec<u8> {
        match dtype {
            Dtype::F32 => v.par_iter().flat_map_iter(|x| x.to_le_bytes()).collect(),
            Dtype::Bf16 => v
                .par_iter()
                .flat_map_iter(|&x| half::bf16::from_f32(x).to_le_bytes())
                .collect(),
            _ => unreachable!("bench covers f32 and bf16"),
        }
    };
    let shape = vec![n as u64];
    let r64: Vec<u8> = r
        .par_iter()
        .flat_map_iter(|&x| f64::from(x).to_le_bytes())
        .collect();
    (
        HostTensor::new(dtype, shape.clone(), encode(&c)).unwrap(),
        HostTensor::new(dtype, shape.clone(), encode(&r)).unwrap(),
        HostTensor::new(Dtype::F64, shape, r64).unwrap(),
    )
}

/// Reads every byte of the slices (as u64 words), in parallel: the bandwidth ceiling.
fn read_all(slices: &[&[u8]]) -> u64 {
    slices
        .iter()
        .map(|s| {
            s.par_chunks(1 << 18)
                .map(|c| {
                    c.chunks_exact(8)
                        .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
                        .fold(0u64, u64::wrapping_add)
                })
                .reduce(|| 0, u64::wrapping_add)
        })
        .fold(0, u64::wrapping_add)
}

fn configure(g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
}

fn bench(c: &mut Criterion) {
    let cases = [
        (Dtype::F32, 256 * MIB, Precision::Fp32),
        (Dtype::Bf16, 64 * MIB, Precision::Bf16),
    ];
    for (dtype, bytes, precision) in cases {
        let (cand, refr, r64) = tensors(dtype, bytes);
        let mut g = c.benchmark_group(format!("compare_{}_{}MiB", dtype, bytes / MIB));
        configure(&mut g);
        g.throughput(Throughput::Bytes(2 * bytes as u64));
        g.bench_function("memory_read", |b| {
            b.iter(|| black_box(read_all(&[cand.data(), refr.data()])))
        });
        g.bench_function("kernelbench", |b| {
            b.iter(|| {
                let v = compare(&cand, &refr, None, ToleranceProfile::KernelBench, precision);
                assert!(v.unwrap().passed());
            })
        });
        g.throughput(Throughput::Bytes((2 * bytes + r64.data().len()) as u64));
        g.bench_function("memory_read_with_f64", |b| {
            b.iter(|| black_box(read_all(&[cand.data(), refr.data(), r64.data()])))
        });
        g.bench_function("strict_with_f64", |b| {
            b.iter(|| {
                let v = compare(
                    &cand,
                    &refr,
                    Some(&r64),
                    ToleranceProfile::Strict,
                    precision,
                );
                assert!(v.unwrap().passed());
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
