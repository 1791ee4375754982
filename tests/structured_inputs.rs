//! What a problem's inputs promise holds under every case family: kernels that rely on
//! triangular, symmetric or ±1 inputs, as KernelBench's level-1 problems 13, 14, 15 and 100
//! make them, pass every family, and a kernel wrong on negative values still fails the
//! signed families with the triangles kept. Real worker, real torch on the CPU. Fixtures:
//! `tests/fixtures/structured_inputs`.

use crate::common;

use common::{by_candidate, families, kbench, show, RunBuilder};

/// A fixed run secret, so the stress cases are the same in every CI run.
const SECRET: &str = "57a7057a7057a7057a7057a7057a7057a7057a7057a7057a7057a7057a7057a7";

#[test]
fn kernels_that_rely_on_what_get_inputs_promises_pass_every_family() {
    let _g = common::shared();
    common::ensure_python();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = kbench()
        .args(RunBuilder::fixture_check("structured_inputs", &out, SECRET).build())
        .output()
        .expect("running kbench");
    // Exit 3: the run finished and a kernel failed (the one wrong on negatives).
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let records = by_candidate(&out);
    assert_eq!(records.len(), 4, "{:?}", records.keys());
    for (name, applying) in [
        (
            "1_skips_lower_halves",
            &["signed", "nan-inf", "large", "small"][..],
        ),
        ("2_transposes_b", &["signed", "nan-inf", "large"][..]),
        // the targets keep their values: the predictions still take every family
        ("3_branches_on_sign", &["signed", "large", "small"][..]),
    ] {
        let r = &records[name];
        assert_eq!(r["outcome"]["kind"], "ok", "{name}: {}", r["outcome"]);
        let (failed, na) = families(r);
        assert!(failed.is_empty(), "{name}: {failed:?}");
        for f in applying {
            assert!(
                !na.iter().any(|x| x == f),
                "{name}: {f} not applicable: {na:?}"
            );
        }
    }
    let wrong = &records["1_wrong_on_negatives"];
    assert_eq!(wrong["outcome"]["kind"], "mismatch", "{}", wrong["outcome"]);
    let (failed, _) = families(wrong);
    assert!(failed.iter().any(|f| f == "signed"), "{failed:?}");
    assert!(!failed.iter().any(|f| f == "random"), "{failed:?}");
}
