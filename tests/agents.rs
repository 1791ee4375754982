//! The agents end to end: the built binary against the scripted fake server on loopback
//! (real HTTP), with the real Python worker evaluating every kernel on CPU. Smoke problem 1
//! (a * b + c) with PyTorch-only kernels keeps each evaluation to a few seconds.

mod common;

use std::path::{Path, PathBuf};

use common::{ensure_python, kbench, serial, show};
use kbench::llm::fake_server::FakeLlm;
use serde_json::{json, Value};

const BROKEN: &str = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b, c):\n        return a * b +\n";
/// A C++ CPU extension that does not compile: the compiler's error must reach the Judge.
const BAD_CPP: &str = "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\ncpp_src = \"\"\"\n#include <torch/extension.h>\ntorch::Tensor fma_cpu(torch::Tensor a, torch::Tensor b, torch::Tensor c) {\n    return a * b + undeclared_thing;\n}\n\"\"\"\next = load_inline(name=\"kbench_agents_bad_fma\", cpp_sources=cpp_src, functions=[\"fma_cpu\"], verbose=False)\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b, c):\n        return ext.fma_cpu(a, b, c)\n";
const WRONG: &str = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b, c):\n        return a * b\n";
const SLOW: &str = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b, c):\n        out = a * b + c\n        for _ in range(40):\n            out = (a * b + c) + 0.0 * out\n        return out\n";
const FAST: &str = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b, c):\n        return torch.addcmul(c, a, b)\n";

fn reply(code: &str, extra: &str) -> Value {
    json!({"content": format!("{extra}\n```python\n{code}```\nI fused the ops."),
           "usage": {"prompt_tokens": 1000, "completion_tokens": 200}})
}

fn judge(v: Value) -> Value {
    json!({"content": format!("```json\n{v}\n```"), "usage": {"prompt_tokens": 1000, "completion_tokens": 200}})
}

/// kbench.toml naming the given models on the server (same model name served).
fn toml(dir: &Path, base_url: &str, models: &[&str]) -> PathBuf {
    let mut s = String::new();
    for m in models {
        s.push_str(&format!(
            "[models.{m}]\nbase_url = \"{base_url}\"\nmodel = \"{m}\"\ninput_usd_per_mtok = 2.0\noutput_usd_per_mtok = 8.0\ntimeout_s = 30\nmax_retries = 1\n\n"
        ));
    }
    let p = dir.join("kbench.toml");
    std::fs::write(&p, s).unwrap();
    p
}

fn run_agent(out: &Path, config: &Path, agent: &str, extra: &[&str]) -> std::process::Output {
    kbench()
        .args([
            "run",
            "--suite",
            "smoke",
            "--select",
            "1",
            "--device",
            "cpu",
            "--families",
            "random",
            "--trials",
            "2",
            "--timed-calls",
            "10",
            "--rounds",
            "5",
            "--warmup",
            "1",
            "--agent",
            agent,
            "--llm-config",
        ])
        .arg(config)
        .arg("--out")
        .arg(out)
        .args(extra)
        .env("KBENCH_LLM_BACKOFF_S", "0.1")
        .output()
        .unwrap()
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
    )
    .unwrap()
}

fn jsonl(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The saved request of call `seq` in `stream`: its last user message.
fn saved_prompt(out: &Path, stream: &str, seq: u32) -> String {
    let dir = out.join("llm").join(stream);
    let f = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with(&format!("{seq:04}_"))
        })
        .unwrap_or_else(|| panic!("no call {seq} in {}", dir.display()));
    let v = read_json(&f);
    let msgs = v["request"]["messages"].as_array().unwrap();
    msgs.iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .unwrap_or_default()
}

const FINAL: &str = "level_1_problem_1_sample_0_kernel.py";

/// CudaForge's loop: C++ compile error → Judge correction (with the compiler's error) → wrong kernel →
/// correction → correct slow kernel → optimisation (with timing) → correct fast kernel.
#[test]
fn coder_judge_corrects_then_optimises_and_keeps_the_fastest_correct_kernel() {
    let _g = serial();
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
    assert_eq!(t["final_kernel"]["name"], "round03");
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
    assert_eq!(
        common::records(&out).len(),
        4,
        "one engine record per kernel"
    );
    // Tokens and dollars: 7 calls of 1000 in + 200 out at $2 / $8 per million.
    assert_eq!(t["spend"]["calls"], 7);
    assert_eq!(t["spend"]["input_tokens"], 7000);
    assert_eq!(t["spend"]["output_tokens"], 1400);
    let cost = t["spend"]["cost_usd"].as_f64().unwrap();
    assert!((cost - 7.0 * 0.0036).abs() < 1e-9, "{cost}");
    assert!(t["wall_s"].as_f64().unwrap() > 0.0);
    // kbench's own replay agent re-evaluates the runs/ folder.
    let re = tmp.path().join("re");
    let o = kbench()
        .args([
            "run",
            "--suite",
            "smoke",
            "--select",
            "1",
            "--device",
            "cpu",
            "--families",
            "random",
            "--trials",
            "1",
            "--no-timing",
            "--quiet",
            "--agent",
            "replay",
            "--replay-dir",
        ])
        .arg(out.join("runs/coder-judge"))
        .arg("--out")
        .arg(&re)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
}

