//! Profile feedback for the agents' prompts and tools: the [`ProfileFeedback`] hook and its
//! CPU stand-in, [`TimingOnly`] (the measured times). Nsight Compute's is in
//! [`super::ncu_feedback`].

use kbench_record::EvalRecord;
use kbench_suites::Problem;
use serde_json::{json, Value};

/// Hook for profiler feedback (`kbench profile`: Nsight Compute metrics and the roofline).
/// The Judge's optimisation mode and the `profile` tools receive what it returns, verbatim.
pub(crate) trait ProfileFeedback: Send + Sync {
    /// A JSON document describing where the kernel's time goes.
    fn profile(&self, problem: &Problem, source: &str, record: &EvalRecord) -> Value;
}

/// What is available until `kbench profile` lands: the measured times, marked as such.
pub(crate) struct TimingOnly;

impl ProfileFeedback for TimingOnly {
    fn profile(&self, _problem: &Problem, _source: &str, r: &EvalRecord) -> Value {
        self.profile_record(r)
    }
}

impl TimingOnly {
    /// The record's measured times, labelled as such.
    pub(crate) fn profile_record(&self, r: &EvalRecord) -> Value {
        match &r.timing {
            Some(t) => json!({
                "source": "kbench timing (no profiler on this device: the measured times only)",
                "candidate_median_ms": round3(t.candidate.median_ms),
                "candidate_mean_ms": round3(t.candidate.mean_ms),
                "reference_median_ms": round3(t.reference.median_ms),
                "speedup": round3(t.speedup),
                "timing_clock": t.candidate.clock,
            }),
            None => json!({"source": "kbench", "note": "not timed (--no-timing)"}),
        }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
