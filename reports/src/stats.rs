//! Order statistics over timing samples.

use kbench_record::TimingStats;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SampleError {
    #[error("no samples")]
    Empty,
    #[error("sample {index} is {value}: times must be finite and non-negative")]
    NotATime { index: usize, value: f64 },
}

/// A non-empty set of finite, non-negative measurements, kept sorted.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    sorted: Vec<f64>,
}

impl Sample {
    /// Checks the invariants: at least one value, all finite and ≥ 0.
    pub fn new(mut values: Vec<f64>) -> Result<Self, SampleError> {
        if values.is_empty() {
            return Err(SampleError::Empty);
        }
        if let Some((index, &value)) = values
            .iter()
            .enumerate()
            .find(|(_, v)| !(v.is_finite() && **v >= 0.0))
        {
            return Err(SampleError::NotATime { index, value });
        }
        values.sort_by(f64::total_cmp);
        Ok(Self { sorted: values })
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    pub fn min(&self) -> f64 {
        self.sorted[0]
    }

    pub fn max(&self) -> f64 {
        self.sorted[self.sorted.len() - 1]
    }

    /// Arithmetic mean (summed in sorted order, smallest first, for accuracy).
    pub fn mean(&self) -> f64 {
        self.sorted.iter().sum::<f64>() / self.sorted.len() as f64
    }

    /// Sample standard deviation with Bessel's correction (n − 1); 0 for one value.
    pub fn std(&self) -> f64 {
        let n = self.sorted.len();
        if n < 2 {
            return 0.0;
        }
        let m = self.mean();
        let ss: f64 = self.sorted.iter().map(|x| (x - m) * (x - m)).sum();
        (ss / (n - 1) as f64).sqrt()
    }

    /// The `p`-th percentile (0 ≤ p ≤ 100) by linear interpolation between closest ranks:
    /// position h = (n − 1)·p/100, value x⌊h⌋ + (h − ⌊h⌋)(x⌊h⌋+1 − x⌊h⌋). This is numpy's default
    /// (`method="linear"`, Hyndman & Fan definition 7).
    pub fn percentile(&self, p: f64) -> f64 {
        let p = p.clamp(0.0, 100.0);
        let n = self.sorted.len();
        let h = (n - 1) as f64 * p / 100.0;
        let lo = h.floor() as usize;
        let hi = (lo + 1).min(n - 1);
        let frac = h - lo as f64;
        self.sorted[lo] + frac * (self.sorted[hi] - self.sorted[lo])
    }

    pub fn median(&self) -> f64 {
        self.percentile(50.0)
    }

    /// Interquartile range, p75 − p25.
    pub fn iqr(&self) -> f64 {
        self.percentile(75.0) - self.percentile(25.0)
    }
}

/// Summarises timing samples (milliseconds) in the order they were taken; the record keeps
/// them unsorted, as measured.
pub fn timing_stats(
    clock: &str,
    samples_ms: Vec<f64>,
    wall_s: f64,
) -> Result<TimingStats, SampleError> {
    let s = Sample::new(samples_ms.clone())?;
    Ok(TimingStats {
        clock: clock.to_string(),
        median_ms: s.median(),
        mean_ms: s.mean(),
        min_ms: s.min(),
        max_ms: s.max(),
        std_ms: s.std(),
        p25_ms: s.percentile(25.0),
        p75_ms: s.percentile(75.0),
        wall_s,
        samples_ms,
    })
}

/// Speedup of `candidate` over `reference`: (median ratio, mean ratio). Greater than 1 means the
/// candidate is faster.
pub fn speedup(reference: &TimingStats, candidate: &TimingStats) -> (f64, f64) {
    (
        reference.median_ms / candidate.median_ms,
        reference.mean_ms / candidate.mean_ms,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_values() {
        let s = Sample::new(vec![4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(s.median(), 2.5);
        assert_eq!(s.mean(), 2.5);
        assert_eq!(s.min(), 1.0);
        assert_eq!(s.max(), 4.0);
        // numpy.percentile([1,2,3,4], 25) == 1.75
        assert_eq!(s.percentile(25.0), 1.75);
        assert_eq!(s.percentile(75.0), 3.25);
        assert_eq!(s.iqr(), 1.5);
        assert!((s.std() - 1.2909944487358056).abs() < 1e-12);
        assert_eq!(Sample::new(vec![7.0]).unwrap().std(), 0.0);
    }

    #[test]
    fn invariants_are_checked() {
        assert_eq!(Sample::new(vec![]), Err(SampleError::Empty));
        assert!(matches!(
            Sample::new(vec![1.0, f64::NAN]),
            Err(SampleError::NotATime { index: 1, .. })
        ));
        assert!(Sample::new(vec![-1.0]).is_err());
        assert!(Sample::new(vec![f64::INFINITY]).is_err());
    }

    #[test]
    fn timing_stats_keep_samples_in_order() {
        let t = timing_stats("perf_counter", vec![3.0, 1.0, 2.0], 0.01).unwrap();
        assert_eq!(t.samples_ms, vec![3.0, 1.0, 2.0]);
        assert_eq!(t.median_ms, 2.0);
        let (m, a) = speedup(&t, &timing_stats("x", vec![1.0], 0.0).unwrap());
        assert_eq!((m, a), (2.0, 2.0));
    }

    proptest! {
        #[test]
        fn median_between_min_and_max(v in proptest::collection::vec(0.0f64..1e6, 1..200)) {
            let s = Sample::new(v).unwrap();
            prop_assert!(s.min() <= s.median() && s.median() <= s.max());
            prop_assert!(s.min() <= s.mean() * (1.0 + 1e-12) && s.mean() <= s.max() * (1.0 + 1e-12));
        }

        #[test]
        fn percentiles_are_monotone(v in proptest::collection::vec(0.0f64..1e6, 1..200), a in 0.0f64..100.0, b in 0.0f64..100.0) {
            let s = Sample::new(v).unwrap();
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(s.percentile(lo) <= s.percentile(hi));
        }

        #[test]
        fn order_does_not_matter(mut v in proptest::collection::vec(0.0f64..1e6, 1..100)) {
            let a = Sample::new(v.clone()).unwrap();
            v.reverse();
            let b = Sample::new(v).unwrap();
            prop_assert_eq!(a.median(), b.median());
            prop_assert_eq!(a.percentile(90.0), b.percentile(90.0));
        }
    }
}
