//! Estimators with their uncertainty: Wilson intervals for rates, percentile-bootstrap
//! intervals for means, medians, 75th percentiles and geometric means, and bootstrap
//! intervals of a speedup from its raw timing samples. Pure functions; the bootstrap uses a
//! fixed seed, so every report is reproducible bit for bit.
//!
//! The normal quantile comes from statrs. The resampling stays kbench's own (SplitMix64
//! with [`BOOTSTRAP_SEED`]): the seed and the generator are part of the documented result —
//! anyone re-running the report on any machine gets the same bounds — which a library's
//! generator, free to change its stream between versions, would not promise. Quantiles of
//! the resampled statistics use kbench's one quantile function, [`crate::percentile_sorted`].

use std::sync::LazyLock;

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal};

use crate::sample::{neumaier_sum, percentile_select, percentile_sorted};

/// Resamples per bootstrap interval over tasks (percentile bootstrap, Efron & Tibshirani
/// 1993, ch. 13). 2,000 keeps the Monte-Carlo error of a 95% bound well under the spread
/// between tasks while a 250-task report stays well under a second.
pub const BOOTSTRAP_RESAMPLES: usize = 2000;
/// Resamples per per-problem speedup interval (from timing samples).
pub const SPEEDUP_RESAMPLES: usize = 1000;
/// Seed of every bootstrap: the same data give the same interval on every machine.
pub const BOOTSTRAP_SEED: u64 = 0x6b62_656e_6368_0007;
/// Two-sided 95% normal quantile, Φ⁻¹(0.975) ≈ 1.959964, from statrs' standard normal.
pub static Z_95: LazyLock<f64> = LazyLock::new(|| Normal::standard().inverse_cdf(0.975));

/// A point estimate with a 95% interval (`low ≤ value ≤ high` is not forced: see each
/// estimator).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

/// A proportion `count / n` with its Wilson 95% interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Rate {
    pub count: usize,
    pub n: usize,
    /// `count / n`, 0 when `n = 0`.
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

impl Rate {
    /// `count / n` with the Wilson score interval (Wilson 1927; Agresti & Coull 1998):
    /// `(p̂ + z²/2n ± z·√(p̂(1−p̂)/n + z²/4n²)) / (1 + z²/n)`, z = [`Z_95`]. Unlike the Wald
    /// interval it stays inside [0, 1] and is not degenerate at 0% or 100%. With `n = 0`
    /// the rate is 0 and the interval the whole of [0, 1].
    pub fn wilson(count: usize, n: usize) -> Rate {
        debug_assert!(count <= n);
        if n == 0 {
            return Rate {
                count,
                n,
                value: 0.0,
                low: 0.0,
                high: 1.0,
            };
        }
        let (nf, p) = (n as f64, count as f64 / n as f64);
        let z = *Z_95;
        let z2 = z * z;
        let denom = 1.0 + z2 / nf;
        let centre = (p + z2 / (2.0 * nf)) / denom;
        let half = z * (p * (1.0 - p) / nf + z2 / (4.0 * nf * nf)).sqrt() / denom;
        Rate {
            count,
            n,
            value: p,
            // The exact bounds at 0 and n; clamp rounding elsewhere so low ≤ p ≤ high.
            low: if count == 0 {
                0.0
            } else {
                (centre - half).min(p)
            },
            high: if count == n {
                1.0
            } else {
                (centre + half).max(p)
            },
        }
    }
}

/// SplitMix64 (Steele, Lea & Flood 2014): a tiny, well-mixed generator, enough for
/// resampling indices; reproducible across platforms.
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; the bias is below 2⁻³² for n < 2³²).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

/// Which statistic of a sample of per-task values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Statistic {
    Mean,
    Median,
    /// 75th percentile (numpy's default linear interpolation, as [`crate::Sample::percentile`]).
    P75,
    /// `exp(mean(ln x))`; the values must be positive.
    Geomean,
}

impl Statistic {
    /// The statistic of `values` (non-empty; positive for `Geomean`). May reorder them.
    pub fn of(self, values: &mut [f64]) -> f64 {
        debug_assert!(!values.is_empty());
        match self {
            Statistic::Mean => neumaier_sum(values.iter().copied()) / values.len() as f64,
            Statistic::Median => percentile_select(values, 50.0),
            Statistic::P75 => percentile_select(values, 75.0),
            Statistic::Geomean => geomean(values),
        }
    }
}

/// Geometric mean `exp((1/n) Σ ln xᵢ)` of positive values (KernelBench's
/// `geometric_mean_speed_ratio_correct_only`, computed in log space so that 250 large
/// ratios do not overflow a product).
pub fn geomean(values: &[f64]) -> f64 {
    (neumaier_sum(values.iter().map(|v| v.ln())) / values.len() as f64).exp()
}

