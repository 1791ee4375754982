//! Every reason category on hand-made records, the set table, golden Markdown/CSV
//! renderings (`KBENCH_UPDATE_GOLDEN=1 cargo test -p kbench-reports claims` rewrites them: the
//! reason categories, and the diagnoses of slower claims), and
//! hostile strings escaped in the HTML section.

use approx::assert_abs_diff_eq;
use kbench_record::claims::{Claim, ClaimSet, ClaimedKernel, ClaimsFile, ImportError};
use kbench_record::{CaseFamily, CaseRef, CaseResult, EvalRecord, IntegrityReport, Outcome};

use super::*;
use crate::tests::record;

fn kernel(problem: u32, claim: Option<f64>) -> ClaimedKernel {
    ClaimedKernel {
        level: 1,
        problem,
        sample: 0,
        name: format!("level_1_problem_{problem}_sample_0_kernel"),
        kernel: Some(format!("level_1_problem_{problem}_sample_0_kernel.py")),
        label: Some("model-a".into()),
        claims: claim
            .map(|speedup| Claim {
                speedup,
                baseline: "eager".into(),
                field: "torch_speedup".into(),
            })
            .into_iter()
            .collect(),
        claimed_correct: Some(true),
        reference: None,
        no_kernel: None,
    }
}

