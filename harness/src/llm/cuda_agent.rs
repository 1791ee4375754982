//! `cuda-agent`: one ReAct agent with tools called through the API's function calling
//! (CUDA Agent, arXiv 2602.24286: a tool-using loop, compile / verify / profile skills, a skills document,
//! up to 200 turns; the result is the fastest verified kernel, chosen by re-timing the
//! finalists and measured afresh as [`super::select`] says). Tools: read_problem,
//! read_skills, write_kernel, compile, check (every case family), time, profile, finish.
//! A step budget (`--max-rounds`, default 200) and a context budget (`--context-tokens`:
//! the run stops when a prompt grows past it). A tool call with bad arguments, an unknown
//! tool or a reply without a tool call is a failed step with that reason.

use std::collections::HashMap;

use anyhow::Result;
use kbench_record::EvalRecord;
use serde_json::{json, Value};

use super::prompt::{error_log, system, user};
use super::task::{KernelResult, Round, TaskCtx};

pub(crate) const DEFAULT_STEPS: u32 = 200;
pub(crate) const SKILLS: &str = include_str!("skills.md");

fn tools() -> Vec<Value> {
    let f = |name: &str, desc: &str, params: Value| json!({"type": "function", "function": {"name": name, "description": desc, "parameters": params}});
    let none = json!({"type": "object", "properties": {}});
    vec![
        f("read_problem", "Read the problem's PyTorch source (class Model, get_inputs, get_init_inputs).", none.clone()),
        f("read_skills", "Read kbench's skills document: optimisation techniques and the evaluation rules.", none.clone()),
        f("write_kernel", "Replace the kernel file with a complete Python source defining class ModelNew.",
          json!({"type": "object", "properties": {"source": {"type": "string", "description": "the complete file"}}, "required": ["source"]})),
        f("compile", "Load the current kernel file (build its extensions); returns the build log on failure.", none.clone()),
        f("check", "Check the current kernel's correctness on every case family; one line per case.", none.clone()),
        f("time", "Measure the current kernel's speedup over the PyTorch reference.", none.clone()),
        f("profile", "Where the current kernel's time goes (timing, or Nsight Compute metrics when available).", none.clone()),
        f("finish", "Stop. The fastest correct kernel written so far is the result.", none),
    ]
}

const SYSTEM: &str = "You are an expert CUDA engineer working in kbench. Write a faster ModelNew for the problem, using the tools: read the problem, read the skills document, write the kernel file, compile it, check it on every case family, time and profile it, improve it, and call finish when done. Call one tool at a time.";

