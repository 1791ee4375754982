/// Statistics asked of data that cannot give them. (A failed kernel is never an error;
/// these are harness faults: a worker reported a NaN time, a report asked for p = 120.)
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SampleError {
    #[error("no timing samples: time at least one call")]
    Empty,
    #[error("timing sample {index} is {value}: timings must be finite")]
    NotFinite { index: usize, value: f64 },
    #[error("timing sample {index} is {value}: timings must not be negative")]
    Negative { index: usize, value: f64 },
    #[error("percentile {0} is outside [0, 100]")]
    Percentile(f64),
}
