//! Timing statistics in the record format, and speedups.

use kbench_record::TimingStats;
use serde::{Deserialize, Serialize};

use crate::error::SampleError;
use crate::sample::{percentile_sorted, Sample};

/// Summarises timing samples (milliseconds, in measurement order) into the record's
/// [`TimingStats`]; fails when they do not make a [`Sample`] (empty, NaN, infinite or
/// negative times). See [`timing_stats_of`].
pub fn timing_stats(
    clock: &str,
    samples_ms: Vec<f64>,
    wall_s: f64,
) -> Result<TimingStats, SampleError> {
    Ok(timing_stats_of(&Sample::new(samples_ms)?, clock, wall_s))
}

/// Summarises a sample of times (milliseconds) into the record's [`TimingStats`]: median,
/// mean, min, max, sample standard deviation (0 for a single sample, which has none), and
/// the 25th and 75th percentiles as [`Sample::percentile`]. All samples are kept, in
/// measurement order.
///
/// `clock` names the timer (`cuda_event`, `perf_counter`); `wall_s` is the harness's own
/// wall time of the timing phase, in seconds.
pub fn timing_stats_of(samples_ms: &Sample, clock: &str, wall_s: f64) -> TimingStats {
    let pct = |p: f64| percentile_sorted(samples_ms.sorted(), p);
    TimingStats {
        clock: clock.to_string(),
        samples_ms: samples_ms.values().to_vec(),
        median_ms: samples_ms.median(),
        mean_ms: samples_ms.mean(),
        min_ms: samples_ms.min(),
        max_ms: samples_ms.max(),
        // JSON records need a number; a single sample has no spread to report.
        std_ms: samples_ms.std_dev().unwrap_or(0.0),
        p25_ms: pct(25.0),
        p75_ms: pct(75.0),
        wall_s,
    }
}

/// Reference time over candidate time: above 1 the candidate is faster.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Speedup {
    /// reference median / candidate median (unpaired; the record keeps it as
    /// `speedup_of_medians` beside the paired headline speedup).
    pub median: f64,
    /// reference mean / candidate mean (KernelBench's: `scripts/benchmark_eval_analysis.py`
    /// divides mean runtimes).
    pub mean: f64,
}

impl Speedup {
    fn from_times(
        ref_median: f64,
        ref_mean: f64,
        cand_median: f64,
        cand_mean: f64,
    ) -> Option<Self> {
        let s = Speedup {
            median: ref_median / cand_median,
            mean: ref_mean / cand_mean,
        };
        (s.median.is_finite() && s.mean.is_finite()).then_some(s)
    }
}

/// Speedup of `candidate` over `reference` from their timing statistics. `None` when the
/// ratio is not finite: a candidate time of zero (below the timer's resolution) means no
/// ratio, and `inf` would not survive a JSON record.
pub fn speedup(reference: &TimingStats, candidate: &TimingStats) -> Option<Speedup> {
    Speedup::from_times(
        reference.median_ms,
        reference.mean_ms,
        candidate.median_ms,
        candidate.mean_ms,
    )
}

/// [`speedup`] from raw samples.
pub fn speedup_of_samples(reference: &Sample, candidate: &Sample) -> Option<Speedup> {
    Speedup::from_times(
        reference.median(),
        reference.mean(),
        candidate.median(),
        candidate.mean(),
    )
}

/// The paired speedup of interleaved timing: `reference` and `candidate` hold the samples
/// of the same rounds in the same order (`per_round` calls a side per round, the last round
/// possibly shorter); each round gives the ratio reference mean / candidate mean over its
/// calls, and the speedup is the median of those ratios.
///
/// Why paired: the two sides of one round run back to back on the same core and GPU, so a
/// host state that lasts longer than a round (a slower vCPU phase, a clock change) scales
/// both alike and cancels in the round's ratio, while the ratio of two medians over the whole
/// phase moves when such a state takes a different share of each side's calls (seen on an
/// H100 VM: launch-bound level-3 models alternating between ~1.7 and ~3.3 ms per call). This
/// is the matched-pairs design (e.g. Montgomery, *Design and Analysis of Experiments*,
/// "paired comparison designs"), with the median for robustness to single slow rounds.
/// `None` when the sides differ in length, a round has no calls, or a ratio is not finite.
pub fn paired_speedup(reference: &[f64], candidate: &[f64], per_round: usize) -> Option<f64> {
    Sample::new(paired_round_ratios(reference, candidate, per_round)?)
        .ok()
        .map(|s| s.median())
}

