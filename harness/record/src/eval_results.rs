//! KernelBench's `eval_results.json`: what its `eval_from_generations.py` writes in
//! `runs/<name>/` and its `benchmark_eval_analysis.py` reads (sample 0 of each problem,
//! `correctness`, `runtime` as a mean in ms). kbench writes one per level of every run from
//! its records ([`from_records`]) and `kbench import kernelbench-runs` reads them back.
//!
//! Layout: `{ "<problem id>": [ {sample_id, compiled, correctness, metadata, runtime,
//! runtime_stats}, ... ] }`, problem ids per level (KernelBench runs are single-level).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::{EvalRecord, Outcome};

/// One sample's result, as KernelBench writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KbEvalResult {
    pub sample_id: u32,
    pub compiled: bool,
    pub correctness: bool,
    #[serde(default)]
    pub metadata: Map<String, Value>,
    /// The candidate's mean time in ms; -1 when it was not timed.
    pub runtime: f64,
    /// `mean`, `std`, `min`, `max`, `num_trials`, `hardware`, `device`; empty when not timed.
    #[serde(default)]
    pub runtime_stats: Map<String, Value>,
}

/// One level's file: problem id → its samples, in sample order.
pub type KbEvalResults = BTreeMap<u32, Vec<KbEvalResult>>;

/// The records of a run as KernelBench's `eval_results.json`, one map per level. The last
/// record of each eval key wins (as `kbench report` reads a resumed log). Where two
/// candidates of one problem share a sample number (agents that keep several kernels per
/// sample), the first in the log is kept and the others are named in its metadata, since
/// KernelBench's analysis refuses two results for one sample.
pub fn from_records(records: &[EvalRecord]) -> BTreeMap<u8, KbEvalResults> {
    let mut at: HashMap<String, usize> = HashMap::new();
    let mut latest: Vec<&EvalRecord> = Vec::new();
    for r in records {
        match at.get(&r.key()) {
            Some(&i) => latest[i] = r,
            None => {
                at.insert(r.key(), latest.len());
                latest.push(r);
            }
        }
    }
    let mut out: BTreeMap<u8, KbEvalResults> = BTreeMap::new();
    for r in latest {
        let samples = out
            .entry(r.problem.level)
            .or_default()
            .entry(r.problem.id)
            .or_default();
        match samples
            .iter_mut()
            .find(|s| s.sample_id == r.candidate.sample)
        {
            Some(kept) => {
                let others = kept
                    .metadata
                    .entry("kbench_same_sample_candidates")
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(v) = others {
                    v.push(Value::String(r.candidate.name.clone()));
                }
            }
            None => samples.push(entry_of(r)),
        }
    }
    for level in out.values_mut() {
        for samples in level.values_mut() {
            samples.sort_by_key(|s| s.sample_id);
        }
    }
    out
}

fn entry_of(r: &EvalRecord) -> KbEvalResult {
    let mut metadata = Map::new();
    metadata.insert("hardware".into(), json!(r.env.device_name));
    metadata.insert("device".into(), json!(r.device.to_string()));
    metadata.insert("kbench_outcome".into(), json!(r.outcome.kind()));
    metadata.insert("kbench_candidate".into(), json!(r.candidate.name));
    // KernelBench's own names for why a sample failed, where one fits.
    let why = match &r.outcome {
        Outcome::Ok => None,
        Outcome::CompileError { .. } => Some("compilation_error"),
        Outcome::RuntimeError { .. } | Outcome::Crashed { .. } | Outcome::Timeout { .. } => {
            Some("runtime_error")
        }
        _ => Some("correctness_issue"),
    };
    if let Some(k) = why {
        metadata.insert(k.into(), json!(r.outcome.to_string()));
    }
    if let Outcome::Integrity { flag, .. } = &r.outcome {
        metadata.insert("kbench_flags".into(), json!([flag]));
    }
    if let Some(adv) = r.integrity.as_ref().filter(|i| !i.advisories.is_empty()) {
        metadata.insert("kbench_advisories".into(), json!(adv.advisories));
    }
    if !r.notes.is_empty() {
        metadata.insert("kbench_notes".into(), json!(r.notes));
    }
    let (runtime, runtime_stats) = match &r.timing {
        Some(t) => {
            metadata.insert(
                "kbench_reference_runtime".into(),
                json!(t.reference.mean_ms),
            );
            metadata.insert("kbench_speedup".into(), json!(t.speedup));
            let c = &t.candidate;
            let stats = json!({
                "mean": c.mean_ms,
                "std": c.std_ms,
                "min": c.min_ms,
                "max": c.max_ms,
                "num_trials": c.samples_ms.len(),
                "hardware": r.env.device_name,
                "device": r.device.to_string(),
            });
            let Value::Object(stats) = stats else {
                unreachable!("json! of an object literal")
            };
            (c.mean_ms, stats)
        }
        None => (-1.0, Map::new()),
    };
    KbEvalResult {
        sample_id: r.candidate.sample,
        compiled: r.outcome.compiled(),
        correctness: r.outcome.is_ok(),
        metadata,
        runtime,
        runtime_stats,
    }
}

/// Reads one problem's value in an `eval_results.json`, one result per sample (each may
/// fail on its own): KernelBench writes a list of samples; its older scripts wrote one
/// object per problem.
pub fn samples_of(value: &Value) -> Result<Vec<Result<KbEvalResult, String>>, String> {
    let one = |v: &Value| {
        serde_json::from_value::<KbEvalResult>(v.clone())
            .map_err(|e| format!("not a KernelBench eval result ({e})"))
    };
    match value {
        Value::Array(items) => Ok(items.iter().map(one).collect()),
        Value::Object(_) => Ok(vec![one(value)]),
        _ => Err("expected a list of results or one result object".into()),
    }
}
