//! An agent run over the run's problems: checks the models, starts the LLM client and the
//! evaluation service, runs the tasks `--jobs` at a time (each through its agent's loop),
//! then writes `runs/<agent>/`, `agent_tasks.jsonl` and `agent_summary.json`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use kbench_suites::Problem;
use serde_json::json;

use super::client::{Llm, Spend};
use super::evaluator::Evaluator;
use super::feedback::{ProfileFeedback, TimingOnly};
use super::options::{model_roles, Budget, Kind, Options};
use super::task::{TaskCtx, TaskResult};
use super::{coder_judge, command, cuda_agent, kevin, ncu_feedback};
use crate::config::RunConfig;

/// Runs an agent over the run's problems; returns the exit code. On CUDA the profile
/// feedback is `kbench profile`'s (Nsight Compute metrics, roofline, speed of light; the
/// PyTorch profiler where ncu cannot be used); on the CPU it is the measured times.
pub(crate) fn run(config: &RunConfig, opts: &Options, stop: Arc<AtomicBool>) -> Result<i32> {
    match config.device {
        kbench_record::Device::Cuda(_) => {
            let ncu = ncu_feedback::NcuFeedback::new(
                config.device,
                config.precision,
                config.python.python.clone(),
            );
            run_with_profiler(config, opts, stop, &ncu)
        }
        kbench_record::Device::Cpu => run_with_profiler(config, opts, stop, &TimingOnly),
    }
}

