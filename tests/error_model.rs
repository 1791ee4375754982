//! The strict profile's fp32 error model end to end: honest reorderings of a long-K matmul
//! pass every family where KernelBench's elementwise rule fails them, and every downgrade
//! of its precision (TF32, fp16 inputs, a bf16 output, one row in fp16) fails; a softmax
//! summing its rows in blocks passes every family, and so does one summing rows of 32,768
//! in order, whose denormal cases are past the 1e-4 floor, while an fp16 output of the
//! same softmax fails. Under timing, an honest in-order matrix-vector sum passes every timed
//! call, some of which only by the absolute arm of the timed calls' rule, and the same sum
//! in bfloat16 after its correctness cases is flagged. Real worker, real torch on the CPU.
//! Fixtures: `tests/fixtures/error_model`, `tests/fixtures/timed_reduction`.

use crate::common;

use std::collections::BTreeMap;

use common::{by_candidate, families, kbench, show, RunBuilder};
use serde_json::Value;

/// A fixed run secret, so the stress cases are the same in every CI run.
const SECRET: &str = "5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed";

fn run(out: &std::path::Path, profile: &str) -> BTreeMap<String, Value> {
    let o = kbench()
        .args(
            RunBuilder::fixture_check("error_model", out, SECRET)
                .args(["--profile", profile])
                .build(),
        )
        .output()
        .expect("running kbench");
    // Exit 3: the run finished and some kernels failed.
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    by_candidate(out)
}

#[test]
fn honest_reorderings_pass_and_downgrades_fail() {
    let _g = common::shared();
    common::ensure_python();
    let dir = tempfile::tempdir().unwrap();
    let strict = run(&dir.path().join("strict"), "strict");
    assert_eq!(strict.len(), 9);
    // A softmax whose row sums are taken in blocks, added last to first, and one summing
    // each row in order: every family.
    for name in ["2_blocked", "3_sequential"] {
        let r = &strict[name];
        assert_eq!(r["outcome"]["kind"], "ok", "{name}: {}", r["outcome"]);
        assert!(families(r).0.is_empty(), "{name}: {:?}", families(r));
    }
    // The sequential one's denormal cases are further from float64 than the 1e-4 floor:
    // the case's gate admitted the roundings of a long sum of alike terms.
    let denormal_beyond_floor = strict["3_sequential"]["cases"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| {
            c["case"]["family"] == "denormal"
                && c["passed"] == true
                && c["rel_l2_vs_f64"].as_f64().is_some_and(|e| e > 1e-4)
        });
    assert!(denormal_beyond_floor, "{}", strict["3_sequential"]["cases"]);
    // The same problem's fp16 output fails the problem's own inputs.
    let f16 = &strict["3_fp16_output"];
    assert_ne!(f16["outcome"]["kind"], "ok", "{}", f16["outcome"]);
    assert!(
        families(f16).0.iter().any(|f| f == "random"),
        "{:?}",
        families(f16)
    );
    for name in ["1_sequential", "1_split_k"] {
        let r = &strict[name];
        assert_eq!(r["outcome"]["kind"], "ok", "{name}: {}", r["outcome"]);
        let (failed, na) = families(r);
        assert!(failed.is_empty(), "{name}: {failed:?}");
        // The families that cancel apply: the fp32 reference is off from float64 only
        // where a dot product cancels, which the error model expects.
        for f in ["signed", "cancellation"] {
            assert!(
                !na.iter().any(|x| x == f),
                "{name}: {f} not applicable: {na:?}"
            );
        }
    }
    // Some case passed with elements outside KernelBench's tolerance (tol_needed > 1e-4):
    // the error model accepted them.
    let beyond_kb = strict["1_sequential"]["cases"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["passed"] == true && c["tol_needed"].as_f64().is_some_and(|t| t > 1e-4));
    assert!(beyond_kb, "{}", strict["1_sequential"]["cases"]);
    for name in [
        "1_tf32_inputs",
        "1_fp16_inputs",
        "1_partial_fp16",
        "1_bf16_output",
    ] {
        let r = &strict[name];
        assert_ne!(r["outcome"]["kind"], "ok", "{name}: {}", r["outcome"]);
    }
    // The input downgrades pass KernelBench's random cases (all positive inputs average
    // their rounding out) and fail the signed family.
    for name in ["1_tf32_inputs", "1_fp16_inputs", "1_partial_fp16"] {
        let (failed, _) = families(&strict[name]);
        assert!(failed.iter().any(|f| f == "signed"), "{name}: {failed:?}");
        assert!(!failed.iter().any(|f| f == "random"), "{name}: {failed:?}");
    }

    // KernelBench's elementwise rule fails the honest sequential kernel.
    let kb = run(&dir.path().join("kb"), "kernelbench");
    let (failed, _) = families(&kb["1_sequential"]);
    assert_eq!(kb["1_sequential"]["outcome"]["kind"], "mismatch");
    assert!(!failed.is_empty());
}

/// A run secret under which timed calls of `1_sequential` draw outputs nearer zero than its
/// cases did (3.1e-3 needed relative on a timed call, 4.4 times the 7.1e-4 the relative arm
/// allows, on this repository's CI machine).
const TIMED_SECRET: &str = "0000000000000000000000000000000000000000000000000000000000000001";

/// An honest reduction's timed calls, with outputs near zero that its cases lacked: it
/// passes, the record says which calls only the absolute arm admitted (the relative rule
/// alone flagged them: `judge::timed`), and the same sum in bfloat16 once its correctness
/// cases are done is flagged beyond both arms.
#[test]
fn an_honest_reduction_passes_its_timed_calls_and_a_timed_downgrade_does_not() {
    let _g = common::shared();
    common::ensure_python();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = kbench()
        .args(RunBuilder::fixture_run("timed_reduction", &out, TIMED_SECRET).build())
        .output()
        .expect("running kbench");
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let runs = by_candidate(&out);
    let honest = &runs["1_sequential"];
    assert_eq!(honest["outcome"]["kind"], "ok", "{}", honest["outcome"]);
    assert!(honest["timing"]["speedup"].as_f64().is_some(), "{honest}");
    let notes = honest["notes"].to_string();
    assert!(
        notes.contains("passed only within 4 times the largest absolute error"),
        "{notes}"
    );
    let cheat = &runs["1_bf16_when_timed"];
    assert_eq!(cheat["outcome"]["flag"], "timed-output-mismatch", "{cheat}");
    let detail = cheat["outcome"]["detail"].as_str().unwrap();
    assert!(detail.contains("beyond both"), "{detail}");
}
