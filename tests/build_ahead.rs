//! Builds ahead whatever the build pattern: C++ `load_inline` kernels that build at module
//! level, in `__init__` and at their first call (from a helper that needs the constructed
//! model), a build that fails and a constructor that raises, run with the build pool on and
//! then off, each with a cold build cache. The verdicts are the same; with the pool on the
//! builds overlap (the run takes well under the sum of its build jobs' times); the failing
//! kernels cost only their own verdicts, and the constructor's side effects (a file in the
//! working folder, a module-level list) still happen in the worker that evaluates the kernel.
//! Real worker, real torch, real compiler, sandboxed.
//! Fixtures: `tests/fixtures/build_patterns`.
//!
//! And the order builds ahead let the device go in: a candidate whose build is still under
//! way waits while candidates queued after it run, its problem's reference session kept
//! open for it.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use common::{by_candidate, kbench, repo_root, show, RunBuilder};
use serde_json::Value;

/// The fixtures copied into `dir` with a line naming this run, so that their sources (and
/// so their content-addressed build folders) are new: every run builds cold.
fn fresh_fixtures(dir: &Path, run: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let src = repo_root().join("tests/fixtures/build_patterns");
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "py") {
            let body = std::fs::read_to_string(&p).unwrap();
            let nonce = format!("# build_ahead test run {run} {:?}\n", Instant::now());
            std::fs::write(dir.join(p.file_name().unwrap()), body + &nonce).unwrap();
        }
    }
}

/// One run over the fixtures; its records by candidate, and its wall time in seconds.
fn run(root: &Path, name: &str, build_jobs: &str) -> (BTreeMap<String, Value>, f64, Vec<Value>) {
    let fixtures = root.join(format!("{name}-kernels"));
    fresh_fixtures(&fixtures, name);
    let out = root.join(name);
    let t0 = Instant::now();
    let o = replay_smoke_1_2(&fixtures, &out, build_jobs);
    let wall = t0.elapsed().as_secs_f64();
    // Exit 3: the run finished and some kernels failed (the two made to).
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let journal = std::fs::read_to_string(out.join("logs/builds.jsonl")).unwrap_or_default();
    let builds = journal
        .lines()
        .map(|l| serde_json::from_str(l).expect("a line of builds.jsonl"))
        .collect();
    (by_candidate(&out), wall, builds)
}

/// kbench replaying `kernels` over smoke problems 1 and 2 on the CPU into `out`, random
/// inputs only and no timing, with `build_jobs` build jobs ahead.
fn replay_smoke_1_2(kernels: &Path, out: &Path, build_jobs: &str) -> std::process::Output {
    kbench()
        .args(
            RunBuilder::new()
                .suite("smoke")
                .select("1,2")
                .agent("replay")
                .build(),
        )
        .args(["--device", "cpu", "--families", "random", "--no-timing"])
        .args(["--build-jobs", build_jobs, "--quiet", "--replay-dir"])
        .arg(kernels)
        .arg("--out")
        .arg(out)
        .output()
        .expect("running kbench")
}

fn kind(r: &Value) -> &str {
    r["outcome"]["kind"].as_str().unwrap_or("?")
}