pub(crate) fn run(ctx: &TaskCtx) -> Result<Value> {
    let steps = ctx.opts.max_rounds.unwrap_or(DEFAULT_STEPS);
    let model = ctx.opts.model.clone().unwrap_or_default();
    let stream = ctx.stream("");
    let tools = tools();
    let mut messages = vec![
        system(SYSTEM),
        user(&format!(
            "Problem level {} id {} ({}). The target is {}. Start by reading the problem and the skills document.",
            ctx.problem.level, ctx.problem.id, ctx.problem.name, ctx.gpu
        )),
    ];
    let mut current: Option<String> = None;
    let mut evaluated: HashMap<String, (EvalRecord, KernelResult)> = HashMap::new();
    let mut finished = false;
    let mut step = 0u32;
    let mut stop_reason = None;
    while step < steps && !finished {
        if let Some(why) = ctx.over_budget() {
            stop_reason = Some(why);
            break;
        }
        let reply = ctx.chat(
            &model,
            &stream,
            &format!("step{step}"),
            &messages,
            Some(&tools),
        )?;
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                ctx.log_round(Round {
                    index: step,
                    kind: "step".into(),
                    failed: Some(format!("model: {e}")),
                    ..Round::default()
                })?;
                step += 1;
                continue;
            }
        };
        // Servers that report no usage: about 4 characters a token.
        let prompt_tokens = if reply.usage.input_tokens > 0 {
            reply.usage.input_tokens
        } else {
            messages
                .iter()
                .map(|m| m.to_string().len() as u64)
                .sum::<u64>()
                / 4
        };
        if prompt_tokens > ctx.opts.context_tokens {
            let why = format!(
                "context budget: the prompt reached {prompt_tokens} tokens of --context-tokens {}",
                ctx.opts.context_tokens
            );
            ctx.stopped
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(why.clone());
            stop_reason = Some(why);
            break;
        }
        messages.push(reply.message.clone());
        if reply.tool_calls.is_empty() {
            ctx.log_round(Round {
                index: step,
                kind: "step".into(),
                failed: Some("the reply called no tool".into()),
                ..Round::default()
            })?;
            messages.push(user("Call one of the tools (finish when you are done)."));
            step += 1;
            continue;
        }
        for call in &reply.tool_calls {
            let mut round = Round {
                index: step,
                kind: format!("step:{}", call.name),
                ..Round::default()
            };
            let args: std::result::Result<Value, String> = if call.arguments.trim().is_empty() {
                Ok(json!({}))
            } else {
                serde_json::from_str(&call.arguments)
                    .map_err(|e| format!("bad arguments for {}: not JSON ({e})", call.name))
            };
            let answer: std::result::Result<String, String> = match args {
                Err(e) => Err(e),
                Ok(args) => match call.name.as_str() {
                    "read_problem" => Ok(ctx.problem.source.clone()),
                    "read_skills" => Ok(SKILLS.to_string()),
                    "write_kernel" => match args.get("source").and_then(Value::as_str) {
                        Some(s) if !s.trim().is_empty() => {
                            current = Some(s.to_string());
                            ctx.save_text("kernel.py", s);
                            Ok(format!("wrote the kernel file ({} bytes)", s.len()))
                        }
                        _ => Err("bad arguments for write_kernel: a non-empty string `source` is required".into()),
                    },
                    "compile" | "check" | "time" | "profile" => match &current {
                        None => Err(format!("{}: no kernel file yet; call write_kernel first", call.name)),
                        Some(src) => {
                            let sha = kbench_suites::sha256_hex(src.as_bytes());
                            if !evaluated.contains_key(&sha) {
                                let (rec, k) = ctx.evaluate(&format!("step{step:03}"), src)?;
                                round.kernel = Some(k.clone());
                                evaluated.insert(sha.clone(), (rec, k));
                            }
                            let (rec, _) = &evaluated[&sha];
                            Ok(tool_answer(ctx, &call.name, src, rec))
                        }
                    },
                    "finish" => {
                        finished = true;
                        Ok("finished".into())
                    }
                    other => Err(format!("unknown tool `{other}`")),
                },
            };
            let content = match answer {
                Ok(a) => a,
                Err(e) => {
                    round.failed = Some(e.clone());
                    format!("error: {e}")
                }
            };
            round.feedback = Some(content.chars().take(2000).collect());
            ctx.log_round(round)?;
            messages.push(json!({"role": "tool", "tool_call_id": call.id, "content": content}));
        }
        step += 1;
    }
    Ok(json!({"steps": step, "finished": finished, "stopped": stop_reason}))
}

fn tool_answer(ctx: &TaskCtx, tool: &str, src: &str, r: &EvalRecord) -> String {
    match tool {
        "compile" => {
            if r.outcome.compiled() {
                format!("compiled and loaded (load {:.2}s)", r.load_s.unwrap_or(0.0))
            } else {
                format!("compilation failed:\n{}", error_log(r))
            }
        }
        "check" => {
            let mut s = kbench_reports::render_case_table(r);
            if !r.outcome.is_ok() {
                s.push_str(&format!("\nlog tail:\n{}", error_log(r)));
            }
            s
        }
        "time" => match (&r.timing, r.outcome.is_ok()) {
            (Some(t), true) => format!(
                "speedup {:.3}x (kernel median {:.4} ms, reference median {:.4} ms)",
                t.speedup, t.candidate.median_ms, t.reference.median_ms
            ),
            (None, true) => "correct, but this run does not time kernels".into(),
            _ => format!("not timed: the kernel is not correct ({})", r.outcome),
        },
        _ => serde_json::to_string_pretty(&ctx.profiler.profile(ctx.problem, src, r))
            .unwrap_or_default(),
    }
}
