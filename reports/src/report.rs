//! The one result struct that every table, export, plot and page reads.

use std::collections::BTreeMap;

use kbench_record::EvalRecord;
use serde::{Deserialize, Serialize};

use crate::basis::SpeedupBasis;
use crate::completeness::{MissingEval, RecordsCheck};
use crate::extras::RecordExtras;
use crate::metrics::{metrics_by_level, pass_at_k_over, ScopeMetrics};
use crate::stats::{Estimate, Rate, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, SPEEDUP_RESAMPLES};
use crate::task::{group_tasks_planned, Baseline, Pick, Task};

/// Version of the report's JSON shape. Bump on any incompatible change.
pub const REPORT_VERSION: u32 = 1;

/// One run as read from its directory: what `kbench report` hands to [`build_report`].
#[derive(Debug, Clone, Default)]
pub struct RunInput {
    /// Short name shown in tables (the run directory's name).
    pub label: String,
    /// The run directory as given.
    pub path: String,
    /// `run.json`'s `run_id` and `agent`, when it was readable.
    pub run_id: Option<String>,
    pub agent: Option<String>,
    /// The records that count: one per planned evaluation recorded
    /// ([`crate::completeness::reconcile`]).
    pub records: Vec<(EvalRecord, RecordExtras)>,
    /// Planned evaluations without a valid record: counted as not correct.
    pub missing: Vec<MissingEval>,
    /// What checking the run's files and matching its records with its plan found.
    pub check: RecordsCheck,
    /// Whether the run timed its kernels (`run.json`'s timed calls); `None` when unknown,
    /// then read from the records.
    pub timed: Option<bool>,
}

/// One problem's result in a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProblemRow {
    pub key: String,
    pub level: u8,
    pub id: u32,
    pub name: String,
    pub candidates: usize,
    pub compiled: bool,
    pub correct: bool,
    pub correct_random: bool,
    /// The best correct candidate against eager, else the last candidate evaluated.
    pub candidate: String,
    /// That candidate's outcome kind.
    pub outcome: String,
    /// Best correct eager speedup, with its interval from the timing samples.
    pub speedup: Option<f64>,
    pub interval: Option<Estimate>,
    /// Best correct speedups against the other baselines.
    pub compile_speedup: Option<f64>,
    pub max_autotune_speedup: Option<f64>,
    /// Integrity flags raised on any candidate of the problem.
    pub flags: Vec<String>,
    /// The shown candidate's median time / the problem's speed of light (CUDA runs on a GPU
    /// in kbench's spec table; see `kbench_record::perf`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sol_ratio: Option<f64>,
}

/// Correctness per case family, over candidates that ran at least one case of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FamilyRow {
    pub family: String,
    /// Candidates that passed every case of the family, over those that ran it.
    pub passed: Rate,
}

/// An integrity flag raised on a candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntegrityRow {
    pub problem: String,
    pub candidate: String,
    pub flag: String,
}

/// Everything reported about one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub label: String,
    pub path: String,
    pub run_id: Option<String>,
    pub agent: Option<String>,
    /// Distinct devices, precisions and tolerance profiles of its records.
    pub devices: Vec<String>,
    pub precisions: Vec<String>,
    pub profiles: Vec<String>,
    pub records: usize,
    /// Per level, then `all`.
    pub scopes: Vec<ScopeMetrics>,
    pub problems: Vec<ProblemRow>,
    pub families: Vec<FamilyRow>,
    pub integrity: Vec<IntegrityRow>,
    /// How its records were judged, where a reader must know: module modes that differ
    /// (`--model-mode`), kernels correct only in eval mode (`mode-switch`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Planned, missing, invalid, duplicate and unplanned records, and how far the run was
    /// verified: every rendering states it.
    #[serde(default)]
    pub records_check: RecordsCheck,
    /// Whether the run timed its kernels: an untimed run (`--no-timing`) has no speedup
    /// figures at all, which renderings show as not timed, never as 0.
    #[serde(default = "timed_default")]
    pub timed: bool,
}

fn timed_default() -> bool {
    true
}

