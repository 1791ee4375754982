//! `kevin`: Kevin's multi-turn refinement (Kevin-32B, arXiv 2507.11948: the loop, and its scoring). T independent
//! trajectories (default 16) of K turns (default 8). Each turn the model writes a complete
//! `ModelNew` plus a short summary of its changes; the next turn's prompt holds the base
//! prompt and, for every earlier turn of the same trajectory, its kernel, the summary (the
//! reasoning itself is dropped) and one feedback message chosen by status (parse,
//! compilation, runtime or correctness error, or "correct but can be made faster" with the
//! measured speedup). Earliest turns are dropped first when the history outgrows the
//! context budget. The add-kernel example appears only in turn 1.
//!
//! Scores: a trajectory's performance is the speedup of its fastest correct kernel (0 when
//! none is correct); best@T is the maximum over trajectories and avg@T the mean, and the
//! same for correctness (Kevin-32B's evaluation). These are the paper's figures, over the turns' own
//! measurements (a maximum, so noise lifts them); the task's final kernel is chosen and
//! measured afresh as [`super::select`] says.

use anyhow::Result;
use serde_json::{json, Value};

use super::prompt::{
    error_log, extract_code, status_of, system, text_outside_code, user, EXAMPLE_MODEL,
    EXAMPLE_MODEL_NEW,
};
use super::task::{Round, TaskCtx};

pub(crate) const DEFAULT_TURNS: u32 = 8;

/// One earlier turn, as later prompts show it.
struct Turn {
    code: Option<String>,
    summary: String,
    feedback: String,
}

fn base_prompt(problem_src: &str, gpu: &str, first: bool) -> String {
    let mut p = format!(
        "You are given the following PyTorch architecture:\n\n```python\n{problem_src}\n```\n\n\
         Replace the PyTorch operators with raw CUDA kernels, optimised for {gpu}: use shared memory, fuse operators, use warp primitives and vectorised loads where they help. Embed the kernels with torch.utils.cpp_extension.load_inline. Name the new architecture ModelNew. Do not use torch.nn modules or functions except nn.Parameter, containers and initialisation; inputs and outputs stay on the same device. Output the complete new architecture in one ```python code block. Your code will be evaluated, and you will get feedback on its correctness and speedup. After the code block, summarise your changes in a few sentences.\n"
    );
    if first {
        p.push_str(&format!(
            "\nHere is an example. The given architecture:\n\n```python\n{EXAMPLE_MODEL}```\n\nThe new architecture with a custom CUDA kernel:\n\n```python\n{EXAMPLE_MODEL_NEW}```\n"
        ));
    }
    p
}

fn turn_prompt(base: &str, history: &[Turn], context_chars: usize) -> String {
    let mut parts: Vec<String> =
        history
            .iter()
            .enumerate()
            .map(|(i, t)| {
                format!(
                "## Attempt {}\n```python\n{}\n```\nSummary of your reasoning: {}\nFeedback: {}\n",
                i + 1,
                t.code.as_deref().unwrap_or("(no code could be parsed from this attempt)"),
                if t.summary.is_empty() { "(none)" } else { &t.summary },
                t.feedback
            )
            })
            .collect();
    // Truncate from the earliest while the prompt would not fit.
    let mut dropped = 0;
    while parts.len() > 1
        && base.len() + parts.iter().map(String::len).sum::<usize>() > context_chars
    {
        parts.remove(0);
        dropped += 1;
    }
    let mut p = base.to_string();
    if !history.is_empty() {
        p.push_str("\n# Previous attempts\n");
        if dropped > 0 {
            p.push_str(&format!(
                "({dropped} earliest attempt(s) left out for length)\n"
            ));
        }
        for s in parts {
            p.push_str(&s);
        }
        p.push_str("\nRestart your reasoning from the feedback above and write a new, complete, improved ModelNew in one ```python code block, then summarise your changes.\n");
    }
    p
}