#[test]
fn builds_ahead_overlap_whatever_the_pattern_and_change_no_verdict() {
    // Shared, not alone: the times asserted on are a run's wall against its own build jobs'
    // sum, which a neighbour's load stretches alike, and a kernel's load after its build
    // ahead (under a second) against its build in place (seconds), too far apart for a
    // neighbour to cross; the two runs' walls are only printed.
    let _g = common::shared();
    common::ensure_python();
    let dir = tempfile::tempdir().unwrap();
    // One build job more than CI's cores: three builds at once, the first of them at the
    // highest of the builds' priorities, beside the evaluation.
    let (ahead, ahead_wall, builds) = run(dir.path(), "ahead", "3");
    let (in_place, in_place_wall, none) = run(dir.path(), "in-place", "0");
    assert!(none.is_empty(), "build jobs with the pool off: {none:?}");
    // The journal: a job per kernel, every builder's complete, and two at a time.
    assert_eq!(builds.len(), 6, "{builds:?}");
    for n in ["1_module_level", "1_in_init", "2_method", "2_first_call"] {
        let job = builds
            .iter()
            .find(|b| b["candidate"].as_str().is_some_and(|c| c.contains(n)))
            .unwrap_or_else(|| panic!("no build job for {n}: {builds:?}"));
        assert_eq!(job["complete"], true, "{n}: {job}");
    }
    let span = |b: &Value| {
        (
            b["started_unix_s"].as_f64().unwrap(),
            b["ended_unix_s"].as_f64().unwrap(),
        )
    };
    let overlapped = builds.iter().enumerate().any(|(i, a)| {
        builds[i + 1..].iter().any(|b| {
            let ((s1, e1), (s2, e2)) = (span(a), span(b));
            s1.max(s2) + 5.0 < e1.min(e2)
        })
    });
    assert!(overlapped, "no two builds ran at once: {builds:?}");

    let expect = [
        ("1_module_level", "ok"),
        ("1_in_init", "ok"),
        ("2_method", "ok"),
        ("2_first_call", "ok"),
        ("1_build_fails", "compile_error"),
        ("1_raises_in_init", "runtime_error"),
    ];
    assert_eq!(ahead.len(), expect.len(), "{:?}", ahead.keys());
    for (name, want) in expect {
        assert_eq!(kind(&ahead[name]), want, "{name} ahead: {}", ahead[name]);
        assert_eq!(
            kind(&in_place[name]),
            want,
            "{name} in place: {}",
            in_place[name]
        );
        // Each kernel had a build job with the pool on, none with it off.
        assert!(ahead[name]["build_ahead_s"].as_f64().is_some(), "{name}");
        assert!(in_place[name]["build_ahead_s"].is_null(), "{name}");
    }
    assert!(
        ahead["1_raises_in_init"]["outcome"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("refuses to be constructed")),
        "{}",
        ahead["1_raises_in_init"]["outcome"]
    );
    // The build that failed ahead fails again with the compiler's own words (its evaluating
    // worker replays the build job's record instead of compiling again).
    let compiler_error = |r: &Value| {
        r["outcome"]["message"].as_str().and_then(|m| {
            m.lines()
                .find_map(|l| l.split_once("error:").map(|(_, e)| e.trim().to_string()))
        })
    };
    let failed = compiler_error(&ahead["1_build_fails"]);
    assert!(failed.is_some(), "{}", ahead["1_build_fails"]["outcome"]);
    assert_eq!(failed, compiler_error(&in_place["1_build_fails"]));

    // The four kernels that build: in place, each worker built its own extension, in its
    // load (module level, `__init__`) or in its first correctness case (the first call).
    // Ahead, the builds had run in the pool (two at once, beside the evaluation), so each
    // found its extension built, even the one made at the first call.
    let mut built_in_place = 0.0;
    for n in ["1_module_level", "1_in_init", "2_method", "2_first_call"] {
        let (there, here) = (
            load_or_first_call(&ahead[n], n),
            load_or_first_call(&in_place[n], n),
        );
        built_in_place += here;
        assert!(
            there < 0.5 * here,
            "{n}: {there:.1} s to load (or first call) after its build ahead, {here:.1} s building in place"
        );
    }
    eprintln!(
        "build_ahead: with builds ahead {ahead_wall:.1} s, in place {in_place_wall:.1} s ({built_in_place:.1} s of builds)"
    );
    // The builds overlapped: the run with builds ahead took well under the sum of its build
    // jobs' own times (serialized, it could not take less than that sum). Its wall against
    // the run in place is printed, not asserted: on CI's two cores builds that share them
    // each take about twice as long (the ratio measured 0.64-0.84 there); what the pipeline
    // gains on a GPU host is measured by bench/build_ahead, not by a timed test.
    let job_seconds: f64 = builds.iter().filter_map(|b| b["seconds"].as_f64()).sum();
    eprintln!("build_ahead: build jobs took {job_seconds:.1} s in all");
    assert!(
        ahead_wall < 0.75 * job_seconds,
        "builds ahead: the run took {ahead_wall:.1} s, its build jobs {job_seconds:.1} s in all: they did not overlap"
    );
}