impl RunReport {
    pub fn scope(&self, name: &str) -> Option<&ScopeMetrics> {
        self.scopes.iter().find(|s| s.scope == name)
    }
}

/// The whole report: settings of the statistics and every run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub report_version: u32,
    /// Which timing ratio the speedups are (`median` or `mean`).
    pub basis: SpeedupBasis,
    /// Which candidates of each problem count.
    pub pick: Pick,
    pub bootstrap_resamples: usize,
    pub speedup_resamples: usize,
    pub bootstrap_seed: u64,
    /// Labels of the runs read with nothing verified (`--unverified`).
    #[serde(default)]
    pub unverified: Vec<String>,
    pub runs: Vec<RunReport>,
}

fn distinct(values: impl Iterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = values.collect();
    v.sort();
    v.dedup();
    v
}

fn problem_row(t: &Task, basis: SpeedupBasis) -> ProblemRow {
    let best = t.best(Baseline::Eager);
    let c = best
        .map(|(c, _)| c)
        .or(t.candidates.last())
        .or(t.remeasured.last())
        .expect("a task has at least one record");
    let mut flags: Vec<String> = t
        .candidates
        .iter()
        .flat_map(|c| c.flags.iter().cloned())
        .collect();
    flags.sort();
    flags.dedup();
    ProblemRow {
        key: t.key.clone(),
        level: t.level,
        id: t.id,
        name: t.name.clone(),
        candidates: t.candidates.len(),
        compiled: t.compiled(),
        correct: t.correct(),
        correct_random: t.correct_random(),
        candidate: c.name.clone(),
        outcome: c.outcome.clone(),
        speedup: best.map(|(_, s)| s),
        // Only the reported candidate's interval is computed: 1,000 resamples of its
        // samples, not of every candidate's.
        interval: best.and_then(|_| c.speedup_interval(basis)),
        compile_speedup: t.best(Baseline::Compile).map(|(_, s)| s),
        max_autotune_speedup: t.best(Baseline::MaxAutotune).map(|(_, s)| s),
        flags,
        sol_ratio: c.sol_ratio,
    }
}

/// Builds one run's report from its records.
pub fn run_report(input: &RunInput, basis: SpeedupBasis, pick: Pick) -> RunReport {
    let tasks = group_tasks_planned(&input.records, &input.missing, basis, pick);
    let mut families: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut integrity = Vec::new();
    let mut missing = 0;
    for t in &tasks {
        for c in &t.candidates {
            missing += usize::from(c.missing);
            for (family, &passed) in &c.families {
                let e = families.entry(family.clone()).or_default();
                e.0 += usize::from(passed);
                e.1 += 1;
            }
            for flag in &c.flags {
                integrity.push(IntegrityRow {
                    problem: t.key.clone(),
                    candidate: c.name.clone(),
                    flag: flag.clone(),
                });
            }
        }
    }
    // A missing evaluation ran no case: it fails every family the others ran.
    for e in families.values_mut() {
        e.1 += missing;
    }
    let records = || input.records.iter().map(|(r, _)| r);
    let timed = input.timed.unwrap_or_else(|| {
        records().any(|r| r.timing.is_some()) || !records().any(|r| r.outcome.is_ok())
    });
    let mut scopes = metrics_by_level(&tasks);
    if !timed {
        // No speedup was measured: not 0, not a figure at all.
        for s in &mut scopes {
            s.baselines.clear();
        }
    }
    if pick != Pick::BestCorrect {
        // pass@k is over every sample even when the other metrics read the first only
        // (KernelBench: fast_p from sample 0, pass@k from all samples).
        let all = group_tasks_planned(&input.records, &input.missing, basis, Pick::BestCorrect);
        for s in &mut scopes {
            let of: Vec<&Task> = all
                .iter()
                .filter(|t| s.level.is_none_or(|l| t.level == l))
                .collect();
            s.pass_at_k = pass_at_k_over(&of);
        }
    }
    RunReport {
        label: input.label.clone(),
        path: input.path.clone(),
        run_id: input.run_id.clone(),
        agent: input.agent.clone(),
        devices: distinct(records().map(|r| r.device.to_string())),
        precisions: distinct(records().map(|r| r.precision.to_string())),
        profiles: distinct(records().map(|r| r.profile.to_string())),
        records: input.records.len(),
        scopes,
        problems: tasks.iter().map(|t| problem_row(t, basis)).collect(),
        families: {
            let mut rows: Vec<FamilyRow> = families
                .into_iter()
                .map(|(family, (passed, ran))| FamilyRow {
                    family,
                    passed: Rate::wilson(passed, ran),
                })
                .collect();
            // KernelBench's own family first, then kbench's in name order.
            rows.sort_by_key(|f| f.family != "random");
            rows
        },
        integrity,
        notes: {
            let mut notes = mode_notes(records());
            notes.extend(baseline_notes(&tasks));
            if !timed {
                notes.push(
                    "NOT TIMED: the run was made with --no-timing; it has no speedups (shown as not timed, never as 0)".into(),
                );
            }
            notes
        },
        records_check: input.check.clone(),
        timed,
    }
}

