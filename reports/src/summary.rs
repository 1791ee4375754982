//! A run's headline numbers, computed from its eval records.

use std::collections::BTreeMap;

use kbench_record::EvalRecord;
use serde::{Deserialize, Serialize};

use crate::basis::SpeedupBasis;
use crate::sample::percentile_sorted;

/// Headline numbers of a run. Counts are over the records given: one record per evaluated
/// candidate (deduplicating a log that was resumed is the reader's job), less an LLM agent's
/// re-measurements of its own kernels (`candidate.selection`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub basis: SpeedupBasis,
    /// Records summarised.
    pub evaluated: usize,
    /// Candidates that got as far as running (`Outcome::compiled`, KernelBench's `compiled`).
    pub compiled: usize,
    /// Candidates with `Outcome::Ok`.
    pub correct: usize,
    /// Correct candidates with a finite speedup.
    pub timed: usize,
    /// Correct candidates with speedup > 1.
    pub fast_1_count: usize,
    /// `fast_1_count / evaluated`; `None` when nothing was evaluated.
    pub fast_1: Option<f64>,
    /// Median speedup over the `timed` candidates; `None` when there are none.
    pub median_speedup: Option<f64>,
    /// Records per outcome kind (`Outcome::kind`), in name order.
    pub outcomes: BTreeMap<String, usize>,
    /// Candidates correct under KernelBench's own check, the `random` family alone
    /// ([`crate::task::correct_on_random`]); `correct` is under every family that ran.
    #[serde(default)]
    pub correct_random: usize,
    /// Per stress family: candidates that failed one of its cases.
    #[serde(default)]
    pub family_failures: BTreeMap<String, usize>,
    /// Per stress family: cases not run because they do not apply to the problem.
    #[serde(default)]
    pub not_applicable: BTreeMap<String, usize>,
    /// Kernels failed by an integrity flag, per flag (never counted correct or fast).
    #[serde(default)]
    pub flagged: BTreeMap<String, usize>,
    /// Timed correct candidates whose record has a speed of light (CUDA runs on a GPU in
    /// kbench's spec table).
    #[serde(default)]
    pub sol_timed: usize,
    /// Median over those of candidate time / speed of light (1.0 = the physical limit).
    #[serde(default)]
    pub median_sol_ratio: Option<f64>,
    /// Of those, how many claim a time more than 10% below the speed of light.
    #[serde(default)]
    pub below_sol: usize,
    /// Records whose candidate ran without a sandbox (`containment: none`).
    #[serde(default)]
    pub uncontained: usize,
    /// Problems the agent gave no kernel for (`no_kernel`): a missing answer, counted as not
    /// compiled and not correct in every rate.
    #[serde(default)]
    pub no_kernel: usize,
    /// Kernels that could not be judged because their problem failed (`reference_error`,
    /// `problem_error`, [`kbench_record::Outcome::unjudged`]): in the denominators, never
    /// correct, and neither compiled nor failing to compile.
    #[serde(default)]
    pub unjudged: usize,
    /// Records per module mode (`train`, `eval`: `kbench run --model-mode`); more than one
    /// key means the records were not judged under one convention.
    #[serde(default)]
    pub model_modes: BTreeMap<String, usize>,
    /// Records per torch version (`env.torch`); more than one key means the times (and the
    /// speedups against live baselines) came from different torches.
    #[serde(default)]
    pub torches: BTreeMap<String, usize>,
    /// Train-mode kernels with the `mode-switch` advisory that failed but are correct with
    /// both models in eval mode (`integrity.eval_mode_correct`): correct only in eval mode.
    #[serde(default)]
    pub eval_mode_only: usize,
}

/// Slack of [`RunSummary::below_sol`]: timing noise allowed below the speed of light.
pub const SOL_SLACK: f64 = 0.1;

