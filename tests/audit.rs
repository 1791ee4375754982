//! `kbench audit` end to end on CPU, with the real worker: a small KernelBench-layout fixture
//! folder (tests/fixtures/audit/level1) whose problems each have one known weakness under
//! KernelBench's `torch.rand` inputs, and an honest one; and the committed audit of the 250
//! KernelBench problems (adversarial/audit/kernelbench/audit.json).

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{ensure_python, kbench, repo_root, shared, show};
use serde_json::Value;

fn fixtures() -> std::path::PathBuf {
    repo_root().join("tests").join("fixtures").join("audit")
}

/// `label -> (removed by signed, rows cut)` of the flags an audit shows for `problem`.
fn shown_flags(problem: &Value) -> BTreeMap<String, Value> {
    problem["findings"]["weaknesses"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["shown"] == true)
        .map(|w| {
            let label = match (w.get("input"), w.get("parameter")) {
                (Some(i), _) => format!("{} (input {i})", w["flag"].as_str().unwrap()),
                (_, Some(p)) => {
                    format!("{} ({})", w["flag"].as_str().unwrap(), p.as_str().unwrap())
                }
                _ => w["flag"].as_str().unwrap().to_string(),
            };
            (label, w["removed_by_signed"].clone())
        })
        .collect()
}

fn by_name(report: &Value) -> BTreeMap<String, Value> {
    report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap().to_string(), p.clone()))
        .collect()
}

fn run_audit(out: &Path, extra: &[&str]) -> Value {
    let mut cmd = kbench();
    cmd.args(["audit", "--kernelbench"])
        .arg(fixtures())
        .args(["--levels", "1", "--device", "cpu", "--jobs", "2", "--out"])
        .arg(out)
        .args(extra);
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("## Flagged problems"), "{}", show(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        stderr.matches("kbench audit: [").count(),
        5,
        "one progress line per problem:\n{stderr}"
    );
    let md = std::fs::read_to_string(out.join("audit.md")).unwrap();
    assert_eq!(md, stdout, "audit.md is the table printed");
    serde_json::from_str(&std::fs::read_to_string(out.join("audit.json")).unwrap()).unwrap()
}

fn check_fixture_findings(report: &Value) {
    let problems = by_name(report);
    assert_eq!(problems.len(), 5);
    for p in problems.values() {
        assert_eq!(p["audited"], true, "{p}");
    }
    let flags = |name: &str| shown_flags(&problems[name]);
    // ReLU is the identity on [0, 1); signed inputs remove that.
    assert_eq!(
        flags("ReLU"),
        BTreeMap::from([("identity (input 0)".into(), Value::Bool(true))])
    );
    // A softmax over 200,000 columns is below atol 1e-4 everywhere: zeros pass.
    let softmax = flags("Softmax_Wide");
    assert_eq!(softmax.keys().collect::<Vec<_>>(), ["zeros"], "{softmax:?}");
    // Ignoring an input or a parameter is a property of the model: signed keeps it.
    assert_eq!(
        flags("Ignores_Second_Input"),
        BTreeMap::from([("ignores-input (input 1)".into(), Value::Bool(false))])
    );
    assert_eq!(
        flags("Unused_Parameter"),
        BTreeMap::from([("ignores-weight (unused_scale)".into(), Value::Bool(false))])
    );
    // The honest matmul: nothing.
    assert_eq!(flags("Matmul"), BTreeMap::new());
    assert_eq!(problems["Matmul"]["flagged"], false);
    assert_eq!(report["counts"]["flagged"], 4);
    assert_eq!(report["counts"]["not_audited"], 0);
}

#[test]
fn audit_flags_the_fixture_weaknesses_and_says_whether_signed_removes_them() {
    let _guard = shared();
    ensure_python();
    let dir = tempfile::tempdir().unwrap();
    let report = run_audit(&dir.path().join("full"), &[]);
    assert_eq!(report["profile"], "kernelbench");
    assert_eq!(report["atol"].as_f64(), Some(1e-4));
    assert_eq!(report["max_rows"], Value::Null);
    check_fixture_findings(&report);
    let softmax = &by_name(&report)["Softmax_Wide"];
    let zeros = &softmax["findings"]["weaknesses"][0];
    assert!(
        zeros["detail"]
            .as_str()
            .unwrap()
            .starts_with("returning zeros passes (max |output| = "),
        "{zeros}"
    );

    // The batch cut to 8 rows where the model allows it: the same findings, and the cut is
    // recorded (the softmax has 2 rows, nothing to cut).
    let report = run_audit(&dir.path().join("cut"), &["--max-rows", "8"]);
    assert_eq!(report["max_rows"], 8);
    check_fixture_findings(&report);
    let problems = by_name(&report);
    assert_eq!(problems["ReLU"]["rows_cut"], true);
    assert_eq!(problems["Matmul"]["rows_cut"], true);
    assert_eq!(problems["Softmax_Wide"]["rows_cut"], false);
    assert_eq!(
        problems["ReLU"]["families"]["random"]["outputs"][0]["shape"],
        serde_json::json!([8, 256])
    );
    let md = std::fs::read_to_string(dir.path().join("cut").join("audit.md")).unwrap();
    assert!(md.contains("cut to 8 rows"), "{md}");
}