/// The per-round ratios behind [`paired_speedup`], in round order; `None` under the same
/// conditions.
pub fn paired_round_ratios(
    reference: &[f64],
    candidate: &[f64],
    per_round: usize,
) -> Option<Vec<f64>> {
    if per_round == 0 || reference.is_empty() || reference.len() != candidate.len() {
        return None;
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let ratios: Vec<f64> = reference
        .chunks(per_round)
        .zip(candidate.chunks(per_round))
        .map(|(r, c)| mean(r) / mean(c))
        .collect();
    ratios.iter().all(|r| r.is_finite()).then_some(ratios)
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;

    fn s(v: &[f64]) -> Sample {
        Sample::new(v.to_vec()).unwrap()
    }

    #[test]
    fn stats_follow_the_sample() {
        let t = timing_stats("cuda_event", vec![2.0, 1.0, 4.0, 3.0], 1.5).unwrap();
        assert_eq!(t.clock, "cuda_event");
        assert_eq!(t.samples_ms, vec![2.0, 1.0, 4.0, 3.0]);
        assert_eq!(
            (t.median_ms, t.mean_ms, t.min_ms, t.max_ms),
            (2.5, 2.5, 1.0, 4.0)
        );
        assert_eq!((t.p25_ms, t.p75_ms, t.wall_s), (1.75, 3.25, 1.5));
        assert_abs_diff_eq!(t.std_ms, (5.0f64 / 3.0).sqrt(), epsilon = 1e-12);
        let one = timing_stats_of(&s(&[0.7]), "perf_counter", 0.01);
        assert_eq!((one.std_ms, one.p25_ms, one.p75_ms), (0.0, 0.7, 0.7));
        // Finite fields only: the record survives JSON.
        let json = serde_json::to_string(&one).unwrap();
        assert_eq!(serde_json::from_str::<TimingStats>(&json).unwrap(), one);
    }

    #[test]
    fn bad_samples_are_errors() {
        assert_eq!(timing_stats("x", vec![], 0.0), Err(SampleError::Empty));
        let err = timing_stats("x", vec![1.0, f64::NAN], 0.0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "timing sample 1 is NaN: timings must be finite"
        );
    }

    #[test]
    fn speedups() {
        let reference = s(&[2.0, 2.0, 8.0]);
        let candidate = s(&[1.0, 1.0, 1.0]);
        assert_eq!(
            speedup_of_samples(&reference, &candidate),
            Some(Speedup {
                median: 2.0,
                mean: 4.0
            })
        );
        assert_eq!(speedup_of_samples(&reference, &s(&[0.0, 0.0])), None);
        let (r, c) = (
            timing_stats_of(&reference, "x", 0.0),
            timing_stats_of(&candidate, "x", 0.0),
        );
        assert_eq!(speedup(&r, &c), speedup_of_samples(&reference, &candidate));
    }

    #[test]
    fn paired_speedup_cancels_host_states_shared_by_a_round() {
        // Rounds alternate between a fast and a 2x slower host state; within a round both
        // sides see the same state. The candidate is 10% faster in every round.
        let mut r = Vec::new();
        let mut c = Vec::new();
        for round in 0..20 {
            let state = if round % 3 == 0 { 2.0 } else { 1.0 };
            r.extend([1.1 * state, 1.1 * state]);
            c.extend([1.0 * state, 1.0 * state]);
        }
        let p = paired_speedup(&r, &c, 2).unwrap();
        assert_abs_diff_eq!(p, 1.1, epsilon = 1e-12);
        // Short last round, a single round, and inputs that make no ratio.
        assert_abs_diff_eq!(
            paired_speedup(&[2.0, 2.0, 3.0], &[1.0, 1.0, 3.0], 2).unwrap(),
            1.5,
            epsilon = 1e-12
        );
        assert_eq!(paired_speedup(&[4.0], &[2.0], 5), Some(2.0));
        assert_eq!(paired_speedup(&[1.0, 2.0], &[1.0], 1), None);
        assert_eq!(paired_speedup(&[], &[], 1), None);
        assert_eq!(paired_speedup(&[1.0], &[0.0], 1), None);
        assert_eq!(paired_speedup(&[1.0], &[1.0], 0), None);
    }
}
