//! Unit tests of the audit: flags and findings from measurements, counts and `audit.md`,
//! admission after memory failures, `--resume`'s progress file and the public seeds.

use kbench_suites::Problem;
use serde_json::{json, Value};

use super::findings::{findings_from_json, FlagKind};
use super::progress::{read_progress, PROGRESS};
use super::report::{
    audit_seeds, count, removed_text, render_markdown, AuditReport, FlagCount, ProblemAudit,
};
use super::runner::Admission;
use super::setup::utc_now;
use super::{FAMILIES, MAX_WEIGHTS, SCHEMA};

const ATOL: f64 = 1e-4;

fn out(v: Value) -> Value {
    v
}

/// ReLU on [0, 1): the output is its input; under signed it is not.
/// Level 1 problem 19, ReLU, as a suite would hold it (no source needed here).
fn relu_problem() -> Problem {
    Problem {
        suite: "kernelbench".into(),
        level: 1,
        id: 19,
        name: "ReLU".into(),
        file: "19_ReLU.py".into(),
        source: String::new(),
        origin: None,
        sha256: "ab".into(),
    }
}

fn relu_like() -> Value {
    json!({
        "random": {"outputs": [out(json!({
            "shape": [16, 16], "dtype": "f32", "elements": 256, "max_abs": 0.99,
            "nonfinite": 0, "zeros_excess": 0.99, "constant_excess": 0.49,
            "input_excess": [0.0],
            "input_sensitivity": [{"max_excess": 0.3, "nan_mismatch": 0}],
            "weight_sensitivity": {}
        }))], "seconds": 0.1, "transformed": 0, "rows_cut": false},
        "signed": {"outputs": [out(json!({
            "shape": [16, 16], "dtype": "f32", "elements": 256, "max_abs": 3.1,
            "nonfinite": 0, "zeros_excess": 3.1, "constant_excess": 1.5,
            "input_excess": [2.9],
            "input_sensitivity": [{"max_excess": 0.5, "nan_mismatch": 0}],
            "weight_sensitivity": {}
        }))], "seconds": 0.1, "transformed": 1, "rows_cut": false}
    })
}

#[test]
fn identity_under_random_is_removed_by_signed() {
    let f = findings_from_json(&relu_like(), ATOL);
    assert_eq!(f.weaknesses.len(), 1, "{f:?}");
    let w = &f.weaknesses[0];
    assert_eq!(w.flag.flag, FlagKind::Identity);
    assert_eq!(w.flag.input, Some(0));
    assert_eq!(w.removed_by_signed, Some(true));
    assert!(w.shown && f.flagged());
    assert!(f.signed_only.is_empty());
    assert!(w.flag.detail.starts_with("returning input 0 passes"));
}

#[test]
fn tiny_outputs_pass_as_zeros_and_subsume_constant_and_independence() {
    let fam = |max: f64, zx: f64| {
        json!({"outputs": [{
            "max_abs": max, "nonfinite": 0, "zeros_excess": zx, "constant_excess": zx / 2.0,
            "input_excess": [0.9],
            "input_sensitivity": [{"max_excess": zx, "nan_mismatch": 0}],
            "weight_sensitivity": {}
        }], "transformed": 1})
    };
    let f = findings_from_json(
        &json!({"random": fam(2.6e-6, 2.6e-6), "signed": fam(4e-4, 4e-4)}),
        ATOL,
    );
    let kinds: Vec<(FlagKind, bool, Option<bool>)> = f
        .weaknesses
        .iter()
        .map(|w| (w.flag.flag, w.shown, w.removed_by_signed))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (FlagKind::Zeros, true, Some(true)),
            (FlagKind::Constant, false, Some(true)),
            (FlagKind::IgnoresInput, false, Some(true)),
        ]
    );
    assert!(
        f.weaknesses[0].flag.detail.contains("2.60e-6"),
        "{:?}",
        f.weaknesses[0]
    );
    // Still tiny under signed: not removed.
    let f = findings_from_json(
        &json!({"random": fam(2.6e-6, 2.6e-6), "signed": fam(5e-5, 5e-5)}),
        ATOL,
    );
    assert_eq!(f.weaknesses[0].removed_by_signed, Some(false));
    // At the v0.1 tolerance the signed output is small enough too.
    let f = findings_from_json(
        &json!({"random": fam(2.6e-6, 2.6e-6), "signed": fam(4e-4, 4e-4)}),
        1e-2,
    );
    assert_eq!(f.weaknesses[0].removed_by_signed, Some(false));
}