/// The committed audits of KernelBench's problems find the known weak problems, each with its
/// reason: ReLU, LeakyReLU and HardTanh are the identity on [0, 1) (signed inputs remove
/// that), a softmax over 393,216 columns is below atol (zeros pass), and level 2 problem 83
/// clamps min(x, 0) into [0, 1], which is 0 for every input.
///
/// The audit of all 250 (`adversarial/audit/kernelbench`) ran on an H100 with the problems'
/// full inputs; every problem was audited.
#[test]
fn the_committed_kernelbench_audit_finds_the_known_weak_problems() {
    let dir = repo_root().join("adversarial").join("audit");
    let mut problems = Vec::new();
    {
        let path = dir.join("kernelbench").join("audit.json");
        let report: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(report["profile"], "kernelbench", "{}", path.display());
        assert_eq!(report["atol"].as_f64(), Some(1e-4));
        assert_eq!(report["counts"]["problems"], 250, "{}", path.display());
        assert_eq!(report["counts"]["not_audited"], 0, "{}", path.display());
        problems.extend(
            report["problems"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["audited"] == true)
                .cloned(),
        );
    }
    let find = |level: u64, id: u64| {
        problems
            .iter()
            .find(|p| p["level"] == level && p["id"] == id)
            .unwrap_or_else(|| panic!("level {level} problem {id} is not in the audit"))
    };
    let expect = [
        (
            1,
            19,
            "ReLU",
            "identity (input 0)",
            "returning input 0 passes",
        ),
        (
            1,
            20,
            "LeakyReLU",
            "identity (input 0)",
            "returning input 0 passes",
        ),
        (
            1,
            32,
            "HardTanh",
            "identity (input 0)",
            "returning input 0 passes",
        ),
        (
            1,
            31,
            "ELU",
            "identity (input 0)",
            "returning input 0 passes",
        ),
        (1, 23, "Softmax", "zeros", "returning zeros passes"),
        (1, 37, "FrobeniusNorm", "zeros", "returning zeros passes"),
        (2, 83, "", "zeros", "returning zeros passes"),
    ];
    for (level, id, name, flag, reason) in expect {
        let p = find(level, id);
        assert!(
            p["name"].as_str().unwrap().starts_with(name),
            "{level}/{id}: {}",
            p["name"]
        );
        assert_eq!(p["audited"], true, "{level}/{id}: {}", p["not_audited"]);
        assert_eq!(p["flagged"], true, "{level}/{id}");
        let flags = shown_flags(p);
        assert!(
            flags.contains_key(flag),
            "{level}/{id} should be flagged {flag}: {flags:?}"
        );
        let w = p["findings"]["weaknesses"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["shown"] == true && w["flag"] == flag.split(' ').next().unwrap())
            .unwrap();
        assert!(
            w["detail"].as_str().unwrap().starts_with(reason),
            "{level}/{id}: {}",
            w["detail"]
        );
        // The findings follow from the raw measurements kept beside them.
        let recomputed = kbench::commands::audit::findings_from_json(&p["families"], 1e-4);
        assert_eq!(
            serde_json::to_value(&recomputed).unwrap(),
            p["findings"],
            "{level}/{id}"
        );
    }
    // Signed inputs remove the activations' identity; nothing removes level 2 problem 83's
    // zeros (min(x, 0) clamped into [0, 1] is 0 whatever x is).
    for id in [19, 20, 31, 32] {
        assert_eq!(
            shown_flags(find(1, id))["identity (input 0)"],
            Value::Bool(true)
        );
    }
    assert_eq!(shown_flags(find(2, 83))["zeros"], Value::Bool(false));
}
