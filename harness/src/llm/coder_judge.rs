//! `coder-judge`: CudaForge's loop (CudaForge, arXiv 2511.01884, and its released code). N rounds (default 10) = N Coder
//! generations; round 0 is KernelBench's seed prompt; afterwards the *previous round's*
//! kernel decides the mode: failing → Judge correction mode (error log, reference, code →
//! one issue as JSON) then Coder repair; correct → profile feedback (Nsight Compute through
//! [`super::ProfileFeedback`] when available, timing otherwise) → Judge optimisation mode
//! (GPU spec, reference, code, metrics → one bottleneck/method/plan) then Coder
//! optimisation. Each call sees only the latest kernel and feedback (no conversation). The
//! task's result is the fastest correct kernel over all rounds, chosen by re-timing the
//! finalists and measured afresh ([`super::select`]).
//!
//! Unlike the released code, a reply without a code block or without parseable Judge JSON
//! does not abort the run: the round fails with that reason and the next round starts from
//! the same previous kernel.

use anyhow::Result;
use kbench_record::EvalRecord;
use serde_json::{json, Value};

use super::options::{coder_model, judge_model};
use super::prompt::{error_log, extract_code, extract_json, gpu_spec, seed_prompt, system, user};
use super::task::{KernelResult, Round, TaskCtx};

pub(crate) const DEFAULT_ROUNDS: u32 = 10;

const CODER_SYSTEM: &str = "You are a senior CUDA-kernel optimisation specialist. Output the complete Python script defining ModelNew inside one ```python code block.";

const JUDGE_CORRECTION_SYSTEM: &str = "You are a CUDA + PyTorch correctness auditor. Report exactly one issue: the single highest-impact correctness problem of the candidate. Prefer semantic issues over style. If nothing is wrong, say so. Be brief. Answer with JSON only, with the keys \"critical_issue\" (at most 20 words), \"why_it_matters\" (at most 35 words) and \"minimal_fix_hint\" (at most 20 words).";

const JUDGE_OPTIMISATION_SYSTEM: &str = "You are a senior CUDA performance engineer. Read the target GPU spec, the PyTorch reference, the CUDA candidate and its profiling metrics. Pick exactly one highest-impact bottleneck (judged by the 3-4 most important metrics), one optimisation method and one modification plan. Prefer bottlenecks the measurements show: occupancy limits, memory coalescing, shared-memory bank conflicts, register pressure, long/short scoreboard stalls, tensor-core under-use. Answer with JSON only, with the keys \"bottleneck\" (at most 30 words), \"optimisation method\" (at most 35 words) and \"modification plan\" (at most 35 words).";

const OUTPUT_RULES: &str = "OUTPUT RULES (STRICT)\n1. Order: imports, then the CUDA source string `source`, then the C++ prototypes `cpp_src`, then one `load_inline` per kernel group, then `class ModelNew`.\n2. No testing code, no `if __name__ == \"__main__\"`, no prose outside the code block.\n3. Keep the Python API of the model (constructor arguments, forward signature).";

fn correction_prompt(problem_src: &str, code: &str, log: &str) -> String {
    format!(
        "ERROR_LOG:\n{log}\n\nPyTorch reference (ground truth):\n```python\n{problem_src}\n```\n\nCUDA candidate (to audit):\n```python\n{code}\n```\n\nFollow the rules and return the JSON object only."
    )
}

fn repair_prompt(code: &str, log: &str, issue: &Value) -> String {
    format!(
        "You are a senior CUDA-extension developer. Your job is to FIX the compilation or runtime errors of the code below so that it builds, runs and matches the reference.\n\n{OUTPUT_RULES}\n\nERROR LOG\n{log}\n\nOLD CODE (read-only)\n```python\n{code}\n```\n\nMain Critical Problem\ncritical_issue: {}\nwhy_it_matters: {}\nminimal_fix_hint: {}\n\n```python\n# <complete ModelNew code>\n```\n",
        field(issue, "critical_issue"),
        field(issue, "why_it_matters"),
        field(issue, "minimal_fix_hint"),
    )
}

fn optimisation_judge_prompt(gpu: &str, problem_src: &str, code: &str, metrics: &Value) -> String {
    format!(
        "# Target GPU\n{gpu}\n# Pytorch Reference\n```python\n{problem_src}\n```\n\n# CUDA candidate\n```python\n{code}\n```\n\n# Nsight Compute metrics (verbatim)\n{}\n\nReturn the JSON object only.",
        serde_json::to_string_pretty(metrics).unwrap_or_default()
    )
}

