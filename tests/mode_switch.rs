//! The module-mode convention (`--model-mode train|eval`) and the `mode-switch` advisory. Real
//! `kbench` runs on the CPU (real worker, real torch) of a Conv2d+BatchNorm problem against
//! four kernels: one that calls `self.eval()` and folds the BatchNorm into the convolution, one
//! that normalises with the running statistics without calling eval, one that branches on
//! `self.training` (nothing to see until its mismatch is checked again in eval mode), and an
//! honest one (its own batch-statistics math, so it updates no running statistics).

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{ensure_python, kbench, key, records, repo_root, shared, show, RunBuilder};
use serde_json::Value;

fn fixtures() -> PathBuf {
    repo_root().join("tests/fixtures/mode_switch")
}

fn problem() -> PathBuf {
    fixtures().join("problem/30_Conv2d_BatchNorm_ReLU.py")
}

fn run(out: &Path, extra: &[&str]) -> Output {
    kbench()
        .args(RunBuilder::new().problem(problem()).build())
        .args(["--agent", "replay", "--replay-dir"])
        .arg(fixtures().join("kernels"))
        .args([
            "--device",
            "cpu",
            "--families",
            "random",
            "--trials",
            "2",
            "--no-timing",
            "--quiet",
            "--out",
        ])
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

fn by_name(out: &Path) -> BTreeMap<String, Value> {
    records(out)
        .into_iter()
        .map(|r| {
            key(&r); // reads back as an EvalRecord
            (r["candidate"]["name"].as_str().unwrap().to_string(), r)
        })
        .collect()
}

fn advisories(r: &Value) -> Vec<String> {
    r["integrity"]["advisories"]
        .as_array()
        .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

fn notes(r: &Value) -> Vec<String> {
    r["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

fn manifest_mode(out: &Path) -> String {
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    m["model_mode"].as_str().unwrap().to_string()
}

#[test]
fn train_mode_flags_mode_switches_and_eval_mode_accepts_them() {
    let _guard = shared();
    ensure_python();
    let dir = tempfile::tempdir().unwrap();

    // Train mode (the default, KernelBench's convention).
    let train = dir.path().join("train");
    let o = run(&train, &[]);
    assert_eq!(o.status.code(), Some(3), "three kernels fail: {}", show(&o));
    assert_eq!(manifest_mode(&train), "train");
    let recs = by_name(&train);
    assert_eq!(recs.len(), 4, "{:?}", recs.keys());
    for r in recs.values() {
        assert_eq!(r["model_mode"], "train", "{r}");
    }

    let folded = &recs["30_folded_eval"];
    assert_eq!(folded["outcome"]["kind"], "mismatch", "{folded}");
    assert_eq!(advisories(folded), ["mode-switch"], "{folded}");
    let detail = folded["integrity"]["mode_switch"].as_str().unwrap();
    assert!(
        detail.contains("after load") && detail.contains("training == False"),
        "{detail}"
    );
    assert_eq!(folded["integrity"]["eval_mode_correct"], true, "{folded}");
    assert!(
        notes(folded).contains(&"mode-switch: correct in eval mode".to_string()),
        "{folded}"
    );

    let stats = &recs["30_running_stats"];
    assert_eq!(stats["outcome"]["kind"], "mismatch", "{stats}");
    assert_eq!(advisories(stats), ["mode-switch"], "{stats}");
    let detail = stats["integrity"]["mode_switch"].as_str().unwrap();
    assert!(
        detail.contains("running statistics (bn.running_mean, bn.running_var)"),
        "{detail}"
    );
    assert_eq!(stats["integrity"]["eval_mode_correct"], true, "{stats}");

    // No advisory: its mismatch alone is checked again in eval mode, where it is correct.
    let branch = &recs["30_training_branch"];
    assert_eq!(branch["outcome"]["kind"], "mismatch", "{branch}");
    assert!(advisories(branch).is_empty(), "{branch}");
    assert_eq!(branch["integrity"]["eval_mode_correct"], true, "{branch}");
    assert!(
        notes(branch)
            .iter()
            .any(|n| n.starts_with("model-mode dependent: correct with both models in eval mode")),
        "{branch}"
    );

    let honest = &recs["30_honest"];
    assert_eq!(honest["outcome"]["kind"], "ok", "{honest}");
    assert!(advisories(honest).is_empty(), "{honest}");
    assert!(honest["integrity"].get("mode_switch").is_none(), "{honest}");
    assert!(
        honest["integrity"].get("eval_mode_correct").is_none(),
        "{honest}"
    );

    // Eval mode (both models in .eval() after construction): all four are correct, and
    // nothing is a mode switch.
    let eval = dir.path().join("eval");
    let o = run(&eval, &["--model-mode", "eval"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(manifest_mode(&eval), "eval");
    let recs = by_name(&eval);
    assert_eq!(recs.len(), 4);
    for (name, r) in &recs {
        assert_eq!(r["outcome"]["kind"], "ok", "{name}: {r}");
        assert_eq!(r["model_mode"], "eval", "{name}");
        assert!(advisories(r).is_empty(), "{name}: {r}");
    }

    // A resumed run keeps its mode.
    let o = run(&train, &["--resume", "--model-mode", "eval"]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cannot resume") && err.contains("--model-mode: recorded train, now eval"),
        "{err}"
    );

    // One report over both runs says they mix conventions, and which kernels are correct
    // only in eval mode.
    let o = kbench()
        .arg("report")
        .arg(&train)
        .arg(&eval)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(
            "MIXED MODEL MODES: this report holds eval and train records (--model-mode); this run's are train"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "mode-switch: 3 kernel(s) fail in train mode but are correct only in eval mode"
        ),
        "{text}"
    );

    // `kbench check` takes the same flag.
    let kernel = fixtures().join("kernels/30_folded_eval.py");
    let check = |mode: &str| {
        kbench()
            .args(["check", "--problem"])
            .arg(problem())
            .arg("--kernel")
            .arg(&kernel)
            .args(["--device", "cpu", "--families", "random", "--no-timing"])
            .args(["--model-mode", mode])
            .output()
            .unwrap()
    };
    let o = check("eval");
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let o = check("train");
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("correct only in eval mode"),
        "{}",
        show(&o)
    );
}

#[test]
fn model_mode_other_than_train_or_eval_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&dir.path().join("x"), &["--model-mode", "inference"]);
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--model-mode"));
}

#[test]
fn records_and_runs_without_model_mode_read_as_train() {
    let run = repo_root().join("tests/fixtures/report_runs/one-shot");
    let recs = records(&run);
    assert!(!recs.is_empty());
    for r in &recs {
        assert!(r.get("model_mode").is_none(), "written before the field");
        let rec: kbench_record::EvalRecord = serde_json::from_value(r.clone()).unwrap();
        assert_eq!(rec.model_mode, kbench_record::ModelMode::Train);
        let again = serde_json::to_string(&rec).unwrap();
        assert!(again.contains("\"model_mode\":\"train\""), "{again}");
    }
    let m: kbench::runlog::RunManifest =
        serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(m.model_mode, "train");
}