fn case(family: CaseFamily, passed: bool) -> CaseResult {
    CaseResult {
        case: CaseRef { family, index: 0 },
        passed,
        max_abs: 0.0,
        max_rel: 0.0,
        mismatches: u64::from(!passed),
        elements: 8,
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

/// A failed case that would pass at `atol = rtol = tol`.
fn needing(family: CaseFamily, tol: f64) -> CaseResult {
    CaseResult {
        tol_needed: Some(tol),
        ..case(family, false)
    }
}

fn mismatch(family: CaseFamily, rule: &str) -> Outcome {
    Outcome::Mismatch {
        case: CaseRef { family, index: 0 },
        output: 0,
        max_abs: 0.003,
        max_rel: 0.01,
        count: 1,
        total: 8,
        first_index: vec![2],
        rule: rule.into(),
    }
}

/// A record of problem `id` with `outcome`, timed at `speedup` with a little noise (20
/// paired samples, so the interval is narrow but real).
fn rec(id: u32, outcome: Outcome, speedup: Option<f64>, cases: Vec<CaseResult>) -> EvalRecord {
    let mut r = record(outcome, speedup.map(|s| (s, s)));
    r.problem.id = id;
    r.cases = cases;
    if let (Some(s), Some(t)) = (speedup, r.timing.as_mut()) {
        let noise = |i: usize| 1.0 + 0.002 * ((i * 7 % 5) as f64 - 2.0);
        t.reference.samples_ms = (0..20).map(|i| s * noise(i)).collect();
        t.candidate.samples_ms = (0..20).map(|i| noise(i + 1)).collect();
        t.speedup_of_medians = None;
    }
    r
}

fn fixture() -> (ClaimsFile, Vec<(EvalRecord, RecordExtras)>) {
    use CaseFamily::*;
    let mut kernels: Vec<ClaimedKernel> = (1..=9).map(|p| kernel(p, Some(2.0))).collect();
    kernels[8].claims.clear();
    // Problem 1's second sample is a placeholder; problem 2's second has no record; problem
    // 13 is outside the run (not selected).
    let mut missing = kernel(1, Some(3.0));
    missing.sample = 1;
    missing.kernel = None;
    missing.no_kernel = Some("custom_code is empty".into());
    kernels.push(missing);
    let mut unrun = kernel(2, Some(1.5));
    unrun.sample = 1;
    kernels.push(unrun);
    kernels.push(kernel(13, Some(1.5)));
    let claims = ClaimsFile {
        schema_version: kbench_record::claims::CLAIMS_SCHEMA_VERSION,
        set: ClaimSet {
            name: "fixture".into(),
            format: "jsonl".into(),
            source: "fixture.jsonl".into(),
            tolerance: None,
            model_mode: None,
        },
        kernels,
        errors: vec![ImportError {
            at: "line 4".into(),
            message: "task_id is missing".into(),
        }],
    };
    let ok = || vec![case(Random, true), case(Signed, true)];
    let none = RecordExtras::default;
    let mut mode = rec(
        5,
        mismatch(Random, "elementwise"),
        None,
        vec![needing(Random, 0.5)],
    );
    mode.integrity = Some(IntegrityReport {
        advisories: vec!["mode-switch".into()],
        eval_mode_correct: Some(true),
        ..Default::default()
    });
    let records = vec![
        // 1: agrees.
        (rec(1, Outcome::Ok, Some(2.0), ok()), none()),
        // 2: correct, but slower than claimed.
        (rec(2, Outcome::Ok, Some(1.2), ok()), none()),
        // 3: a cached output.
        (
            rec(
                3,
                Outcome::Integrity {
                    flag: "output-replayed".into(),
                    detail: "cases 1 and 2".into(),
                },
                None,
                ok(),
            ),
            none(),
        ),
        // 4: fails the random cases by far.
        (
            rec(
                4,
                mismatch(Random, "elementwise"),
                None,
                vec![needing(Random, 0.5)],
            ),
            none(),
        ),
        // 5: folds BatchNorm after self.eval(); correct in eval mode.
        (mode, none()),
        // 6: misses kbench's tolerance, within KernelBench's.
        (
            rec(
                6,
                mismatch(Random, "elementwise"),
                None,
                vec![CaseResult {
                    rel_l2_vs_f64: Some(2.5e-3),
                    ..needing(Random, 0.003)
                }],
            ),
            none(),
        ),
        // 7: drops NaN on the nan-inf family only.
        (
            rec(
                7,
                mismatch(NanInf, "drops-nan"),
                None,
                vec![case(Random, true), case(NanInf, false)],
            ),
            none(),
        ),
        // 8: its extension does not build (against this torch).
        (
            rec(
                8,
                Outcome::CompileError {
                    message: "extension build failed while executing candidate /tmp/k/8.py: \
                              RuntimeError: Error building extension 'relu': [1/2] nvcc -c cuda.cu\n\
                              FAILED: [code=2] cuda.cuda.o\n\
                              /tmp/cache/ab12/relu/cuda.cu(59): error: no suitable conversion \
                              function from \"const at::DeprecatedTypeProperties\" to \
                              \"c10::ScalarType\" exists\n1 error detected"
                        .into(),
                },
                None,
                vec![],
            ),
            none(),
        ),
        // 9: correct, no claim made.
        (rec(9, Outcome::Ok, Some(0.8), ok()), none()),
        // 11 has no record; a record of problem 12 matches no claim.
        (rec(12, Outcome::Ok, Some(1.0), ok()), none()),
    ];
    (claims, records)
}

fn report() -> ClaimsReport {
    let (claims, records) = fixture();
    build_claims_report(&claims, "run-a", &records, SpeedupBasis::Median)
}

#[test]
fn every_disagreement_gets_its_category() {
    let r = report();
    let cat = |p: u32| {
        r.rows
            .iter()
            .find(|x| x.problem == p && x.sample == 0)
            .unwrap()
            .reason
            .as_ref()
            .map(|x| x.category())
    };
    assert_eq!(cat(1), None);
    assert_eq!(cat(2), Some("slower than claimed"));
    assert_eq!(cat(3), Some("integrity flag"));
    assert_eq!(cat(4), Some("fails KernelBench's check"));
    assert_eq!(cat(5), Some("model-mode dependent"));
    assert_eq!(cat(6), Some("tolerance-dependent"));
    assert_eq!(cat(7), Some("fails only a stress family"));
    assert_eq!(cat(8), Some("does not build here"));
    assert_eq!(cat(9), None);
    let sample1 = |p: u32| {
        r.rows
            .iter()
            .find(|x| x.problem == p && x.sample == 1)
            .unwrap()
            .reason
            .as_ref()
            .unwrap()
            .describe()
    };
    assert!(sample1(1).contains("custom_code is empty"));
    assert!(sample1(2).contains("no record in the run"));
    // A tolerance-dependent kernel says how far off it is as a whole (against float64): a
    // placeholder whose small outputs pass only through atol reads 88% off, not a nuance.
    let tolerance = r.rows.iter().find(|x| x.problem == 6).unwrap();
    let said = tolerance.reason.as_ref().unwrap().describe();
    assert!(
        said.ends_with("(relative L2 error vs float64 2.5e-3)"),
        "{said}"
    );
    assert_eq!(r.outside_run, 1);
    assert!(!r.rows.iter().any(|x| x.problem == 13));
    let row7 = r.rows.iter().find(|x| x.problem == 7).unwrap();
    assert_eq!(
        row7.reason.as_ref().unwrap().describe(),
        "fails only a stress family: nan-inf (drops-nan)"
    );
}

#[test]
fn the_set_table_counts_claims_that_survive() {
    let t = report().table;
    assert_eq!((t.kernels, t.evaluated), (11, 9));
    assert_eq!((t.claimed_correct, t.measured_correct), (11, 3));
    // Claims: every kernel but 9; surviving: 1 only (2 is slower, the rest incorrect).
    assert_eq!((t.claims, t.surviving), (10, 1));
    assert_eq!((t.reproduced, t.faster, t.slower), (1, 0, 1));
    assert_eq!(t.correct_stated, 11);
    assert_abs_diff_eq!(t.claimed_fast_1, 10.0 / 11.0, epsilon = 1e-12);
    assert_abs_diff_eq!(t.measured_fast_1, 2.0 / 11.0, epsilon = 1e-12);
    let g = t.measured_geomean.unwrap();
    assert_abs_diff_eq!(g, (2.0f64 * 1.2 * 0.8).powf(1.0 / 3.0), epsilon = 1e-9);
    assert_eq!(t.measured_median, Some(1.2));
}

/// Kernel 1 of [`fixture`] measured correct on the random cases at `speedup`.
fn timed_ok(speedup: f64) -> EvalRecord {
    rec(
        1,
        Outcome::Ok,
        Some(speedup),
        vec![case(CaseFamily::Random, true)],
    )
}

/// The claims report of [`fixture`]'s claims against one record.
fn report_of(claims: &ClaimsFile, r: EvalRecord) -> ClaimsReport {
    build_claims_report(
        claims,
        "x",
        &[(r, RecordExtras::default())],
        SpeedupBasis::Median,
    )
}

#[test]
fn a_faster_than_claimed_kernel_still_survives() {
    let (claims, _) = fixture();
    let r = timed_ok(5.0);
    let rep = report_of(&claims, r);
    let row = &rep.rows[0];
    assert_eq!(
        row.reason.as_ref().map(|x| x.category()),
        Some("faster than claimed")
    );
    assert!(row.survives() && !row.reproduced());
    assert_eq!(
        (rep.table.reproduced, rep.table.faster, rep.table.slower),
        (0, 1, 0)
    );
}

#[test]
fn a_claim_just_outside_its_interval_prints_outside_it() {
    let r = Reason::SlowerThanClaimed {
        claimed: 0.1249,
        low: 0.1201,
        high: 0.1236,
    };
    assert_eq!(
        r.describe(),
        "slower than claimed: claimed 0.125x, measured [0.120, 0.124]"
    );
    let r = Reason::FasterThanClaimed {
        claimed: 1.5,
        low: 2.0,
        high: 2.2,
    };
    assert_eq!(
        r.describe(),
        "faster than claimed: claimed 1.50x, measured [2.00, 2.20]"
    );
}

#[test]
fn a_set_that_states_no_correctness_reads_not_stated() {
    let (mut claims, records) = fixture();
    for k in &mut claims.kernels {
        k.claimed_correct = None;
    }
    let r = build_claims_report(&claims, "run-a", &records, SpeedupBasis::Median);
    assert_eq!((r.table.claimed_correct, r.table.correct_stated), (0, 0));
    let md = render_claims_markdown(&r);
    assert!(md.contains("| correct | not stated | 3/11 |"), "{md}");
    claims.kernels[0].claimed_correct = Some(true);
    let r = build_claims_report(&claims, "run-a", &records, SpeedupBasis::Median);
    let md = render_claims_markdown(&r);
    assert!(
        md.contains("| correct | 1/11 (stated for 1) | 3/11 |"),
        "{md}"
    );
}

#[test]
fn golden_renderings() {
    let r = report();
    let text = format!(
        "{}\n---- csv ----\n{}",
        render_claims_markdown(&r),
        render_claims_csv(&r)
    );
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/claims/golden.md");
    if std::env::var_os("KBENCH_UPDATE_GOLDEN").is_some() {
        std::fs::write(path, &text).unwrap();
    }
    let want = std::fs::read_to_string(path).unwrap_or_default();
    assert_eq!(
        text, want,
        "claims rendering changed; if intended, rerun with KBENCH_UPDATE_GOLDEN=1 and review the diff"
    );
    let html = render_claims_html(&r).into_string();
    assert!(html.contains("<h2>Claims: fixture</h2>"));
    assert_eq!(html.matches("class=\"disagrees\"").count(), 9);
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["rows"][2]["reason"]["category"], "integrity-flag");
    assert_eq!(json["rows"][2]["reason"]["flag"], "output-replayed");
}

#[test]
fn hostile_strings_in_the_claims_section_come_out_escaped() {
    use crate::leaderboard::tests::{escaped, HOSTILE};
    for h in HOSTILE {
        let mut r = report();
        r.set_name = format!("set{h}");
        r.set_format = format!("format{h}");
        r.run = format!("run{h}");
        r.tolerance_source = format!("source{h}");
        r.rows[0].label = Some(format!("label{h}"));
        r.rows[0].verdict = Some(format!("verdict{h}"));
        let html = render_claims_html(&r).into_string();
        assert!(!html.contains(h), "{h} is in the claims section unescaped");
        // (field, least number of places: heading and note, or text and data-v of a cell)
        for (field, places) in [
            ("set", 2),
            ("format", 1),
            ("run", 1),
            ("source", 1),
            ("label", 2),
            ("verdict", 2),
        ] {
            let n = html.matches(&escaped(&format!("{field}{h}"))).count();
            assert!(
                n >= places,
                "{field}{h}: {n} escaped occurrences, want {places}"
            );
        }
        assert!(!html.contains("<script") && !html.contains("<img"));
        assert!(!html.contains("onmouseover=\""));
    }
}

#[test]
fn a_slower_kernel_that_times_itself_is_diagnosed() {
    let (claims, _) = fixture();
    let mut r = timed_ok(0.99);
    r.integrity = Some(IntegrityReport {
        advisories: vec!["times-itself".into()],
        ..Default::default()
    });
    r.notes.push(
        "times-itself: line 12 times code at run time (`s.elapsed_time(e)`): what the kernel runs may be chosen by what it measured there".into(),
    );
    let rep = report_of(&claims, r);
    let row = &rep.rows[0];
    let reason = row.reason.as_ref().unwrap();
    assert_eq!(reason.category(), "slower, path chosen at run time");
    let d = reason.describe();
    assert!(
        d.contains("claimed 2.00x") && d.contains("; its line 12 times code at run time"),
        "{d}"
    );
    assert!(!row.survives());
    assert_eq!(
        (rep.table.reproduced, rep.table.faster, rep.table.slower),
        (0, 0, 1)
    );
}

#[test]
fn a_slower_kernel_that_ran_only_library_kernels_is_diagnosed() {
    let (claims, _) = fixture();
    let profiled = |own: Vec<String>, advisories: Vec<String>| {
        let mut r = timed_ok(0.99);
        r.integrity = Some(IntegrityReport {
            advisories,
            kernels: Some(kbench_record::KernelProfile {
                launches: 3,
                total_us: 40.0,
                own_fraction: if own.is_empty() { 0.0 } else { 0.5 },
                library_fraction: if own.is_empty() { 0.97 } else { 0.47 },
                other_fraction: 0.03,
                own,
                library: vec!["sm90_xmma_gemm_f32f32_tf32f32".into()],
                other: vec![],
                side_stream: false,
            }),
            ..Default::default()
        });
        let rep = report_of(&claims, r);
        rep.rows[0].reason.clone().unwrap()
    };
    let reason = profiled(vec![], vec!["no-custom-kernel".into()]);
    assert_eq!(reason.category(), "slower, only library kernels ran");
    let d = reason.describe();
    assert!(
        d.contains("claimed 2.00x")
            && d.contains(
                "97% of its device time in library kernels (sm90_xmma_gemm_f32f32_tf32f32)"
            ),
        "{d}"
    );
    // Its own kernel ran: slower than claimed, no more.
    let reason = profiled(vec!["my_gemm".into()], vec![]);
    assert_eq!(reason.category(), "slower than claimed");
}

#[test]
fn a_claim_that_holds_only_under_another_timing_method_is_method_dependent() {
    let (claims, _) = fixture();
    let timed_as = |methods: &[(&str, f64)]| {
        let mut r = timed_ok(0.99);
        r.timing.as_mut().unwrap().method_timings = methods
            .iter()
            .map(|&(m, s)| kbench_record::MethodTiming {
                method: m.into(),
                reference_ms: s,
                candidate_ms: 1.0,
                reference_calls: 100,
                candidate_calls: 100,
                speedup: s,
            })
            .collect();
        let rep = report_of(&claims, r);
        (rep.rows[0].clone(), rep.table)
    };
    // Claimed 2.00x; KernelBench's method gives 1.90x (at least 90% of the claim).
    let (row, table) = timed_as(&[("kernelbench", 1.9), ("cuda-l1", 1.01)]);
    let reason = row.reason.as_ref().unwrap();
    assert_eq!(reason.category(), "method-dependent");
    let d = reason.describe();
    assert!(
        d.contains("claimed 2.00x; 1.90x under KernelBench's method, 1.01x under CUDA-L1's method; measured ["),
        "{d}"
    );
    assert!(!row.survives() && row.slower());
    assert_eq!(table.slower, 1);
    // KernelBench's older releases (no L2 thrash) are a convention of their own.
    let (row, _) = timed_as(&[("kernelbench", 1.2), ("kernelbench-v0.1", 1.95)]);
    let d = row.reason.as_ref().unwrap().describe();
    assert!(d.contains("1.95x under KernelBench v0.1's method"), "{d}");
    // No convention reaches the claim: slower than claimed, no more.
    let (row, _) = timed_as(&[("kernelbench", 1.2)]);
    assert_eq!(row.reason.unwrap().category(), "slower than claimed");
    // kbench itself measures 97% of a claim of 1.02x: slower, whatever the other methods say.
    let mut claims_near = claims.clone();
    for k in &mut claims_near.kernels {
        for c in &mut k.claims {
            c.speedup = 1.02;
        }
    }
    let mut r = timed_ok(0.99);
    r.timing.as_mut().unwrap().method_timings = vec![kbench_record::MethodTiming {
        method: "cuda-l1".into(),
        reference_ms: 1.03,
        candidate_ms: 1.0,
        reference_calls: 100,
        candidate_calls: 100,
        speedup: 1.03,
    }];
    let rep = report_of(&claims_near, r);
    assert_eq!(
        rep.rows[0].reason.as_ref().unwrap().category(),
        "slower than claimed"
    );
}

/// The diagnoses a reviewer acts on, in one set that states no correctness: a kernel faster
/// than its claim, one that chose its path at run time, one that ran only library kernels,
/// one whose claim holds under another evaluator's timing, and a claim against
/// `torch.compile` measured on that baseline.
fn diagnoses_report() -> ClaimsReport {
    use CaseFamily::*;
    let mut kernels: Vec<ClaimedKernel> = (1..=5).map(|p| kernel(p, Some(2.0))).collect();
    for k in &mut kernels {
        k.claimed_correct = None;
    }
    kernels[4].claims[0] = Claim {
        speedup: 1.5,
        baseline: "compile".into(),
        field: "score_compile".into(),
    };
    let claims = ClaimsFile {
        schema_version: kbench_record::claims::CLAIMS_SCHEMA_VERSION,
        set: ClaimSet {
            name: "diagnoses".into(),
            format: "jsonl".into(),
            source: "diagnoses.jsonl".into(),
            tolerance: None,
            model_mode: None,
        },
        kernels,
        errors: vec![],
    };
    let ok = || vec![case(Random, true), case(Signed, true)];
    let mut times_itself = rec(2, Outcome::Ok, Some(0.99), ok());
    times_itself.integrity = Some(IntegrityReport {
        advisories: vec!["times-itself".into()],
        ..Default::default()
    });
    times_itself.notes.push(
        "times-itself: line 30 times code at run time (`t0 = time.perf_counter()`): what the kernel runs may be chosen by what it measured there".into(),
    );
    let mut library = rec(3, Outcome::Ok, Some(0.99), ok());
    library.integrity = Some(IntegrityReport {
        advisories: vec!["no-custom-kernel".into()],
        kernels: Some(kbench_record::KernelProfile {
            launches: 3,
            total_us: 40.0,
            own_fraction: 0.0,
            library_fraction: 0.97,
            other_fraction: 0.03,
            own: vec![],
            library: vec!["sm90_xmma_gemm_f32f32_tf32f32".into()],
            other: vec![],
            side_stream: false,
        }),
        ..Default::default()
    });
    let mut method = rec(4, Outcome::Ok, Some(0.99), ok());
    method.timing.as_mut().unwrap().method_timings = [("kernelbench", 1.9), ("cuda-l1", 1.01)]
        .iter()
        .map(|&(m, s)| kbench_record::MethodTiming {
            method: m.into(),
            reference_ms: s,
            candidate_ms: 1.0,
            reference_calls: 100,
            candidate_calls: 100,
            speedup: s,
        })
        .collect();
    let mut compiled = RecordExtras::default();
    compiled.baselines.insert(
        "compile".into(),
        crate::extras::BaselineSpeedup {
            speedup: 1.5,
            speedup_mean: Some(1.5),
            samples_ms: vec![],
        },
    );
    let records = vec![
        (
            rec(1, Outcome::Ok, Some(5.0), ok()),
            RecordExtras::default(),
        ),
        (times_itself, RecordExtras::default()),
        (library, RecordExtras::default()),
        (method, RecordExtras::default()),
        (rec(5, Outcome::Ok, Some(3.0), ok()), compiled),
    ];
    build_claims_report(&claims, "run-b", &records, SpeedupBasis::Median)
}

#[test]
fn golden_diagnoses() {
    let r = diagnoses_report();
    let category = |p: u32| {
        let row = r.rows.iter().find(|x| x.problem == p).unwrap();
        row.reason.as_ref().map(|x| x.category())
    };
    assert_eq!(category(1), Some("faster than claimed"));
    assert_eq!(category(2), Some("slower, path chosen at run time"));
    assert_eq!(category(3), Some("slower, only library kernels ran"));
    assert_eq!(category(4), Some("method-dependent"));
    // Claimed 1.5x over torch.compile, measured 1.5x over it (3.0x over eager): reproduced.
    assert_eq!(category(5), None);
    assert_eq!(
        (r.table.reproduced, r.table.faster, r.table.slower),
        (1, 1, 3)
    );
    let text = format!(
        "{}\n---- csv ----\n{}",
        render_claims_markdown(&r),
        render_claims_csv(&r)
    );
    assert!(text.contains("| correct | not stated | 5/5 |"), "{text}");
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/claims/golden_diagnoses.md"
    );
    if std::env::var_os("KBENCH_UPDATE_GOLDEN").is_some() {
        std::fs::write(path, &text).unwrap();
    }
    let want = std::fs::read_to_string(path).unwrap_or_default();
    assert_eq!(
        text, want,
        "claims rendering changed; if intended, rerun with KBENCH_UPDATE_GOLDEN=1 and review the diff"
    );
}

