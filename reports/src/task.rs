//! From eval records to tasks: what each candidate achieved, and which result stands for
//! each problem.
//!
//! A *task* is one problem of a run; a run may hold several candidates per problem
//! (samples, refinement turns, parallel trajectories). A task's result is its **best
//! correct candidate**: the correct candidate with the highest speedup against the
//! baseline in question (CudaForge: "the fastest correct kernel over all rounds"; CUDA Agent:
//! "the maximum speedup vs torch.compile in the trajectory"; Kevin: the fastest correct
//! kernel of a trajectory). A task is compiled / correct when any of its candidates is.
//! Each baseline picks its own fastest candidate. CUDA Agent picks one kernel by its speedup
//! over torch.compile and reports that kernel's eager speedup too; since all candidates of a
//! task face the same baselines, the fastest kernel is the same for every baseline up to
//! timing noise between records, which is where the two rules can differ.
//! Tasks are the problems that have at least one record or one evaluation planned in the
//! run's `run.json` without a valid record ([`crate::completeness`]): such a *missing*
//! evaluation is a candidate that is neither compiled nor correct, so a record that was
//! never written, deleted or spoiled counts against the run in every denominator. `kbench run`
//! records a selected problem its agent gave no kernel for (`no_kernel`) and a broken
//! problem file (`problem_error`), so those are in every denominator, never correct.

use std::collections::BTreeMap;

use kbench_record::{CaseFamily, EvalRecord, Outcome, SelectionRole};
use serde::{Deserialize, Serialize};

use crate::basis::SpeedupBasis;
use crate::completeness::MissingEval;
use crate::extras::{Cost, RecordExtras};

/// Which candidates of a problem a report considers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pick {
    /// Every candidate; a task reports its best correct one (CudaForge, CUDA Agent, Kevin).
    #[default]
    BestCorrect,
    /// Only each problem's first sample (the lowest `candidate.sample`), as KernelBench's
    /// `benchmark_eval_analysis.py` uses `sample_id == 0` alone.
    FirstSample,
}

impl Pick {
    pub fn as_str(self) -> &'static str {
        match self {
            Pick::BestCorrect => "best correct candidate",
            Pick::FirstSample => "first sample only",
        }
    }
}

/// What a speedup is measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Baseline {
    /// PyTorch eager: the problem's own `Model`, timed by kbench in the same run.
    #[serde(rename = "eager")]
    Eager,
    /// `torch.compile(model)` (inductor, default mode).
    #[serde(rename = "compile")]
    Compile,
    /// `torch.compile(model, mode="max-autotune")`.
    #[serde(rename = "max-autotune")]
    MaxAutotune,
}

impl Baseline {
    pub const ALL: [Baseline; 3] = [Baseline::Eager, Baseline::Compile, Baseline::MaxAutotune];

    /// A baseline mode as records name it (`baselines` keys); `None` for modes reports do
    /// not know.
    pub fn from_name(name: &str) -> Option<Baseline> {
        match name {
            "eager" => Some(Baseline::Eager),
            "compile" => Some(Baseline::Compile),
            "max-autotune" | "max_autotune" => Some(Baseline::MaxAutotune),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Baseline::Eager => "eager",
            Baseline::Compile => "compile",
            Baseline::MaxAutotune => "max-autotune",
        }
    }
}

