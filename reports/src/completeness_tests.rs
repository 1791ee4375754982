//! Matching records with their plan, and the property every reader relies on: no change to a
//! log that can be made without the run's secret raises any rate of the report.

use kbench_record::{CaseFamily, CaseRef, CaseResult, Outcome, PlannedKernels};
use proptest::prelude::*;

use super::*;
use crate::basis::SpeedupBasis;
use crate::metrics::FAST_P;
use crate::report::{run_report, RunInput, RunReport};
use crate::task::{Baseline, Pick};
use crate::tests::record;

fn case(family: &str, passed: bool) -> CaseResult {
    CaseResult {
        case: CaseRef {
            family: CaseFamily::from(family),
            index: 0,
        },
        passed,
        max_abs: 0.0,
        max_rel: 0.0,
        mismatches: 0,
        elements: 1,
        rel_l2_vs_f64: None,
        wall_s: 0.0,
        not_applicable: None,
        flush: None,
        tol_needed: None,
        artefacts: None,
        detail: None,
        times: None,
    }
}

/// What one evaluation came to.
#[derive(Debug, Clone, Copy)]
enum Verdict {
    Fast(f64),
    WrongOnSigned,
    CompileError,
}

/// A record of problem `id`, candidate `name`, sample `sample`.
fn eval(id: u32, sample: u32, v: Verdict) -> (EvalRecord, RecordExtras) {
    let mut r = match v {
        Verdict::Fast(s) => record(Outcome::Ok, Some((s, s))),
        Verdict::WrongOnSigned => record(
            Outcome::Mismatch {
                case: CaseRef {
                    family: CaseFamily::from("signed"),
                    index: 0,
                },
                output: 0,
                max_abs: 1.0,
                max_rel: 1.0,
                count: 1,
                total: 1,
                first_index: vec![0],
                rule: "elementwise".into(),
            },
            None,
        ),
        Verdict::CompileError => record(
            Outcome::CompileError {
                message: "nvcc".into(),
            },
            None,
        ),
    };
    r.problem.id = id;
    r.problem.name = format!("p{id}");
    r.candidate.name = format!("s{sample}");
    r.candidate.sample = sample;
    r.cases = match v {
        Verdict::Fast(_) => vec![case("random", true), case("signed", true)],
        Verdict::WrongOnSigned => vec![case("random", true), case("signed", false)],
        Verdict::CompileError => vec![],
    };
    (r, RecordExtras::default())
}

fn plan_of(records: &[(EvalRecord, RecordExtras)]) -> Plan {
    let mut plan = Plan::new(PlannedKernels::Ahead);
    for (r, _) in records {
        plan.add_kernel(&r.problem, &r.candidate.name, r.candidate.sample);
    }
    plan
}

fn verified(invalid: usize, truncated: usize) -> LogCheck {
    LogCheck {
        invalid,
        truncated,
        ..LogCheck::default()
    }
}

#[test]
fn a_deleted_or_spoiled_record_is_missing_and_a_duplicate_counts_once() {
    let all = vec![
        eval(1, 0, Verdict::Fast(2.0)),
        eval(2, 0, Verdict::CompileError),
        eval(3, 0, Verdict::Fast(1.5)),
    ];
    let plan = plan_of(&all);
    // Line 2 deleted, line 3 spoiled (it no longer verifies), line 1 twice.
    let lines = vec![all[0].clone(), all[0].clone()];
    let r = reconcile(Some(&plan), "replay", lines, &verified(1, 0));
    assert_eq!(r.records.len(), 1);
    assert_eq!(
        r.check,
        RecordsCheck {
            planned: Some(3),
            recorded: 1,
            missing: Some(2),
            invalid: 1,
            duplicates: 1,
            ..RecordsCheck::default()
        }
    );
    let ids: Vec<u32> = r.missing.iter().map(|m| m.id).collect();
    assert_eq!(ids, [2, 3]);
    assert_eq!(r.missing[0].kernel, Some(("s0".to_string(), 0)));
    // The report counts them: 1 of 3 correct, not 1 of 1.
    let report = report_of(&r);
    let all_scope = report.scope("all").unwrap();
    assert_eq!((all_scope.tasks, all_scope.correct.count), (3, 1));
    let missing_row = report.problems.iter().find(|p| p.id == 3).unwrap();
    assert_eq!(missing_row.outcome, "missing");
    assert!(!missing_row.compiled && !missing_row.correct);
}