/// Weighted geometric mean `exp(Σ wᵢ ln gᵢ / Σ wᵢ)`. CUDA Agent's "Overall" speed-up
/// weights each level's geomean by its task count (paper §4.1; 1.87, 2.80, 1.52 over
/// 100/100/50 tasks give 2.11).
pub fn weighted_geomean(values_and_weights: &[(f64, f64)]) -> Option<f64> {
    let w: f64 = values_and_weights.iter().map(|(_, w)| w).sum();
    (w > 0.0)
        .then(|| (neumaier_sum(values_and_weights.iter().map(|(g, wi)| wi * g.ln())) / w).exp())
}

/// `statistic` of `values` with a 95% percentile-bootstrap interval: [`BOOTSTRAP_RESAMPLES`]
/// resamples with replacement of the same size, seeded with [`BOOTSTRAP_SEED`]; the bounds
/// are the 2.5th and 97.5th percentiles of the resampled statistics (linear interpolation).
/// The bounds are widened to include the point estimate where resampling noise leaves it
/// just outside (possible for the median or p75 of a few values). `None` for no values.
pub fn bootstrap(values: &[f64], statistic: Statistic) -> Option<Estimate> {
    if values.is_empty() {
        return None;
    }
    let value = statistic.of(&mut values.to_vec());
    let mut rng = SplitMix64::new(BOOTSTRAP_SEED);
    let mut buf = vec![0.0; values.len()];
    let mut stats: Vec<f64> = (0..BOOTSTRAP_RESAMPLES)
        .map(|_| {
            for slot in buf.iter_mut() {
                *slot = values[rng.below(values.len())];
            }
            statistic.of(&mut buf)
        })
        .collect();
    stats.sort_unstable_by(f64::total_cmp);
    Some(Estimate {
        value,
        low: percentile_sorted(&stats, 2.5).min(value),
        high: percentile_sorted(&stats, 97.5).max(value),
    })
}

/// Which ratio a per-problem speedup interval is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RatioOf {
    Median,
    Mean,
    /// kbench's paired speedup ([`crate::paired_speedup`]): the median of per-round ratios,
    /// with this many calls a side per round. Rounds are resampled as pairs.
    Paired(usize),
}

/// A speedup `reference / candidate` from the raw timing samples (ms) with a 95%
/// percentile-bootstrap interval: reference and candidate samples are resampled
/// independently ([`SPEEDUP_RESAMPLES`] times, fixed seed) and the ratio of their medians
/// (or means) taken each time. The interval says how much the measured speedup could move
/// from timing noise alone. `None` when either sample is empty or a ratio is not finite.
pub fn speedup_interval(reference: &[f64], candidate: &[f64], of: RatioOf) -> Option<Estimate> {
    if reference.is_empty() || candidate.is_empty() {
        return None;
    }
    let stat = match of {
        RatioOf::Median => Statistic::Median,
        RatioOf::Mean => Statistic::Mean,
        RatioOf::Paired(per_round) => return paired_interval(reference, candidate, per_round),
    };
    let value = stat.of(&mut reference.to_vec()) / stat.of(&mut candidate.to_vec());
    if !value.is_finite() {
        return None;
    }
    let mut rng = SplitMix64::new(BOOTSTRAP_SEED);
    let (mut rb, mut cb) = (vec![0.0; reference.len()], vec![0.0; candidate.len()]);
    let mut ratios = Vec::with_capacity(SPEEDUP_RESAMPLES);
    for _ in 0..SPEEDUP_RESAMPLES {
        for slot in rb.iter_mut() {
            *slot = reference[rng.below(reference.len())];
        }
        for slot in cb.iter_mut() {
            *slot = candidate[rng.below(candidate.len())];
        }
        let r = stat.of(&mut rb) / stat.of(&mut cb);
        if r.is_finite() {
            ratios.push(r);
        }
    }
    if ratios.is_empty() {
        return None;
    }
    ratios.sort_unstable_by(f64::total_cmp);
    Some(Estimate {
        value,
        low: percentile_sorted(&ratios, 2.5).min(value),
        high: percentile_sorted(&ratios, 97.5).max(value),
    })
}

