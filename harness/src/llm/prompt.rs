//! Prompt pieces the agents share and the parsing of their replies: code and JSON
//! extraction, the error log and status a kernel's record gives, KernelBench's one-shot
//! example and seed prompt, and the GPU specification lines.

use kbench_record::{EvalRecord, Outcome};
use kbench_suites::Problem;
use serde_json::{json, Value};

/// The GPU specification lines of CudaForge's prompts (CudaForge's prompts): the run's GPU as the
/// driver reports it.
pub(crate) fn gpu_spec(config_gpu: &str) -> String {
    let mut out = format!("GPU Name: {config_gpu}\n");
    if let Ok(all) = crate::gpu::describe() {
        if let Some(i) = all.iter().find(|i| config_gpu.contains(&i.name)) {
            out.push_str(&format!(
                "Architecture: compute capability {}.{}\nDetails:\n• SMs: {}\n• SM clock: {} MHz\n• GPU Memory: {:.0} GB\n• Memory Bandwidth: {:.0} GB/s\n• L2 cache: {} MB\n• Shared memory capacity per SM: {} KB\n",
                i.compute_capability.0,
                i.compute_capability.1,
                i.sms,
                i.sm_clock_khz / 1000,
                i.memory_bytes as f64 / 1e9,
                i.peak_bandwidth_gbs(),
                i.l2_bytes / (1 << 20),
                i.shared_memory_per_sm_bytes / 1024
            ));
        }
    }
    out
}

/// The first fenced code block (closing fence optional), as CudaForge extracts code
/// (CudaForge's released code); `None` when the reply has no fence.
pub(crate) fn extract_code(reply: &str) -> Option<String> {
    let start = reply.find("```")?;
    let after = &reply[start + 3..];
    let body_start = after.find('\n').map(|i| i + 1).unwrap_or(after.len());
    let body = &after[body_start..];
    let code = match body.find("```") {
        Some(end) => &body[..end],
        None => body,
    };
    let code = code.trim_end().to_string();
    (!code.trim().is_empty()).then_some(code)
}

/// The text after the first code block (Kevin's summary of the turn), else before it.
pub(crate) fn text_outside_code(reply: &str) -> String {
    if let Some(start) = reply.find("```") {
        let after = &reply[start + 3..];
        if let Some(end) = after.find("```") {
            let tail = after[end + 3..].trim();
            if !tail.is_empty() {
                return tail.to_string();
            }
        }
        return reply[..start].trim().to_string();
    }
    reply.trim().to_string()
}

/// CudaForge's JSON extraction (CudaForge's released code): first ```json block, else the first
/// `{...}`, else the whole text; an error when none parses.
pub(crate) fn extract_json(reply: &str) -> std::result::Result<Value, String> {
    if let Some(i) = reply.find("```json") {
        let rest = &reply[i + 7..];
        let body = rest.find("```").map(|e| &rest[..e]).unwrap_or(rest);
        if let Ok(v) = serde_json::from_str(body.trim()) {
            return Ok(v);
        }
    }
    if let (Some(a), Some(b)) = (reply.find('{'), reply.rfind('}')) {
        if a < b {
            if let Ok(v) = serde_json::from_str(&reply[a..=b]) {
                return Ok(v);
            }
        }
    }
    serde_json::from_str(reply.trim()).map_err(|e| {
        format!(
            "no JSON object in the reply ({e}): {}",
            reply.chars().take(200).collect::<String>()
        )
    })
}

/// The error log a failing kernel leaves: the outcome, then the process's last lines;
/// the last 150 lines, with pybind's `Invoked with:` tail cut (CudaForge's released code).
pub(crate) fn error_log(r: &EvalRecord) -> String {
    // The outcome's Display keeps one line; the build log and traceback are in the message.
    let mut text = match &r.outcome {
        Outcome::CompileError { message } => format!("compile_error:\n{message}\n"),
        Outcome::RuntimeError { phase, message } => {
            format!("runtime_error ({phase}):\n{message}\n")
        }
        other => format!("{other}\n"),
    };
    if !r.log_tail.trim().is_empty() {
        text.push_str(&r.log_tail);
    }
    let text = match text.find("Invoked with:") {
        Some(i) => text[..i].to_string(),
        None => text,
    };
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(150);
    lines[start..].join("\n")
}

