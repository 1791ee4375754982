//! Run summaries, the table, and property tests of the statistics.

use approx::{assert_abs_diff_eq, relative_eq};
use kbench_record::{
    CandidateRef, CaseFamily, CaseRef, Device, Environment, EvalRecord, Outcome, Phase, Precision,
    ProblemRef, TimingStats, TimingSummary, ToleranceProfile, SCHEMA_VERSION,
};
use proptest::prelude::*;

use crate::*;

fn stats(ms: f64) -> TimingStats {
    timing_stats("cuda_event", vec![ms], 0.0).unwrap()
}

/// A record with `outcome`; timed with the given (median, mean) speedups when present.
pub(crate) fn record(outcome: Outcome, speedups: Option<(f64, f64)>) -> EvalRecord {
    EvalRecord {
        schema_version: SCHEMA_VERSION,
        run_id: "run".into(),
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
            selection: None,
        },
        device: Device::Cpu,
        precision: Precision::Fp32,
        profile: ToleranceProfile::Strict,
        model_mode: Default::default(),
        outcome,
        cases: vec![],
        timing: speedups.map(|(median, mean)| TimingSummary {
            reference: stats(if median.is_finite() { median } else { 1.0 }),
            candidate: stats(1.0),
            speedup: median,
            speedup_of_medians: Some(median),
            speedup_mean: mean,
            warmup: 3,
            l2_flush: true,
            rounds: 1,
            round_warmup: None,
            harness_clock: None,
            method_timings: vec![],
        }),
        load_s: None,
        build_ahead_s: None,
        phases: None,
        gpu: None,
        wall_s: 1.0,
        started_unix_s: 0.0,
        finished_unix_s: 1.0,
        log_tail: String::new(),
        notes: vec![],
        env: Environment::default(),
        baselines: Default::default(),
        baselines_missing: Default::default(),
        speed_of_light: None,
        integrity: None,
        cost: None,
    }
}

