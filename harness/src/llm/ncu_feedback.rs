//! Profile feedback from `kbench profile` (docs/profiling.md): Nsight Compute's metrics in
//! CudaForge's set, a roofline verdict per kernel and the speed-of-light ratio, for the Judge's
//! optimisation mode, cuda-agent's `profile` tool and the command agent's `profile` request.
//! Where ncu cannot be used, `kbench profile` falls back to the PyTorch profiler and says so;
//! where profiling fails altogether, the measured times are given, labelled as such.

use std::path::PathBuf;

use kbench_record::{Device, EvalRecord, Precision};
use kbench_suites::Problem;
use serde_json::{json, Value};

use super::{ProfileFeedback, TimingOnly};
use crate::measure::profile::ProfileConfig;

/// Profiles correct kernels with `kbench profile` on the run's device.
pub(crate) struct NcuFeedback {
    device: Device,
    precision: Precision,
    python: PathBuf,
}

impl NcuFeedback {
    pub(crate) fn new(device: Device, precision: Precision, python: PathBuf) -> Self {
        Self {
            device,
            precision,
            python,
        }
    }

    fn run(
        &self,
        problem: &Problem,
        source: &str,
    ) -> anyhow::Result<crate::measure::profile::ProfileReport> {
        let dir = tempfile::tempdir()?;
        let problem_path = dir.path().join(&problem.file);
        std::fs::write(&problem_path, &problem.source)?;
        let kernel_path = dir.path().join("kernel.py");
        std::fs::write(&kernel_path, source)?;
        let args = ProfileConfig {
            problem: problem_path,
            kernel: kernel_path,
            device: self.device.to_string(),
            precision: self.precision,
            calls: 3,
            warmup: 2,
            ncu: None,
            no_ncu: false,
            keep: None,
            python: Some(self.python.clone()),
        };
        // The GPU to itself: no evaluation is timed while ncu replays this kernel (and ncu's
        // clocks are not disturbed by one).
        let device = crate::exec::device_lock(self.device);
        let _held = device.lock().unwrap_or_else(|e| e.into_inner());
        crate::measure::profile::profile(&args)
    }
}

/// The feedback document for one profile report: what an agent reads.
pub(crate) fn feedback_json(
    r: &crate::measure::profile::ProfileReport,
    record: &EvalRecord,
) -> Value {
    let source = match (&r.source[..], &r.fallback_reason) {
        ("ncu", _) => "Nsight Compute (kbench profile)".to_string(),
        (s, Some(why)) => format!("{s} (Nsight Compute not used: {why})"),
        (s, None) => s.to_string(),
    };
    let mut doc = json!({
        "source": source,
        "calls_profiled": r.calls,
        "timing": TimingOnly.profile_record(record),
    });
    if let Some(n) = &r.ncu {
        doc["metrics"] = crate::measure::profile::cudaforge_metrics_json(n);
        doc["kernels"] = n
            .kernels
            .iter()
            .take(8)
            .map(|k| {
                json!({
                    "name": k.name,
                    "launches_per_call": k.launches_per_call,
                    "time_per_call_us": (k.time_per_call_s * 1e9).round() / 1e3,
                    "share": (k.share * 1000.0).round() / 1000.0,
                    "roofline": k.verdict.as_ref().map(|v| v.to_string()),
                })
            })
            .collect();
        if let Some(v) = &n.per_call_verdict {
            doc["per_call_roofline"] = json!(v.to_string());
        }
    } else {
        doc["torch_events"] =
            serde_json::to_value(r.torch_events.iter().take(10).collect::<Vec<_>>())
                .unwrap_or(Value::Null);
    }
    if let Some(s) = r.sol_ratio {
        doc["time_over_speed_of_light"] = json!((s * 100.0).round() / 100.0);
    }
    if let Some(p) = &r.peaks {
        doc["gpu_peaks"] = json!(p.describe());
    }
    doc
}

impl ProfileFeedback for NcuFeedback {
    fn profile(&self, problem: &Problem, source: &str, record: &EvalRecord) -> Value {
        match self.run(problem, source) {
            Ok(r) => feedback_json(&r, record),
            Err(e) => {
                let mut doc = TimingOnly.profile(problem, source, record);
                doc["profile_error"] = json!(format!("{e:#}"));
                doc
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::profile::{aggregate, parse_ncu_raw_csv, ProfileReport};
    use crate::test_support::{h100, h100_ncu_report, one_shot_records};

    const MATMUL: &str = include_str!("../../../tests/fixtures/ncu/matmul_bf16.csv");
    fn timed_record() -> EvalRecord {
        one_shot_records()
            .into_iter()
            .find(|r| r.timing.is_some())
            .expect("a timed record in the fixture run")
    }

    #[test]
    fn the_judge_gets_cudaforge_metrics_roofline_and_timing_from_an_ncu_profile() {
        let peaks = h100();
        let ncu = aggregate(&parse_ncu_raw_csv(MATMUL).unwrap(), 3, Some(&peaks));
        let gemm = ncu.kernels[0].name.clone();
        let report = ProfileReport {
            sol_ratio: Some(3.456),
            ..h100_ncu_report("p.py", ncu)
        };
        let record = timed_record();
        let doc = feedback_json(&report, &record);
        assert_eq!(doc["source"], "Nsight Compute (kbench profile)");
        // CudaForge's metric set, per kernel.
        let m = &doc["metrics"][&gemm];
        assert!(m.as_object().is_some_and(|o| !o.is_empty()), "{doc}");
        assert!(
            doc["kernels"][0]["roofline"]
                .as_str()
                .unwrap()
                .contains("compute-bound"),
            "{doc}"
        );
        assert_eq!(doc["time_over_speed_of_light"], 3.46);
        assert!(doc["gpu_peaks"].as_str().unwrap().contains("GB/s"));
        // The measured times ride along.
        assert_eq!(
            doc["timing"]["speedup"].as_f64(),
            Some((record.timing.as_ref().unwrap().speedup * 1000.0).round() / 1000.0)
        );

        // A fallback says why ncu was not used.
        let fallback = ProfileReport {
            source: "torch-profiler".into(),
            fallback_reason: Some("ncu not found".into()),
            ncu: None,
            ..report
        };
        let doc = feedback_json(&fallback, &record);
        assert_eq!(
            doc["source"],
            "torch-profiler (Nsight Compute not used: ncu not found)"
        );
        assert!(doc.get("metrics").is_none());
    }
}
