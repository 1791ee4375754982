//! Optional record fields that reports read when present, and that older records lack.
//!
//! Read leniently from the record's JSON (a missing or malformed field is simply absent),
//! so every record ever written stays readable. The field names below are the contract for
//! the issues that will write them:
//!
//! - `baselines`: speedups of the candidate over other baselines than the eager reference,
//!   keyed by baseline name (`compile`, `max-autotune`), each an object with `speedup`
//!   (baseline median / candidate median) and optionally `speedup_mean` (mean ratio),
//!   `samples_ms` (the baseline's timing samples) — e.g.
//!   `"baselines": {"compile": {"speedup": 1.3, "speedup_mean": 1.28}}`. Also accepted
//!   under `timing.baselines`.
//! - `flags`: integrity flags raised on the candidate, a list of strings (in addition to an
//!   `integrity` outcome's `flag`).
//! - `candidate.trajectory`: which independent trajectory of an agent produced the
//!   candidate (Kevin's 16 parallel trajectories); `candidate.turn`: its refinement turn or
//!   round. Without `trajectory`, each `candidate.sample` is its own trajectory.
//! - `cost`: what producing the candidate cost the agent: `prompt_tokens`,
//!   `completion_tokens`, `tokens` (total; defaults to the sum of the two), `usd`,
//!   `wall_s` (agent wall time) and `gpu_s` (GPU time the agent used, e.g. for its own
//!   profiling). Summed over a task's candidates. The LLM agents write it as the record's
//!   typed `cost` ([`kbench_record::AgentCost`]); read here as JSON, like the others.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One baseline's speedup for a candidate, from the record's `baselines` map.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineSpeedup {
    /// baseline median / candidate median.
    pub speedup: f64,
    /// baseline mean / candidate mean, when recorded.
    pub speedup_mean: Option<f64>,
    /// The baseline's raw timing samples (ms), when recorded.
    pub samples_ms: Vec<f64>,
}

/// Agent cost of one candidate; every part optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    pub tokens: Option<f64>,
    pub usd: Option<f64>,
    pub wall_s: Option<f64>,
    pub gpu_s: Option<f64>,
}

/// The optional fields of one record (see the module doc for their names).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordExtras {
    pub baselines: BTreeMap<String, BaselineSpeedup>,
    pub flags: Vec<String>,
    pub trajectory: Option<u32>,
    pub turn: Option<u32>,
    pub cost: Option<Cost>,
}

impl RecordExtras {
    /// Reads the optional fields from a record's JSON; never fails.
    pub fn from_json(record: &Value) -> RecordExtras {
        let mut baselines = BTreeMap::new();
        let maps = [
            record.get("baselines"),
            record.get("timing").and_then(|t| t.get("baselines")),
        ];
        for map in maps.into_iter().flatten().filter_map(Value::as_object) {
            for (name, b) in map {
                let Some(speedup) = b.get("speedup").and_then(Value::as_f64) else {
                    continue;
                };
                baselines
                    .entry(name.clone())
                    .or_insert_with(|| BaselineSpeedup {
                        speedup,
                        speedup_mean: b.get("speedup_mean").and_then(Value::as_f64),
                        samples_ms: b
                            .get("samples_ms")
                            .and_then(Value::as_array)
                            .map(|a| a.iter().filter_map(Value::as_f64).collect())
                            .unwrap_or_default(),
                    });
            }
        }
        let flags = record
            .get("flags")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|f| f.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let candidate = record.get("candidate");
        let field_u32 = |name: &str| {
            candidate
                .and_then(|c| c.get(name))
                .and_then(Value::as_u64)
                .and_then(|v| u32::try_from(v).ok())
        };
        let cost = record.get("cost").filter(|c| c.is_object()).map(|c| {
            let num = |name: &str| c.get(name).and_then(Value::as_f64);
            let tokens =
                num("tokens").or_else(|| match (num("prompt_tokens"), num("completion_tokens")) {
                    (None, None) => None,
                    (p, q) => Some(p.unwrap_or(0.0) + q.unwrap_or(0.0)),
                });
            Cost {
                tokens,
                usd: num("usd"),
                wall_s: num("wall_s"),
                gpu_s: num("gpu_s"),
            }
        });
        RecordExtras {
            baselines,
            flags,
            trajectory: field_u32("trajectory"),
            turn: field_u32("turn"),
            cost,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_is_there_and_ignores_the_rest() {
        let v: Value = serde_json::from_str(
            r#"{"candidate": {"trajectory": 3, "turn": 7},
                "baselines": {"compile": {"speedup": 1.5, "speedup_mean": 1.4},
                              "broken": {"speedup": "fast"}},
                "timing": {"baselines": {"max-autotune": {"speedup": 0.9, "samples_ms": [1, 2]}}},
                "flags": ["side-stream", 3],
                "cost": {"prompt_tokens": 100, "completion_tokens": 50, "usd": 0.25}}"#,
        )
        .unwrap();
        let x = RecordExtras::from_json(&v);
        assert_eq!((x.trajectory, x.turn), (Some(3), Some(7)));
        assert_eq!(x.baselines["compile"].speedup_mean, Some(1.4));
        assert_eq!(x.baselines["max-autotune"].samples_ms, vec![1.0, 2.0]);
        assert!(!x.baselines.contains_key("broken"));
        assert_eq!(x.flags, vec!["side-stream".to_string()]);
        let cost = x.cost.unwrap();
        assert_eq!(
            (cost.tokens, cost.usd, cost.wall_s),
            (Some(150.0), Some(0.25), None)
        );
        assert_eq!(
            RecordExtras::from_json(&serde_json::json!({})),
            RecordExtras::default()
        );
    }
}
