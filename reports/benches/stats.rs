//! Order statistics over a million timing samples.

use criterion::{criterion_group, criterion_main, Criterion};
use kbench_reports::Sample;

fn bench(c: &mut Criterion) {
    // Deterministic pseudo-random samples (xorshift), 1e6 values in (0, 10) ms.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let v: Vec<f64> = (0..1_000_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64 * 10.0
        })
        .collect();
    let mut g = c.benchmark_group("stats");
    g.sample_size(10);
    g.bench_function("sample_new_sort_1e6", |b| {
        b.iter(|| Sample::new(v.clone()).unwrap())
    });
    let s = Sample::new(v.clone()).unwrap();
    g.bench_function("median_p25_p75_std_1e6", |b| {
        b.iter(|| (s.median(), s.percentile(25.0), s.percentile(75.0), s.std()))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
