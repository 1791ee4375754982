//! Whether a run's records are complete: each evaluation its `run.json` plans matched with
//! its valid record. Pure functions over what the reader found.
//!
//! A planned evaluation without a valid record (never written, deleted, a line that does not
//! verify or is not a record, a truncated last line) is *missing*: a candidate that counts
//! as not compiled and not correct in every rate, failing every case family. A valid record
//! the plan does not list is *unplanned* and left out of every figure (it verifies, so it
//! was written with this run's secret: another shard's line, for instance). The same
//! evaluation recorded twice counts once (the last line). So no change to a log can raise a
//! rate: a record removed, spoiled or copied in only turns into a missing evaluation or
//! leaves the figures as they were.
//!
//! Without a plan (a run written before kbench listed planned evaluations, or a records file
//! read alone) every valid record counts and missing evaluations cannot be known; the check
//! says so.

use std::collections::{BTreeMap, HashSet};

use kbench_record::{EvalRecord, Plan, PlannedKernels};
use serde::{Deserialize, Serialize};

use crate::extras::RecordExtras;

/// How far a run's files were checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verification {
    /// `run.json`'s signature and every record line verified with the run's secret.
    #[default]
    Verified,
    /// Every record line verified; `run.json` is from a kbench that neither signed it nor
    /// listed planned evaluations.
    RecordsOnly,
    /// Nothing was checked (`--unverified`): the numbers are only as good as the files.
    Unverified,
}

/// What reading a run's files found, before its records are matched with its plan.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogCheck {
    pub verification: Verification,
    /// Why it is not [`Verification::Verified`].
    pub note: Option<String>,
    /// Lines that did not verify or are not records (a truncated last line aside).
    pub invalid: usize,
    /// 1 when the last line is a partial one (a run killed mid-write).
    pub truncated: usize,
}

/// A planned evaluation without a valid record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissingEval {
    pub suite: String,
    pub level: u8,
    pub id: u32,
    /// The problem's name.
    pub name: String,
    /// The kernel's candidate name and sample; `None` for a problem of a plan whose agent
    /// writes its kernels as it goes that got no record at all.
    pub kernel: Option<(String, u32)>,
}

impl MissingEval {
    /// The problem's key (`suite/L<level>/<id>`).
    pub fn problem_key(&self) -> String {
        format!("{}/L{}/{}", self.suite, self.level, self.id)
    }
}

/// What checking a run's records found: every export states it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RecordsCheck {
    pub verification: Verification,
    /// Why the run is not verified, when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Planned evaluations (`None`: `run.json` lists none, so missing ones are not known).
    pub planned: Option<usize>,
    /// Evaluations counted: planned ones with a valid record (every valid record when there
    /// is no plan).
    pub recorded: usize,
    /// Planned evaluations without a valid record, counted as not correct (`None` without a
    /// plan).
    pub missing: Option<usize>,
    /// Lines that did not verify or are not records: their evaluations are missing.
    pub invalid: usize,
    /// A partial last line (a run killed mid-write): its evaluation is missing.
    pub truncated: usize,
    /// Lines recording an evaluation already recorded: counted once (the last).
    pub duplicates: usize,
    /// Valid records of evaluations the plan does not list: left out.
    pub unplanned: usize,
}

impl RecordsCheck {
    pub fn unverified(&self) -> bool {
        self.verification == Verification::Unverified
    }
}

/// A run's records matched with its plan.
#[derive(Debug, Clone, Default)]
pub struct Reconciled {
    /// The records that count: one per planned evaluation recorded (every evaluation once
    /// when there is no plan), in log order.
    pub records: Vec<(EvalRecord, RecordExtras)>,
    pub missing: Vec<MissingEval>,
    pub check: RecordsCheck,
}

/// Matches `lines` (the valid records, in log order) with `plan`, whose kernels are `agent`'s
/// (`run.json`'s agent). `log` is what reading the files found.
pub fn reconcile(
    plan: Option<&Plan>,
    agent: &str,
    lines: Vec<(EvalRecord, RecordExtras)>,
    log: &LogCheck,
) -> Reconciled {
    // One record per evaluation, the last line winning, in the order evaluations first
    // appear.
    let mut at: BTreeMap<String, usize> = BTreeMap::new();
    let mut records: Vec<(EvalRecord, RecordExtras)> = Vec::new();
    let mut duplicates = 0;
    for (r, x) in lines {
        match at.get(&r.key()) {
            Some(&i) => {
                duplicates += 1;
                records[i] = (r, x);
            }
            None => {
                at.insert(r.key(), records.len());
                records.push((r, x));
            }
        }
    }
    let mut check = RecordsCheck {
        verification: log.verification,
        note: log.note.clone(),
        invalid: log.invalid,
        truncated: log.truncated,
        duplicates,
        ..RecordsCheck::default()
    };
    let Some(plan) = plan else {
        check.recorded = records.len();
        return Reconciled {
            records,
            missing: Vec::new(),
            check,
        };
    };
    let keys: HashSet<String> = plan.keys(agent).into_iter().collect();
    let before = records.len();
    records.retain(|(r, _)| keys.contains(&r.key()));
    check.unplanned = before - records.len();
    let recorded: HashSet<String> = records.iter().map(|(r, _)| r.key()).collect();
    let recorded_problems: HashSet<String> = records.iter().map(|(r, _)| r.problem.key()).collect();
    let mut missing = Vec::new();
    for p in &plan.problems {
        let pk = p.key();
        let of = |kernel| MissingEval {
            suite: p.suite.clone(),
            level: p.level,
            id: p.id,
            name: p.name.clone(),
            kernel,
        };
        for k in &p.kernels {
            let key = kbench_record::eval_key(&pk, agent, &k.name, k.sample);
            if !recorded.contains(&key) {
                missing.push(of(Some((k.name.clone(), k.sample))));
            }
        }
        if plan.kernels == PlannedKernels::AsWritten
            && p.kernels.is_empty()
            && !recorded_problems.contains(&pk)
        {
            missing.push(of(None));
        }
    }
    check.planned = Some(records.len() + missing.len());
    check.recorded = records.len();
    check.missing = Some(missing.len());
    Reconciled {
        records,
        missing,
        check,
    }
}

#[cfg(test)]
#[path = "completeness_tests.rs"]
mod tests;