/// [`speedup_interval`] for the paired speedup: the per-round ratios are resampled with
/// replacement (each round keeps its reference and candidate together, as they were
/// measured), and the median taken each time.
fn paired_interval(reference: &[f64], candidate: &[f64], per_round: usize) -> Option<Estimate> {
    let value = crate::paired_speedup(reference, candidate, per_round)?;
    let rounds = crate::paired_round_ratios(reference, candidate, per_round)?;
    let mut rng = SplitMix64::new(BOOTSTRAP_SEED);
    let mut resample = vec![0.0; rounds.len()];
    let mut medians = Vec::with_capacity(SPEEDUP_RESAMPLES);
    for _ in 0..SPEEDUP_RESAMPLES {
        for slot in resample.iter_mut() {
            *slot = rounds[rng.below(rounds.len())];
        }
        medians.push(Statistic::Median.of(&mut resample));
    }
    medians.sort_unstable_by(f64::total_cmp);
    Some(Estimate {
        value,
        low: percentile_sorted(&medians, 2.5).min(value),
        high: percentile_sorted(&medians, 97.5).max(value),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::{abs_diff_eq, assert_abs_diff_eq, assert_relative_eq};

    #[test]
    fn paired_interval_brackets_the_paired_speedup() {
        // Every round: candidate 10% faster, under a host state that doubles both sides in
        // some rounds. The paired interval is tight around 1.1; the unpaired one is not.
        let (mut r, mut c) = (Vec::new(), Vec::new());
        for k in 0..50 {
            let state = if k % 3 == 0 { 2.0 } else { 1.0 };
            let jitter = 1.0 + 0.01 * ((k * 7 % 5) as f64 - 2.0);
            r.extend([1.1 * state * jitter, 1.1 * state]);
            c.extend([state, state * jitter]);
        }
        let p = speedup_interval(&r, &c, RatioOf::Paired(2)).unwrap();
        assert!(p.low <= p.value && p.value <= p.high);
        assert!(abs_diff_eq!(p.value, 1.1, epsilon = 0.02), "{p:?}");
        assert!(p.high - p.low < 0.05, "{p:?}");
        let u = speedup_interval(&r, &c, RatioOf::Median).unwrap();
        assert!(u.high - u.low > p.high - p.low, "{u:?} vs {p:?}");
        assert!(speedup_interval(&r, &c[..10], RatioOf::Paired(2)).is_none());
    }

    #[test]
    fn z_is_the_normal_quantile() {
        // Φ⁻¹(0.975) = 1.95996398454005423552… (Wichura's AS241 to 16 digits); statrs'
        // erfc⁻¹ lands one ulp below the correctly rounded f64.
        assert_relative_eq!(
            *Z_95,
            1.959_963_984_540_054,
            max_relative = 2.0 * f64::EPSILON
        );
    }

    #[test]
    fn wilson_matches_the_formula() {
        // Wilson interval for 8/10 at 95%: [0.4902, 0.9433] (R: prop.test(8, 10, correct=FALSE)).
        let r = Rate::wilson(8, 10);
        assert!(abs_diff_eq!(r.low, 0.4902, epsilon = 1e-4), "{r:?}");
        assert!(abs_diff_eq!(r.high, 0.9433, epsilon = 1e-4), "{r:?}");
        assert_eq!(
            (Rate::wilson(0, 5).low, Rate::wilson(5, 5).high),
            (0.0, 1.0)
        );
        assert!(Rate::wilson(0, 5).high > 0.0 && Rate::wilson(5, 5).low < 1.0);
        let empty = Rate::wilson(0, 0);
        assert_eq!((empty.value, empty.low, empty.high), (0.0, 0.0, 1.0));
    }

    #[test]
    fn geomeans() {
        assert_abs_diff_eq!(geomean(&[1.0, 4.0]), 2.0, epsilon = 1e-12);
        let overall = weighted_geomean(&[(1.87, 100.0), (2.80, 100.0), (1.52, 50.0)]).unwrap();
        assert_eq!(format!("{overall:.2}"), "2.11");
        assert_eq!(weighted_geomean(&[]), None);
    }

    #[test]
    fn bootstrap_is_reproducible_and_brackets_the_estimate() {
        let v: Vec<f64> = (1..=50).map(|i| i as f64 / 10.0).collect();
        let a = bootstrap(&v, Statistic::Mean).unwrap();
        assert_eq!(Some(a), bootstrap(&v, Statistic::Mean));
        assert_abs_diff_eq!(a.value, 2.55, epsilon = 1e-12);
        // Standard error of the mean ≈ 0.2; the 95% interval is about ±0.4.
        assert!(
            a.low < 2.3 && a.low > 2.0 && a.high > 2.8 && a.high < 3.1,
            "{a:?}"
        );
        let one = bootstrap(&[3.0], Statistic::Median).unwrap();
        assert_eq!((one.value, one.low, one.high), (3.0, 3.0, 3.0));
        assert_eq!(bootstrap(&[], Statistic::Mean), None);
    }

    #[test]
    fn speedup_interval_reflects_noise() {
        let reference: Vec<f64> = (0..100).map(|i| 2.0 + (i % 10) as f64 * 0.01).collect();
        let candidate: Vec<f64> = (0..100).map(|i| 1.0 + (i % 7) as f64 * 0.01).collect();
        let e = speedup_interval(&reference, &candidate, RatioOf::Median).unwrap();
        assert!(e.low <= e.value && e.value <= e.high);
        assert!(e.high - e.low < 0.1, "{e:?}");
        assert_eq!(speedup_interval(&reference, &[0.0], RatioOf::Mean), None);
    }

    #[test]
    fn uniform_indices_cover_the_range() {
        let mut rng = SplitMix64::new(1);
        let mut seen = [0usize; 7];
        for _ in 0..7000 {
            seen[rng.below(7)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 850 && n < 1150), "{seen:?}");
    }
}