fn mismatch() -> Outcome {
    Outcome::Mismatch {
        case: CaseRef {
            family: CaseFamily::Random,
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

/// 6 records: 2 fast, 1 exactly as fast (not > 1), 1 correct untimed, 1 mismatch,
/// 1 compile error.
fn run() -> Vec<EvalRecord> {
    vec![
        record(Outcome::Ok, Some((2.0, 1.5))),
        record(Outcome::Ok, Some((1.0, 0.9))),
        record(Outcome::Ok, Some((3.0, 0.5))),
        record(Outcome::Ok, None),
        record(mismatch(), None),
        record(
            Outcome::CompileError {
                message: "nvcc: error".into(),
            },
            None,
        ),
    ]
}

#[test]
fn summary_counts_follow_kernelbench() {
    let s = summarize(&run());
    assert_eq!((s.evaluated, s.compiled, s.correct, s.timed), (6, 5, 4, 3));
    // fast_1: strict >, over all evaluated: 2.0 and 3.0, not 1.0.
    assert_eq!(s.fast_1_count, 2);
    assert_eq!(s.fast_1, Some(2.0 / 6.0));
    assert_eq!(s.median_speedup, Some(2.0));
    assert_eq!(s.compiled_rate(), Some(5.0 / 6.0));
    assert_eq!(s.correct_rate(), Some(4.0 / 6.0));
    let kinds: Vec<(&str, usize)> = s.outcomes.iter().map(|(k, &n)| (k.as_str(), n)).collect();
    assert_eq!(
        kinds,
        vec![("compile_error", 1), ("mismatch", 1), ("ok", 4)]
    );
}

#[test]
fn mean_basis_is_kernelbench_compatible() {
    let s = RunSummary::from_records(&run(), SpeedupBasis::Mean);
    assert_eq!((s.fast_1_count, s.median_speedup), (1, Some(0.9)));
    assert_eq!(fast_p(&run(), 1.0, SpeedupBasis::Mean), Some(1.0 / 6.0));
    // fast_0: correct and timed with a positive speedup.
    assert_eq!(fast_p(&run(), 0.0, SpeedupBasis::Median), Some(3.0 / 6.0));
    assert_eq!(fast_p(&run(), 2.5, SpeedupBasis::Median), Some(1.0 / 6.0));
}

#[test]
fn empty_runs_have_no_rates() {
    let s = summarize(&[]);
    assert_eq!((s.evaluated, s.fast_1, s.median_speedup), (0, None, None));
    assert_eq!((s.compiled_rate(), s.correct_rate()), (None, None));
    assert_eq!(fast_p(&[], 1.0, SpeedupBasis::Median), None);
    assert_eq!(
        render_summary(&s),
        "evaluated                 0\n\
         compiled                  0\n\
         correct                   0\n\
         correct random            0  KernelBench's check: the random family alone\n\
         fast_1                    0  correct and speedup > 1, over all evaluated\n\
         median speedup            -  median basis, over 0 timed correct\n"
    );
}

#[test]
fn mixed_torch_versions_are_named() {
    let mut r = run();
    for x in r.iter_mut() {
        x.env.torch = "2.11.0+cu130".into();
    }
    let text = render_summary(&summarize(&r));
    assert!(!text.contains("MIXED TORCH"), "{text}");
    let torch = r[0].env.torch.clone();
    r[0].env.torch = "2.15.0+cu132".into();
    let text = render_summary(&summarize(&r));
    assert!(
        text.contains(&format!(
            "MIXED TORCH VERSIONS: {} with torch {torch}, 1 with torch 2.15.0+cu132: their times",
            r.len() - 1
        )),
        "{text}"
    );
}

#[test]
fn mixed_model_modes_and_eval_only_kernels_are_named() {
    let mut r = run();
    let s = summarize(&r);
    assert_eq!(s.model_modes.len(), 1);
    assert!(!render_summary(&s).contains("MIXED MODEL MODES"));
    let mut eval_only = r.iter().find(|x| !x.outcome.is_ok()).unwrap().clone();
    eval_only.integrity = Some(kbench_record::IntegrityReport {
        advisories: vec!["mode-switch".into()],
        eval_mode_correct: Some(true),
        ..Default::default()
    });
    r.push(eval_only);
    r[0].model_mode = kbench_record::ModelMode::Eval;
    let s = summarize(&r);
    assert_eq!(s.eval_mode_only, 1);
    let text = render_summary(&s);
    assert!(
        text.contains("MIXED MODEL MODES: 1 in eval, 6 in train (--model-mode)"),
        "{text}"
    );
    assert!(
        text.contains(
            "mode-switch: 1 kernel(s) fail in train mode but are correct only in eval mode"
        ),
        "{text}"
    );
}

#[test]
fn non_finite_speedups_are_not_timings() {
    let mut r = run();
    r.push(record(Outcome::Ok, Some((f64::INFINITY, f64::NAN))));
    let s = summarize(&r);
    assert_eq!((s.correct, s.timed, s.fast_1_count), (5, 3, 2));
}

#[test]
fn summary_table_snapshot() {
    let s = summarize(&run());
    assert_eq!(
        render_summary(&s),
        "evaluated                 6\n\
         compiled          5 (83.3%)\n\
         correct           4 (66.7%)\n\
         correct random    4 (66.7%)  KernelBench's check: the random family alone\n\
         fast_1            2 (33.3%)  correct and speedup > 1, over all evaluated\n\
         median speedup        2.00x  median basis, over 3 timed correct\n\
         \n\
         outcome               count\n\
         compile_error             1\n\
         mismatch                  1\n\
         ok                        4\n"
    );
}

#[test]
fn an_untimed_run_says_not_timed_where_speedups_would_be_not_zero() {
    let s = summarize(&[record(Outcome::Ok, None), record(mismatch(), None)]);
    let text = render_summary(&s);
    assert!(
        text.contains("fast_1            not timed  no correct kernel was timed (--no-timing)"),
        "{text}"
    );
    assert!(text.contains("median speedup    not timed"), "{text}");
    assert!(!text.contains("0.0%)  correct and speedup"), "{text}");
    // A timed run whose kernels all failed has a fast_1 of 0, which is a figure.
    let s = summarize(&[record(mismatch(), None)]);
    let text = render_summary(&s);
    assert!(text.contains("fast_1             0 (0.0%)"), "{text}");
}

#[test]
fn summary_separates_random_from_every_family_and_names_failing_ones() {
    use kbench_record::{CaseFamily, CaseRef, CaseResult};
    let case = |family: &str, passed: bool, na: Option<&str>| CaseResult {
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
        not_applicable: na.map(Into::into),
        flush: None,
        tol_needed: None,
        artefacts: None,
        detail: None,
        times: None,
    };
    let mut runs = run();
    // A kernel that passes the random cases and fails `signed`; one where `large` does not
    // apply (not a failure).
    let mut r = record(
        Outcome::Mismatch {
            case: CaseRef {
                family: CaseFamily::Signed,
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
    );
    r.cases = vec![
        case("random", true, None),
        case("signed", false, None),
        case(
            "large",
            true,
            Some("the reference is ill-conditioned under it"),
        ),
    ];
    runs.push(r);
    let s = summarize(&runs);
    assert_eq!((s.correct, s.correct_random), (4, 5));
    assert_eq!(s.family_failures.get("signed"), Some(&1));
    assert_eq!(s.not_applicable.get("large"), Some(&1));
    let text = render_summary(&s);
    assert!(
        text.contains("correct           4 (57.1%)  under every case family that applies\n"),
        "{text}"
    );
    assert!(text.contains("correct random    5 (71.4%)"), "{text}");
    assert!(text.contains("failing families: signed (1)\n"), "{text}");
}

#[test]
fn summary_serialises() {
    let s = summarize(&run());
    let json = serde_json::to_string(&s).unwrap();
    assert!(json.contains("\"basis\":\"median\""), "{json}");
    assert_eq!(serde_json::from_str::<RunSummary>(&json).unwrap(), s);
}

#[test]
fn timeouts_in_load_do_not_count_as_compiled() {
    let r = vec![
        record(
            Outcome::Timeout {
                phase: Phase::Load,
                limit_s: 60.0,
            },
            None,
        ),
        record(
            Outcome::Timeout {
                phase: Phase::Run,
                limit_s: 60.0,
            },
            None,
        ),
    ];
    let s = summarize(&r);
    assert_eq!((s.evaluated, s.compiled, s.correct), (2, 1, 0));
}

/// A missing kernel is a wrong answer; a kernel whose problem failed is on a line of its own,
/// not among those that failed to compile; both are in every denominator.
#[test]
fn missing_kernels_and_unjudged_problems_count_as_not_correct_on_lines_of_their_own() {
    let mut r = run();
    r.push(record(
        Outcome::NoKernel {
            message: "replay folder r has no kernel for smoke/L1/1".into(),
        },
        None,
    ));
    r.push(record(
        Outcome::ReferenceError {
            message: "reference failed".into(),
        },
        None,
    ));
    r.push(record(
        Outcome::ProblemError {
            message: "problem file level1/7_X.py: no class Model".into(),
        },
        None,
    ));
    let s = summarize(&r);
    assert_eq!((s.evaluated, s.compiled, s.correct, s.timed), (9, 5, 4, 3));
    assert_eq!((s.no_kernel, s.unjudged), (1, 2));
    assert_eq!(s.correct_rate(), Some(4.0 / 9.0));
    assert_eq!(fast_p(&r, 1.0, SpeedupBasis::Median), Some(2.0 / 9.0));
    assert_eq!(
        render_summary(&s),
        "evaluated                 9\n\
         compiled          5 (55.6%)  of 7 judged; 2 not judged (below)\n\
         correct           4 (44.4%)\n\
         correct random    4 (44.4%)  KernelBench's check: the random family alone\n\
         fast_1            2 (22.2%)  correct and speedup > 1, over all evaluated\n\
         median speedup        2.00x  median basis, over 3 timed correct\n\
         not judged        2 (22.2%)  the problem failed (reference_error, problem_error): kernel not run, not correct\n\
         no kernel         1 (11.1%)  the agent gave none: counted not compiled, not correct\n\
         \n\
         outcome               count\n\
         compile_error             1\n\
         mismatch                  1\n\
         no_kernel                 1\n\
         ok                        4\n\
         problem_error             1\n\
         reference_error            1\n"
    );
}

/// Percentile straight from the definition, in exact-ish f64, for comparison.
fn percentile_by_definition(v: &[f64], p: f64) -> f64 {
    let mut x = v.to_vec();
    x.sort_by(f64::total_cmp);
    let h = (x.len() - 1) as f64 * p / 100.0;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(x.len() - 1);
    x[lo] + (h - lo as f64) * (x[hi] - x[lo])
}

fn times() -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(
        prop_oneof![4 => 0.0f64..10.0, 1 => 0.0f64..1e6, 1 => Just(0.0), 1 => Just(1.5)],
        1..300,
    )
}

proptest! {
    #[test]
    fn median_and_mean_lie_between_min_and_max(v in times()) {
        let s = Sample::new(v).unwrap();
        prop_assert!(s.min() <= s.median() && s.median() <= s.max());
        prop_assert!(s.min() <= s.mean() && s.mean() <= s.max());
        prop_assert!(s.iqr() >= 0.0);
        prop_assert!(s.std_dev().unwrap_or(0.0) >= 0.0);
    }

    #[test]
    fn percentiles_are_monotone_in_p(v in times(), a in 0.0f64..=100.0, b in 0.0f64..=100.0) {
        let s = Sample::new(v).unwrap();
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        prop_assert!(s.percentile(lo).unwrap() <= s.percentile(hi).unwrap());
        prop_assert_eq!(s.percentile(0.0).unwrap(), s.min());
        prop_assert_eq!(s.percentile(100.0).unwrap(), s.max());
    }

    #[test]
    fn statistics_ignore_the_order_of_samples(v in times(), seed in any::<u64>()) {
        let a = Sample::new(v.clone()).unwrap();
        // A seeded Fisher–Yates shuffle.
        let mut w = v;
        let mut x = seed | 1;
        for i in (1..w.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            w.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let b = Sample::new(w).unwrap();
        prop_assert_eq!(a.sorted(), b.sorted());
        prop_assert_eq!(a.median(), b.median());
        prop_assert_eq!(a.percentile(90.0).unwrap(), b.percentile(90.0).unwrap());
        prop_assert_eq!(a.iqr(), b.iqr());
        // Compensated sums are order-independent up to the last bits.
        prop_assert!(relative_eq!(a.mean(), b.mean(), epsilon = 0.0, max_relative = 1e-12));
    }

    #[test]
    fn percentiles_match_the_definition(v in times(), p in 0.0f64..=100.0) {
        let s = Sample::new(v.clone()).unwrap();
        let want = percentile_by_definition(&v, p);
        let got = s.percentile(p).unwrap();
        // Relative 1e-12; absolute 1e-12 of the largest sample, since an interpolation
        // between 0 and 5e5 that lands near 92 carries the rounding of 5e5, not of 92.
        let scale = v.iter().fold(1.0f64, |m, x| m.max(x.abs()));
        prop_assert!(
            relative_eq!(got, want, epsilon = 1e-12 * scale, max_relative = 1e-12),
            "{} vs {}",
            got,
            want
        );
    }

    #[test]
    fn timing_stats_agree_with_the_sample(v in times(), wall in 0.0f64..10.0) {
        let s = Sample::new(v.clone()).unwrap();
        let t = timing_stats("perf_counter", v.clone(), wall).unwrap();
        prop_assert_eq!(&t.samples_ms, &v);
        prop_assert_eq!((t.median_ms, t.min_ms, t.max_ms), (s.median(), s.min(), s.max()));
        prop_assert!(t.p25_ms <= t.median_ms && t.median_ms <= t.p75_ms);
        prop_assert_eq!(t.wall_s, wall);
    }
}

#[test]
fn summary_shows_the_ratio_to_the_speed_of_light_and_flags_impossible_times() {
    use kbench_record::perf::{speed_of_light, ArchRates, Peaks, ProblemCost};
    let peaks = Peaks::from_rates(&ArchRates::for_cc(9, 0).unwrap(), 132, 1980.0, 3.35232e12);
    // 33.5232 MB at 3.35232 TB/s: a 10 us speed of light (no counted FLOPs).
    let cost = ProblemCost {
        precision: "fp32".into(),
        input_bytes: 16.7616e6,
        output_bytes: 16.7616e6,
        ..Default::default()
    };
    let sol = speed_of_light(&cost, &peaks);
    assert_abs_diff_eq!(sol.min_s, 10e-6, epsilon = 1e-15);
    let with_time = |ms: f64| {
        let mut r = record(Outcome::Ok, Some((2.0, 2.0)));
        r.timing.as_mut().unwrap().candidate = stats(ms);
        r.speed_of_light = Some(sol.clone());
        r
    };
    // 40 us, 20 us and an impossible 2 us; one record without a speed of light.
    let records = vec![
        with_time(0.040),
        with_time(0.020),
        with_time(0.002),
        record(Outcome::Ok, Some((1.0, 1.0))),
    ];
    assert_abs_diff_eq!(records[0].sol_ratio().unwrap(), 4.0, epsilon = 1e-9);
    // Reports carry it per candidate (and per problem, for the shown candidate).
    let c = crate::task::Candidate::from_record(
        &records[0],
        &RecordExtras::default(),
        SpeedupBasis::Median,
    );
    assert_abs_diff_eq!(c.sol_ratio.unwrap(), 4.0, epsilon = 1e-9);
    let mut wrong = records[0].clone();
    wrong.outcome = mismatch();
    let c =
        crate::task::Candidate::from_record(&wrong, &RecordExtras::default(), SpeedupBasis::Median);
    assert_eq!(c.sol_ratio, None);
    // The strict bound counts the 16.76 MB read: 5 us; 2 us is impossible, 5 us is not.
    assert!(records[2].below_speed_of_light(SOL_SLACK));
    assert!(!records[1].below_speed_of_light(SOL_SLACK));
    assert!(!with_time(0.005).below_speed_of_light(SOL_SLACK));
    let mut fast = with_time(0.002);
    assert!(fast.below_speed_of_light(SOL_SLACK));
    // Without the L2 flush nothing is judged: inputs may come from L2.
    fast.timing.as_mut().unwrap().l2_flush = false;
    assert!(!fast.below_speed_of_light(SOL_SLACK));
    let s = summarize(&records);
    assert_eq!((s.sol_timed, s.below_sol), (3, 1));
    assert_abs_diff_eq!(s.median_sol_ratio.unwrap(), 2.0, epsilon = 1e-9);
    let t = render_summary(&s);
    assert!(t.contains("x speed of light"), "{t}");
    assert!(
        t.contains("2.00x") && t.contains("1 BELOW the limit"),
        "{t}"
    );
    // Without any speed of light the row is absent (CPU runs look as before).
    assert!(!render_summary(&summarize(&run())).contains("speed of light"));
    // A record written before the field existed still reads.
    let mut v = serde_json::to_value(&records[3]).unwrap();
    v.as_object_mut().unwrap().remove("speed_of_light");
    let back: EvalRecord = serde_json::from_value(v).unwrap();
    assert_eq!(back.speed_of_light, None);
    let v = serde_json::to_value(&records[0]).unwrap();
    assert!(v["speed_of_light"]["min_s"].as_f64().is_some());
    let back: EvalRecord = serde_json::from_value(v).unwrap();
    assert_eq!(back.speed_of_light, Some(sol));
}