/// One evaluated candidate, reduced to what the metrics need.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub name: String,
    /// Independent trajectory (`candidate.trajectory`, else the sample number).
    pub trajectory: u32,
    /// Refinement turn or round, when the agent recorded one.
    pub turn: Option<u32>,
    /// The outcome's kind (`ok`, `mismatch`, ...).
    pub outcome: String,
    /// Got as far as running (KernelBench's `compiled`).
    pub compiled: bool,
    /// Correct on every case family (`Outcome::Ok`).
    pub correct: bool,
    /// Correct on the `random` family alone (KernelBench's own check): see
    /// [`correct_on_random`].
    pub correct_random: bool,
    /// Speedups of a correct, timed candidate, per baseline, on the report's basis.
    pub speedups: BTreeMap<Baseline, f64>,
    /// Raw timing samples (ms) of reference and candidate, kept for the speedup interval
    /// of the candidate a task reports (computed for that one only; not serialized).
    #[serde(skip)]
    pub samples: Option<(Vec<f64>, Vec<f64>)>,
    /// Calls a side per interleaving round when the record's median-basis speedup is the
    /// paired one (records that carry `speedup_of_medians`); `None` for older records.
    #[serde(skip)]
    pub paired_per_round: Option<usize>,
    /// Baselines with no usable time for the problem (the record's `baselines_missing`),
    /// with why. A task any of whose records says so is left out of that baseline's
    /// figures: its speedup there is unknown, not 0.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub baselines_missing: BTreeMap<Baseline, String>,
    /// Where each non-eager speedup's baseline time came from (`<origin> <file>`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub baseline_sources: BTreeMap<Baseline, String>,
    /// Per non-eager baseline of stored times: the store's eager time over the run's own
    /// reference ([`kbench_record::BaselineRatio::eager_drift`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eager_drift: BTreeMap<Baseline, f64>,
    /// Per case family: did every case of the family that ran pass.
    pub families: BTreeMap<String, bool>,
    /// Integrity flags: an `integrity` outcome's flag and the record's `flags`.
    pub flags: Vec<String>,
    pub cost: Option<Cost>,
    /// The harness's wall time evaluating it, seconds.
    pub eval_s: f64,
    /// Median time / the problem's speed of light ([`EvalRecord::sol_ratio`]) of a correct,
    /// timed candidate on a GPU in kbench's spec table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sol_ratio: Option<f64>,
    /// An LLM agent's re-measurement of one of its kernels while choosing its final one:
    /// a finalist's re-timing, or the chosen kernel's fresh measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<SelectionRole>,
    /// A planned evaluation without a valid record: neither compiled nor correct, and failing
    /// every case family the run's other candidates ran.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub missing: bool,
}

/// The outcome kind of a missing evaluation.
pub const MISSING: &str = "missing";

impl Candidate {
    /// A planned evaluation without a valid record ([`crate::completeness`]).
    pub fn missing(m: &MissingEval) -> Candidate {
        let (name, sample) = m
            .kernel
            .clone()
            .unwrap_or_else(|| ("(no record)".to_string(), 0));
        Candidate {
            name,
            trajectory: sample,
            turn: None,
            outcome: MISSING.into(),
            compiled: false,
            correct: false,
            correct_random: false,
            speedups: BTreeMap::new(),
            samples: None,
            paired_per_round: None,
            baselines_missing: BTreeMap::new(),
            baseline_sources: BTreeMap::new(),
            eager_drift: BTreeMap::new(),
            families: BTreeMap::new(),
            flags: Vec::new(),
            cost: None,
            eval_s: 0.0,
            sol_ratio: None,
            selection: None,
            missing: true,
        }
    }

    /// The 95% interval of the eager speedup on `basis`, from the timing samples (the
    /// paired ratio when the record was timed in interleaved rounds).
    pub fn speedup_interval(&self, basis: SpeedupBasis) -> Option<crate::stats::Estimate> {
        use crate::stats::RatioOf;
        let (reference, candidate) = self.samples.as_ref()?;
        let of = match (basis, self.paired_per_round) {
            (SpeedupBasis::Median, Some(per_round)) => RatioOf::Paired(per_round),
            (SpeedupBasis::Median, None) => RatioOf::Median,
            (SpeedupBasis::Mean, _) => RatioOf::Mean,
        };
        crate::stats::speedup_interval(reference, candidate, of)
    }