#[test]
fn a_subsumed_flag_that_survives_signed_is_shown() {
    // Zeros pass under random but not under signed, where a constant still passes.
    let fam = |zx: f64, cx: f64| {
        json!({"outputs": [{"max_abs": zx, "nonfinite": 0, "zeros_excess": zx, "constant_excess": cx,
                            "input_sensitivity": [{"max_excess": 0.0, "nan_mismatch": 0}]}]})
    };
    let f = findings_from_json(
        &json!({"random": fam(1e-5, 1e-6), "signed": fam(0.5, 1e-6)}),
        ATOL,
    );
    let c = f
        .weaknesses
        .iter()
        .find(|w| w.flag.flag == FlagKind::Constant)
        .unwrap();
    assert_eq!(c.subsumed_by, Some(FlagKind::Zeros));
    assert!(c.shown);
    assert_eq!(c.removed_by_signed, Some(false));
}

#[test]
fn a_constant_must_also_be_the_same_in_every_case() {
    // A scalar loss: one element is always within tolerance of itself.
    let fam = |sens: f64| {
        json!({"outputs": [{"shape": [], "elements": 1, "max_abs": 2.3, "nonfinite": 0,
            "zeros_excess": 2.3, "constant_excess": -2.3e-4, "input_excess": [null, null],
            "input_sensitivity": [{"max_excess": sens, "nan_mismatch": 0}, null]}]})
    };
    let f = findings_from_json(&json!({"random": fam(3e-3)}), ATOL);
    assert!(f.weaknesses.is_empty(), "{f:?}");
    // Over a large batch of random inputs the loss is the same in every case.
    let f = findings_from_json(&json!({"random": fam(-1e-4), "signed": fam(0.2)}), ATOL);
    let kinds: Vec<_> = f
        .weaknesses
        .iter()
        .map(|w| (w.flag.label(), w.shown, w.removed_by_signed))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("constant".to_string(), true, Some(true)),
            ("ignores-input (input 0)".to_string(), false, Some(true)),
        ]
    );
    // No sensitivity reported: unknown, no flag.
    let f = findings_from_json(
        &json!({"random": {"outputs": [{"nonfinite": 0, "zeros_excess": 1.0, "constant_excess": 0.0}]}}),
        ATOL,
    );
    assert!(f.weaknesses.is_empty(), "{f:?}");
}

#[test]
fn nonfinite_outputs_never_pass_as_zeros() {
    let f = findings_from_json(
        &json!({"random": {"outputs": [{"nonfinite": 3, "zeros_excess": 0.0}]}}),
        ATOL,
    );
    assert!(f.weaknesses.is_empty(), "{f:?}");
}

