//! The kevin agent end to end (best-of-T and average-of-T, the run's time budget, and the
//! evaluation service under concurrent submissions): the built binary against the scripted
//! fake server on loopback (real HTTP), with the real Python worker evaluating every kernel
//! on CPU. Smoke problems 1 and 2 with PyTorch-only kernels keep each evaluation to a few
//! seconds.

use crate::agents_common;
use crate::common;

use agents_common::*;
use approx::assert_abs_diff_eq;
use common::{ensure_python, kbench, shared, show, RunBuilder};
use kbench::llm::fake_server::FakeLlm;
use serde_json::{json, Value};

/// Kevin with T=2, K=2: turn 2 sees turn 1's kernel, summary and feedback; best-of-T and
/// average-of-T follow the paper's definitions.
#[test]
fn kevin_reports_best_and_average_of_trajectories() {
    let _g = shared();
    ensure_python();
    let server = FakeLlm::start(
        &json!({"models": {"kevin-m": [
            reply(WRONG, ""),                      // t0 turn 1: incorrect
            reply(FAST, ""),                       // t0 turn 2: correct
            reply(BROKEN, ""),                     // t1 turn 1: compile error
            {"content": "I give up", "usage": {"prompt_tokens": 10, "completion_tokens": 5}}, // t1 turn 2: parse error
        ]}}),
        0,
        None,
    )
    .unwrap();
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
            "2",
            // One at a time: the fake server answers a model's calls in arrival order.
            "--trajectory-jobs",
            "1",
            "--max-rounds",
            "2",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let p0 = saved_prompt(&out, "level1_problem1_t00", 0);
    assert!(
        p0.contains("elementwise_add_kernel"),
        "turn 1 shows the example"
    );
    let p1 = saved_prompt(&out, "level1_problem1_t00", 1);
    assert!(
        !p1.contains("elementwise_add_kernel"),
        "the example is only in turn 1"
    );
    assert!(
        p1.contains("## Attempt 1") && p1.contains("return a * b\n"),
        "{p1}"
    );
    assert!(p1.contains("I fused the ops."), "turn 1's summary: {p1}");
    assert!(
        p1.contains("Feedback: Incorrect"),
        "turn 1's feedback: {p1}"
    );
    let q1 = saved_prompt(&out, "level1_problem1_t01", 1);
    assert!(
        q1.contains("Feedback: Compilation error") && q1.contains("SyntaxError"),
        "{q1}"
    );
    let t = &jsonl(&out.join("agent_tasks.jsonl"))[0];
    let x = &t["extra"];
    let s0 = x["trajectory_speedups"][0].as_f64().unwrap();
    assert!(s0 > 0.0);
    assert_eq!(x["trajectory_speedups"][1].as_f64().unwrap(), 0.0);
    assert_eq!(x["best_of_t_speedup"].as_f64().unwrap(), s0);
    assert_abs_diff_eq!(
        x["avg_of_t_speedup"].as_f64().unwrap(),
        s0 / 2.0,
        epsilon = 1e-12
    );
    assert_eq!(x["best_of_t_correct"], true);
    assert_eq!(x["avg_of_t_correct"].as_f64().unwrap(), 0.5);
    assert_eq!(t["failed_rounds"], 1);
    // KernelBench's eval_results.json: the task's final kernel (of trajectory 0) as sample 0.
    let kb = read_json(&out.join("eval_results.json"));
    let p1 = kb["1"].as_array().unwrap();
    assert_eq!(p1.len(), 1, "{kb}");
    assert_eq!(
        (&p1[0]["sample_id"], &p1[0]["correctness"]),
        (&json!(0), &json!(true))
    );
    assert_eq!(
        p1[0]["metadata"]["kbench_candidate"],
        t["final_kernel"]["name"]
    );
    // `kbench report --table kevin` reads each trajectory as a sample: the same best/avg.
    let o = kbench()
        .args(["report", "--table", "kevin"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[1..4], ["2", "100.0%", "50.0%"], "{table}");
    // Tokens and dollars: three replies of 1000 + 200 tokens and one of 10 + 5.
    assert_eq!(t["spend"]["calls"], 4);
    assert_eq!(t["spend"]["input_tokens"], 3010);
    assert_eq!(t["spend"]["output_tokens"], 605);
    let cost = t["spend"]["cost_usd"].as_f64().unwrap();
    assert_abs_diff_eq!(cost, (3010.0 * 2.0 + 605.0 * 8.0) / 1e6, epsilon = 1e-12);
    // The records carry them: each trajectory's kernels their own trajectory's calls, and
    // the final measurement the call after t01's last kernel (its parse error); together
    // the task's whole spend, which `kbench report` gives per task.
    let records = common::records(&out);
    let tokens = |name: &str| {
        let r = records
            .iter()
            .find(|r| r["candidate"]["name"] == name)
            .unwrap_or_else(|| panic!("no record {name}"));
        r["cost"]["tokens"].as_u64()
    };
    assert_eq!(tokens("t00_turn0"), Some(1200));
    assert_eq!(tokens("t00_turn1"), Some(1200));
    assert_eq!(tokens("t01_turn0"), Some(1200));
    let final_name = format!("final_{}", t["selection"]["chosen"].as_str().unwrap());
    assert_eq!(tokens(&final_name), Some(15));
    let usd: f64 = records
        .iter()
        .filter_map(|r| r["cost"]["usd"].as_f64())
        .sum();
    assert_abs_diff_eq!(usd, cost, epsilon = 1e-12);
    assert_eq!(
        std::fs::read_to_string(out.join("runs/kevin").join(FINAL))
            .unwrap()
            .trim_end(),
        FAST.trim_end()
    );
}

/// The run's time budget: with --max-minutes 0 no model call is made at all.
#[test]
fn run_time_budget_stops_before_any_call() {
    let server = FakeLlm::start(&json!({"models": {"m": [reply(FAST, "")]}}), 0, None).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = toml(tmp.path(), &server.base_url(), &["m"]);
    let out = tmp.path().join("run");
    let o = run_agent(
        &out,
        &cfg,
        "kevin",
        &["--model", "m", "--trajectories", "2", "--max-minutes", "0"],
    );
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    assert!(server.received().is_empty());
    let t = &jsonl(&out.join("agent_tasks.jsonl"))[0];
    assert!(
        t["stopped"].as_str().unwrap().contains("--max-minutes 0"),
        "{t}"
    );
    assert_eq!(t["extra"]["avg_of_t_speedup"].as_f64().unwrap(), 0.0);
}

/// The evaluation service: three kevin trajectories submit their kernels at once, from three
/// threads; each kernel gets its own record (its own source, the verdict that source earns),
/// and all six (and the re-timing that chooses the final kernel) share one reference worker,
/// opened for the first and kept for the rest.
#[test]
fn concurrent_submissions_share_the_problems_reference_worker() {
    let _g = shared();
    ensure_python();
    const WRONG2: &str = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b, c):\n        return a + b + c\n";
    const FAST2: &str = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b, c):\n        return a * b + c\n";
    let kernels = [WRONG, FAST, BROKEN, FAST2, WRONG2, SLOW];
    let server = FakeLlm::start(
        &json!({"models": {"kevin-m": kernels.iter().map(|k| reply(k, "")).collect::<Vec<_>>()}}),
        0,
        None,
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = toml(tmp.path(), &server.base_url(), &["kevin-m"]);
    let out = tmp.path().join("run");
    let t0 = std::time::Instant::now();
    let o = run_agent(
        &out,
        &cfg,
        "kevin",
        &[
            "--model",
            "kevin-m",
            "--trajectories",
            "3",
            "--trajectory-jobs",
            "3",
            "--max-rounds",
            "2",
        ],
    );
    eprintln!("6 kernels in {:.1} s wall", t0.elapsed().as_secs_f64());
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let all = jsonl(&out.join("records.jsonl"));
    // The three correct kernels are then re-timed as one batch and the fastest measured afresh:
    // the task's final kernel (so that picking the fastest of noisy timings does not inflate
    // its speedup).
    let (records, chosen): (Vec<_>, Vec<_>) = all
        .iter()
        .partition(|r| r["candidate"]["selection"].is_null());
    assert_eq!(records.len(), 6, "one record per kernel");
    let roles: Vec<&str> = chosen
        .iter()
        .map(|r| r["candidate"]["selection"]["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["finalist", "finalist", "finalist", "final"]);
    let kdir = out.join("agent/level1_problem1/kernels");
    let mut names = std::collections::HashSet::new();
    for r in &records {
        let name = r["candidate"]["name"].as_str().unwrap();
        assert!(names.insert(name.to_string()), "{name} recorded twice");
        let src = std::fs::read_to_string(kdir.join(format!("{name}.py"))).unwrap();
        assert_eq!(
            r["candidate"]["sha256"].as_str().unwrap(),
            kbench_suites::sha256_hex(src.as_bytes()),
            "{name}: the record is of the kernel submitted under that name"
        );
        let t: u64 = name[1..3].parse().unwrap();
        assert_eq!(r["candidate"]["sample"], t, "{name}");
        let kind = r["outcome"]["kind"].as_str().unwrap();
        let expected = match src.trim_end() {
            s if s == WRONG.trim_end() || s == WRONG2.trim_end() => "mismatch",
            s if s == BROKEN.trim_end() => "compile_error",
            _ => "ok",
        };
        assert_eq!(kind, expected, "{name}: {}", r["outcome"]);
    }
    let summary = read_json(&out.join("agent_summary.json"));
    let ev = &summary["evaluations"];
    assert_eq!(ev["evaluated"], 10, "{ev}");
    assert_eq!(ev["submitted"], 10, "{ev}");
    assert_eq!(
        ev["reference_sessions_opened"], 1,
        "one reference worker for the problem's six kernels and their re-timing: {ev}"
    );
    // Five more kernels, the finalists' batch and the fresh measurement each found it open.
    assert_eq!(ev["reference_sessions_reused"], 7, "{ev}");
    eprintln!(
        "{:.2} s evaluating per kernel",
        ev["evaluation_s"].as_f64().unwrap() / 10.0
    );
}

/// Two tasks at once (`--jobs 2`), problems 1 and 2: each kernel is judged against its own
/// problem's reference (one session each), whichever order the submissions arrive in.
#[test]
fn concurrent_tasks_of_two_problems_each_use_their_own_reference() {
    let _g = shared();
    ensure_python();
    // Right for both problems (a * b + c, and ELU with alpha 1.3) / wrong for both.
    const GOOD: &str = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\nclass ModelNew(nn.Module):\n    def __init__(self, *args):\n        super().__init__()\n\n    def forward(self, *xs):\n        if len(xs) == 3:\n            return torch.addcmul(xs[2], xs[0], xs[1])\n        return F.elu(xs[0], alpha=1.3)\n";
    const BAD: &str = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def __init__(self, *args):\n        super().__init__()\n\n    def forward(self, *xs):\n        return xs[0] * 2.0\n";
    let replies: Vec<Value> = (0..4)
        .map(|i| {
            reply(
                &format!("{}# {i}\n", if i % 2 == 0 { GOOD } else { BAD }),
                "",
            )
        })
        .collect();
    let server = FakeLlm::start(&json!({"models": {"kevin-m": replies}}), 0, None).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = toml(tmp.path(), &server.base_url(), &["kevin-m"]);
    let out = tmp.path().join("run");
    let o = kbench()
        .args(
            RunBuilder::new()
                .suite("smoke")
                .select("1,2")
                .device("cpu")
                .families("random")
                .args(["--trials", "2"])
                .no_timing()
                .agent("kevin")
                .args(["--model", "kevin-m"])
                .args(["--trajectories", "1"])
                .args(["--max-rounds", "2"])
                .args(["--jobs", "2"])
                .arg("--llm-config")
                .arg(&cfg)
                .out(&out)
                .build(),
        )
        .env("KBENCH_LLM_BACKOFF_S", "0.1")
        .output()
        .unwrap();
    assert!(matches!(o.status.code(), Some(0 | 3)), "{}", show(&o));
    let records = jsonl(&out.join("records.jsonl"));
    assert_eq!(records.len(), 4, "{}", show(&o));
    for r in &records {
        let p = r["problem"]["id"].as_u64().unwrap();
        let name = r["candidate"]["name"].as_str().unwrap();
        let src =
            std::fs::read_to_string(out.join(format!("agent/level1_problem{p}/kernels/{name}.py")))
                .unwrap();
        assert_eq!(
            r["candidate"]["sha256"].as_str().unwrap(),
            kbench_suites::sha256_hex(src.as_bytes())
        );
        let expected = if src.contains("addcmul") {
            "ok"
        } else {
            "mismatch"
        };
        assert_eq!(
            r["outcome"]["kind"], expected,
            "problem {p} {name}: {}",
            r["outcome"]
        );
    }
    let ev = &read_json(&out.join("agent_summary.json"))["evaluations"];
    assert_eq!(ev["evaluated"], 4, "{ev}");
    assert_eq!(ev["reference_sessions_opened"], 2, "one per problem: {ev}");
    assert_eq!(ev["reference_sessions_reused"], 2, "{ev}");
}
