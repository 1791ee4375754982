//! `command`: any external program as an agent (protocol in README: "The command agent").
//!
//! kbench starts `sh -c COMMAND` in the task's folder and writes the task as one JSON line
//! on its stdin. The program writes requests as JSON lines on its stdout:
//! `{"type": "compile"|"check"|"time"|"profile", "source": "..."}` → kbench evaluates the
//! source with the engine and answers one JSON line on stdin (`{"type": "result", ...}`);
//! `{"type": "submit", "source": "..."}` ends the task (answered with `{"type": "done", ...}`,
//! then stdin closes). A line that is not such a request is a failed round, answered with
//! `{"type": "error", "message": ...}`; the program goes on. Its stderr goes to
//! `agent/<task>/command.stderr`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result};
use kbench_record::EvalRecord;
use serde_json::{json, Value};

use super::prompt::error_log;
use super::task::{KernelResult, Round, TaskCtx};

/// Requests allowed per task unless `--max-rounds` says otherwise.
pub(crate) const DEFAULT_REQUESTS: u32 = 50;

pub(crate) fn run(ctx: &TaskCtx) -> Result<Value> {
    let cmd = ctx.opts.command.clone().unwrap_or_default();
    let max = ctx.opts.max_rounds.unwrap_or(DEFAULT_REQUESTS);
    let stderr = std::fs::File::create(ctx.dir.join("command.stderr"))?;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(&cmd)
        .current_dir(&ctx.dir)
        .env("KBENCH_TASK_DIR", &ctx.dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr))
        .spawn()
        .with_context(|| format!("starting the command agent `{cmd}`"))?;
    let mut stdin = child.stdin.take().context("command agent stdin")?;
    let stdout = child.stdout.take().context("command agent stdout")?;
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let task = json!({
        "type": "task",
        "protocol": 1,
        "problem": {
            "key": ctx.problem.key(),
            "level": ctx.problem.level,
            "id": ctx.problem.id,
            "name": ctx.problem.name,
            "source": ctx.problem.source,
        },
        "target": ctx.gpu,
        "max_requests": max,
        "tools": ["compile", "check", "time", "profile", "submit"],
    });
    let send = |v: Value, stdin: &mut std::process::ChildStdin| -> bool {
        writeln!(stdin, "{v}").and_then(|_| stdin.flush()).is_ok()
    };
    send(task, &mut stdin);
    let mut evaluated: HashMap<String, (EvalRecord, KernelResult)> = HashMap::new();
    let mut n = 0u32;
    let mut submitted: Option<String> = None;
    let mut ended = None;
    loop {
        let line = match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(l) => l,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Some(why) = ctx.over_budget() {
                    ended = Some(why);
                    break;
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                ended = Some("the program closed its stdout without submitting a kernel".into());
                break;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        if let Some(why) = ctx.over_budget() {
            send(json!({"type": "error", "message": why}), &mut stdin);
            ended = Some(why);
            break;
        }
        let mut round = Round {
            index: n,
            kind: "request".into(),
            ..Round::default()
        };
        n += 1;
        let req: std::result::Result<(String, String), String> =
            serde_json::from_str::<Value>(&line)
                .map_err(|e| {
                    format!(
                        "not a JSON request ({e}): {}",
                        line.chars().take(200).collect::<String>()
                    )
                })
                .and_then(|v| {
                    let kind = v
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    if !["compile", "check", "time", "profile", "submit"].contains(&kind.as_str()) {
                        return Err(format!(
                            "unknown request type `{kind}` (compile, check, time, profile, submit)"
                        ));
                    }
                    let src = v
                        .get("source")
                        .and_then(Value::as_str)
                        .filter(|s| !s.trim().is_empty())
                        .ok_or_else(|| {
                            format!("request `{kind}` needs a non-empty string `source`")
                        })?;
                    Ok((kind, src.to_string()))
                });
        let (kind, src) = match req {
            Err(e) => {
                round.failed = Some(e.clone());
                ctx.log_round(round)?;
                send(json!({"type": "error", "message": e}), &mut stdin);
                continue;
            }
            Ok(r) => r,
        };
        round.kind = kind.clone();
        if n > max && kind != "submit" {
            let e = format!("request budget exhausted ({max} requests; --max-rounds)");
            round.failed = Some(e.clone());
            ctx.log_round(round)?;
            send(json!({"type": "error", "message": e}), &mut stdin);
            continue;
        }
        let sha = kbench_suites::sha256_hex(src.as_bytes());
        if !evaluated.contains_key(&sha) {
            let (rec, k) = ctx.evaluate(&format!("request{:03}", n - 1), &src)?;
            round.kernel = Some(k.clone());
            evaluated.insert(sha.clone(), (rec, k));
        }
        let (rec, k) = &evaluated[&sha];
        let mut answer = json!({
            "type": if kind == "submit" { "done" } else { "result" },
            "tool": kind,
            "compiled": rec.outcome.compiled(),
            "correct": k.correct,
            "outcome": k.outcome,
            "speedup": if k.correct { k.speedup } else { None },
        });
        match kind.as_str() {
            "compile" if !rec.outcome.compiled() => answer["log"] = json!(error_log(rec)),
            "check" => {
                answer["report"] = json!(kbench_reports::render_case_table(rec));
                if !k.correct {
                    answer["log"] = json!(error_log(rec));
                }
            }
            "profile" => answer["profile"] = ctx.profiler.profile(ctx.problem, &src, rec),
            _ => {}
        }
        round.feedback = Some(answer.to_string().chars().take(2000).collect());
        ctx.log_round(round)?;
        send(answer, &mut stdin);
        if kind == "submit" {
            submitted = Some(sha);
            break;
        }
    }
    drop(stdin);
    // Give the program a moment to exit on its own, then end it.
    for _ in 0..50 {
        if child.try_wait()?.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if child.try_wait()?.is_none() {
        let _ = child.kill();
    }
    let status = child.wait().ok().and_then(|s| s.code());
    if submitted.is_none() {
        ctx.stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(
                ended
                    .clone()
                    .unwrap_or_else(|| "no kernel submitted".into()),
            );
    }
    Ok(json!({"submitted_sha256": submitted, "requests": n, "exit_code": status, "ended": ended}))
}

/// The submitted kernel among those evaluated.
pub(crate) fn submitted(
    extra: &Value,
    sources: &[(KernelResult, String)],
) -> Option<(KernelResult, String)> {
    let sha = extra.get("submitted_sha256")?.as_str()?;
    sources.iter().find(|(k, _)| k.sha256 == sha).cloned()
}
