//! The cuda-agent and command agents end to end (tool calls, the context budget, the shipped
//! command example) and `kbench fake-llm`: the built binary against the scripted fake server
//! on loopback (real HTTP), with the real Python worker evaluating every kernel on CPU. Smoke
//! problem 1 (a * b + c) with PyTorch-only kernels keeps each evaluation to a few seconds.

use crate::agents_common;
use crate::common;

use agents_common::*;
use common::{ensure_python, kbench, shared, show, RunBuilder};
use kbench::llm::fake_server::FakeLlm;
use serde_json::{json, Value};

/// cuda-agent: tool calls through function calling, one with bad arguments (a failed step,
/// not a crash), compile and check answered from the engine, finish.
#[test]
fn cuda_agent_calls_tools_and_bad_arguments_fail_a_step() {
    let _g = shared();
    ensure_python();
    let call = |name: &str, args: Value| json!({"name": name, "arguments": args});
    let steps = json!([
        {"tool_calls": [call("read_problem", json!({})), call("read_skills", json!({}))]},
        {"tool_calls": [call("write_kernel", json!({"src": "x"}))]},
        {"tool_calls": [call("write_kernel", Value::String("{not json".into()))]},
        {"tool_calls": [call("write_kernel", json!({"source": FAST}))]},
        {"tool_calls": [call("compile", json!({})), call("check", json!({})), call("time", json!({}))]},
        {"tool_calls": [call("finish", json!({}))]},
    ]);
    let server = FakeLlm::start(&json!({"models": {"agent-m": steps}}), 0, None).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = toml(tmp.path(), &server.base_url(), &["agent-m"]);
    let out = tmp.path().join("run");
    let o = run_agent(
        &out,
        &cfg,
        "cuda-agent",
        &["--model", "agent-m", "--max-rounds", "10"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let rounds = jsonl(&out.join("agent/level1_problem1/rounds.jsonl"));
    let failed: Vec<&str> = rounds.iter().filter_map(|r| r["failed"].as_str()).collect();
    assert_eq!(failed.len(), 2, "{rounds:?}");
    assert!(
        failed[0].contains("bad arguments for write_kernel"),
        "{failed:?}"
    );
    assert!(failed[1].contains("not JSON"), "{failed:?}");
    // The requests carried the tools, and the tool answers reached the model.
    let reqs = server.received();
    assert_eq!(reqs.len(), 6);
    assert_eq!(reqs[0].body["tools"].as_array().unwrap().len(), 8);
    let last = reqs[5].body["messages"].as_array().unwrap();
    let tool_msgs: Vec<&str> = last
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert!(
        tool_msgs.iter().any(|m| m.contains("return a * b + c")),
        "read_problem answer"
    );
    assert!(
        tool_msgs.iter().any(|m| m.contains("kbench skills")),
        "read_skills answer"
    );
    assert!(
        tool_msgs
            .iter()
            .any(|m| m.starts_with("compiled and loaded")),
        "{tool_msgs:?}"
    );
    assert!(
        tool_msgs
            .iter()
            .any(|m| m.contains("random#0") && m.contains("pass")),
        "{tool_msgs:?}"
    );
    assert!(
        tool_msgs.iter().any(|m| m.starts_with("speedup ")),
        "{tool_msgs:?}"
    );
    let t = &jsonl(&out.join("agent_tasks.jsonl"))[0];
    assert_eq!(t["extra"]["finished"], true);
    // The fake server's default usage is 100 + 50 tokens a reply.
    assert_eq!(t["spend"]["calls"], 6);
    assert_eq!(t["spend"]["input_tokens"], 600);
    assert_eq!(t["spend"]["output_tokens"], 300);
    assert_eq!(
        t["kernels"].as_array().unwrap().len(),
        1,
        "compile/check/time share one evaluation"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("runs/cuda-agent").join(FINAL)).unwrap(),
        FAST
    );
}

/// The command agent with the shipped example program on two tasks at once; and a program sending garbage gets
/// an error line back, a failed round, and the task still ends.
#[test]
fn command_agent_runs_the_shipped_example() {
    let _g = shared();
    ensure_python();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let example = common::repo_root().join("examples/command_agent.py");
    let o = kbench()
        .args(
            RunBuilder::new()
                .suite("smoke")
                .select("1,2")
                .args(["--jobs", "2"])
                .device("cpu")
                .families("random")
                .args(["--trials", "2"])
                .timed_calls(10)
                .args(["--rounds", "5"])
                .warmup(1)
                .agent("command")
                .arg("--command")
                .arg(format!("python3 {}", example.display()))
                .out(&out)
                .build(),
        )
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let rounds = jsonl(&out.join("agent/level1_problem1/rounds.jsonl"));
    let kinds: Vec<&str> = rounds.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["compile", "check", "time", "submit"]);
    let stderr = std::fs::read_to_string(out.join("agent/level1_problem1/command.stderr")).unwrap();
    assert!(stderr.contains("submitted: correct=True"), "{stderr}");
    let k = std::fs::read_to_string(out.join("runs/command").join(FINAL)).unwrap();
    assert!(k.contains("class ModelNew"));
    // Two tasks ran (at once, --jobs 2), each with one evaluation (compile, check, time and
    // submit of one source share it) and the fresh measurement of the submitted kernel
    // that the task reports (`final_<name>`).
    let k2 = std::fs::read_to_string(out.join("runs/command/level_1_problem_2_sample_0_kernel.py"))
        .unwrap();
    assert!(k2.contains("class ModelNew") && k2 != k);
    let records = common::records(&out);
    assert_eq!(records.len(), 4);
    let fresh = records
        .iter()
        .filter(|r| r["candidate"]["selection"]["role"] == "final")
        .count();
    assert_eq!(fresh, 2, "{records:?}");
    assert_eq!(jsonl(&out.join("agent_tasks.jsonl")).len(), 2);
    // A misbehaving program.
    let bad = tmp.path().join("bad.sh");
    std::fs::write(&bad, format!("read -r task\necho 'hello'\nread -r answer\nprintf '%s\\n' \"$answer\" >&2\nprintf '%s\\n' '{}'\nread -r done\n",
        json!({"type": "submit", "source": FAST}))).unwrap();
    let out2 = tmp.path().join("run2");
    let o = kbench()
        .args(
            RunBuilder::new()
                .suite("smoke")
                .select("1")
                .device("cpu")
                .families("random")
                .args(["--trials", "1"])
                .no_timing()
                .agent("command")
                .arg("--command")
                .arg(format!("sh {}", bad.display()))
                .out(&out2)
                .build(),
        )
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let rounds = jsonl(&out2.join("agent/level1_problem1/rounds.jsonl"));
    assert!(
        rounds[0]["failed"]
            .as_str()
            .unwrap()
            .contains("not a JSON request"),
        "{rounds:?}"
    );
    let stderr =
        std::fs::read_to_string(out2.join("agent/level1_problem1/command.stderr")).unwrap();
    assert!(stderr.contains("\"type\":\"error\""), "{stderr}");
    assert_eq!(rounds[1]["kind"], "submit");
}

