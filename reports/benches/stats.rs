//! Order statistics over a million timing samples.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use kbench_reports::{timing_stats_of, Sample};

fn bench(c: &mut Criterion) {
    // Deterministic pseudo-random times in [0, 10) ms (xorshift64).
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let v: Vec<f64> = (0..1_000_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64 * 10.0
        })
        .collect();
    let mut g = c.benchmark_group("stats_1e6");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    g.bench_function("sample_new_checks_and_sorts", |b| {
        b.iter(|| Sample::new(black_box(v.clone())).unwrap())
    });
    let s = Sample::new(v.clone()).unwrap();
    g.bench_function("median_and_percentiles", |b| {
        b.iter(|| {
            let s = black_box(&s);
            [
                s.median(),
                s.percentile(25.0).unwrap(),
                s.percentile(75.0).unwrap(),
                s.percentile(99.0).unwrap(),
                s.iqr(),
            ]
        })
    });
    g.bench_function("mean_and_std_dev", |b| {
        b.iter(|| (black_box(&s).mean(), s.std_dev()))
    });
    g.bench_function("timing_stats", |b| {
        b.iter(|| timing_stats_of(black_box(&s), "cuda_event", 1.0))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