fn feedback_message(r: &kbench_record::EvalRecord) -> String {
    match status_of(&r.outcome) {
        "correct" => match &r.timing {
            Some(t) => format!(
                "Your kernel is correct but can be made faster: speedup {:.3}x over the PyTorch reference.",
                t.speedup
            ),
            None => "Your kernel is correct (not timed in this run).".to_string(),
        },
        status => format!(
            "{}{}: {}",
            status[..1].to_uppercase(),
            &status[1..],
            error_log(r)
                .lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

pub(crate) fn run(ctx: &TaskCtx) -> Result<Value> {
    let t_count = ctx.opts.trajectories.max(1);
    let turns = ctx.opts.max_rounds.unwrap_or(DEFAULT_TURNS);
    let model = ctx.opts.model.clone().unwrap_or_default();
    // Context budget in characters (≈ 4 per token).
    let context_chars = (ctx.opts.context_tokens as usize).saturating_mul(4);
    // Trajectories are independent: up to --trajectory-jobs of them run at once (their
    // model calls overlap; kernel evaluations take turns in the evaluator).
    let parallel = ctx.opts.trajectory_jobs.max(1) as usize;
    let mut per_traj: Vec<(f64, bool)> = Vec::new();
    let ids: Vec<u32> = (0..t_count).collect();
    for wave in ids.chunks(parallel) {
        let results: Vec<Result<(f64, bool)>> = std::thread::scope(|s| {
            let handles: Vec<_> = wave
                .iter()
                .map(|&t| {
                    let model = &model;
                    s.spawn(move || trajectory(ctx, t, turns, model, context_chars))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a trajectory panicked")))
                })
                .collect()
        });
        for r in results {
            per_traj.push(r?);
        }
    }
    let n = per_traj.len().max(1) as f64;
    let best_of = per_traj.iter().map(|p| p.0).fold(0.0, f64::max);
    let avg_of = per_traj.iter().map(|p| p.0).sum::<f64>() / n;
    let correct_best = per_traj.iter().any(|p| p.1);
    let correct_avg = per_traj.iter().filter(|p| p.1).count() as f64 / n;
    Ok(json!({
        "trajectories": t_count,
        "turns": turns,
        "trajectory_speedups": per_traj.iter().map(|p| p.0).collect::<Vec<_>>(),
        "trajectory_correct": per_traj.iter().map(|p| p.1).collect::<Vec<_>>(),
        "best_of_t_speedup": best_of,
        "avg_of_t_speedup": avg_of,
        "best_of_t_correct": correct_best,
        "avg_of_t_correct": correct_avg,
    }))
}

/// One trajectory of K turns: (speedup of its fastest correct kernel or 0, any correct).
fn trajectory(
    ctx: &TaskCtx,
    t: u32,
    turns: u32,
    model: &str,
    context_chars: usize,
) -> Result<(f64, bool)> {
    let stream = ctx.stream(&format!("_t{t:02}"));
    let mut history: Vec<Turn> = Vec::new();
    let mut best: Option<f64> = None;
    for k in 0..turns {
        if ctx.over_budget().is_some() {
            return Ok((best.unwrap_or(0.0), best.is_some()));
        }
        let base = base_prompt(&ctx.problem.source, &ctx.gpu, k == 0);
        let prompt = turn_prompt(&base, &history, context_chars);
        ctx.save_text(&format!("t{t:02}_turn{k}_prompt.txt"), &prompt);
        let mut round = Round {
            index: k,
            kind: "turn".into(),
            trajectory: t,
            feedback: history.last().map(|h| h.feedback.clone()),
            ..Round::default()
        };
        let reply = ctx.chat(
            model,
            &stream,
            &format!("turn{k}"),
            &[
                system("You are an expert CUDA kernel engineer."),
                user(&prompt),
            ],
            None,
        )?;
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                round.failed = Some(format!("model: {e}"));
                history.push(Turn {
                    code: None,
                    summary: String::new(),
                    feedback: format!("Your previous answer could not be used: {e}"),
                });
                ctx.log_round(round)?;
                continue;
            }
        };
        let summary: String = text_outside_code(&reply.content)
            .chars()
            .take(1500)
            .collect();
        let Some(code) = extract_code(&reply.content) else {
            round.failed = Some("parse error: the reply has no code block".into());
            history.push(Turn {
                    code: None,
                    summary,
                    feedback: "Parse error: your answer had no ```python code block with the complete ModelNew.".into(),
                });
            ctx.log_round(round)?;
            continue;
        };
        let (rec, kres) = ctx.evaluate_sample(&stream, &format!("t{t:02}_turn{k}"), t, &code)?;
        let format_error = if ctx.opts.kevin_format_checks {
            format_violation(&code)
        } else {
            None
        };
        let feedback = match &format_error {
            Some(why) => {
                round.failed = Some(format!("format check: {why}"));
                format!("Format error: {why}. The kernel scores 0.")
            }
            None => {
                if let Some(s) = kres.score() {
                    best = Some(best.map_or(s, |b: f64| b.max(s)));
                }
                feedback_message(&rec)
            }
        };
        history.push(Turn {
            code: Some(code),
            summary,
            feedback,
        });
        round.kernel = Some(kres);
        ctx.log_round(round)?;
    }
    Ok((best.unwrap_or(0.0), best.is_some()))
}

/// Kevin's format and reward-hacking checks (Kevin-32B's reward and the hacks it guards against), with `--kevin-format-checks`:
/// PyTorch operators through `torch.nn.functional` or `nn.` modules (other than
/// `Module`, `Parameter`, containers and `init`), `try`/`except`, a `pass` statement, or no
/// CUDA kernel at all make the kernel score 0. The paper's exact rules are not published:
/// these are the ones it describes.
pub(crate) fn format_violation(code: &str) -> Option<String> {
    const ALLOWED: [&str; 7] = [
        "Module",
        "Parameter",
        "ParameterList",
        "ParameterDict",
        "ModuleList",
        "ModuleDict",
        "init",
    ];
    for line in code.lines() {
        let l = line.trim();
        if l.starts_with('#') {
            continue;
        }
        if l.starts_with("try:") || l.starts_with("except") {
            return Some("try/except is not allowed".into());
        }
        if l == "pass" {
            return Some("`pass` is not allowed".into());
        }
        if l.contains("torch.nn.functional") || l.contains(" F.") || l.contains("(F.") {
            return Some("torch.nn.functional is not allowed".into());
        }
        let mut rest = l;
        while let Some(i) = rest.find("nn.") {
            let before = rest[..i].chars().next_back();
            let name: String = rest[i + 3..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                && !name.is_empty()
                && !ALLOWED.contains(&name.as_str())
            {
                return Some(format!("the PyTorch module nn.{name} is not allowed"));
            }
            rest = &rest[i + 3..];
        }
    }
    if !code.contains("__global__") {
        return Some("no CUDA kernel (__global__ function) in the code".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_checks_follow_the_papers_rules() {
        let ok = "import torch.nn as nn\nsrc = '__global__ void k() {}'\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.w = nn.Parameter(torch.ones(1))\n";
        assert_eq!(format_violation(ok), None);
        assert!(format_violation(&ok.replace("__global__", ""))
            .unwrap()
            .contains("no CUDA kernel"));
        assert!(
            format_violation(&format!("{ok}        self.l = nn.Linear(2, 2)\n"))
                .unwrap()
                .contains("nn.Linear")
        );
        assert!(format_violation(&format!(
            "{ok}    def f(self, x):\n        return F.relu(x)\n"
        ))
        .unwrap()
        .contains("functional"));
        assert!(format_violation(&format!(
            "{ok}    try:\n        x = 1\n    except Exception:\n        x = 2\n"
        ))
        .unwrap()
        .contains("try"));
        assert!(
            format_violation(&format!("{ok}    def g(self):\n        pass\n"))
                .unwrap()
                .contains("pass")
        );
    }

    #[test]
    fn earliest_turns_are_dropped_past_the_context_budget() {
        let turn = |i: usize| Turn {
            code: Some(format!("code{i} {}", "x".repeat(100))),
            summary: format!("summary{i}"),
            feedback: format!("feedback{i}"),
        };
        let history: Vec<Turn> = (0..4).map(turn).collect();
        let base = base_prompt("class Model: pass", "H100", false);
        let all = turn_prompt(&base, &history, usize::MAX);
        assert!(all.contains("code0") && all.contains("feedback3") && !all.contains("left out"));
        let cut = turn_prompt(&base, &history, base.len() + 400);
        assert!(!cut.contains("code0") && cut.contains("code3") && cut.contains("feedback3"));
        assert!(cut.contains("earliest attempt(s) left out"), "{cut}");
        // The example shows only in the first turn.
        assert!(base_prompt("m", "H100", true).contains("elementwise_add_kernel"));
        assert!(!base.contains("elementwise_add_kernel"));
    }
}