/// cuda-agent's context budget: a prompt past --context-tokens stops the task before any
/// tool runs. No kernel is evaluated, so this needs no Python.
#[test]
fn cuda_agent_stops_at_the_context_budget() {
    let server = FakeLlm::start(
        &json!({"models": {"agent-m": [
            {"tool_calls": [{"name": "read_problem", "arguments": "{}"}],
             "usage": {"prompt_tokens": 5000, "completion_tokens": 10}},
        ]}}),
        0,
        None,
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = toml(tmp.path(), &server.base_url(), &["agent-m"]);
    let out = tmp.path().join("run");
    let o = run_agent(
        &out,
        &cfg,
        "cuda-agent",
        &["--model", "agent-m", "--context-tokens", "4000"],
    );
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let t = &jsonl(&out.join("agent_tasks.jsonl"))[0];
    assert!(
        t["stopped"]
            .as_str()
            .unwrap()
            .contains("--context-tokens 4000"),
        "{t}"
    );
    assert!(t["final_kernel"].is_null());
    assert!(!out.join("runs/cuda-agent").join(FINAL).exists());
}

/// `kbench fake-llm` serves its script over real HTTP until killed.
#[test]
fn fake_llm_subcommand_serves_the_script() {
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("script.json");
    std::fs::write(
        &script,
        json!({"models": {"m": [{"content": "scripted hello"}]}}).to_string(),
    )
    .unwrap();
    let url_file = tmp.path().join("url");
    let log = tmp.path().join("requests.jsonl");
    let mut child = kbench()
        .args(["fake-llm", "--script"])
        .arg(&script)
        .arg("--url-file")
        .arg(&url_file)
        .arg("--log")
        .arg(&log)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut url = String::new();
    for _ in 0..100 {
        if let Ok(u) = std::fs::read_to_string(&url_file) {
            url = u;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let cfg = toml(tmp.path(), &url, &["m"]);
    let file = kbench::llm::client::LlmFile::load(&cfg).unwrap();
    let llm = kbench::llm::client::Llm::new(file, &cfg, tmp.path(), None, false).unwrap();
    let r = llm.chat(
        "m",
        "s",
        "c",
        &[json!({"role": "user", "content": "hi"})],
        None,
    );
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(r.unwrap().content, "scripted hello");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("\"hi\""), "{logged}");
}