#[test]
fn a_record_the_plan_does_not_list_is_left_out_and_counted() {
    let planned = vec![eval(1, 0, Verdict::CompileError)];
    let plan = plan_of(&planned);
    // Another shard's line: it verifies (same secret), but this run never planned it.
    let lines = vec![planned[0].clone(), eval(9, 0, Verdict::Fast(3.0))];
    let r = reconcile(Some(&plan), "replay", lines.clone(), &verified(0, 0));
    assert_eq!((r.records.len(), r.check.unplanned), (1, 1));
    assert_eq!(report_of(&r).scope("all").unwrap().correct.count, 0);
    // Another agent's record of a planned kernel is not this run's either.
    let mut other = planned[0].clone();
    other.0.candidate.agent = "reference".into();
    let r = reconcile(Some(&plan), "replay", vec![other], &verified(0, 0));
    assert_eq!((r.check.unplanned, r.check.missing), (1, Some(1)));
    // Without a plan every valid record counts, and missing ones are not known.
    let r = reconcile(None, "replay", lines, &verified(0, 0));
    assert_eq!(r.records.len(), 2);
    assert_eq!((r.check.planned, r.check.missing), (None, None));
}

#[test]
fn a_task_of_an_agent_that_writes_as_it_goes_without_any_record_is_missing() {
    let mut plan = Plan::new(PlannedKernels::AsWritten);
    let (a, _) = eval(1, 0, Verdict::Fast(2.0));
    let (b, _) = eval(2, 0, Verdict::Fast(2.0));
    plan.add_problem(&a.problem);
    plan.add_problem(&b.problem);
    // Problem 1's kernel was recorded (it joined the plan as it was written); problem 2 got
    // nothing.
    plan.add_kernel(&a.problem, "s0", 0);
    let r = reconcile(
        Some(&plan),
        "replay",
        vec![(a, RecordExtras::default())],
        &verified(0, 0),
    );
    assert_eq!(r.check.missing, Some(1));
    assert_eq!(r.missing[0].kernel, None);
    let report = report_of(&r);
    assert_eq!(report.scope("all").unwrap().tasks, 2);
    assert_eq!(report.scope("all").unwrap().correct.count, 1);
}

#[test]
fn a_missing_first_sample_is_the_first_sample() {
    // KernelBench's table reads sample 0: with its record deleted, sample 1 must not stand in.
    let all = vec![
        eval(1, 0, Verdict::CompileError),
        eval(1, 1, Verdict::Fast(2.0)),
    ];
    let plan = plan_of(&all);
    let r = reconcile(Some(&plan), "replay", vec![all[1].clone()], &verified(0, 0));
    let input = input_of(&r);
    let first = run_report(&input, SpeedupBasis::Median, Pick::FirstSample);
    assert_eq!(first.scope("all").unwrap().correct.count, 0);
    let best = run_report(&input, SpeedupBasis::Median, Pick::BestCorrect);
    assert_eq!(best.scope("all").unwrap().correct.count, 1);
    // pass@1 over every sample: 1 of 2 candidates, the missing one failing.
    assert_eq!(best.scope("all").unwrap().pass_at_k, vec![(1, 0.5)]);
}

fn input_of(r: &Reconciled) -> RunInput {
    RunInput {
        label: "run".into(),
        path: "run".into(),
        records: r.records.clone(),
        missing: r.missing.clone(),
        check: r.check.clone(),
        timed: Some(true),
        ..RunInput::default()
    }
}

fn report_of(r: &Reconciled) -> RunReport {
    run_report(&input_of(r), SpeedupBasis::Median, Pick::BestCorrect)
}

