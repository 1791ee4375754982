//! Triton candidates on the CPU: kbench runs their kernels under Triton's interpreter
//! (`TRITON_INTERPRET=1` in every CPU worker), in the sandbox, with the real worker and the
//! real Triton of kbench's environment. An honest kernel is `ok`; one that drops a term is a
//! mismatch, like any other kernel.

use crate::common;

use common::{ensure_python, kbench, repo_root, shared, show};

fn check(kernel: &str) -> std::process::Output {
    let root = repo_root();
    kbench()
        .args(["check", "--problem"])
        .arg(root.join("suites/smoke/2_ELU.py"))
        .arg("--kernel")
        .arg(root.join("tests/fixtures/triton").join(kernel))
        .args([
            "--device",
            "cpu",
            "--families",
            "random",
            "--trials",
            "2",
            "--no-timing",
        ])
        .output()
        .unwrap()
}

#[test]
fn triton_kernels_run_under_the_interpreter_on_the_cpu() {
    let _guard = shared();
    ensure_python();
    let o = check("2_triton_elu.py");
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("outcome: ok"), "{out}");
    let o = check("2_triton_elu_no_alpha.py");
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("outcome: mismatch"), "{out}");
}
