//! A checked sample of timings and the order statistics over it.

use crate::error::SampleError;

/// Timing samples (any unit, typically milliseconds) that are known to be usable:
/// non-empty, finite and non-negative. Keeps the values in measurement order and a sorted
/// copy, so order statistics are O(1) after construction.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    values: Vec<f64>,
    sorted: Vec<f64>,
}

impl Sample {
    /// Checks the invariants: at least one value, every value finite and `≥ 0`
    /// (`-0.0` counts as zero).
    pub fn new(values: Vec<f64>) -> Result<Self, SampleError> {
        if values.is_empty() {
            return Err(SampleError::Empty);
        }
        for (index, &value) in values.iter().enumerate() {
            if !value.is_finite() {
                return Err(SampleError::NotFinite { index, value });
            }
            if value < 0.0 {
                return Err(SampleError::Negative { index, value });
            }
        }
        let mut sorted = values.clone();
        sorted.sort_unstable_by(f64::total_cmp);
        // total_cmp orders -0.0 before +0.0; both are zero for every statistic here.
        Ok(Sample { values, sorted })
    }

    /// Number of values (at least 1).
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Always false: a `Sample` is never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The values in measurement order.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// The values in ascending order.
    pub fn sorted(&self) -> &[f64] {
        &self.sorted
    }

    pub fn into_values(self) -> Vec<f64> {
        self.values
    }

    pub fn min(&self) -> f64 {
        self.sorted[0]
    }

    pub fn max(&self) -> f64 {
        self.sorted[self.sorted.len() - 1]
    }

    /// Arithmetic mean, with compensated (Neumaier) summation so that long samples of
    /// similar values lose no digits.
    pub fn mean(&self) -> f64 {
        neumaier_sum(self.values.iter().copied()) / self.values.len() as f64
    }

    /// Sample standard deviation, `sqrt(Σ(xᵢ − x̄)² / (n − 1))` (Bessel's correction, as
    /// numpy's `std(ddof=1)` and Python's `statistics.stdev`), computed in two passes.
    /// `None` for a single value, where it is undefined.
    pub fn std_dev(&self) -> Option<f64> {
        let n = self.values.len();
        if n < 2 {
            return None;
        }
        let mean = self.mean();
        let ss = neumaier_sum(self.values.iter().map(|&x| (x - mean) * (x - mean)));
        Some((ss / (n - 1) as f64).sqrt())
    }

    /// The `p`-th percentile, `0 ≤ p ≤ 100`, by linear interpolation between order
    /// statistics: with the sorted values `x₀ ≤ … ≤ xₙ₋₁`, `h = (n − 1)·p/100`,
    /// `i = ⌊h⌋`, the result is `xᵢ + (h − i)·(xᵢ₊₁ − xᵢ)`. This is numpy's default,
    /// `numpy.percentile(a, p, method="linear")` (Hyndman & Fan 1996, definition 7), and
    /// Excel's `PERCENTILE.INC`. Interpolation follows numpy's `_lerp`, which computes from
    /// the nearer end, and the result is clamped to `[xᵢ, xᵢ₊₁]`, so it is monotone in `p`.
    pub fn percentile(&self, p: f64) -> Result<f64, SampleError> {
        if !(0.0..=100.0).contains(&p) {
            return Err(SampleError::Percentile(p));
        }
        Ok(percentile_sorted(&self.sorted, p))
    }

    /// The median: the 50th percentile (the mean of the two middle values for even `n`).
    pub fn median(&self) -> f64 {
        percentile_sorted(&self.sorted, 50.0)
    }

    /// Interquartile range: 75th minus 25th percentile (both as [`Sample::percentile`]).
    pub fn iqr(&self) -> f64 {
        percentile_sorted(&self.sorted, 75.0) - percentile_sorted(&self.sorted, 25.0)
    }
}

/// kbench's one quantile function: [`Sample::percentile`] over an ascending, non-empty
/// slice, `p` in `[0, 100]`. The baselines store and every report statistic use it.
///
/// Hand-written rather than statrs' `OrderStatistics::quantile`/`percentile`, because
/// statrs estimates quantiles with Hyndman & Fan's definition 8 (`h = (n + 1/3)·τ + 1/3`,
/// R's `type = 8`) and takes whole percentiles only, while kbench documents, and tests
/// against, numpy's default linear interpolation (definition 7) at 2.5 and 97.5.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    debug_assert!(!sorted.is_empty() && (0.0..=100.0).contains(&p));
    let (lo, t) = rank(sorted.len(), p);
    let hi = (lo + 1).min(sorted.len() - 1);
    lerp(sorted[lo], sorted[hi], t)
}

/// [`percentile_sorted`] without sorting: partial selection of the two order statistics
/// needed, O(n) (the bootstrap takes a median of every resample). Reorders `values`; the
/// result is bit-identical to sorting first.
pub(crate) fn percentile_select(values: &mut [f64], p: f64) -> f64 {
    debug_assert!(!values.is_empty() && (0.0..=100.0).contains(&p));
    let last = values.len() - 1;
    let (lo, t) = rank(values.len(), p);
    let (_, &mut a, above) = values.select_nth_unstable_by(lo, f64::total_cmp);
    let b = if lo == last {
        a
    } else {
        above.iter().copied().fold(f64::INFINITY, f64::min)
    };
    lerp(a, b, t)
}

/// Where the `p`-th percentile of `len` sorted values lies: `h = (len − 1)·p/100`, the
/// lower order statistic `⌊h⌋` and the fraction `h − ⌊h⌋` towards the next.
fn rank(len: usize, p: f64) -> (usize, f64) {
    let last = len - 1;
    let h = last as f64 * (p / 100.0);
    let lo = (h.floor() as usize).min(last);
    (lo, h - lo as f64)
}