/// Every rate of a report that a better run would raise, in one list (scope `all`).
fn rates(r: &RunReport) -> Vec<(String, f64)> {
    let s = r.scope("all").unwrap();
    let mut out = vec![
        ("compiled".to_string(), s.compiled.value),
        ("correct".to_string(), s.correct.value),
        ("correct_random".to_string(), s.correct_random.value),
        ("kevin correct avg".to_string(), s.kevin.correct_avg),
        ("kevin perf avg".to_string(), s.kevin.perf_avg),
    ];
    out.extend(s.pass_at_k.iter().map(|(k, p)| (format!("pass@{k}"), *p)));
    if let Some(b) = s.baseline(Baseline::Eager) {
        out.extend(
            b.fast_p
                .iter()
                .map(|f| (format!("fast_{}", f.p), f.rate.value)),
        );
        if let Some(z) = &b.zero_filled {
            out.push(("mean (0 if wrong)".into(), z.mean.value));
        }
    } else {
        out.extend(FAST_P.iter().map(|p| (format!("fast_{p}"), 0.0)));
    }
    out.extend(
        r.families
            .iter()
            .map(|f| (format!("family {}", f.family), f.passed.value)),
    );
    out
}

/// What can be done to a log without the run's secret.
#[derive(Debug, Clone)]
enum Tamper {
    /// A line removed.
    Delete(usize),
    /// A line changed: it no longer verifies.
    Spoil(usize),
    /// A line written again.
    Duplicate(usize),
    /// The last line cut short.
    Truncate,
    /// A line another run signed with this secret (a shard's), for a problem never planned.
    Foreign(u32, f64),
}

fn tamper() -> impl Strategy<Value = Tamper> {
    prop_oneof![
        (0usize..12).prop_map(Tamper::Delete),
        (0usize..12).prop_map(Tamper::Spoil),
        (0usize..12).prop_map(Tamper::Duplicate),
        Just(Tamper::Truncate),
        (100u32..104, 0.5f64..5.0).prop_map(|(id, s)| Tamper::Foreign(id, s)),
    ]
}

fn verdict() -> impl Strategy<Value = Verdict> {
    prop_oneof![
        (0.3f64..4.0).prop_map(Verdict::Fast),
        Just(Verdict::WrongOnSigned),
        Just(Verdict::CompileError),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// A run of 1–12 evaluations over 1–4 problems, then any sequence of changes that need no
    /// secret: no rate of its report goes up, on either pick.
    #[test]
    fn no_tampering_raises_a_rate(
        evals in prop::collection::vec((1u32..5, verdict()), 1..12),
        changes in prop::collection::vec(tamper(), 0..6),
    ) {
        let mut samples: BTreeMap<u32, u32> = BTreeMap::new();
        let all: Vec<(EvalRecord, RecordExtras)> = evals
            .iter()
            .map(|&(id, v)| {
                let s = samples.entry(id).or_default();
                *s += 1;
                eval(id, *s - 1, v)
            })
            .collect();
        let plan = plan_of(&all);
        let honest = reconcile(Some(&plan), "replay", all.clone(), &verified(0, 0));
        let mut lines = all;
        let (mut invalid, mut truncated) = (0, 0);
        for c in changes {
            match c {
                Tamper::Delete(i) if i < lines.len() => {
                    lines.remove(i);
                }
                Tamper::Spoil(i) if i < lines.len() => {
                    lines.remove(i);
                    invalid += 1;
                }
                Tamper::Duplicate(i) if i < lines.len() => {
                    let l = lines[i].clone();
                    lines.push(l);
                }
                Tamper::Truncate if truncated == 0 && !lines.is_empty() => {
                    lines.pop();
                    truncated = 1;
                }
                Tamper::Foreign(id, s) => lines.push(eval(id, 0, Verdict::Fast(s))),
                _ => {}
            }
        }
        let tampered = reconcile(Some(&plan), "replay", lines, &verified(invalid, truncated));
        prop_assert_eq!(tampered.check.planned, honest.check.planned);
        for pick in [Pick::BestCorrect, Pick::FirstSample] {
            let before = rates(&run_report(&input_of(&honest), SpeedupBasis::Median, pick));
            let after = rates(&run_report(&input_of(&tampered), SpeedupBasis::Median, pick));
            for (name, was) in &before {
                // A family every remaining candidate skipped has no row: nothing to raise.
                let Some((_, now)) = after.iter().find(|(n, _)| n == name) else { continue };
                prop_assert!(
                    *now <= *was + 1e-12,
                    "{} rose from {} to {} ({:?})", name, was, now, pick
                );
            }
            for (name, _) in &after {
                prop_assert!(before.iter().any(|(n, _)| n == name), "new rate {}", name);
            }
        }
    }
}
