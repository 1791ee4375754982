//! How records become tasks: which candidate a task reports, what "correct under the random
//! family" means, and the optional fields. Uses the record helper of `tests.rs`.

use kbench_record::{CaseFamily, CaseRef, CaseResult, Outcome, Phase};

use crate::basis::SpeedupBasis;
use crate::extras::RecordExtras;
use crate::task::{correct_on_random, group_tasks, Baseline, Pick};
use crate::tests::record;

fn case(family: &str, index: u32, passed: bool) -> CaseResult {
    CaseResult {
        case: CaseRef {
            family: CaseFamily::from(family),
            index,
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

/// A task's best candidate by name, with its speedup.
fn best(t: &crate::task::Task, baseline: Baseline) -> Option<(&str, f64)> {
    t.best(baseline).map(|(c, s)| (c.name.as_str(), s))
}

fn mismatch_on(family: &str) -> Outcome {
    Outcome::Mismatch {
        case: CaseRef {
            family: CaseFamily::from(family),
            index: 0,
        },
        output: 0,
        max_abs: 1.0,
        max_rel: 1.0,
        count: 1,
        total: 1,
        first_index: vec![0],
        rule: "elementwise".into(),
    }
}

#[test]
fn random_only_correctness_needs_passing_random_cases_and_a_failure_elsewhere() {
    let mut r = record(mismatch_on("signed"), None);
    r.cases = vec![
        case("random", 0, true),
        case("random", 1, true),
        case("signed", 0, false),
    ];
    assert!(correct_on_random(&r));
    // Failing a random case is incorrect under both definitions.
    let mut r2 = r.clone();
    r2.outcome = mismatch_on("random");
    r2.cases[1].passed = false;
    assert!(!correct_on_random(&r2));
    // No random case ran: nothing shows KernelBench's check would pass.
    let mut r3 = r.clone();
    r3.cases.retain(|c| c.case.family != CaseFamily::Random);
    assert!(!correct_on_random(&r3));
    // A crash on a stress case, after every random case passed (the engine records the
    // case it crashed on as failed): correct under KernelBench's check, not under kbench's.
    let mut r4 = r.clone();
    r4.outcome = Outcome::Crashed {
        phase: Phase::Run,
        signal: Some(11),
        exit_code: None,
    };
    assert!(correct_on_random(&r4));
    // A crash with no failed stress case (on a random case, or while loading) is
    // incorrect under both.
    let mut r5 = r4.clone();
    r5.cases.retain(|c| c.case.family == CaseFamily::Random);
    assert!(!correct_on_random(&r5));
    r5.cases.clear();
    assert!(!correct_on_random(&r5));
    assert!(correct_on_random(&record(Outcome::Ok, None)));
}

#[test]
fn a_task_reports_its_fastest_correct_candidate_per_baseline() {
    let mut slow = record(Outcome::Ok, Some((1.2, 1.1)));
    slow.candidate.name = "slow".into();
    let mut fast = record(Outcome::Ok, Some((2.0, 1.9)));
    fast.candidate.name = "fast".into();
    fast.candidate.sample = 1;
    let mut wrong = record(mismatch_on("random"), Some((9.0, 9.0)));
    wrong.candidate.sample = 2;
    let extras = |json: serde_json::Value| RecordExtras::from_json(&json);
    let records = vec![
        (
            slow,
            extras(serde_json::json!({"baselines": {"compile": {"speedup": 1.5}}})),
        ),
        (
            fast,
            extras(serde_json::json!({"baselines": {"compile": {"speedup": 1.4}}})),
        ),
        (wrong, RecordExtras::default()),
    ];
    let tasks = group_tasks(&records, SpeedupBasis::Median);
    assert_eq!(tasks.len(), 1);
    let t = &tasks[0];
    assert_eq!(t.candidates.len(), 3);
    // The incorrect candidate's 9x never counts; each baseline picks its own fastest.
    assert_eq!(best(t, Baseline::Eager), Some(("fast", 2.0)));
    assert_eq!(best(t, Baseline::Compile), Some(("slow", 1.5)));
    assert_eq!(best(t, Baseline::MaxAutotune), None);
    assert_eq!(t.score(Baseline::MaxAutotune), 0.0);
    // Without a `speedup_mean`, a baseline has no speedup on the mean basis.
    let mean = group_tasks(&records, SpeedupBasis::Mean);
    assert_eq!(best(&mean[0], Baseline::Eager), Some(("fast", 1.9)));
    assert_eq!(best(&mean[0], Baseline::Compile), None);
    // Trajectories default to the sample number: three, one correct-and-fast each.
    assert_eq!(
        t.trajectories(),
        vec![(true, 1.2), (true, 2.0), (false, 0.0)]
    );
}

#[test]
fn integrity_flags_come_from_the_outcome_and_the_flags_field() {
    let r = record(
        Outcome::Integrity {
            flag: "side-stream".into(),
            detail: "x".into(),
        },
        None,
    );
    let x = RecordExtras::from_json(
        &serde_json::json!({"flags": ["side-stream", "excessive-speedup"]}),
    );
    let tasks = group_tasks(&[(r, x)], SpeedupBasis::Median);
    let c = &tasks[0].candidates[0];
    assert_eq!(c.flags, vec!["side-stream", "excessive-speedup"]);
    assert!(!c.correct && c.compiled);
}

#[test]
fn an_agents_fresh_final_measurement_is_the_tasks_result_not_the_maximum() {
    use kbench_record::{Selection, SelectionRole};
    let named = |name: &str, speedup: f64, role: Option<SelectionRole>| {
        let mut r = record(Outcome::Ok, Some((speedup, speedup)));
        r.candidate.name = name.into();
        r.candidate.selection = role.map(|role| Selection {
            role,
            of: "round01".into(),
            finalists: 2,
            session: Vec::new(),
        });
        (r, RecordExtras::default())
    };
    // Noise made round01 look fastest twice (1.33x, then 1.40x when re-timed to choose);
    // its fresh measurement after the choice says 1.05x, and that is what the task reports.
    let records = vec![
        named("round00", 1.10, None),
        named("round01", 1.33, None),
        named("select_round00", 1.02, Some(SelectionRole::Finalist)),
        named("select_round01", 1.40, Some(SelectionRole::Finalist)),
        named("final_round01", 1.05, Some(SelectionRole::Final)),
    ];
    let t = &group_tasks(&records, SpeedupBasis::Median)[0];
    assert_eq!(best(t, Baseline::Eager), Some(("final_round01", 1.05)));
    // The re-measurements are not more kernels: counts, rates, pass@k and Kevin's
    // trajectories are over the two the agent wrote.
    assert_eq!((t.candidates.len(), t.remeasured.len()), (2, 3));
    assert_eq!(t.trajectories(), vec![(true, 1.33)]);
    // A final record that is not correct leaves the rule to the agent's own kernels: the
    // finalists' re-timings never count.
    let mut failed = records.clone();
    failed[4].0.outcome = mismatch_on("random");
    let t = &group_tasks(&failed, SpeedupBasis::Median)[0];
    assert_eq!(best(t, Baseline::Eager), Some(("round01", 1.33)));
    // KernelBench's first-sample rule reads the first sample's own kernels only.
    let first =
        &crate::task::group_tasks_picking(&records, SpeedupBasis::Median, Pick::FirstSample)[0];
    assert_eq!((first.candidates.len(), first.remeasured.len()), (2, 0));
}

/// A problem the compile baseline has no time for is left out of the compile
/// figures (its speedup there is unknown, not 0), and the report names it with why and says
/// which file the other compile times came from.
#[test]
fn problems_without_a_baseline_time_are_left_out_of_its_figures() {
    use kbench_record::BaselineRatio;

    let ratio = |s: f64| BaselineRatio {
        speedup: s,
        speedup_mean: Some(s),
        baseline_ms: 1.0,
        basis: "median".into(),
        origin: "measured".into(),
        file: "store/h100/compile.json".into(),
        eager_drift: None,
    };
    let timed = |id: u32, compile: Option<f64>, missing: Option<&str>| {
        let mut r = record(Outcome::Ok, Some((2.0, 2.0)));
        r.problem.id = id;
        r.problem.file = format!("{id}_x.py");
        if let Some(s) = compile {
            r.baselines.insert("compile".into(), ratio(s));
        }
        if let Some(why) = missing {
            r.baselines_missing.insert("compile".into(), why.into());
        }
        r
    };
    // Problem 3 is correct but its compile baseline failed; problem 4 is wrong and has no
    // compile time either; problem 5 is wrong and has one.
    let mut wrong_missing = record(mismatch_on("random"), None);
    wrong_missing.problem.id = 4;
    wrong_missing
        .baselines_missing
        .insert("compile".into(), "missing".into());
    let mut wrong = record(mismatch_on("random"), None);
    wrong.problem.id = 5;
    let records = [
        timed(1, Some(3.0), None),
        timed(2, Some(0.5), None),
        timed(3, None, Some("failed: timeout: 600 s")),
        wrong_missing,
        wrong,
    ];
    let report = report_of(records.into());
    let all = report.scope("all").unwrap();
    let eager = all.baseline(Baseline::Eager).unwrap();
    let compile = all.baseline(Baseline::Compile).unwrap();
    // Eager is every task's own reference: 3 correct of 5.
    assert_eq!((eager.timed, eager.without_time), (3, 0));
    assert_eq!(eager.fast_p[3].rate.value, 3.0 / 5.0);
    // Compile: problems 3 and 4 left out; of the other 3, one (problem 1) is faster.
    assert_eq!((compile.timed, compile.without_time), (2, 2));
    assert_eq!(compile.fast_p[3].rate.value, 1.0 / 3.0);
    let zero_filled = compile.zero_filled.unwrap();
    assert!((zero_filled.mean.value - (3.0 + 0.5 + 0.0) / 3.0).abs() < 1e-12);
    let notes = report.notes.join("\n");
    assert!(
        notes.contains(
            "speedups vs compile: times from measured store/h100/compile.json (2 task(s))"
        ),
        "{notes}"
    );
    assert!(
        notes.contains("NO COMPILE TIME for 2 of 5 problem(s), left out of the compile rows (not counted as 0): smoke/L1/3 (failed: timeout: 600 s), smoke/L1/4 (missing)"),
        "{notes}"
    );
}

/// Where a store's eager time is far from the run's own reference (a launch-bound
/// model on a host whose CPU ran at another speed), the report says that the speedups over
/// that store's times carry the factor, worst first; within the bound, nothing is said.
#[test]
fn stored_times_far_from_the_runs_own_reference_are_noted() {
    use kbench_record::BaselineRatio;

    use crate::report::drift_note;

    let timed = |id: u32, drift: f64| {
        let mut r = record(Outcome::Ok, Some((2.0, 2.0)));
        r.problem.id = id;
        r.problem.file = format!("{id}_x.py");
        r.baselines.insert(
            "compile".into(),
            BaselineRatio {
                speedup: 1.0,
                speedup_mean: Some(1.0),
                baseline_ms: 1.0,
                basis: "median".into(),
                origin: "measured".into(),
                file: "store/h100/compile.json".into(),
                eager_drift: Some(drift),
            },
        );
        r
    };
    let notes_of = |drifts: &[f64]| {
        let records = drifts.iter().enumerate();
        report_of(records.map(|(i, &d)| timed(i as u32 + 1, d)).collect()).notes
    };
    let notes = notes_of(&[1.05, 0.85, 1.8, 0.91]);
    let drift: Vec<&String> = notes.iter().filter(|n| n.starts_with("STORED")).collect();
    assert_eq!(drift.len(), 1, "{notes:?}");
    let key = |id: u32| timed(id, 1.0).problem.key();
    assert!(
        drift[0].starts_with(&format!(
            "STORED COMPILE TIMES FROM ANOTHER MOMENT: on 2 of 4 problem(s) compared, the store's eager time is more than 10% from this run's own reference (store / run: {} 1.80x, {} 0.85x); speedups vs compile on them carry about that factor"
            , key(3), key(2))),
        "{}",
        drift[0]
    );
    assert!(drift[0].ends_with("`--baselines live,compile` measures them in the run"));
    // Within 10% either way: no note.
    assert!(!notes_of(&[1.09, 0.92])
        .iter()
        .any(|n| n.starts_with("STORED")));
    // More than twelve far: the rest counted.
    let many: Vec<(String, f64)> = (0..15).map(|i| (format!("p{i:02}"), 2.0)).collect();
    let n = drift_note("max-autotune", &many).unwrap();
    assert!(
        n.contains("on 15 of 15 problem(s)") && n.contains("p11 2.00x, and 3 more);"),
        "{n}"
    );
    assert!(!n.contains("p12 "), "{n}");
}

/// The report of one run of `records` (median basis, best correct candidate per task).
fn report_of(records: Vec<kbench_record::EvalRecord>) -> crate::report::RunReport {
    let records = records
        .into_iter()
        .map(|r| {
            let extras = RecordExtras::from_json(&serde_json::to_value(&r).unwrap());
            (r, extras)
        })
        .collect();
    let input = crate::report::RunInput {
        label: "run".into(),
        path: "run".into(),
        records,
        ..Default::default()
    };
    crate::report::run_report(&input, SpeedupBasis::Median, Pick::BestCorrect)
}
