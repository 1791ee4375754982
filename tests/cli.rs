//! The binary's command line: listing suites and rejecting bad input with clear errors. These
//! need no Python.

mod common;

use common::{kbench, kernelbench_dir, show};

#[test]
fn lists_all_250_kernelbench_problems_with_level_id_and_name() {
    let Some(kb) = kernelbench_dir() else {
        return;
    };
    let out = kbench()
        .args(["list", "--kernelbench"])
        .arg(&kb)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 250);
    for level in ["1", "2", "3"] {
        let n = rows.iter().filter(|r| r[0] == level).count();
        assert_eq!(n, if level == "3" { 50 } else { 100 }, "level {level}");
    }
    for expected in [
        ["1", "1", "Square_matrix_multiplication_"],
        ["1", "19", "ReLU"],
        ["2", "40", "Matmul_Scaling_ResidualAdd"],
        ["3", "35", "LSTM"],
    ] {
        assert!(
            rows.iter().any(|r| r[..] == expected[..]),
            "missing {expected:?}"
        );
    }
    // --levels narrows, --select picks.
    let out = kbench()
        .args([
            "list",
            "--levels",
            "3",
            "--select",
            "3/1-3",
            "--kernelbench",
        ])
        .arg(&kb)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 3);
}

#[test]
fn lists_the_smoke_suite() {
    let out = kbench()
        .args(["list", "--suite", "smoke"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert!(String::from_utf8(out.stdout).unwrap().lines().count() >= 10);
}

#[test]
fn bad_input_gets_a_clear_error_naming_the_thing() {
    let dir = tempfile::tempdir().unwrap();
    // A problem file without class Model.
    let bad = dir.path().join("7_Broken.py");
    std::fs::write(&bad, "import torch\ndef get_inputs():\n    return []\n").unwrap();
    let out = kbench()
        .args(["list", "--problem"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("7_Broken.py") && err.contains("Model"),
        "{err}"
    );

    // A KernelBench folder that is not one.
    let out = kbench()
        .args(["list", "--kernelbench"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&dir.path().display().to_string()));

    // Replay without a folder.
    let out = kbench()
        .args([
            "run", "--suite", "smoke", "--agent", "replay", "--device", "cpu", "--out",
        ])
        .arg(dir.path().join("run"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--replay-dir"));

    // An interpreter that cannot import torch is named, with the fix.
    let out = kbench()
        .args([
            "run",
            "--suite",
            "smoke",
            "--device",
            "cpu",
            "--python",
            "/bin/false",
            "--out",
        ])
        .arg(dir.path().join("run2"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/bin/false") && err.contains("pip install"),
        "{err}"
    );

    // Usage errors are clap's exit code 2.
    let out = kbench().args(["run", "--bogus"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn cuda_without_a_gpu_says_why() {
    if kbench::gpu::inventory().count() > 0 {
        return; // a GPU machine: covered by the GPU runs
    }
    let dir = tempfile::tempdir().unwrap();
    let out = kbench()
        .args(["run", "--suite", "smoke", "--device", "cuda", "--out"])
        .arg(dir.path().join("run"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--device cpu"));
}

#[test]
fn gpus_lists_devices_or_says_plainly_why_there_are_none() {
    let out = kbench().arg("gpus").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    if kbench::gpu::inventory().count() == 0 {
        assert!(text.starts_with("no GPU: "), "{text}");
        assert!(text.contains("--device cpu"), "{text}");
        let out = kbench().args(["gpus", "--json"]).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["gpus"], serde_json::json!([]));
    } else {
        assert!(text.contains("SMs") && text.contains("peak BW"), "{text}");
    }
}

/// The throughput benchmark's summarizer (run on the GPU machine, Python's standard library
/// only) checks its own figures on synthetic runs: phases, pauses, agreement, scaling.
#[test]
fn throughput_summarizer_passes_its_self_test() {
    let out = std::process::Command::new("python3")
        .arg(common::repo_root().join("bench/throughput/summarize.py"))
        .arg("--self-test")
        .output()
        .expect("python3 on PATH (kbench setup needs it too)");
    assert!(out.status.success(), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("self-test: ok"));
}

/// The side-by-side benchmark (KernelBench's eval against kbench, issue 24; its GPU part runs
/// on the GPU machine) checks, with Python's standard library alone, its summary's seconds
/// and ratios on a fixture, its selection syntax and `run.sh --dry-run`'s commands.
#[test]
fn side_by_side_summarizer_passes_its_tests() {
    let out = std::process::Command::new("python3")
        .arg(common::repo_root().join("bench/side_by_side/test_side_by_side.py"))
        .output()
        .expect("python3 on PATH (kbench setup needs it too)");
    assert!(out.status.success(), "{}", show(&out));
    // unittest reports on stderr: "Ran N tests ... OK".
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Ran ") && err.trim_end().ends_with("OK"),
        "{err}"
    );
}