/// Malformed replies (no code block, a body that is not JSON) are failed rounds; the run
/// goes on. Then `--llm-replay` reproduces the run with no server at all.
#[test]
fn malformed_replies_fail_rounds_and_llm_replay_reproduces_the_run() {
    let _g = serial();
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
    let _g = serial();
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

trait TapMkdir {
    fn tap_mkdir(self) -> PathBuf;
}
impl TapMkdir for PathBuf {
    fn tap_mkdir(self) -> PathBuf {
        std::fs::create_dir_all(&self).unwrap();
        self
    }
}

/// A task budget stops the loop before the next call; a bad key stops the run with a clear
/// message.
#[test]
fn budget_stops_the_task_and_a_bad_key_stops_the_run() {
    let _g = serial();
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
        .args([
            "run",
            "--suite",
            "smoke",
            "--select",
            "1",
            "--device",
            "cpu",
            "--agent",
            "coder-judge",
            "--model",
            "coder-m",
            "--llm-config",
        ])
        .arg(&cfg)
        .arg("--out")
        .arg(tmp.path().join("bad"))
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

/// Kevin with T=2, K=2: turn 2 sees turn 1's kernel, summary and feedback; best-of-T and
/// average-of-T follow the paper's definitions.
#[test]
fn kevin_reports_best_and_average_of_trajectories() {
    let _g = serial();
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
    assert!((x["avg_of_t_speedup"].as_f64().unwrap() - s0 / 2.0).abs() < 1e-12);
    assert_eq!(x["best_of_t_correct"], true);
    assert_eq!(x["avg_of_t_correct"].as_f64().unwrap(), 0.5);
    assert_eq!(t["failed_rounds"], 1);
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
    assert!(
        (cost - (3010.0 * 2.0 + 605.0 * 8.0) / 1e6).abs() < 1e-12,
        "{cost}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("runs/kevin").join(FINAL))
            .unwrap()
            .trim_end(),
        FAST.trim_end()
    );
}

/// cuda-agent: tool calls through function calling, one with bad arguments (a failed step,
/// not a crash), compile and check answered from the engine, finish.
#[test]
fn cuda_agent_calls_tools_and_bad_arguments_fail_a_step() {
    let _g = serial();
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
    let _g = serial();
    ensure_python();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let example = common::repo_root().join("examples/command_agent.py");
    let o = kbench()
        .args([
            "run",
            "--suite",
            "smoke",
            "--select",
            "1,2",
            "--jobs",
            "2",
            "--device",
            "cpu",
            "--families",
            "random",
            "--trials",
            "2",
            "--timed-calls",
            "10",
            "--rounds",
            "5",
            "--warmup",
            "1",
            "--agent",
            "command",
            "--command",
        ])
        .arg(format!("python3 {}", example.display()))
        .arg("--out")
        .arg(&out)
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
    // Two tasks ran (at once, --jobs 2), each with one evaluation: compile, check, time and
    // submit of one source share it.
    let k2 = std::fs::read_to_string(out.join("runs/command/level_1_problem_2_sample_0_kernel.py"))
        .unwrap();
    assert!(k2.contains("class ModelNew") && k2 != k);
    assert_eq!(common::records(&out).len(), 2);
    assert_eq!(jsonl(&out.join("agent_tasks.jsonl")).len(), 2);
    // A misbehaving program.
    let bad = tmp.path().join("bad.sh");
    std::fs::write(&bad, format!("read -r task\necho 'hello'\nread -r answer\nprintf '%s\\n' \"$answer\" >&2\nprintf '%s\\n' '{}'\nread -r done\n",
        json!({"type": "submit", "source": FAST}))).unwrap();
    let out2 = tmp.path().join("run2");
    let o = kbench()
        .args([
            "run",
            "--suite",
            "smoke",
            "--select",
            "1",
            "--device",
            "cpu",
            "--families",
            "random",
            "--trials",
            "1",
            "--no-timing",
            "--agent",
            "command",
            "--command",
        ])
        .arg(format!("sh {}", bad.display()))
        .arg("--out")
        .arg(&out2)
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

/// The evaluation service: three kevin trajectories submit their kernels at once, from three
/// threads; each kernel gets its own record (its own source, the verdict that source earns),
/// and all six share one reference worker, opened for the first and kept for the rest.
#[test]
fn concurrent_submissions_share_the_problems_reference_worker() {
    let _g = serial();
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
    let records = jsonl(&out.join("records.jsonl"));
    assert_eq!(records.len(), 6, "one record per kernel");
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
    assert_eq!(ev["evaluated"], 6, "{ev}");
    assert_eq!(ev["submitted"], 6, "{ev}");
    assert_eq!(
        ev["reference_sessions_opened"], 1,
        "one reference worker for the problem's six kernels: {ev}"
    );
    assert_eq!(ev["reference_sessions_reused"], 5, "{ev}");
    eprintln!(
        "{:.2} s evaluating per kernel",
        ev["evaluation_s"].as_f64().unwrap() / 6.0
    );
}

/// Two tasks at once (`--jobs 2`), problems 1 and 2: each kernel is judged against its own
/// problem's reference (one session each), whichever order the submissions arrive in.
#[test]
fn concurrent_tasks_of_two_problems_each_use_their_own_reference() {
    let _g = serial();
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
        .args([
            "run",
            "--suite",
            "smoke",
            "--select",
            "1,2",
            "--device",
            "cpu",
            "--families",
            "random",
            "--trials",
            "2",
            "--no-timing",
            "--agent",
            "kevin",
            "--model",
            "kevin-m",
            "--trajectories",
            "1",
            "--max-rounds",
            "2",
            "--jobs",
            "2",
            "--llm-config",
        ])
        .arg(&cfg)
        .arg("--out")
        .arg(&out)
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