impl RunSummary {
    /// Summarises `records` with speedups on `basis`.
    pub fn from_records(records: &[EvalRecord], basis: SpeedupBasis) -> Self {
        // An LLM agent's re-measurements of its own kernels (choosing its final one) are not
        // more kernels: left out of every count.
        let records: Vec<&EvalRecord> = records
            .iter()
            .filter(|r| r.candidate.selection.is_none())
            .collect();
        let mut outcomes = BTreeMap::new();
        let mut speedups = Vec::new();
        let (mut compiled, mut correct, mut correct_random) = (0, 0, 0);
        let mut family_failures: BTreeMap<String, usize> = BTreeMap::new();
        let mut not_applicable: BTreeMap<String, usize> = BTreeMap::new();
        let mut flagged: BTreeMap<String, usize> = BTreeMap::new();
        let mut sol_ratios = Vec::new();
        let mut below_sol = 0;
        let mut uncontained = 0;
        let (mut no_kernel, mut unjudged) = (0, 0);
        let mut model_modes: BTreeMap<String, usize> = BTreeMap::new();
        let mut torches: BTreeMap<String, usize> = BTreeMap::new();
        let mut eval_mode_only = 0;
        for &r in &records {
            *model_modes.entry(r.model_mode.to_string()).or_insert(0) += 1;
            *torches.entry(r.env.torch.clone()).or_insert(0) += 1;
            eval_mode_only += usize::from(
                !r.outcome.is_ok()
                    && r.integrity
                        .as_ref()
                        .is_some_and(|ig| ig.eval_mode_correct == Some(true)),
            );
            uncontained += usize::from(r.env.containment.as_deref() == Some("none"));
            correct_random += usize::from(crate::task::correct_on_random(r));
            let mut failed: Vec<String> = r
                .cases
                .iter()
                .filter(|c| !c.passed && c.case.family != kbench_record::CaseFamily::Random)
                .map(|c| c.case.family.to_string())
                .collect();
            failed.dedup();
            for f in failed {
                *family_failures.entry(f).or_insert(0) += 1;
            }
            for c in r.cases.iter().filter(|c| c.not_applicable.is_some()) {
                *not_applicable.entry(c.case.family.to_string()).or_insert(0) += 1;
            }
            *outcomes.entry(r.outcome.kind().to_string()).or_insert(0) += 1;
            if let kbench_record::Outcome::Integrity { flag, .. } = &r.outcome {
                *flagged.entry(flag.clone()).or_insert(0) += 1;
            }
            compiled += usize::from(r.outcome.compiled());
            no_kernel += usize::from(matches!(r.outcome, kbench_record::Outcome::NoKernel { .. }));
            unjudged += usize::from(r.outcome.unjudged());
            if r.outcome.is_ok() {
                correct += 1;
                speedups.extend(basis.speedup_of(r));
                if let Some(x) = r.sol_ratio() {
                    sol_ratios.push(x);
                    below_sol += usize::from(r.below_speed_of_light(SOL_SLACK));
                }
            }
        }
        let fast_1_count = speedups.iter().filter(|&&s| s > 1.0).count();
        speedups.sort_unstable_by(f64::total_cmp);
        sol_ratios.sort_unstable_by(f64::total_cmp);
        RunSummary {
            sol_timed: sol_ratios.len(),
            median_sol_ratio: (!sol_ratios.is_empty())
                .then(|| percentile_sorted(&sol_ratios, 50.0)),
            below_sol,
            uncontained,
            basis,
            evaluated: records.len(),
            compiled,
            correct,
            timed: speedups.len(),
            fast_1_count,
            fast_1: ratio(fast_1_count, records.len()),
            median_speedup: (!speedups.is_empty()).then(|| percentile_sorted(&speedups, 50.0)),
            outcomes,
            correct_random,
            family_failures,
            not_applicable,
            flagged,
            no_kernel,
            unjudged,
            model_modes,
            torches,
            eval_mode_only,
        }
    }

    /// `compiled / evaluated`.
    pub fn compiled_rate(&self) -> Option<f64> {
        ratio(self.compiled, self.evaluated)
    }

    /// `correct / evaluated` (KernelBench's fast_0).
    pub fn correct_rate(&self) -> Option<f64> {
        ratio(self.correct, self.evaluated)
    }
}

/// [`RunSummary::from_records`] on kbench's default basis, the median.
pub fn summarize(records: &[EvalRecord]) -> RunSummary {
    RunSummary::from_records(records, SpeedupBasis::Median)
}

/// KernelBench's fast_p: `#{correct and speedup > p} / #records`, strict `>`, over every
/// record (`scripts/benchmark_eval_analysis.py`). A correct record without a speedup (not
/// timed) is correct but not fast, so fast_0 equals the correctness rate only when every
/// correct record was timed, as in KernelBench. `None` when there are no records. An LLM
/// agent's re-measurements of its own kernels (`candidate.selection`) are not records here.
pub fn fast_p(records: &[EvalRecord], p: f64, basis: SpeedupBasis) -> Option<f64> {
    let kernels: Vec<&EvalRecord> = records
        .iter()
        .filter(|r| r.candidate.selection.is_none())
        .collect();
    let fast = kernels
        .iter()
        .filter(|r| r.outcome.is_ok())
        .filter(|r| basis.speedup_of(r).is_some_and(|s| s > p))
        .count();
    ratio(fast, kernels.len())
}

fn ratio(num: usize, den: usize) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}
