//! Properties every report relies on, over random runs: fast_0 is the correctness rate,
//! fast_p never increases with p, and every interval contains its point estimate.

use std::collections::BTreeMap;

use kbench_reports::metrics::{metrics_by_level, FAST_P};
use kbench_reports::stats::{bootstrap, speedup_interval, Rate, RatioOf, Statistic};
use kbench_reports::task::{Baseline, Candidate, Task};
use proptest::prelude::*;

fn candidate(speedup: Option<f64>, compile: Option<f64>, trajectory: u32) -> Candidate {
    let mut speedups = BTreeMap::new();
    if let Some(s) = speedup {
        speedups.insert(Baseline::Eager, s);
        if let Some(c) = compile {
            speedups.insert(Baseline::Compile, c);
        }
    }
    Candidate {
        name: "c".into(),
        trajectory,
        turn: None,
        outcome: if speedup.is_some() { "ok" } else { "mismatch" }.into(),
        compiled: true,
        correct: speedup.is_some(),
        correct_random: speedup.is_some(),
        speedups,
        samples: None,
        paired_per_round: None,
        baselines_missing: BTreeMap::new(),
        baseline_sources: BTreeMap::new(),
        eager_drift: Default::default(),
        families: BTreeMap::new(),
        flags: vec![],
        cost: None,
        eval_s: 0.0,
        sol_ratio: None,
        selection: None,
        missing: false,
    }
}

/// Up to 24 tasks over 3 levels, each with 1–4 candidates, correct ones with a speedup.
fn tasks() -> impl Strategy<Value = Vec<Task>> {
    let cand = (
        proptest::option::weighted(0.6, 0.05f64..8.0),
        proptest::option::of(0.05f64..8.0),
        0u32..3,
    );
    proptest::collection::vec((1u8..=3, proptest::collection::vec(cand, 1..4)), 1..24).prop_map(
        |v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (level, cands))| Task {
                    key: format!("k/L{level}/{i}"),
                    level,
                    id: i as u32,
                    name: format!("p{i}"),
                    candidates: cands
                        .into_iter()
                        .map(|(s, c, t)| candidate(s, c, t))
                        .collect(),
                    remeasured: Vec::new(),
                })
                .collect()
        },
    )
}

fn contains(low: f64, value: f64, high: f64) -> bool {
    low <= value && value <= high
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn fast_0_is_the_correctness_rate_and_fast_p_never_increases(tasks in tasks()) {
        for s in metrics_by_level(&tasks) {
            let eager = s.baseline(Baseline::Eager).unwrap();
            prop_assert_eq!(eager.fast_p[0].p, 0.0);
            prop_assert_eq!(eager.fast_p[0].rate.count, s.correct.count);
            prop_assert_eq!(eager.fast_p[0].rate.value, s.correct.value);
            for b in &s.baselines {
                prop_assert_eq!(b.fast_p.len(), FAST_P.len());
                for w in b.fast_p.windows(2) {
                    prop_assert!(w[1].rate.value <= w[0].rate.value);
                }
                for w in b.curve.windows(2) {
                    prop_assert!(w[0].0 < w[1].0 && w[1].1 <= w[0].1);
                }
            }
        }
    }

    #[test]
    fn every_interval_contains_its_estimate(tasks in tasks()) {
        for s in metrics_by_level(&tasks) {
            for r in [&s.compiled, &s.correct, &s.correct_random] {
                prop_assert!(contains(r.low, r.value, r.high), "{:?}", r);
            }
            for b in &s.baselines {
                for f in &b.fast_p {
                    prop_assert!(contains(f.rate.low, f.rate.value, f.rate.high));
                }
                if let Some(g) = b.geomean {
                    prop_assert!(contains(g.low, g.value, g.high), "{:?}", g);
                }
                let z = b.zero_filled.unwrap();
                for e in [z.mean, z.median, z.p75] {
                    prop_assert!(contains(e.low, e.value, e.high), "{:?}", e);
                }
            }
            // Kevin's best-of-k is never below average-of-k.
            prop_assert!(s.kevin.correct_best >= s.kevin.correct_avg);
            prop_assert!(s.kevin.perf_best >= s.kevin.perf_avg);
        }
    }

    #[test]
    fn wilson_brackets_the_rate(n in 0usize..500, k in 0usize..500) {
        let count = k.min(n);
        let r = Rate::wilson(count, n);
        prop_assert!(0.0 <= r.low && r.low <= r.value && r.value <= r.high && r.high <= 1.0);
    }

    #[test]
    fn bootstrap_brackets_each_statistic(values in proptest::collection::vec(0.01f64..50.0, 1..40)) {
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(0.0, f64::max);
        for stat in [Statistic::Mean, Statistic::Median, Statistic::P75, Statistic::Geomean] {
            let e = bootstrap(&values, stat).unwrap();
            prop_assert!(contains(e.low, e.value, e.high), "{:?} {:?}", stat, e);
            // Every resampled statistic lies within the data's range, and so do the bounds.
            prop_assert!(min - 1e-9 <= e.low && e.high <= max + 1e-9, "{:?} {:?}", stat, e);
        }
        // With spread in the data the mean's interval has width (the bootstrap resampled).
        if values.len() >= 5 && max - min > 1.0 {
            let e = bootstrap(&values, Statistic::Mean).unwrap();
            prop_assert!(e.low < e.value && e.value < e.high, "{:?}", e);
        }
    }

    #[test]
    fn speedup_interval_brackets_the_ratio(
        reference in proptest::collection::vec(0.5f64..2.0, 1..30),
        candidate in proptest::collection::vec(0.5f64..2.0, 1..30),
    ) {
        let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        for of in [RatioOf::Median, RatioOf::Mean] {
            let e = speedup_interval(&reference, &candidate, of).unwrap();
            prop_assert!(contains(e.low, e.value, e.high), "{:?}", e);
            let (lo, hi) = (min(&reference) / max(&candidate), max(&reference) / min(&candidate));
            prop_assert!(lo - 1e-9 <= e.low && e.high <= hi + 1e-9, "{:?}", e);
        }
    }
}
