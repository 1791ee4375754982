//! Triton candidates on the CPU: kbench runs their kernels under Triton's interpreter
//! (`TRITON_INTERPRET=1` in every CPU worker), in the sandbox, with the real worker and the
//! real Triton of kbench's environment. Honest kernels are `ok` (an elementwise one with an
//! `expm1` that survives tiny inputs, an online-softmax reduction, a `tl.dot` matrix product
//! in fp32); wrong ones are mismatches like any other kernel.

use crate::common;

use common::{ensure_python, kbench, repo_root, shared, show};

fn check(problem: &str, kernel: &str, families: &str) -> std::process::Output {
    let root = repo_root();
    kbench()
        .args(["check", "--problem"])
        .arg(root.join("suites/smoke").join(problem))
        .arg("--kernel")
        .arg(root.join("tests/fixtures/triton").join(kernel))
        .args([
            "--device",
            "cpu",
            "--families",
            families,
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
    let cases = [
        // `small` inputs: exp(x) - 1 would lose every digit there.
        ("2_ELU.py", "2_triton_elu.py", "random,small", "ok"),
        ("2_ELU.py", "2_triton_elu_no_alpha.py", "random", "mismatch"),
        (
            "4_Softmax.py",
            "4_triton_online_softmax.py",
            "random,signed",
            "ok",
        ),
        (
            "4_Softmax.py",
            "4_triton_softmax_no_max.py",
            "random",
            "mismatch",
        ),
        (
            "5_Matmul_Irregular_Shapes.py",
            "5_triton_matmul.py",
            "random,signed",
            "ok",
        ),
    ];
    for (problem, kernel, families, outcome) in cases {
        let o = check(problem, kernel, families);
        let code = if outcome == "ok" { 0 } else { 3 };
        assert_eq!(o.status.code(), Some(code), "{kernel}: {}", show(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains(&format!("outcome: {outcome}")),
            "{kernel}: {out}"
        );
    }
}