/// The time a kernel's own build took where it was made: its load (module level and
/// `__init__`), or its correctness cases, whose first call builds (`2_first_call`).
fn load_or_first_call(r: &Value, name: &str) -> f64 {
    if name == "2_first_call" {
        r["phases"]["correctness_s"].as_f64().unwrap_or(f64::NAN)
    } else {
        r["load_s"].as_f64().unwrap_or(f64::NAN)
    }
}

/// Smoke problem 1's kernel built at module level, after a pause (in every process that
/// imports it: its build job's and its evaluating worker's), so that its build ahead runs
/// far longer than a kernel without a build takes to evaluate.
const SLOW_BUILD: &str = r#"
import time
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

time.sleep(12)
SOURCE = r"""
torch::Tensor multiply_add(torch::Tensor a, torch::Tensor b, torch::Tensor c) {
    return a * b + c;
}
"""
ext = load_inline(name="kbench_order_slow_build", cpp_sources=SOURCE, functions=["multiply_add"])


class ModelNew(nn.Module):
    def forward(self, a, b, c):
        return ext.multiply_add(a, b, c)
"#;

const PLAIN_MULTIPLY_ADD: &str = r#"
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b, c):
        return a * b + c
"#;

const PLAIN_ELU: &str = r#"
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return F.elu(x, alpha=self.alpha)
"#;

#[test]
fn a_kernel_still_building_lets_the_kernels_queued_after_it_go_first() {
    let _g = common::shared();
    common::ensure_python();
    let dir = tempfile::tempdir().unwrap();
    let kernels = dir.path().join("kernels");
    std::fs::create_dir_all(&kernels).unwrap();
    // Problem 1: a kernel without a build, then one whose build ahead is slow; problem 2: a
    // kernel without a build. In the plan's order 1_b would hold the device (and problem
    // 2) until its build ended.
    let nonce = format!("# build order test {:?}\n", Instant::now());
    for (name, body) in [
        ("1_a_plain.py", PLAIN_MULTIPLY_ADD),
        ("1_b_slow_build.py", SLOW_BUILD),
        ("2_plain.py", PLAIN_ELU),
    ] {
        std::fs::write(kernels.join(name), format!("{body}{nonce}")).unwrap();
    }
    let out = dir.path().join("out");
    let o = replay_smoke_1_2(&kernels, &out, "1");
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let records = by_candidate(&out);
    for n in ["1_a_plain", "1_b_slow_build", "2_plain"] {
        assert_eq!(kind(&records[n]), "ok", "{n}: {}", records[n]);
    }
    let at = |n: &str, k: &str| records[n][k].as_f64().unwrap();
    let journal = std::fs::read_to_string(out.join("logs/builds.jsonl")).unwrap();
    let builds: Vec<Value> = journal
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(builds.len(), 1, "{journal}");
    let built_at = builds[0]["ended_unix_s"].as_f64().unwrap();
    // Problem 2 went while 1_b was still building, after 1_a.
    assert!(
        at("2_plain", "finished_unix_s") < built_at,
        "2_plain ended at {}, after 1_b's build ended at {built_at}: it waited",
        at("2_plain", "finished_unix_s")
    );
    assert!(at("1_a_plain", "finished_unix_s") <= at("2_plain", "started_unix_s"));
    assert!(at("2_plain", "finished_unix_s") <= at("1_b_slow_build", "started_unix_s"));
    // 1_b found its problem's reference session still open: it opened none.
    let opened = |n: &str| {
        records[n]["phases"]["reference_open_s"]
            .as_f64()
            .unwrap_or(0.0)
    };
    assert_eq!(
        opened("1_b_slow_build"),
        0.0,
        "{}",
        records["1_b_slow_build"]
    );
    assert!(opened("2_plain") > 0.0, "{}", records["2_plain"]);
    // And it loaded what its build ahead made.
    assert!(
        records["1_b_slow_build"]["build_ahead_s"].as_f64().unwrap() > 12.0,
        "{}",
        records["1_b_slow_build"]
    );
}