/// Where each non-eager baseline's times came from, and the problems it has no usable time
/// for (left out of its figures, [`crate::metrics::with_time`]), with why. Eager needs no
/// note: it is each run's own reference, timed beside the candidate.
fn baseline_notes(tasks: &[Task]) -> Vec<String> {
    let mut notes = Vec::new();
    for b in Baseline::ALL.into_iter().filter(|&b| b != Baseline::Eager) {
        let mut sources: BTreeMap<&str, usize> = BTreeMap::new();
        for t in tasks {
            if let Some((c, _)) = t.best(b) {
                if let Some(s) = c.baseline_sources.get(&b) {
                    *sources.entry(s).or_insert(0) += 1;
                }
            }
        }
        let missing: Vec<(&str, &str)> = tasks
            .iter()
            .filter_map(|t| Some((t.key.as_str(), t.baseline_missing(b)?)))
            .collect();
        if !sources.is_empty() {
            let named: Vec<String> = sources
                .iter()
                .map(|(s, n)| format!("{s} ({n} task(s))"))
                .collect();
            notes.push(format!(
                "speedups vs {}: times from {}",
                b.as_str(),
                named.join("; ")
            ));
        }
        let drifts: Vec<(&str, f64)> = tasks
            .iter()
            .filter_map(|t| {
                let (c, _) = t.best(b)?;
                Some((t.key.as_str(), *c.eager_drift.get(&b)?))
            })
            .collect();
        notes.extend(drift_note(b.as_str(), &drifts));
        if !missing.is_empty() {
            let named = first_named(missing.iter().map(|(key, why)| format!("{key} ({why})")));
            notes.push(format!(
                "NO {} TIME for {} of {} problem(s), left out of the {} rows (not counted as 0): {}",
                b.as_str().to_uppercase(),
                missing.len(),
                tasks.len(),
                b.as_str(),
                named.join(", ")
            ));
        }
    }
    notes
}

/// How far a store's eager time may be from a run's own reference before the run's speedups
/// over that store's times are noted: beyond the few percent two GPUs of one model differ by
/// on GPU-bound problems (docs/baselines.md, stored against live).
pub const EAGER_DRIFT_NOTED: f64 = 0.10;

/// The note for speedups over `mode`'s stored times when, on some problems, the store's eager
/// time is more than [`EAGER_DRIFT_NOTED`] from the run's own reference (`drifts`: problem and
/// [`kbench_record::BaselineRatio::eager_drift`] of each problem compared): those speedups
/// carry the store's machine and moment. The worst are named first. Used by `kbench report`
/// and by the summary `kbench run` prints.
pub fn drift_note<K: AsRef<str>>(mode: &str, drifts: &[(K, f64)]) -> Option<String> {
    let bound = (1.0 + EAGER_DRIFT_NOTED).ln();
    let mut far: Vec<(&str, f64)> = drifts
        .iter()
        .map(|(k, d)| (k.as_ref(), *d))
        .filter(|(_, d)| d.is_finite() && *d > 0.0 && d.ln().abs() > bound)
        .collect();
    if far.is_empty() {
        return None;
    }
    far.sort_by(|a, b| b.1.ln().abs().total_cmp(&a.1.ln().abs()).then(a.0.cmp(b.0)));
    let named = first_named(far.iter().map(|(key, d)| format!("{key} {d:.2}x")));
    Some(format!(
        "STORED {} TIMES FROM ANOTHER MOMENT: on {} of {} problem(s) compared, the store's eager time is more than {:.0}% from this run's own reference (store / run: {}); speedups vs {mode} on them carry about that factor (the store's machine and moment; launch-bound models follow the host CPU's speed): `--baselines live,{mode}` measures them in the run",
        mode.to_uppercase(),
        far.len(),
        drifts.len(),
        100.0 * EAGER_DRIFT_NOTED,
        named.join(", "),
    ))
}