    /// Reduces a record (and its optional fields) with speedups on `basis`.
    pub fn from_record(r: &EvalRecord, extras: &RecordExtras, basis: SpeedupBasis) -> Candidate {
        let correct = r.outcome.is_ok();
        let mut speedups = BTreeMap::new();
        let mut samples = None;
        let mut paired_per_round = None;
        if correct {
            if let Some(s) = basis.speedup_of(r) {
                speedups.insert(Baseline::Eager, s);
            }
            if let Some(t) = &r.timing {
                samples = Some((
                    t.reference.samples_ms.clone(),
                    t.candidate.samples_ms.clone(),
                ));
                if t.speedup_of_medians.is_some() && t.rounds > 0 {
                    paired_per_round =
                        Some(t.candidate.samples_ms.len().div_ceil(t.rounds as usize));
                }
            }
            for (name, b) in &extras.baselines {
                let Some(baseline) = Baseline::from_name(name).filter(|&b| b != Baseline::Eager)
                else {
                    continue;
                };
                let s = match basis {
                    SpeedupBasis::Median => Some(b.speedup),
                    SpeedupBasis::Mean => b.speedup_mean,
                };
                if let Some(s) = s.filter(|s| s.is_finite() && *s >= 0.0) {
                    speedups.insert(baseline, s);
                }
            }
        }
        let baselines_missing = r
            .baselines_missing
            .iter()
            .filter_map(|(name, why)| Some((Baseline::from_name(name)?, why.clone())))
            // The report's eager is the run's own reference, never missing (a stored eager
            // file a run also compared with is another matter).
            .filter(|(b, _)| *b != Baseline::Eager)
            .collect();
        let baseline_sources = r
            .baselines
            .iter()
            .filter(|(_, b)| !b.file.is_empty())
            .filter_map(|(name, b)| {
                let source = format!("{} {}", b.origin, b.file);
                Some((Baseline::from_name(name)?, source.trim().to_string()))
            })
            .collect();
        let eager_drift = r
            .baselines
            .iter()
            .filter_map(|(name, b)| {
                let d = b.eager_drift.filter(|d| d.is_finite() && *d > 0.0)?;
                Some((Baseline::from_name(name)?, d))
            })
            .collect();
        let mut families: BTreeMap<String, bool> = BTreeMap::new();
        // A case that does not apply to the problem is no evidence either way.
        for c in r.cases.iter().filter(|c| c.not_applicable.is_none()) {
            *families.entry(c.case.family.to_string()).or_insert(true) &= c.passed;
        }
        // A failure the record attributes to a case fails that case's family even when the
        // case never made it into `cases`.
        if let Some(family) = failed_case_family(&r.outcome) {
            families.insert(family.to_string(), false);
        }
        let mut flags = Vec::new();
        if let Outcome::Integrity { flag, .. } = &r.outcome {
            flags.push(flag.clone());
        }
        for f in &extras.flags {
            if !flags.contains(f) {
                flags.push(f.clone());
            }
        }
        Candidate {
            name: r.candidate.name.clone(),
            trajectory: extras.trajectory.unwrap_or(r.candidate.sample),
            turn: extras.turn,
            outcome: r.outcome.kind().to_string(),
            compiled: r.outcome.compiled(),
            correct,
            correct_random: correct_on_random(r),
            speedups,
            samples,
            paired_per_round,
            baselines_missing,
            baseline_sources,
            eager_drift,
            families,
            flags,
            cost: extras.cost.clone(),
            eval_s: r.wall_s,
            sol_ratio: if correct { r.sol_ratio() } else { None },
            selection: r.candidate.selection.as_ref().map(|s| s.role),
            missing: false,
        }
    }
}

/// The case family a failing outcome names, if it names one.
fn failed_case_family(o: &Outcome) -> Option<&CaseFamily> {
    match o {
        Outcome::Mismatch { case, .. }
        | Outcome::WrongShape { case, .. }
        | Outcome::WrongDtype { case, .. } => Some(&case.family),
        _ => None,
    }
}