#[test]
fn independence_of_inputs_and_weights() {
    let fam = |s1: Value, w: Value| {
        json!({"outputs": [{
            "max_abs": 5.0, "nonfinite": 0, "zeros_excess": 5.0, "constant_excess": 2.0,
            "input_excess": [3.0, null],
            "input_sensitivity": [{"max_excess": 0.7, "nan_mismatch": 0}, s1],
            "weight_sensitivity": w,
        }], "transformed": 2})
    };
    let random = fam(
        json!({"max_excess": -0.5, "nan_mismatch": 0}),
        json!({"linear.weight": {"max_excess": 0.2, "nan_mismatch": 0},
               "unused": {"max_excess": null, "nan_mismatch": 0},
               "nanny": {"max_excess": 0.0, "nan_mismatch": 2},
               "unknown": null}),
    );
    let signed = fam(
        json!({"max_excess": 0.0, "nan_mismatch": 0}),
        json!({"linear.weight": {"max_excess": 0.2, "nan_mismatch": 0},
               "unused": {"max_excess": 0.0, "nan_mismatch": 0}}),
    );
    let f = findings_from_json(&json!({"random": random, "signed": signed}), ATOL);
    let got: Vec<(String, Option<bool>)> = f
        .weaknesses
        .iter()
        .map(|w| (w.flag.label(), w.removed_by_signed))
        .collect();
    assert_eq!(
        got,
        vec![
            ("ignores-input (input 1)".to_string(), Some(false)),
            ("ignores-weight (unused)".to_string(), Some(false)),
        ]
    );
    assert!(f.weaknesses.iter().all(|w| w.shown));
}

#[test]
fn every_output_must_qualify_and_missing_fields_raise_nothing() {
    let f = findings_from_json(
        &json!({"random": {"outputs": [
            {"nonfinite": 0, "zeros_excess": 0.0, "constant_excess": 0.0, "input_excess": [0.0]},
            {"nonfinite": 0, "zeros_excess": 0.5, "input_excess": [null]}
        ]}}),
        ATOL,
    );
    assert!(f.weaknesses.is_empty(), "{f:?}");
    // Nothing but garbage: no flag, no panic.
    for v in [
        json!(null),
        json!({"random": 3}),
        json!({"random": {"outputs": [7, {"zeros_excess": "x"}]}}),
    ] {
        assert!(findings_from_json(&v, ATOL).weaknesses.is_empty());
    }
}

#[test]
fn signed_unmeasured_or_unchanged_is_said() {
    let fam = json!({"outputs": [{"nonfinite": 0, "zeros_excess": 0.0, "max_abs": 0.0}], "transformed": 0});
    let f = findings_from_json(&json!({"random": fam.clone()}), ATOL);
    assert_eq!(f.weaknesses[0].removed_by_signed, None);
    assert!(removed_text(None, &f).contains("unknown"));
    let f = findings_from_json(&json!({"random": fam.clone(), "signed": fam}), ATOL);
    assert_eq!(f.weaknesses[0].removed_by_signed, Some(false));
    assert!(f.signed_unchanged);
    assert!(removed_text(Some(false), &f).contains("changes no input"));
    let f = findings_from_json(
        &json!({"random": {"outputs": [{"nonfinite": 0, "zeros_excess": 0.0}]}, "signed": {"error": "boom", "outputs": []}}),
        ATOL,
    );
    assert_eq!(f.signed_unknown.as_deref(), Some("boom"));
}

#[test]
fn signed_only_flags_are_notes() {
    let f = findings_from_json(
        &json!({
            "random": {"outputs": [{"nonfinite": 0, "zeros_excess": 1.0, "constant_excess": 1.0, "input_excess": [0.5]}]},
            "signed": {"outputs": [{"nonfinite": 0, "zeros_excess": 1.0, "constant_excess": 1.0, "input_excess": [0.0]}]}
        }),
        ATOL,
    );
    assert!(f.weaknesses.is_empty());
    assert_eq!(f.signed_only.len(), 1);
    assert!(!f.flagged());
}

