//! The NaN/Inf rules of the `nan-inf` family on the real worker. An honest rewrite whose NaN
//! stays where the output depends on it passes although the reference's matmul spreads it
//! further (reference artefacts, recorded); kernels that invent a NaN, flip an infinity's sign
//! or drop a NaN fail under the rule that names it. Real worker, real torch on CPU.
//!
//! Fixtures: `tests/fixtures/nan_inf/problems/level1` (small problems) and
//! `tests/fixtures/nan_inf/kernels/level1` (candidates, `<id>_<label>.py`).

use crate::common;

use std::collections::BTreeMap;

use common::{by_candidate, kbench, repo_root, show, RunBuilder};
use serde_json::Value;

/// A fixed run secret: the injected positions (seeded from it) are the same in every run.
const SECRET: &str = "21212121212121212121212121212121212121212121212121212121212121ab";

fn fixtures() -> std::path::PathBuf {
    repo_root().join("tests/fixtures/nan_inf")
}

fn run(out: &std::path::Path) -> (std::process::Output, BTreeMap<String, Value>) {
    let secret = out.with_extension("secret");
    std::fs::write(&secret, SECRET).unwrap();
    let output = kbench()
        .args(
            RunBuilder::new()
                .agent("replay")
                .replay_dir(fixtures().join("kernels"))
                .kernelbench(fixtures().join("problems"))
                .build(),
        )
        .args(["--levels", "1", "--device", "cpu", "--no-timing"])
        .args(["--families", "nan-inf", "--out"])
        .arg(out)
        .arg("--secret-from")
        .arg(&secret)
        .output()
        .expect("running kbench");
    let recs = by_candidate(out);
    (output, recs)
}

/// The record's `nan-inf` case.
fn nan_inf_case(r: &Value) -> &Value {
    r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["case"]["family"] == "nan-inf")
        .unwrap_or_else(|| panic!("no nan-inf case in {r}"))
}

#[test]
fn nan_inf_rules_pass_rewrites_and_name_real_bugs() {
    let _g = common::shared();
    common::ensure_python();
    let dir = tempfile::tempdir().unwrap();
    let (out, recs) = run(&dir.path().join("run"));
    let text = show(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert_eq!(recs.len(), 6, "{text}");

    // (a) A.unsqueeze(1) * B for diag(A) @ B: passes, with the column NaNs of the
    // reference's matmul accepted as artefacts (and said so in a note).
    let rewrite = &recs["1_rewrite"];
    assert_eq!(rewrite["outcome"]["kind"], "ok", "{}", rewrite["outcome"]);
    let case = nan_inf_case(rewrite);
    assert!(case.get("not_applicable").is_none(), "{case}");
    assert_eq!(case["passed"], true);
    let artefacts = &case["artefacts"];
    assert!(artefacts["count"].as_u64().unwrap() > 10, "{case}");
    assert_eq!(artefacts["first_index"].as_array().unwrap().len(), 2);
    assert_eq!(case["tol_needed"], 0.0, "{case}");
    let notes = rewrite["notes"].to_string();
    assert!(notes.contains("accepted as reference artefacts"), "{notes}");
    // Every case records the tolerance it needs; the random ones pass exactly.
    for c in rewrite["cases"].as_array().unwrap() {
        assert!(c["tol_needed"].as_f64().is_some(), "{c}");
    }

    // (b)–(d): each wrong kernel fails the nan-inf case under the rule named for its bug.
    for (name, rule, detail) in [
        ("1_inf_sign", "inf-sign", "the reference is -Inf"),
        (
            "2_mask_multiply",
            "nonfinite-invented",
            "the reference is finite (0.0)",
        ),
        (
            "2_where",
            "drops-nan",
            "where the output depends on an injected NaN/Inf input",
        ),
        ("3_nan_to_num", "drops-nan", "the reference is NaN"),
    ] {
        let r = &recs[name];
        let o = &r["outcome"];
        assert_eq!(o["kind"], "mismatch", "{name}: {o}");
        assert_eq!(o["case"]["family"], "nan-inf", "{name}: {o}");
        assert_eq!(o["rule"], rule, "{name}: {o}");
        let case = nan_inf_case(r);
        assert_eq!(case["passed"], false);
        // No tolerance makes a NaN/Inf failure pass.
        assert!(case.get("tol_needed").is_none(), "{name}: {case}");
        let d = case["detail"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: {case}"));
        assert!(d.starts_with(rule) && d.contains(detail), "{name}: {d}");
    }
    assert_eq!(recs["2_honest"]["outcome"]["kind"], "ok");
}

#[test]
fn check_explains_nan_inf_rulings() {
    let _g = common::shared();
    common::ensure_python();
    let check = |problem: &str, kernel: &str| {
        let out = kbench()
            .args(["check", "--device", "cpu", "--no-timing", "--problem"])
            .arg(fixtures().join("problems/level1").join(problem))
            .arg("--kernel")
            .arg(fixtures().join("kernels/level1").join(kernel))
            .output()
            .expect("running kbench check");
        (out.status.code(), show(&out))
    };
    let (code, text) = check("1_Diag_Matmul.py", "1_rewrite.py");
    assert_eq!(code, Some(0), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("nan-inf#0: "))
        .unwrap_or_else(|| panic!("no nan-inf ruling in:\n{text}"));
    assert!(
        line.contains("accepted as reference artefacts, first at [") && line.contains("0·NaN"),
        "{line}"
    );
    assert!(text.contains("tol needed"), "{text}");

    let (code, text) = check("2_ReLU.py", "2_where.py");
    assert_eq!(code, Some(3), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("nan-inf#0: drops-nan: the reference is NaN at index ["))
        .unwrap_or_else(|| panic!("no drops-nan ruling in:\n{text}"));
    assert!(line.contains("the candidate returned 0.0"), "{line}");
}