/// Correct under KernelBench's own check, the `random` family alone: the outcome is `ok`,
/// or the candidate passed every `random` case it ran (at least one) and its failure is
/// attributed to a case of another family (`mismatch`, `wrong_shape`, `wrong_dtype` on a
/// `signed`, `nan-inf`, ... case), or it erred, crashed or timed out on a stress case (which
/// the engine records as a failed case; stress cases run only after every random case
/// passed). Other failures not tied to a case (load errors, integrity flags) count as
/// incorrect under both definitions.
pub fn correct_on_random(r: &EvalRecord) -> bool {
    if r.outcome.is_ok() {
        return true;
    }
    let Some(family) = failed_case_family(&r.outcome) else {
        // An error or crash on a stress case: the engine runs stress cases only after every
        // random case passed, and records the case it failed on.
        let mut random = r
            .cases
            .iter()
            .filter(|c| c.case.family == CaseFamily::Random)
            .peekable();
        let stress_failed = r
            .cases
            .iter()
            .any(|c| c.case.family != CaseFamily::Random && !c.passed);
        return stress_failed && random.peek().is_some() && random.all(|c| c.passed);
    };
    let mut random = r
        .cases
        .iter()
        .filter(|c| c.case.family == CaseFamily::Random)
        .peekable();
    *family != CaseFamily::Random && random.peek().is_some() && random.all(|c| c.passed)
}

/// One problem of a run and all its candidates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// `suite/L<level>/<id>`.
    pub key: String,
    pub level: u8,
    pub id: u32,
    pub name: String,
    /// The kernels the run wrote: every count, rate and pass@k is over these.
    pub candidates: Vec<Candidate>,
    /// An LLM agent's re-measurements of its own kernels while choosing its final one
    /// (finalists' re-timings, then the chosen kernel's fresh measurement), in log order:
    /// not more kernels, so counted nowhere but in [`Task::best`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remeasured: Vec<Candidate>,
}

impl Task {
    pub fn compiled(&self) -> bool {
        self.candidates.iter().any(|c| c.compiled)
    }

    pub fn correct(&self) -> bool {
        self.candidates.iter().any(|c| c.correct)
    }

    pub fn correct_random(&self) -> bool {
        self.candidates.iter().any(|c| c.correct_random)
    }

    /// The best correct candidate against `baseline` and its speedup. Ties go to the
    /// earlier candidate (the first round that reached the speed).
    ///
    /// Where an LLM agent chose its final kernel (README, "Agents"), the fresh measurement
    /// of its choice ([`SelectionRole::Final`], in `remeasured`) is the task's result when
    /// it is correct and timed against `baseline`: the maximum over the agent's measurements
    /// would reward timing noise. The finalists' re-timings, used to choose, never count;
    /// without a usable final record the rule above applies to the agent's own kernels.
    pub fn best(&self, baseline: Baseline) -> Option<(&Candidate, f64)> {
        let fresh = self.remeasured.iter().rev().find_map(|c| {
            (c.selection == Some(SelectionRole::Final))
                .then(|| c.speedups.get(&baseline).map(|&s| (c, s)))
                .flatten()
        });
        if fresh.is_some() {
            return fresh;
        }
        let mut best: Option<(&Candidate, f64)> = None;
        for c in &self.candidates {
            if let Some(&s) = c.speedups.get(&baseline) {
                if best.is_none_or(|(_, b)| s > b) {
                    best = Some((c, s));
                }
            }
        }
        best
    }

    /// Why `baseline` has no usable time for this task's problem, when a record says so
    /// (`baselines_missing`); such a task is left out of that baseline's figures.
    pub fn baseline_missing(&self, baseline: Baseline) -> Option<&str> {
        self.candidates
            .iter()
            .chain(&self.remeasured)
            .find_map(|c| c.baselines_missing.get(&baseline))
            .map(String::as_str)
    }

