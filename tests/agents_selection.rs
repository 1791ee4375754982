//! How an agent's final kernel is chosen: finalists re-timed together, the choice measured
//! afresh, and that fresh figure reported, so that picking the fastest of noisy measurements
//! does not inflate the speedup. The kevin agent end to end against the scripted fake server on
//! loopback, with the real Python worker timing every kernel on CPU.

use crate::agents_common;
use crate::common;

use agents_common::*;
use common::{ensure_python, kbench, shared, show};
use kbench::llm::fake_server::FakeLlm;
use serde_json::{json, Value};

/// Smoke problem 1's own `Model` as `ModelNew`, written differently per `i` (a comment and
/// blank lines): different sources of exactly the reference's speed.
fn same_speed(i: usize) -> String {
    let src = include_str!("../suites/smoke/1_Elementwise_Multiply_Add.py");
    let model = &src[..src.find("rows = ").unwrap()];
    format!(
        "# variant {i}{}\n{}",
        "\n".repeat(i),
        model.replace("Model", "ModelNew")
    )
}

fn speedup(r: &Value) -> f64 {
    r["timing"]["speedup"].as_f64().unwrap()
}

/// Four kernels of equal speed (the reference's own code; the fourth repeats the first's
/// source): three distinct finalists are re-timed as one batch, the fastest there is
/// chosen, and the task reports a fresh measurement of it taken after the choice.
#[test]
fn the_final_kernel_is_chosen_among_retimed_finalists_and_measured_afresh() {
    let _g = shared();
    ensure_python();
    let replies: Vec<Value> = [0, 1, 2, 0]
        .iter()
        .map(|&i| reply(&same_speed(i), ""))
        .collect();
    let server = FakeLlm::start(&json!({"models": {"kevin-m": replies}}), 0, None).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = toml(tmp.path(), &server.base_url(), &["kevin-m"]);
    let out = tmp.path().join("run");
    let o = run_agent(
        &out,
        &cfg,
        "kevin",
        &[
            "--model",
            "kevin-m",
            "--trajectories",
            "4",
            "--trajectory-jobs",
            "1",
            "--max-rounds",
            "1",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let records = common::records(&out);
    let named = |prefix: &str| -> Vec<&Value> {
        records
            .iter()
            .filter(|r| r["candidate"]["name"].as_str().unwrap().starts_with(prefix))
            .collect()
    };
    let written = named("t0");
    assert_eq!(written.len(), 4, "one record per kernel the agent wrote");
    assert!(
        written.iter().all(|r| r["outcome"]["kind"] == "ok"),
        "{written:?}"
    );
    // Finalists: the three distinct sources (t03's repeats t00's), re-timed as one batch.
    let finalists = named("select_");
    let of = |r: &Value| {
        r["candidate"]["selection"]["of"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        finalists
            .iter()
            .map(|r| of(r))
            .collect::<std::collections::BTreeSet<_>>(),
        ["t00_turn0", "t01_turn0", "t02_turn0"]
            .map(String::from)
            .into(),
    );
    for r in &finalists {
        assert_eq!(r["candidate"]["selection"]["role"], "finalist");
        assert_eq!(r["candidate"]["selection"]["finalists"], 3);
        assert_eq!(r["outcome"]["kind"], "ok", "{r}");
    }
    // The choice: the fastest of the selection batch.
    let fastest = finalists
        .iter()
        .max_by(|a, b| speedup(a).total_cmp(&speedup(b)))
        .unwrap();
    let finals = named("final_");
    assert_eq!(finals.len(), 1);
    let fresh = finals[0];
    let sel = &fresh["candidate"]["selection"];
    assert_eq!(sel["role"], "final");
    assert_eq!(of(fresh), of(fastest));
    assert_eq!(fresh["candidate"]["name"], format!("final_{}", of(fastest)));
    assert_eq!(sel["session"].as_array().unwrap().len(), 3, "{sel}");
    // Fresh: measured after every measurement that chose it.
    let latest = finalists
        .iter()
        .map(|r| r["finished_unix_s"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!(fresh["started_unix_s"].as_f64().unwrap() >= latest);
    // What the task reports is that fresh figure, and says how it was chosen.
    let reported = speedup(fresh);
    let t = &jsonl(&out.join("agent_tasks.jsonl"))[0];
    assert_eq!(t["final_kernel"]["name"], fresh["candidate"]["name"]);
    assert_eq!(t["final_kernel"]["speedup"].as_f64().unwrap(), reported);
    let s = &t["selection"];
    assert_eq!(s["distinct_correct"], 3);
    assert_eq!(s["finalists"].as_array().unwrap().len(), 3);
    assert_eq!(s["chosen"].as_str().unwrap(), of(fastest));
    assert_eq!(s["final_speedup"].as_f64().unwrap(), reported);
    // The check a biased pick fails: keeping the fastest measurement reports exactly one of
    // the measurements that chose it (their maximum). Independent timings of the same code
    // never agree to the last bit, so the fresh figure equals none of them.
    // Not asserted: "reported <= the largest figure seen". With kernels of equal speed the
    // fresh figure is one more draw of the same noise and exceeds all seven earlier ones
    // about one run in eight: a flaky test on a loaded 2-core machine.
    let earlier: Vec<f64> = written
        .iter()
        .chain(&finalists)
        .map(|r| speedup(r))
        .collect();
    assert!(
        earlier.iter().all(|e| *e != reported),
        "the reported {reported} is one of the measurements that chose it: {earlier:?}"
    );
    // Kernels of the reference's speed: the fresh figure is of order 1. The bound is wide on
    // purpose: these are microsecond CPU calls, and on a 2-core machine with a compiler
    // running beside the tests one such figure came out at 3.74, and 5.05 with another
    // test's workers beside it (the timing alternates kernel and reference calls, but a
    // burst of load can still land on one side's calls). What this test guards is which
    // measurement is reported, above; this only catches a figure that is not a timing.
    assert!((0.05..20.0).contains(&reported), "{reported}");
    // `kbench report` shows the fresh record as the task's result, not the maximum.
    let report = tmp.path().join("report.json");
    let o = kbench()
        .arg("report")
        .arg(&out)
        .arg("--export-json")
        .arg(&report)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let row = &read_json(&report)["runs"][0]["problems"][0];
    assert_eq!(row["candidate"], fresh["candidate"]["name"], "{row}");
    assert_eq!(row["speedup"].as_f64().unwrap(), reported);
    // The re-measurements are not more kernels: the task has the four the agent wrote.
    assert_eq!(row["candidates"], 4, "{row}");
    // runs/ holds the chosen source (trajectory t wrote variant t).
    let t_chosen: usize = of(fastest)[1..3].parse().unwrap();
    assert_eq!(
        std::fs::read_to_string(out.join("runs/kevin").join(FINAL))
            .unwrap()
            .trim_end(),
        same_speed(t_chosen).trim_end()
    );
}