/// [`run`] with another source of profile feedback: `kbench profile` (Nsight
/// Compute metrics, roofline) plugs in here, and the Judge's optimisation mode, cuda-agent's
/// `profile` tool and the command agent's `profile` request all receive its JSON.
pub(crate) fn run_with_profiler(
    config: &RunConfig,
    opts: &Options,
    stop: Arc<AtomicBool>,
    profiler: &dyn ProfileFeedback,
) -> Result<i32> {
    // Never another tool's folder: checked before anything is written into it.
    let resuming = crate::runlog::check_out(&config.out)? == crate::runlog::OutFolder::Run;
    if resuming && !config.resume {
        bail!(
            "{} already holds a run: pass --resume to continue it (the model calls it recorded are answered from its llm/ folder and the kernels it evaluated are not evaluated again), or choose another --out",
            config.out.display()
        );
    }
    if resuming && opts.llm_replay.is_some() {
        bail!(
            "--resume continues {} from its own recorded calls: drop --llm-replay",
            config.out.display()
        );
    }
    if opts.kind == Kind::Command && opts.command.is_none() {
        bail!("--agent command needs --command 'PROGRAM ARGS' (see README: the command agent protocol)");
    }
    // Check the models before anything is written.
    let llm_file = match opts.kind {
        Kind::Command => None,
        _ => {
            let path = opts
                .llm_config
                .clone()
                .unwrap_or_else(|| PathBuf::from("kbench.toml"));
            let file = crate::llm::client::LlmFile::load(&path)?;
            for role in model_roles(opts)? {
                file.model(&role, &path)?;
            }
            Some((file, path))
        }
    };
    std::fs::create_dir_all(&config.out)
        .with_context(|| format!("creating {}", config.out.display()))?;
    let llm = match llm_file {
        None => None,
        Some((file, path)) => Some(Llm::new(
            file,
            &path,
            &config.out,
            opts.llm_replay.as_deref(),
            resuming,
        )?),
    };
    let agent = opts.kind.name();
    let eval = Evaluator::new(config, agent, Arc::clone(&stop))?;
    // A broken problem file is a task no agent can answer: one `problem_error` record each.
    for b in &config.broken {
        eval.problem_error(b)?;
        if !config.quiet {
            eprintln!("kbench: {b}; recorded as problem_error");
        }
    }
    let budget = Budget {
        started: Instant::now(),
        opts: opts.clone(),
    };
    let gpu = opts.gpu.clone().unwrap_or_else(|| gpu_label(config));
    let queue = Mutex::new(
        config
            .problems
            .iter()
            .collect::<std::collections::VecDeque<_>>(),
    );
    let results: Mutex<Vec<TaskResult>> = Mutex::new(Vec::new());
    let fatal: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let jobs = opts.jobs.max(1).min(config.problems.len().max(1));
    let runs_name = opts.runs_name.clone().unwrap_or_else(|| agent.to_string());
    // Off a terminal, a plain line while no task ends (a task's rounds take minutes).
    let tasks_done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let heartbeat = {
        let (done, total, t0) = (
            Arc::clone(&tasks_done),
            config.problems.len(),
            Instant::now(),
        );
        crate::exec::Heartbeat::start(config.quiet, move || {
            let n = done.load(Ordering::SeqCst);
            let line = format!(
                "{n}/{total} task(s) done after {}",
                indicatif::FormattedDuration(t0.elapsed())
            );
            (n, line)
        })
    };
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                if stop.load(Ordering::SeqCst)
                    || fatal.lock().unwrap_or_else(|e| e.into_inner()).is_some()
                {
                    return;
                }
                let Some(problem) = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front()
                else {
                    return;
                };
                let r = run_task(
                    config,
                    opts,
                    problem,
                    llm.as_ref(),
                    &eval,
                    &budget,
                    profiler,
                    &gpu,
                    &runs_name,
                );
                tasks_done.fetch_add(1, Ordering::SeqCst);
                match r {
                    Ok(t) => {
                        if !config.quiet {
                            eprintln!("kbench: {}", describe_task(&t));
                        }
                        results.lock().unwrap_or_else(|e| e.into_inner()).push(t)
                    }
                    Err(e) => {
                        fatal
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .get_or_insert(
                                e.context(format!("agent {agent}, problem {}", problem.key())),
                            );
                    }
                }
            });
        }
    });
    drop(heartbeat);
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by(|a, b| a.problem.cmp(&b.problem));
    let mut lines = String::new();
    for t in &results {
        lines.push_str(&serde_json::to_string(t)?);
        lines.push('\n');
    }
    crate::runlog::write_atomic(&config.out.join("agent_tasks.jsonl"), lines.as_bytes())?;
    let total = llm.as_ref().map(|l| l.spent()).unwrap_or_default();
    // Every task has ended: the service finishes (nothing is queued) and says what it did.
    let evaluations = match eval.finish() {
        Ok(s) => s,
        Err(e) => {
            fatal
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(e);
            eval.stats()
        }
    };
    let summary = json!({
        "agent": agent,
        "tasks": results.len(),
        "solved": results.iter().filter(|t| t.final_kernel.as_ref().is_some_and(|k| k.correct)).count(),
        "llm": total,
        // Replayed runs report the recorded calls' tokens and dollars (nothing was spent now).
        "llm_replayed_from": opts.llm_replay.as_ref().filter(|_| llm.as_ref().is_some_and(|l| l.replaying())),
        // A resumed run: calls answered from this run's own records (their tokens and
        // dollars are in `llm`, spent by the run before it was interrupted).
        "llm_calls_resumed": llm.as_ref().map(|l| l.reused_calls()).unwrap_or(0),
        "wall_s": budget.started.elapsed().as_secs_f64(),
        "runs_dir": config.out.join("runs").join(&runs_name),
        "evaluations": evaluations,
    });
    crate::runlog::write_atomic(
        &config.out.join("agent_summary.json"),
        serde_json::to_string_pretty(&summary)?.as_bytes(),
    )?;
    write_final_eval_results(&config.out, &results)?;
    if let Some(e) = fatal.into_inner().unwrap_or_else(|e| e.into_inner()) {
        if stop.load(Ordering::SeqCst) {
            eprintln!(
                "kbench: interrupted: {e:#}; what was recorded is kept in {}",
                config.out.display()
            );
            return Ok(crate::exit::INTERRUPTED);
        }
        return Err(e);
    }
    println!(
        "{agent}: {} task(s), {} with a correct kernel; {} model call(s), {} input + {} output tokens, ${:.4}; kernels in {}",
        results.len(),
        summary["solved"],
        total.calls,
        total.input_tokens,
        total.output_tokens,
        total.cost_usd,
        config.out.join("runs").join(&runs_name).display()
    );
    println!(
        "run log: {}",
        config.out.join(crate::runlog::RECORDS).display()
    );
    if stop.load(Ordering::SeqCst) {
        return Ok(crate::exit::INTERRUPTED);
    }
    Ok(
        if results
            .iter()
            .all(|t| t.final_kernel.as_ref().is_some_and(|k| k.correct))
        {
            crate::exit::OK
        } else {
            crate::exit::KERNELS_FAILED
        },
    )
}

/// KernelBench's `eval_results.json` of an agent run: each task's final kernel as its sample
/// 0 (the sample KernelBench's analysis reads), from the run's records; a task with no final
/// kernel is left out, which that analysis counts as not compiled.
fn write_final_eval_results(out: &std::path::Path, results: &[TaskResult]) -> Result<()> {
    let log = crate::runlog::RecordLog::of_run(out)?;
    let mut finals = Vec::new();
    for t in results {
        let Some(k) = &t.final_kernel else { continue };
        let found = log.lines.iter().rev().find(|l| {
            let c = &l.record.candidate;
            l.record.problem.key() == t.problem && c.name == k.name && c.sha256 == k.sha256
        });
        if let Some(line) = found {
            let mut r = line.record.clone();
            r.notes.push(format!(
                "{}'s final kernel {} (sample {}), written as sample 0",
                t.agent, k.name, r.candidate.sample
            ));
            r.candidate.sample = 0;
            finals.push(r);
        }
    }
    crate::runlog::write_eval_results(out, &finals)?;
    Ok(())
}