/// numpy `_lerp`: from `a` below the midpoint, from `b` above, exact at both ends, clamped
/// to `[a, b]` so percentiles are monotone in `p`.
fn lerp(a: f64, b: f64, t: f64) -> f64 {
    let diff = b - a;
    let v = if t < 0.5 {
        a + diff * t
    } else {
        b - diff * (1.0 - t)
    };
    v.clamp(a, b)
}

/// Σ with Neumaier's compensation (Kahan–Babuška): error independent of the length for
/// values of one sign. Kept rather than statrs' `Statistics::mean`/`std_dev`, which
/// accumulate a running (Welford) mean without compensation: the reports' means, standard
/// deviations and geomeans, and the bootstrap intervals over them, are reproducible bit for
/// bit and pinned by the snapshot tests.
pub(crate) fn neumaier_sum(values: impl Iterator<Item = f64>) -> f64 {
    let (mut sum, mut comp) = (0.0f64, 0.0f64);
    for x in values {
        let t = sum + x;
        if sum.abs() >= x.abs() {
            comp += (sum - t) + x;
        } else {
            comp += (x - t) + sum;
        }
        sum = t;
    }
    sum + comp
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::{abs_diff_eq, assert_abs_diff_eq};

    fn s(v: &[f64]) -> Sample {
        Sample::new(v.to_vec()).unwrap()
    }

    #[test]
    fn invariants_are_checked() {
        assert_eq!(Sample::new(vec![]), Err(SampleError::Empty));
        assert_eq!(
            Sample::new(vec![1.0, f64::NAN]).unwrap_err().to_string(),
            "timing sample 1 is NaN: timings must be finite"
        );
        assert!(matches!(
            Sample::new(vec![f64::INFINITY]),
            Err(SampleError::NotFinite { index: 0, .. })
        ));
        assert_eq!(
            Sample::new(vec![0.5, -1e-9]),
            Err(SampleError::Negative {
                index: 1,
                value: -1e-9
            })
        );
        assert!(Sample::new(vec![0.0, -0.0]).is_ok());
    }

    #[test]
    fn order_statistics() {
        let x = s(&[3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]);
        assert_eq!(x.values()[0], 3.0);
        assert_eq!(x.sorted(), &[1.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 9.0]);
        assert_eq!((x.min(), x.max(), x.len()), (1.0, 9.0, 8));
        assert_eq!(x.median(), 3.5);
        assert_eq!(x.mean(), 31.0 / 8.0);
        // numpy.percentile([3,1,4,1,5,9,2,6], [0, 10, 25, 75, 90, 100]) =
        // [1.0, 1.0, 1.75, 5.25, 6.9, 9.0]
        for (p, want) in [
            (0.0, 1.0),
            (10.0, 1.0),
            (25.0, 1.75),
            (75.0, 5.25),
            (90.0, 6.9),
            (100.0, 9.0),
        ] {
            let got = x.percentile(p).unwrap();
            assert!(
                abs_diff_eq!(got, want, epsilon = 1e-12),
                "p{p}: {got} vs {want}"
            );
        }
        assert_abs_diff_eq!(x.iqr(), 3.5, epsilon = 1e-12);
        // numpy.std([3,1,4,1,5,9,2,6], ddof=1) = 2.748376...
        assert_abs_diff_eq!(x.std_dev().unwrap(), 2.748_376_143_938_415, epsilon = 1e-12);
    }

    #[test]
    fn selection_matches_sorting() {
        let v = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0];
        let x = s(&v);
        for p in [0.0, 2.5, 25.0, 50.0, 75.0, 97.5, 100.0] {
            let mut w = v.to_vec();
            assert_eq!(
                percentile_select(&mut w, p),
                x.percentile(p).unwrap(),
                "p{p}"
            );
        }
        assert_eq!(percentile_select(&mut [7.0], 75.0), 7.0);
    }

    #[test]
    fn single_value() {
        let x = s(&[2.5]);
        assert_eq!(
            (x.median(), x.mean(), x.iqr(), x.std_dev()),
            (2.5, 2.5, 0.0, None)
        );
        assert_eq!(x.percentile(37.0).unwrap(), 2.5);
    }

    #[test]
    fn odd_and_even_medians() {
        assert_eq!(s(&[5.0, 1.0, 3.0]).median(), 3.0);
        assert_eq!(s(&[4.0, 1.0, 3.0, 2.0]).median(), 2.5);
    }

    #[test]
    fn percentile_range_is_checked() {
        let x = s(&[1.0, 2.0]);
        assert_eq!(x.percentile(100.5), Err(SampleError::Percentile(100.5)));
        assert!(x.percentile(-0.1).is_err());
        assert!(x.percentile(f64::NAN).is_err());
    }

    #[test]
    fn mean_and_std_keep_their_digits() {
        // 1e6 values of 1e9 + small offsets: naive summation would lose the offsets.
        let v: Vec<f64> = (0..1_000_000)
            .map(|i| 1e9 + (i % 10) as f64 * 0.1)
            .collect();
        let x = Sample::new(v).unwrap();
        assert_abs_diff_eq!(x.mean(), (1e9 + 0.45), epsilon = 1e-6);
        // Offsets 0, 0.1, …, 0.9 in equal numbers: population variance 0.0825.
        let want = (0.0825f64 * 1e6 / (1e6 - 1.0)).sqrt();
        assert_abs_diff_eq!(x.std_dev().unwrap(), want, epsilon = 1e-6);
    }
}
