//! The short table `kbench run` ends with: evaluated, compiled, correct, fast_1, median speedup.

use std::collections::BTreeMap;

use kbench_record::EvalRecord;

use crate::stats::Sample;

/// Counts and rates over a run's records.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    pub evaluated: usize,
    /// Got past loading (KernelBench's `compiled`).
    pub compiled: usize,
    /// Outcome `ok`.
    pub correct: usize,
    /// Correct and timed.
    pub timed: usize,
    /// #(correct and speedup > 1) / evaluated — KernelBench's fast_p at p = 1 (strict `>`,
    /// over all evaluated kernels).
    pub fast_1: f64,
    /// Median of the speedups of correct, timed kernels.
    pub median_speedup: Option<f64>,
    /// Records per outcome kind.
    pub by_outcome: BTreeMap<String, usize>,
}

/// Summarises records (one per evaluated kernel).
pub fn summarize(records: &[EvalRecord]) -> RunSummary {
    let evaluated = records.len();
    let compiled = records.iter().filter(|r| r.outcome.compiled()).count();
    let correct = records.iter().filter(|r| r.outcome.is_ok()).count();
    let speedups: Vec<f64> = records
        .iter()
        .filter(|r| r.outcome.is_ok())
        .filter_map(|r| r.timing.as_ref().map(|t| t.speedup))
        .filter(|s| s.is_finite() && *s >= 0.0)
        .collect();
    let fast = speedups.iter().filter(|&&s| s > 1.0).count();
    let mut by_outcome = BTreeMap::new();
    for r in records {
        *by_outcome.entry(r.outcome.kind().to_string()).or_insert(0) += 1;
    }
    RunSummary {
        evaluated,
        compiled,
        correct,
        timed: speedups.len(),
        fast_1: if evaluated == 0 {
            0.0
        } else {
            fast as f64 / evaluated as f64
        },
        median_speedup: Sample::new(speedups).ok().map(|s| s.median()),
        by_outcome,
    }
}

fn pct(n: usize, d: usize) -> String {
    if d == 0 {
        "-".into()
    } else {
        format!("{:.1}%", 100.0 * n as f64 / d as f64)
    }
}

/// Renders a summary as a small aligned table.
pub fn render_summary(s: &RunSummary) -> String {
    let rows = [
        ("evaluated", s.evaluated.to_string(), String::new()),
        (
            "compiled",
            s.compiled.to_string(),
            pct(s.compiled, s.evaluated),
        ),
        (
            "correct",
            s.correct.to_string(),
            pct(s.correct, s.evaluated),
        ),
        (
            "fast_1",
            format!("{:.3}", s.fast_1),
            "correct and faster than the reference".into(),
        ),
        (
            "median speedup",
            s.median_speedup.map_or("-".into(), |m| format!("{m:.3}x")),
            format!("over {} timed correct kernel(s)", s.timed),
        ),
    ];
    let mut out = String::new();
    for (k, v, note) in rows {
        out.push_str(&format!("{k:<15} {v:>8}  {note}\n"));
    }
    let outcomes: Vec<String> = s
        .by_outcome
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    out.push_str(&format!("{:<15} {}\n", "outcomes", outcomes.join(", ")));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbench_record::*;

    fn record(outcome: Outcome, speedup: Option<f64>) -> EvalRecord {
        let stats = |m: f64| TimingStats {
            clock: "perf_counter".into(),
            samples_ms: vec![m],
            median_ms: m,
            mean_ms: m,
            min_ms: m,
            max_ms: m,
            std_ms: 0.0,
            p25_ms: m,
            p75_ms: m,
            wall_s: 0.0,
        };
        EvalRecord {
            schema_version: SCHEMA_VERSION,
            run_id: "r".into(),
            problem: ProblemRef {
                suite: "smoke".into(),
                level: 1,
                id: 1,
                name: "x".into(),
                file: "1_x.py".into(),
                sha256: "0".into(),
            },
            candidate: CandidateRef {
                agent: "replay".into(),
                name: "c".into(),
                sample: 0,
                source_path: None,
                sha256: "0".into(),
            },
            device: Device::Cpu,
            precision: Precision::Fp32,
            profile: ToleranceProfile::Strict,
            outcome,
            cases: vec![],
            timing: speedup.map(|s| TimingSummary {
                reference: stats(s),
                candidate: stats(1.0),
                speedup: s,
                speedup_mean: s,
                warmup: 0,
                l2_flush: false,
                rounds: 1,
            }),
            load_s: None,
            wall_s: 0.0,
            started_unix_s: 0.0,
            finished_unix_s: 0.0,
            log_tail: String::new(),
            notes: vec![],
            env: Environment::default(),
        }
    }

    #[test]
    fn summary_counts_and_rates() {
        let rs = vec![
            record(Outcome::Ok, Some(2.0)),
            record(Outcome::Ok, Some(0.5)),
            record(Outcome::Ok, Some(1.0)), // not > 1: not fast
            record(
                Outcome::CompileError {
                    message: "x".into(),
                },
                None,
            ),
        ];
        let s = summarize(&rs);
        assert_eq!((s.evaluated, s.compiled, s.correct, s.timed), (4, 3, 3, 3));
        assert_eq!(s.fast_1, 0.25);
        assert_eq!(s.median_speedup, Some(1.0));
        assert_eq!(s.by_outcome["ok"], 3);
        let text = render_summary(&s);
        assert!(
            text.contains("fast_1") && text.contains("0.250") && text.contains("75.0%"),
            "{text}"
        );
        let empty = summarize(&[]);
        assert_eq!(empty.median_speedup, None);
        assert!(render_summary(&empty).contains("evaluated"));
    }
}