fn describe_task(t: &TaskResult) -> String {
    let k = match &t.final_kernel {
        Some(k) if k.correct => format!(
            "{} correct{}",
            k.name,
            k.speedup.map(|s| format!(", {s:.3}x")).unwrap_or_default()
        ),
        Some(k) => format!("no correct kernel (last: {})", k.outcome),
        None => "no kernel".into(),
    };
    format!(
        "{} {}: {} kernel(s), {}; {} call(s), ${:.4}{}",
        t.agent,
        t.problem,
        t.kernels.len(),
        k,
        t.spend.calls,
        t.spend.cost_usd,
        t.stopped
            .as_deref()
            .map(|s| format!("; stopped: {s}"))
            .unwrap_or_default()
    )
}

fn gpu_label(config: &RunConfig) -> String {
    match config.device {
        kbench_record::Device::Cpu => {
            "CPU (no GPU: kernels run on the host, as PyTorch or C++ CPU extensions)".to_string()
        }
        kbench_record::Device::Cuda(g) => crate::gpu::describe()
            .ok()
            .and_then(|all| all.into_iter().find(|i| i.index == g))
            .map(|i| i.name)
            .unwrap_or_else(|| "NVIDIA GPU".to_string()),
    }
}

#[allow(clippy::too_many_arguments)]
fn run_task(
    config: &RunConfig,
    opts: &Options,
    problem: &Problem,
    llm: Option<&Llm>,
    eval: &Evaluator,
    budget: &Budget,
    profiler: &dyn ProfileFeedback,
    gpu: &str,
    runs_name: &str,
) -> Result<TaskResult> {
    let dir = config
        .out
        .join("agent")
        .join(format!("level{}_problem{}", problem.level, problem.id));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let _ = std::fs::remove_file(dir.join("rounds.jsonl"));
    let ctx = TaskCtx {
        problem,
        opts,
        llm,
        eval,
        budget,
        profiler,
        dir,
        started: Instant::now(),
        spend: Mutex::new(Spend::default()),
        gpu: gpu.to_string(),
        rounds_log: Mutex::new(Vec::new()),
        sources: Mutex::new(Vec::new()),
        stopped: Mutex::new(None),
        unbilled: Mutex::new(std::collections::HashMap::new()),
    };
    let extra = match opts.kind {
        Kind::CoderJudge => coder_judge::run(&ctx),
        Kind::Kevin => kevin::run(&ctx),
        Kind::CudaAgent => cuda_agent::run(&ctx),
        Kind::Command => command::run(&ctx),
    };
    let sources = ctx
        .sources
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    // The final kernel: chosen without rewarding timing noise, its speedup measured afresh
    // after the choice (`select`); the command agent chose its own, measured afresh too.
    let chosen = match &extra {
        Err(_) => Ok(None),
        Ok(extra) => match opts.kind {
            Kind::Command => match command::submitted(extra, &sources) {
                Some(s) => super::select::choose(&ctx, opts.finalists.min(1), &[s]),
                None => Ok(None),
            },
            _ => super::select::choose(&ctx, opts.finalists, &sources),
        },
    };
    // No more kernels of this problem: the service may close its reference worker.
    eval.release(problem);
    let extra = extra?;
    let chosen = chosen?;
    // A task that ended without any kernel gave a wrong answer: it is recorded, so the
    // problem counts in every rate (an interrupted task is continued by --resume instead).
    if sources.is_empty() && !eval.stopped() {
        eval.no_kernel(problem, ctx.unbilled_rest())?;
    }
    let rounds = ctx
        .rounds_log
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    let (final_kernel, selection) = match chosen {
        Some((k, src, selection)) => (Some((k, src)), selection),
        None => (None, None),
    };
    if let Some((_, src)) = &final_kernel {
        let d = config.out.join("runs").join(runs_name);
        std::fs::create_dir_all(&d)?;
        std::fs::write(
            d.join(format!(
                "level_{}_problem_{}_sample_0_kernel.py",
                problem.level, problem.id
            )),
            src,
        )?;
    }
    Ok(TaskResult {
        problem: problem.key(),
        agent: opts.kind.name().to_string(),
        kernels: sources.iter().map(|(k, _)| k.clone()).collect(),
        final_kernel: final_kernel.map(|(k, _)| k),
        selection,
        rounds: rounds.len() as u32,
        failed_rounds: rounds.iter().filter(|r| r.failed.is_some()).count() as u32,
        spend: ctx.spend.into_inner().unwrap_or_else(|e| e.into_inner()),
        wall_s: ctx.started.elapsed().as_secs_f64(),
        stopped: ctx.stopped.into_inner().unwrap_or_else(|e| e.into_inner()),
        extra,
    })
}
