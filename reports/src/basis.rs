//! Which of a record's speedups the metrics use: the paired median (kbench's) or the
//! ratio of means (KernelBench's).

use kbench_record::EvalRecord;
use serde::{Deserialize, Serialize};

/// Which speedup of a record's [`kbench_record::TimingSummary`] the metrics use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpeedupBasis {
    /// `TimingSummary::speedup`, kbench's default: the median over interleaved rounds of the
    /// round's reference / candidate time (records from before the paired speedup: reference
    /// median / candidate median).
    #[default]
    Median,
    /// reference mean / candidate mean (`TimingSummary::speedup_mean`), KernelBench's.
    Mean,
}

impl SpeedupBasis {
    pub fn as_str(self) -> &'static str {
        match self {
            SpeedupBasis::Median => "median",
            SpeedupBasis::Mean => "mean",
        }
    }

    /// How this basis's speedup is computed, for report footers.
    pub fn describe(self) -> &'static str {
        match self {
            SpeedupBasis::Median => {
                "the median over interleaved timing rounds of reference time / candidate time \
                 (paired; older records: reference median / candidate median)"
            }
            SpeedupBasis::Mean => "reference mean / candidate mean",
        }
    }

    /// The record's speedup on this basis, if it was timed and the ratio is finite.
    pub fn speedup_of(self, record: &EvalRecord) -> Option<f64> {
        let t = record.timing.as_ref()?;
        let s = match self {
            SpeedupBasis::Median => t.speedup,
            SpeedupBasis::Mean => t.speedup_mean,
        };
        s.is_finite().then_some(s)
    }
}