#[test]
fn counts_and_markdown() {
    let p = relu_problem();
    let mut a = ProblemAudit::new(&p);
    a.set_measured(relu_like(), ATOL);
    let mut b = ProblemAudit::new(&p);
    b.id = 20;
    b.not_audited = Some("out of memory: load failed".into());
    let counts = count(&[a.clone(), b.clone()]);
    assert_eq!(
        (counts.audited, counts.flagged, counts.not_audited),
        (1, 1, 1)
    );
    assert_eq!(
        counts.by_flag["identity"],
        FlagCount {
            problems: 1,
            removed_by_signed: 1
        }
    );
    let report = AuditReport {
        schema: SCHEMA,
        profile: "kernelbench".into(),
        atol: ATOL,
        rtol: ATOL,
        precision: "fp32",
        device: "cpu".into(),
        device_name: "x".into(),
        torch: "2".into(),
        python: "3".into(),
        kbench: "0".into(),
        date: utc_now(),
        command: "kbench audit".into(),
        suite: "t".into(),
        families: FAMILIES.to_vec(),
        weight_seed: 42,
        max_weights: MAX_WEIGHTS,
        max_rows: Some(64),
        interrupted: false,
        counts,
        problems: vec![a, b],
    };
    let md = render_markdown(&report);
    assert!(
        md.contains("| 1 | 19_ReLU | `identity (input 0)` | returning input 0 passes"),
        "{md}"
    );
    assert!(md.contains("| yes |"), "{md}");
    assert!(
        md.contains("- level 1 20_ReLU: out of memory: load failed"),
        "{md}"
    );
    assert!(md.contains("cut to 64 rows"), "{md}");
    // The JSON keeps what the flags are recomputed from.
    let js = serde_json::to_value(&report).unwrap();
    let fams = &js["problems"][0]["families"];
    assert_eq!(
        findings_from_json(fams, js["atol"].as_f64().unwrap()),
        report.problems[0].findings
    );
}

#[test]
fn after_a_memory_failure_problems_run_alone_until_three_light_ones() {
    let a = Admission::new(16 << 30);
    let go_on = || false;
    let stop = || true;
    assert_eq!(a.enter(&go_on), Some(false));
    assert_eq!(a.enter(&go_on), Some(false));
    // One ran out of memory beside the other: the next waits for the other to end.
    a.leave(1 << 30, true);
    assert_eq!(a.enter(&stop), None, "waits while another problem runs");
    a.leave(8 << 30, false);
    // Alone now; a heavy problem keeps it so, three light ones end it.
    for peak in [1u64 << 30, 5 << 30, 1 << 30, 1 << 30] {
        assert_eq!(a.enter(&go_on), Some(true));
        a.leave(peak, false);
    }
    assert_eq!(a.enter(&go_on), Some(true));
    a.leave(1 << 30, false);
    assert_eq!(a.enter(&go_on), Some(false));
    assert_eq!(a.enter(&go_on), Some(false));
}

#[test]
fn resume_reads_back_what_was_audited_with_the_same_settings() {
    let p = relu_problem();
    let mut done = ProblemAudit::new(&p);
    done.set_measured(relu_like(), ATOL);
    let mut cut = ProblemAudit::new(&p);
    cut.id = 20;
    cut.key = "kernelbench/L1/20".into();
    cut.not_audited = Some("interrupted".into());
    let settings = json!({"profile": "kernelbench", "max_rows": 64});
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(PROGRESS);
    let text = format!(
        "{}\n{}\n{}\n{{\"level\": 1, \"id\"",
        json!({ "settings": settings }),
        serde_json::to_string(&done).unwrap(),
        serde_json::to_string(&cut).unwrap()
    );
    std::fs::write(&path, text).unwrap();
    let back = read_progress(&path, &settings).unwrap();
    assert_eq!(
        back.len(),
        1,
        "the interrupted one and the cut line are left out"
    );
    let r = &back["kernelbench/L1/19/ab"];
    assert_eq!(r.findings, done.findings);
    assert!(r.audited && r.flagged);
    let e = read_progress(&path, &json!({"profile": "kernelbench", "max_rows": 8})).unwrap_err();
    assert!(e.to_string().contains("other settings"), "{e}");
    assert!(read_progress(&dir.path().join("none"), &settings)
        .unwrap()
        .is_empty());
}

#[test]
fn seeds_are_public_and_per_problem() {
    assert_eq!(audit_seeds("a"), audit_seeds("a"));
    assert_ne!(audit_seeds("a").0, audit_seeds("b").0);
    assert_ne!(audit_seeds("a").0, audit_seeds("a").1);
}
