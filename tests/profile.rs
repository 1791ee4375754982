//! `kbench profile` end to end on CPU, with the real worker and torch. There is no GPU (and no
//! ncu) here, so this is the fallback path: the PyTorch profiler's CPU operator times, a plain
//! note saying so, and the problem's cost counted on the reference. The ncu path is covered by
//! the CSV fixtures (harness/src/profile.rs) and tests/gpu/profiling.sh ncu.

use crate::common;

use common::{ensure_python, kbench, repo_root, shared, show};
use serde_json::Value;

fn profile(problem: &str, kernel: &str, extra: &[&str]) -> std::process::Output {
    let root = repo_root();
    let mut c = kbench();
    c.arg("profile")
        .arg("--problem")
        .arg(root.join(problem))
        .arg("--kernel")
        .arg(root.join(kernel))
        .args(["--device", "cpu", "--calls", "3", "--warmup", "1"])
        .args(extra);
    c.output().expect("running kbench profile")
}

#[test]
fn profile_falls_back_to_the_pytorch_profiler_on_cpu_and_counts_the_problem() {
    ensure_python();
    let _g = shared();
    let out = profile(
        "tests/fixtures/profile/1_Small_matmul.py",
        "tests/fixtures/profile/1_blocked_matmul.py",
        &["--json"],
    );
    assert!(out.status.success(), "{}", show(&out));
    let r: Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    assert_eq!(r["source"], "torch-profiler", "{r:#}");
    let why = r["fallback_reason"].as_str().unwrap();
    assert!(why.contains("CPU") && why.contains("ncu"), "{why}");
    assert_eq!(r["ncu"], Value::Null);
    assert_eq!(r["peaks"], Value::Null);
    assert_eq!(r["speed_of_light"], Value::Null);
    assert_eq!(r["calls"], 3);
    // FlopCounterMode on the reference: 2·M·N·K; bytes: A, B and C once each, fp32.
    let (m, k, n) = (64.0, 32.0, 48.0);
    assert_eq!(r["cost"]["flops"].as_f64(), Some(2.0 * m * n * k));
    assert_eq!(
        r["cost"]["input_bytes"].as_f64(),
        Some(4.0 * (m * k + k * n))
    );
    assert_eq!(r["cost"]["output_bytes"].as_f64(), Some(4.0 * m * n));
    assert_eq!(
        r["cost"]["flops_by_op"]["aten.mm"].as_f64(),
        Some(2.0 * m * n * k)
    );
    // The candidate's own operators, 2 mm per call, as CPU ops.
    let events = r["torch_events"].as_array().unwrap();
    let mm = events
        .iter()
        .find(|e| e["name"] == "aten::mm")
        .unwrap_or_else(|| panic!("no aten::mm in {events:#?}"));
    assert_eq!(mm["kind"], "cpu_op");
    assert_eq!(mm["count"], 6);
    assert!(
        events.iter().any(|e| e["name"] == "aten::add"),
        "{events:#?}"
    );
    assert!(r["wall_s_per_call"].as_f64().unwrap() > 0.0);

    // The table says plainly what it is.
    let out = profile(
        "tests/fixtures/stress/problems/level1/1_ReLU.py",
        "tests/fixtures/stress/kernels/level1/1_honest.py",
        &[],
    );
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("NOTE: not profiled with Nsight Compute: the device is the CPU"),
        "{text}"
    );
    assert!(text.contains("CPU times of aten operators"), "{text}");
    assert!(text.contains("aten::clamp"), "{text}");
    // ReLU of a 64x1024 fp32 tensor: 262,144 bytes in, the same out, no counted FLOPs.
    assert!(
        text.contains("0 FLOP (fp32), 0.524 MB moved (inputs 0.262, weights 0.000, outputs 0.262)"),
        "{text}"
    );
    assert!(text.contains("no speed of light"), "{text}");
}

#[test]
fn profile_errors_name_the_file_and_the_fix() {
    let out = profile(
        "tests/fixtures/profile/1_Small_matmul.py",
        "tests/fixtures/profile/no_such_kernel.py",
        &[],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no_such_kernel.py not found") && err.contains("ModelNew"),
        "{err}"
    );
    // A kernel that raises on load: the worker's error, naming the kernel file.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad_kernel.py");
    std::fs::write(&bad, "raise RuntimeError('broken kernel')\n").unwrap();
    ensure_python();
    let _g = shared();
    let out = kbench()
        .arg("profile")
        .arg("--problem")
        .arg(repo_root().join("tests/fixtures/profile/1_Small_matmul.py"))
        .arg("--kernel")
        .arg(&bad)
        .args(["--device", "cpu"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("compile_error")
            && err.contains("bad_kernel.py")
            && err.contains("broken kernel"),
        "{err}"
    );
}