#[test]
fn an_extension_that_does_not_build_names_the_compilers_error() {
    let said = |m: &str| extension_build_error(m);
    // The compiler's line, its build folder cut off.
    assert_eq!(
        said("extension build failed while executing candidate /x.py: RuntimeError: Error building extension 'a': \n/tmp/c/9f/a/cuda.cu(42): error: identifier \"x\" is undefined\n").as_deref(),
        Some("cuda.cu(42): error: identifier \"x\" is undefined")
    );
    // An older record, without the compiler's output: torch's line, and that it is all.
    assert_eq!(
        said("extension build failed while executing candidate /x.py: RuntimeError: Error building extension 'argmin_cuda'\nTraceback ...").as_deref(),
        Some("Error building extension 'argmin_cuda' (the record holds no compiler output)")
    );
    // A fatal error's path is cut too; the traceback is not read.
    assert_eq!(
        said("extension build failed while constructing ModelNew: RuntimeError: Error building extension 'b': \n/tmp/c/b/main.cpp:3:10: fatal error: missing.h: No such file or directory\nTraceback (most recent call last):\n  x: error: not this").as_deref(),
        Some("main.cpp:3:10: fatal error: missing.h: No such file or directory")
    );
    assert_eq!(
        said("extension build failed while executing candidate /x.py: RuntimeError: Error building extension 'c'\nTraceback (most recent call last):\n  File \"/x.py\", line 3\nq.cu(1): error: from the traceback").as_deref(),
        Some("Error building extension 'c' (the record holds no compiler output)")
    );
    // Other compile errors are not builds, even when they quote torch's words.
    assert_eq!(
        said("exception while executing candidate /x.py: ValueError: Error building extension 'x'"),
        None
    );
    assert_eq!(
        said("syntax error in candidate /x.py: SyntaxError: invalid syntax"),
        None
    );
    assert_eq!(
        said("import failed while executing candidate /x.py: ImportError: triton"),
        None
    );
}