/// Kevin's feedback classes (Kevin-32B, arXiv 2507.11948).
pub(crate) fn status_of(o: &Outcome) -> &'static str {
    match o {
        Outcome::Ok => "correct",
        Outcome::CompileError { .. } => "compilation error",
        Outcome::RuntimeError { .. }
        | Outcome::Timeout { .. }
        | Outcome::Crashed { .. }
        | Outcome::MemoryCap { .. } => "runtime error",
        Outcome::ReferenceError { .. } => "reference error",
        _ => "incorrect",
    }
}

/// KernelBench's one-shot example pair (element-wise add), as the seed prompts show it.
pub(crate) const EXAMPLE_MODEL: &str = r#"import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a, b):
        return a + b

def get_inputs():
    a = torch.randn(1, 128).cuda()
    b = torch.randn(1, 128).cuda()
    return [a, b]

def get_init_inputs():
    return []
"#;

pub(crate) const EXAMPLE_MODEL_NEW: &str = r#"import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void elementwise_add_kernel(const float* a, const float* b, float* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        out[idx] = a[idx] + b[idx];
    }
}

torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b) {
    auto size = a.numel();
    auto out = torch::zeros_like(a);
    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;
    elementwise_add_kernel<<<num_blocks, block_size>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), size);
    return out;
}
"""
cpp_src = "torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b);"

elementwise_add = load_inline(name="elementwise_add", cpp_sources=cpp_src, cuda_sources=source,
                              functions=["elementwise_add_cuda"], verbose=False)

class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.elementwise_add = elementwise_add

    def forward(self, a, b):
        return self.elementwise_add.elementwise_add_cuda(a, b)
"#;

/// KernelBench's one-shot seed prompt (CudaForge round 0).
pub(crate) fn seed_prompt(problem: &Problem) -> String {
    format!(
        "You write custom CUDA kernels to replace the pytorch operators in the given architecture to get speedups.\n\n\
         You have complete freedom to choose the set of operators you want to replace. You may make the decision to replace some operators with custom CUDA kernels and leave others unchanged. You may replace multiple operators with custom implementations, consider operator fusion opportunities (combining multiple operators into a single kernel, for example, combining matmul+relu), or algorithmic changes (such as online softmax). You are only limited by your imagination.\n\n\
         Here's an example to show you the syntax of inline embedding custom CUDA operators in torch: The example given architecture is:\n\n```python\n{EXAMPLE_MODEL}```\n\n\
         The example new arch with custom CUDA kernels looks like this:\n\n```python\n{EXAMPLE_MODEL_NEW}```\n\n\
         You are given the following architecture:\n\n```python\n{}\n```\n\n\
         Optimize the architecture named Model with custom CUDA operators! Name your optimized output architecture ModelNew. Output the new code in codeblocks. Please generate real code, NOT pseudocode, make sure the code compiles and is fully functional. Just output the new model code, no other text, and NO testing code!\n",
        problem.source
    )
}

pub(crate) fn system(text: &str) -> Value {
    json!({"role": "system", "content": text})
}

pub(crate) fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_and_json_extraction() {
        assert_eq!(
            extract_code("text\n```python\nx = 1\n```\nsummary").as_deref(),
            Some("x = 1")
        );
        assert_eq!(extract_code("```\ny = 2\n").as_deref(), Some("y = 2"));
        assert_eq!(extract_code("no code here"), None);
        assert_eq!(
            text_outside_code("```python\nx\n```\nI fused it."),
            "I fused it."
        );
        assert_eq!(
            extract_json("blah ```json\n{\"a\": 1}\n``` x").unwrap()["a"],
            1
        );
        assert_eq!(extract_json("say {\"b\": 2} ok").unwrap()["b"], 2);
        assert!(extract_json("not json at all").is_err());
    }
}