/// The first twelve of `items`, and "and N more" for the rest: a note's list of problems.
fn first_named(items: impl ExactSizeIterator<Item = String>) -> Vec<String> {
    const SHOWN: usize = 12;
    let n = items.len();
    let mut named: Vec<String> = items.take(SHOWN).collect();
    if n > SHOWN {
        named.push(format!("and {} more", n - SHOWN));
    }
    named
}

/// Notes on module modes: records of both modes in one run, and `mode-switch` kernels that
/// failed in train mode but are correct with both models in eval mode.
fn mode_notes<'a>(records: impl Iterator<Item = &'a EvalRecord>) -> Vec<String> {
    let mut modes: BTreeMap<String, usize> = BTreeMap::new();
    let mut eval_only = 0;
    for r in records {
        *modes.entry(r.model_mode.to_string()).or_insert(0) += 1;
        eval_only += usize::from(
            !r.outcome.is_ok()
                && r.integrity
                    .as_ref()
                    .is_some_and(|ig| ig.eval_mode_correct == Some(true)),
        );
    }
    let mut notes = Vec::new();
    if modes.len() > 1 {
        let named: Vec<String> = modes.iter().map(|(m, n)| format!("{n} in {m}")).collect();
        notes.push(format!(
            "MIXED MODEL MODES: {} (--model-mode): these records were not judged under one convention",
            named.join(", ")
        ));
    }
    if eval_only > 0 {
        notes.push(format!(
            "mode-switch: {eval_only} kernel(s) fail in train mode but are correct only in eval mode (both models in .eval())"
        ));
    }
    notes
}

/// Builds the report of every run, speedups on `basis`, every candidate considered.
pub fn build_report(inputs: &[RunInput], basis: SpeedupBasis) -> Report {
    build_report_picking(inputs, basis, Pick::BestCorrect)
}

/// [`build_report`] over the candidates `pick` considers.
pub fn build_report_picking(inputs: &[RunInput], basis: SpeedupBasis, pick: Pick) -> Report {
    Report {
        report_version: REPORT_VERSION,
        basis,
        pick,
        bootstrap_resamples: BOOTSTRAP_RESAMPLES,
        speedup_resamples: SPEEDUP_RESAMPLES,
        bootstrap_seed: BOOTSTRAP_SEED,
        unverified: inputs
            .iter()
            .filter(|i| i.check.unverified())
            .map(|i| i.label.clone())
            .collect(),
        runs: with_report_modes(
            inputs,
            inputs.iter().map(|i| run_report(i, basis, pick)).collect(),
        ),
    }
}

/// Runs each in one module mode, but not all in the same one: each says so.
fn with_report_modes(inputs: &[RunInput], mut runs: Vec<RunReport>) -> Vec<RunReport> {
    let modes_of = |i: &RunInput| distinct(i.records.iter().map(|(r, _)| r.model_mode.to_string()));
    let all = distinct(inputs.iter().flat_map(modes_of));
    if all.len() > 1 {
        for (run, input) in runs.iter_mut().zip(inputs) {
            if let [mine] = &modes_of(input)[..] {
                run.notes.insert(
                    0,
                    format!(
                        "MIXED MODEL MODES: this report holds {} records (--model-mode); this run's are {mine}",
                        all.join(" and ")
                    ),
                );
            }
        }
    }
    runs
}