    /// CudaForge's per-task score: the best correct speedup, 0 when no correct candidate
    /// was timed against `baseline` (CudaForge `best_score` = 0.0 for failed tasks).
    pub fn score(&self, baseline: Baseline) -> f64 {
        self.best(baseline).map_or(0.0, |(_, s)| s)
    }

    /// Kevin's trajectories: per trajectory (in id order), whether any of its kernels is
    /// correct and its best correct eager speedup (0 when none). The paper's metric, over
    /// the kernels the trajectories wrote (not the re-measurements that choose a task's
    /// final kernel).
    pub fn trajectories(&self) -> Vec<(bool, f64)> {
        let mut by: BTreeMap<u32, (bool, f64)> = BTreeMap::new();
        for c in &self.candidates {
            let t = by.entry(c.trajectory).or_insert((false, 0.0));
            t.0 |= c.correct;
            if let Some(&s) = c.speedups.get(&Baseline::Eager) {
                t.1 = t.1.max(s);
            }
        }
        by.into_values().collect()
    }
}

/// Groups candidates into tasks by problem key, ordered by level, id and key.
pub fn group_tasks(records: &[(EvalRecord, RecordExtras)], basis: SpeedupBasis) -> Vec<Task> {
    group_tasks_picking(records, basis, Pick::BestCorrect)
}

/// [`group_tasks`], keeping only the candidates `pick` considers.
pub fn group_tasks_picking(
    records: &[(EvalRecord, RecordExtras)],
    basis: SpeedupBasis,
    pick: Pick,
) -> Vec<Task> {
    group_tasks_planned(records, &[], basis, pick)
}

/// [`group_tasks_picking`] with the run's `missing` evaluations as candidates that are
/// neither compiled nor correct. `pick` sees them like records: a missing first sample is
/// the first sample, so no later sample stands in for it.
pub fn group_tasks_planned(
    records: &[(EvalRecord, RecordExtras)],
    missing: &[MissingEval],
    basis: SpeedupBasis,
    pick: Pick,
) -> Vec<Task> {
    let missing_sample = |m: &MissingEval| m.kernel.as_ref().map_or(0, |(_, s)| *s);
    let mut first_sample: BTreeMap<String, u32> = BTreeMap::new();
    for (r, _) in records {
        let s = first_sample.entry(r.problem.key()).or_insert(u32::MAX);
        *s = (*s).min(r.candidate.sample);
    }
    for m in missing {
        let s = first_sample.entry(m.problem_key()).or_insert(u32::MAX);
        *s = (*s).min(missing_sample(m));
    }
    let mut tasks: BTreeMap<(u8, u32, String), Task> = BTreeMap::new();
    for (r, x) in records {
        // The first sample alone: an agent's re-measurements while choosing its final kernel
        // (which may come from any sample) are not part of it.
        if pick == Pick::FirstSample
            && (first_sample[&r.problem.key()] != r.candidate.sample
                || r.candidate.selection.is_some())
        {
            continue;
        }
        let t = tasks
            .entry((r.problem.level, r.problem.id, r.problem.key()))
            .or_insert_with(|| {
                new_task(
                    r.problem.level,
                    r.problem.id,
                    r.problem.key(),
                    &r.problem.name,
                )
            });
        let c = Candidate::from_record(r, x, basis);
        if c.selection.is_some() {
            t.remeasured.push(c);
        } else {
            t.candidates.push(c);
        }
    }
    for m in missing {
        let key = m.problem_key();
        if pick == Pick::FirstSample && first_sample[&key] != missing_sample(m) {
            continue;
        }
        tasks
            .entry((m.level, m.id, key.clone()))
            .or_insert_with(|| new_task(m.level, m.id, key, &m.name))
            .candidates
            .push(Candidate::missing(m));
    }
    tasks.into_values().collect()
}

fn new_task(level: u8, id: u32, key: String, name: &str) -> Task {
    Task {
        key,
        level,
        id,
        name: name.to_string(),
        candidates: Vec::new(),
        remeasured: Vec::new(),
    }
}