fn optimisation_coder_prompt(gpu: &str, code: &str, plan: &Value) -> String {
    format!(
        "# Target GPU\n{gpu}\n# ---------- Previously generated kernels ----------\n(None)\n\nYou are a CUDA-kernel optimization specialist. Strictly apply the following STRATEGY to the architecture file.\n\n[ARCHITECTURE FILE]\n```python\n{code}\n```\n\n[optimization instructions]\n{}\n\nGOAL\nImprove latency and throughput on the target GPU while keeping correctness (atol=1e-4 or rtol=1e-4) and the Python API.\n\n{OUTPUT_RULES}\n\n```python\n# <complete ModelNew code>\n```\n",
        serde_json::to_string_pretty(plan).unwrap_or_default()
    )
}

fn field(v: &Value, k: &str) -> String {
    match v.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "(not given)".into(),
    }
}

/// The previous round's kernel: its code and evaluation.
struct Prev {
    code: String,
    record: EvalRecord,
}

pub(crate) fn run(ctx: &TaskCtx) -> Result<Value> {
    let rounds = ctx.opts.max_rounds.unwrap_or(DEFAULT_ROUNDS);
    let coder = coder_model(ctx.opts)?;
    let judge = judge_model(ctx.opts)?;
    let stream = ctx.stream("");
    let gpu = gpu_spec(&ctx.gpu);
    let mut prev: Option<Prev> = None;
    for r in 0..rounds {
        if ctx.over_budget().is_some() {
            break;
        }
        let mut round = Round {
            index: r,
            ..Round::default()
        };
        // The Coder's prompt for this round, after the Judge where there is a previous kernel.
        let coder_prompt = match &prev {
            None => {
                round.kind = "seed".into();
                seed_prompt(ctx.problem)
            }
            Some(p) if !p.record.outcome.is_ok() => {
                round.kind = "correction".into();
                let log = error_log(&p.record);
                let jp = correction_prompt(&ctx.problem.source, &p.code, &log);
                ctx.save_text(&format!("round{r:02}_judge_prompt.txt"), &jp);
                let reply = ctx.chat(
                    &judge,
                    &stream,
                    &format!("r{r}_judge_correction"),
                    &[system(JUDGE_CORRECTION_SYSTEM), user(&jp)],
                    None,
                )?;
                let issue = match reply
                    .map_err(|e| e.to_string())
                    .and_then(|r| extract_json(&r.content))
                {
                    Ok(v) => v,
                    Err(why) => {
                        round.failed = Some(format!("judge (correction): {why}"));
                        ctx.log_round(round)?;
                        continue;
                    }
                };
                round.feedback = Some(format!(
                    "error log:\n{log}\njudge: {}",
                    serde_json::to_string(&issue)?
                ));
                repair_prompt(&p.code, &log, &issue)
            }
            Some(p) => {
                round.kind = "optimisation".into();
                let metrics = ctx.profiler.profile(ctx.problem, &p.code, &p.record);
                let jp = optimisation_judge_prompt(&gpu, &ctx.problem.source, &p.code, &metrics);
                ctx.save_text(&format!("round{r:02}_judge_prompt.txt"), &jp);
                let reply = ctx.chat(
                    &judge,
                    &stream,
                    &format!("r{r}_judge_optimisation"),
                    &[system(JUDGE_OPTIMISATION_SYSTEM), user(&jp)],
                    None,
                )?;
                let plan = match reply
                    .map_err(|e| e.to_string())
                    .and_then(|r| extract_json(&r.content))
                {
                    Ok(v) => v,
                    Err(why) => {
                        round.failed = Some(format!("judge (optimisation): {why}"));
                        ctx.log_round(round)?;
                        continue;
                    }
                };
                round.feedback = Some(format!(
                    "metrics: {}\njudge: {}",
                    serde_json::to_string(&metrics)?,
                    serde_json::to_string(&plan)?
                ));
                optimisation_coder_prompt(&gpu, &p.code, &plan)
            }
        };
        ctx.save_text(&format!("round{r:02}_coder_prompt.txt"), &coder_prompt);
        if ctx.over_budget().is_some() {
            ctx.log_round(round)?;
            break;
        }
        let reply = ctx.chat(
            &coder,
            &stream,
            &format!("r{r}_coder"),
            &[system(CODER_SYSTEM), user(&coder_prompt)],
            None,
        )?;
        let code = match reply {
            Err(e) => {
                round.failed = Some(format!("coder: {e}"));
                ctx.log_round(round)?;
                continue;
            }
            Ok(reply) => match extract_code(&reply.content) {
                Some(c) => c,
                None => {
                    round.failed = Some("coder: the reply has no code block".into());
                    ctx.log_round(round)?;
                    continue;
                }
            },
        };
        let (record, k): (EvalRecord, KernelResult) =
            ctx.evaluate(&format!("round{r:02}"), &code)?;
        round.kernel = Some(k);
        ctx.log_round(round)?;
        prev = Some(Prev { code, record });
    }
    Ok(json!({"rounds": rounds, "coder": coder, "judge": judge}))
}
