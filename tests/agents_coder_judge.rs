//! The coder-judge agent end to end (CudaForge's loop, malformed replies and `--llm-replay`,
//! `--resume`, budgets and a bad key): the built binary against the scripted fake server on
//! loopback (real HTTP), with the real Python worker evaluating every kernel on CPU. Smoke
//! problem 1 (a * b + c) with PyTorch-only kernels keeps each evaluation to a few seconds.

use crate::agents_common;
use crate::common;

use approx::assert_abs_diff_eq;
use std::path::PathBuf;

use agents_common::*;
use common::{ensure_python, kbench, shared, show, RunBuilder};
use kbench::llm::fake_server::FakeLlm;
use serde_json::json;

/// CudaForge's loop: C++ compile error → Judge correction (with the compiler's error) → wrong kernel →
/// correction → correct slow kernel → optimisation (with timing) → correct fast kernel.
#[test]
fn coder_judge_corrects_then_optimises_and_keeps_the_fastest_correct_kernel() {
    let _g = shared();
    ensure_python();
    let issue = json!({"critical_issue": "syntax error in forward", "why_it_matters": "module cannot load", "minimal_fix_hint": "complete the expression"});
    let server = FakeLlm::start(
        &json!({"models": {
            "coder-m": [reply(BAD_CPP, ""), reply(WRONG, ""), reply(SLOW, ""), reply(FAST, "")],
            "judge-m": [judge(issue.clone()),
                        judge(json!({"critical_issue": "c is never added", "why_it_matters": "wrong values", "minimal_fix_hint": "add c"})),
                        judge(json!({"bottleneck": "redundant loop", "optimisation method": "fuse", "modification plan": "one addcmul"}))]
        }}),
        0,
        None,
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = toml(tmp.path(), &server.base_url(), &["coder-m", "judge-m"]);
    let out = tmp.path().join("run");
    let o = run_agent(
        &out,
        &cfg,
        "coder-judge",
        &[
            "--coder",
            "coder-m",
            "--judge",
            "judge-m",
            "--max-rounds",
            "4",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(
        server.remaining().values().sum::<usize>(),
        0,
        "every scripted reply used"
    );
    let stream = "level1_problem1";
    // Calls: coder r0, judge r1, coder r1, judge r2, coder r2, judge r3, coder r3.
    let corr = saved_prompt(&out, stream, 1);
    assert!(
        corr.starts_with("ERROR_LOG:") && corr.contains("was not declared in this scope"),
        "{corr}"
    );
    assert!(corr.contains("PyTorch reference (ground truth)") && corr.contains("return a * b + c"));
    let repair = saved_prompt(&out, stream, 2);
    assert!(
        repair.contains("syntax error in forward") && repair.contains("undeclared_thing"),
        "{repair}"
    );
    let corr2 = saved_prompt(&out, stream, 3);
    assert!(
        corr2.contains("mismatch") || corr2.contains("Mismatch") || corr2.contains("tolerance"),
        "{corr2}"
    );
    let opt = saved_prompt(&out, stream, 5);
    assert!(
        opt.contains("# Target GPU") && opt.contains("speedup") && opt.contains("range(40)"),
        "{opt}"
    );
    let opt_coder = saved_prompt(&out, stream, 6);
    assert!(
        opt_coder.contains("one addcmul") && opt_coder.contains("[ARCHITECTURE FILE]"),
        "{opt_coder}"
    );
    // Rounds and kernels.
    let rounds = jsonl(&out.join("agent/level1_problem1/rounds.jsonl"));
    let kinds: Vec<&str> = rounds.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["seed", "correction", "correction", "optimisation"]);
    let correct: Vec<bool> = rounds
        .iter()
        .map(|r| r["kernel"]["correct"].as_bool().unwrap())
        .collect();
    assert_eq!(correct, [false, false, true, true]);
    let tasks = jsonl(&out.join("agent_tasks.jsonl"));
    let t = &tasks[0];
    let speed = |i: usize| rounds[i]["kernel"]["speedup"].as_f64().unwrap();
    assert!(
        speed(3) > speed(2),
        "the fused kernel should be faster: {} vs {}",
        speed(3),
        speed(2)
    );
    // The two correct kernels were re-timed together; the fused one won and was measured
    // afresh, and that measurement is the task's result.
    assert_eq!(t["selection"]["chosen"], "round03");
    assert_eq!(t["selection"]["finalists"].as_array().unwrap().len(), 2);
    assert_eq!(t["final_kernel"]["name"], "final_round03");
    // The final kernel in KernelBench's runs/ layout, and every kernel kept.
    assert_eq!(
        std::fs::read_to_string(out.join("runs/coder-judge").join(FINAL))
            .unwrap()
            .trim_end(),
        FAST.trim_end()
    );
    for r in 0..4 {
        assert!(out
            .join(format!("agent/level1_problem1/kernels/round{r:02}.py"))
            .is_file());
    }
    let names: Vec<String> = common::records(&out)
        .iter()
        .map(|r| r["candidate"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "round00",
            "round01",
            "round02",
            "round03",
            "select_round03",
            "select_round02",
            "final_round03"
        ],
        "one engine record per kernel, then the finalists' re-timing and the fresh one"
    );
    // Tokens and dollars: 7 calls of 1000 in + 200 out at $2 / $8 per million.
    assert_eq!(t["spend"]["calls"], 7);
    assert_eq!(t["spend"]["input_tokens"], 7000);
    assert_eq!(t["spend"]["output_tokens"], 1400);
    let cost = t["spend"]["cost_usd"].as_f64().unwrap();
    assert_abs_diff_eq!(cost, 7.0 * 0.0036, epsilon = 1e-9);
    assert!(t["wall_s"].as_f64().unwrap() > 0.0);
    // Each kernel's record carries the calls that wrote it: round00 the first coder call,
    // each later round a judge call and a coder call; re-measurements cost no call.
    let records = common::records(&out);
    let calls: Vec<u64> = records
        .iter()
        .map(|r| r["cost"]["calls"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(calls, [1, 2, 2, 2, 0, 0, 0], "cost.calls per record");
    for r in &records[..4] {
        let c = &r["cost"];
        let n = c["calls"].as_f64().unwrap();
        assert_eq!(c["prompt_tokens"].as_f64().unwrap(), 1000.0 * n);
        assert_eq!(c["tokens"].as_f64().unwrap(), 1200.0 * n);
        assert!(
            (c["usd"].as_f64().unwrap() - 0.0036 * n).abs() < 1e-12,
            "{c}"
        );
        assert!(c["wall_s"].as_f64().unwrap() > 0.0, "{c}");
    }
    let wall_s: f64 = records[..4]
        .iter()
        .map(|r| r["cost"]["wall_s"].as_f64().unwrap())
        .sum();
    assert!(wall_s <= t["wall_s"].as_f64().unwrap());
    // `kbench report` shows them per task: 8400 tokens, $0.0252, the agent's minutes.
    let json_path = tmp.path().join("report.json");
    let o = kbench()
        .arg("report")
        .arg(&out)
        .arg("--export-json")
        .arg(&json_path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("$/task") && text.contains("0.025") && text.contains("8400"),
        "{text}"
    );
    let report = read_json(&json_path);
    let cost = &report["runs"][0]["scopes"][0]["cost"];
    assert_eq!(cost["tasks_with_cost"], 1, "{cost}");
    assert_eq!(cost["tokens_per_task"].as_f64(), Some(8400.0), "{cost}");
    assert!((cost["usd_per_task"].as_f64().unwrap() - 7.0 * 0.0036).abs() < 1e-12);
    let min = cost["agent_wall_min_per_task"].as_f64().unwrap();
    assert!((min - wall_s / 60.0).abs() < 1e-9, "{min} vs {wall_s} s");
    // CudaForge's table: dollars and minutes per task beside its quality columns.
    let o = kbench()
        .args(["report", "--table", "cudaforge"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    let head: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(&head[head.len() - 2..], ["$/task", "Min/task"], "{table}");
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[row.len() - 2], "0.025", "{table}");
    assert_eq!(
        row[row.len() - 1],
        format!("{:.1}", wall_s / 60.0),
        "{table}"
    );
    // kbench's own replay agent re-evaluates the runs/ folder.
    let re = tmp.path().join("re");
    let o = kbench()
        .args(
            RunBuilder::new()
                .suite("smoke")
                .select("1")
                .device("cpu")
                .families("random")
                .args(["--trials", "1"])
                .no_timing()
                .quiet()
                .agent("replay")
                .replay_dir(out.join("runs/coder-judge"))
                .out(&re)
                .build(),
        )
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
}

/// Malformed replies (no code block, a body that is not JSON) are failed rounds; the run
/// goes on. Then `--llm-replay` reproduces the run with no server at all.
#[test]
fn malformed_replies_fail_rounds_and_llm_replay_reproduces_the_run() {
    let _g = shared();
    ensure_python();
    let server = FakeLlm::start(
        &json!({"models": {"coder-m": [
            {"content": "Sorry, I will not write code today."},
            {"raw": "{\"choices\": [oops"},
            reply(FAST, ""),
        ]}}),
        0,
        None,
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = toml(tmp.path(), &server.base_url(), &["coder-m"]);
    let out = tmp.path().join("run");
    let o = run_agent(
        &out,
        &cfg,
        "coder-judge",
        &["--model", "coder-m", "--max-rounds", "3"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let rounds = jsonl(&out.join("agent/level1_problem1/rounds.jsonl"));
    assert_eq!(rounds.len(), 3);
    assert!(
        rounds[0]["failed"]
            .as_str()
            .unwrap()
            .contains("no code block"),
        "{:?}",
        rounds[0]
    );
    assert!(
        rounds[1]["failed"].as_str().unwrap().contains("not JSON"),
        "{:?}",
        rounds[1]
    );
    assert!(rounds[2]["kernel"]["correct"].as_bool().unwrap());
    // Replay: the configuration points at a dead port, so any real call would fail.
    let cfg2 = toml(
        &tmp.path().join("cfg2").tap_mkdir(),
        "http://127.0.0.1:9/v1",
        &["coder-m"],
    );
    let out2 = tmp.path().join("replayed");
    let o = run_agent(
        &out2,
        &cfg2,
        "coder-judge",
        &[
            "--model",
            "coder-m",
            "--max-rounds",
            "3",
            "--llm-replay",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let rounds2 = jsonl(&out2.join("agent/level1_problem1/rounds.jsonl"));
    for (a, b) in rounds.iter().zip(&rounds2) {
        assert_eq!(
            a["failed"].as_str().map(|s| s.replace("(replayed) ", "")),
            b["failed"].as_str().map(|s| s.replace("(replayed) ", ""))
        );
        assert_eq!(a["kernel"]["sha256"], b["kernel"]["sha256"]);
    }
    assert_eq!(
        std::fs::read_to_string(out.join("runs/coder-judge").join(FINAL)).unwrap(),
        std::fs::read_to_string(out2.join("runs/coder-judge").join(FINAL)).unwrap()
    );
    // A replay that asks for more calls than were recorded says so and stops.
    let out3 = tmp.path().join("replayed-more");
    let o = run_agent(
        &out3,
        &cfg2,
        "coder-judge",
        &[
            "--model",
            "coder-m",
            "--max-rounds",
            "5",
            "--llm-replay",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no call 3"),
        "{}",
        show(&o)
    );
}

/// A killed agent run continues with `--resume`: the model calls it recorded are answered
/// from its own llm/ folder (the server sees only the rest) and the kernels it evaluated are
/// not evaluated again; without `--resume` an existing run is refused.
#[test]
fn an_interrupted_agent_run_resumes_from_its_own_calls_and_records() {
    let _g = shared();
    ensure_python();
    let server = FakeLlm::start(
        &json!({"models": {"coder-m": [
            {"content": "Sorry, I will not write code today."},
            {"raw": "{\"choices\": [oops"},
            reply(FAST, ""),
        ]}}),
        0,
        None,
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = toml(tmp.path(), &server.base_url(), &["coder-m"]);
    let out = tmp.path().join("run");
    let args = [
        "--model",
        "coder-m",
        "--judge",
        "coder-m",
        "--max-rounds",
        "3",
    ];
    let o = run_agent(&out, &cfg, "coder-judge", &args);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let calls = server.received().len();
    let rounds = jsonl(&out.join("agent/level1_problem1/rounds.jsonl"));
    assert_eq!(rounds.len(), 3);
    assert!(rounds[2]["kernel"]["correct"].as_bool().unwrap());
    let records = jsonl(&out.join("records.jsonl"));
    let kernels = records
        .iter()
        .filter(|r| r.get("candidate").is_some())
        .count();

    // As if killed during the last round: its model call and its record never landed.
    let llm = out.join("llm");
    let stream = std::fs::read_dir(&llm)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&stream)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), calls);
    std::fs::remove_file(files.last().unwrap()).unwrap();
    let text = std::fs::read_to_string(out.join("records.jsonl")).unwrap();
    // The last round's kernel is the log's last record.
    let mut kept: Vec<&str> = text.lines().collect();
    let last = kept.pop().unwrap();
    assert!(last.contains("round02"), "{last}");
    let kept: String = kept.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(out.join("records.jsonl"), kept).unwrap();
    let before = read_json(&out.join("agent_summary.json"));
    for f in ["agent_tasks.jsonl", "agent_summary.json"] {
        std::fs::remove_file(out.join(f)).unwrap();
    }

    // A new server that knows only the last reply.
    let server2 =
        FakeLlm::start(&json!({"models": {"coder-m": [reply(FAST, "")]}}), 0, None).unwrap();
    let cfg2 = toml(
        &tmp.path().join("cfg2").tap_mkdir(),
        &server2.base_url(),
        &["coder-m"],
    );
    let o = run_agent(&out, &cfg2, "coder-judge", &args);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("pass --resume"),
        "{}",
        show(&o)
    );
    let mut resume = args.to_vec();
    resume.push("--resume");
    let o = run_agent(&out, &cfg2, "coder-judge", &resume);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(
        server2.received().len(),
        1,
        "only the call that never landed"
    );
    let rounds2 = jsonl(&out.join("agent/level1_problem1/rounds.jsonl"));
    assert_eq!(rounds2.len(), 3);
    for (a, b) in rounds.iter().zip(&rounds2) {
        assert_eq!(a["kernel"]["sha256"], b["kernel"]["sha256"]);
        assert_eq!(a["kernel"]["correct"], b["kernel"]["correct"]);
    }
    // Each kernel once in the log: the earlier ones were not evaluated again.
    let records2 = jsonl(&out.join("records.jsonl"));
    assert_eq!(
        records2
            .iter()
            .filter(|r| r.get("candidate").is_some())
            .count(),
        kernels
    );
    let summary = read_json(&out.join("agent_summary.json"));
    assert_eq!(summary["llm_calls_resumed"], (calls - 1) as u64);
    // The run's spend is that of the uninterrupted run: recorded calls count as spent.
    for k in ["calls", "input_tokens", "output_tokens", "cost_usd"] {
        assert_eq!(
            summary["llm"][k], before["llm"][k],
            "{k}: {summary} vs {before}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(out.join("runs/coder-judge").join(FINAL))
            .unwrap()
            .trim_end(),
        FAST.trim_end()
    );
}

/// A task budget stops the loop before the next call; a bad key stops the run with a clear
/// message.
#[test]
fn budget_stops_the_task_and_a_bad_key_stops_the_run() {
    let _g = shared();
    ensure_python();
    let server = FakeLlm::start(
        &json!({"models": {"coder-m": [reply(WRONG, ""), reply(FAST, ""), reply(FAST, "")]}}),
        0,
        None,
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = toml(tmp.path(), &server.base_url(), &["coder-m"]);
    let out = tmp.path().join("run");
    let o = run_agent(
        &out,
        &cfg,
        "coder-judge",
        &[
            "--model",
            "coder-m",
            "--max-rounds",
            "3",
            "--max-task-cost-usd",
            "0.001",
        ],
    );
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let t = &jsonl(&out.join("agent_tasks.jsonl"))[0];
    assert_eq!(t["spend"]["calls"], 1, "{t}");
    assert!(
        t["stopped"]
            .as_str()
            .unwrap()
            .contains("--max-task-cost-usd"),
        "{t}"
    );
    assert_eq!(server.received().len(), 1);
    // The run budget stops too (one call of $0.0036 against $0.003).
    let out_r = tmp.path().join("run-budget");
    let o = run_agent(
        &out_r,
        &cfg,
        "coder-judge",
        &[
            "--model",
            "coder-m",
            "--max-rounds",
            "3",
            "--max-cost-usd",
            "0.003",
            "--no-timing",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let t = &jsonl(&out_r.join("agent_tasks.jsonl"))[0];
    assert_eq!(t["spend"]["calls"], 1, "{t}");
    assert!(
        t["stopped"].as_str().unwrap().contains("--max-cost-usd"),
        "{t}"
    );
    assert_eq!(server.received().len(), 2);
    // Bad key.
    let keyed = FakeLlm::start(
        &json!({"api_key": "good", "models": {"coder-m": [reply(FAST, "")]}}),
        0,
        None,
    )
    .unwrap();
    let dir = tmp.path().join("k").tap_mkdir();
    let cfg = toml(&dir, &keyed.base_url(), &["coder-m"]);
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("timeout_s", "api_key_env = \"KBENCH_TEST_KEY\"\ntimeout_s");
    std::fs::write(&cfg, text).unwrap();
    let o = kbench()
        .args(
            RunBuilder::new()
                .suite("smoke")
                .select("1")
                .device("cpu")
                .agent("coder-judge")
                .args(["--model", "coder-m"])
                .arg("--llm-config")
                .arg(&cfg)
                .out(tmp.path().join("bad"))
                .build(),
        )
        .env("KBENCH_TEST_KEY", "bad")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("401") && err.contains("KBENCH_TEST_KEY"),
        "{err}"
    );
}
