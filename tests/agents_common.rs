//! Helpers shared by the agent tests (`agents_*.rs`): the kernels the scripted model writes,
//! its replies, `kbench.toml`, `kbench run --agent` on smoke problem 1, and reading what a
//! run wrote. A test file imports it with `use crate::agents_common;`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::common::{kbench, RunBuilder};

pub const BROKEN: &str = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b, c):\n        return a * b +\n";
/// A C++ CPU extension that does not compile: the compiler's error must reach the Judge.
pub const BAD_CPP: &str = "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\ncpp_src = \"\"\"\n#include <torch/extension.h>\ntorch::Tensor fma_cpu(torch::Tensor a, torch::Tensor b, torch::Tensor c) {\n    return a * b + undeclared_thing;\n}\n\"\"\"\next = load_inline(name=\"kbench_agents_bad_fma\", cpp_sources=cpp_src, functions=[\"fma_cpu\"], verbose=False)\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b, c):\n        return ext.fma_cpu(a, b, c)\n";
pub const WRONG: &str = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b, c):\n        return a * b\n";
pub const SLOW: &str = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b, c):\n        out = a * b + c\n        for _ in range(40):\n            out = (a * b + c) + 0.0 * out\n        return out\n";
pub const FAST: &str = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b, c):\n        return torch.addcmul(c, a, b)\n";

pub fn reply(code: &str, extra: &str) -> Value {
    json!({"content": format!("{extra}\n```python\n{code}```\nI fused the ops."),
           "usage": {"prompt_tokens": 1000, "completion_tokens": 200}})
}

pub fn judge(v: Value) -> Value {
    json!({"content": format!("```json\n{v}\n```"), "usage": {"prompt_tokens": 1000, "completion_tokens": 200}})
}

/// kbench.toml naming the given models on the server (same model name served).
pub fn toml(dir: &Path, base_url: &str, models: &[&str]) -> PathBuf {
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

pub fn run_agent(out: &Path, config: &Path, agent: &str, extra: &[&str]) -> std::process::Output {
    kbench()
        .args(
            RunBuilder::new()
                .suite("smoke")
                .select("1")
                .device("cpu")
                .families("random")
                .args(["--trials", "2"])
                .timed_calls(10)
                .args(["--rounds", "5"])
                .warmup(1)
                .agent(agent)
                .arg("--llm-config")
                .arg(config)
                .out(out)
                .args(extra)
                .build(),
        )
        .env("KBENCH_LLM_BACKOFF_S", "0.1")
        .output()
        .unwrap()
}

pub fn read_json(p: &Path) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
    )
    .unwrap()
}

pub fn jsonl(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The saved request of call `seq` in `stream`: its last user message.
pub fn saved_prompt(out: &Path, stream: &str, seq: u32) -> String {
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

pub const FINAL: &str = "level_1_problem_1_sample_0_kernel.py";

pub trait TapMkdir {
    fn tap_mkdir(self) -> PathBuf;
}
impl TapMkdir for PathBuf {
    fn tap_mkdir(self) -> PathBuf {
        std::fs::create_dir_all(&self).unwrap();
        self
    }
}
