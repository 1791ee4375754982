//! `kbench run`'s evaluation: the whole plan queued at once, one executor per device.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Result;
use kbench_record::EvalRecord;

use super::engine::{build_job, run_executors, Engine};
use super::executor::{Depth, Shared, Sink};
use super::progress::{progress_bar, report_line, Heartbeat};
use super::queue::{lock, Batch, Item, Queue};
use crate::agents::{Agent, GivenAgent, ReferenceAgent, ReplayAgent};
use crate::config::{materialize_problem, AgentConfig, RunConfig};
use crate::eval::prepare::prepare_candidate;
use crate::eval::record::{environment_base, unjudged_record};
use crate::judge::Tolerance;
use crate::plan::record_key;
use crate::worker::bounds::MemoryCapChoice;

/// What a `kbench run` produced.
#[derive(Debug)]
pub struct RunResult {
    /// Records in the log: the ones found on resume, then the ones added now.
    pub records: Vec<EvalRecord>,
    /// Records added by this invocation.
    pub added: usize,
    /// Candidates skipped because they were already recorded.
    pub skipped: usize,
    pub interrupted: bool,
    /// Problems not started: `--stop-starting-after` came first (`cut_off`), or no executor
    /// was left to take them.
    pub not_started: usize,
    pub cut_off: bool,
    pub run_dir: std::path::PathBuf,
}

/// How many problems an executor takes ahead on a GPU: enough that Python's start-up and
/// torch's import (4–5 s on the H100 host) are hidden behind problems of 2–3 s.
pub(crate) const LOOKAHEAD: usize = 2;
/// Problems taken ahead when measuring baselines: their compiles (CPU work, for the default
/// mode) hide behind the timing of the one before.
const BASELINE_LOOKAHEAD: usize = 4;
/// Problems taken ahead when a baseline mode autotunes. Max-autotune's compile times kernels
/// on the GPU: with four level-3 models ahead on each of 4 H100s (20 compiles at once), each
/// autotuning pass took 3-10 times as long, every load ran past the 400 s compile timeout and
/// was loaded again, and a 555 s call finished none.
const AUTOTUNE_LOOKAHEAD: usize = 1;

/// The default lookahead of a baseline plan.
fn baseline_lookahead(
    plan: &std::collections::BTreeMap<String, Vec<kbench_baselines::Mode>>,
) -> usize {
    if plan.values().flatten().any(|m| m.autotunes()) {
        AUTOTUNE_LOOKAHEAD
    } else {
        BASELINE_LOOKAHEAD
    }
}

/// The records of this invocation, in the order they were appended.
struct Added(Mutex<Vec<EvalRecord>>);

impl Sink for Added {
    fn recorded(&self, _key: &str, record: &EvalRecord, _eval_s: f64) {
        lock(&self.0).push(record.clone());
    }
}

/// Runs the whole plan. `stop` is raised by the signal handler.
pub fn run(config: &RunConfig, stop: Arc<AtomicBool>) -> Result<RunResult> {
    // LLM agents evaluate one call at a time in one process: the probe kept in memory. A
    // kernel file given to `check` (a `replay` agent's) is evaluated once: the one on disk.
    let repeated = matches!(&config.agent, AgentConfig::Given { agent, .. } if *agent != "replay");
    let engine = Engine::prepare(config, repeated)?;
    let say = |msg: &str| {
        if !config.quiet {
            eprintln!("kbench: {msg}");
        }
    };
    // The agent before the run folder: a replay folder that cannot be read at all leaves no
    // half-made run behind (a kernel file that cannot be read is that kernel's verdict).
    let agent: Box<dyn Agent> = match &config.agent {
        AgentConfig::Reference => Box::new(ReferenceAgent),
        AgentConfig::Replay { dir } => {
            // Never read on a kernel's behalf, even from inside the replay folder.
            let mut guarded = vec![config.out.clone()];
            guarded.extend(config.secret_from.clone());
            let a = ReplayAgent::scan(dir, &config.problems, &guarded)?;
            for p in &a.unmatched {
                say(&format!(
                    "replay file {} matches no selected problem; skipped",
                    p.display()
                ));
            }
            for s in &a.skipped {
                eprintln!("kbench: {s}");
            }
            Box::new(a)
        }
        AgentConfig::Baselines { plan, .. } => {
            Box::new(crate::agents::baseline::BaselineAgent { plan: plan.clone() })
        }
        AgentConfig::Given { agent, candidates } => Box::new(GivenAgent {
            agent,
            candidates: candidates.clone(),
        }),
    };
    // Every evaluation the run plans goes into run.json before anything is recorded.
    let planned = crate::plan::planned(&config.problems, &config.broken, agent.as_ref())?;
    let mut run_dir = super::run_dir::open(config, planned)?;
    // Said even with --quiet where the workers have no memory cap.
    if engine.memory.each.is_none() && config.memory_cap != MemoryCapChoice::Off {
        eprintln!("kbench: {}", engine.bounds_line());
    } else {
        say(&engine.bounds_line());
    }
    // Said even with --quiet: a line skipped may be a forgery.
    for note in &run_dir.notes {
        eprintln!("kbench: {note}");
    }

    // The plan: every (problem, candidate) not yet recorded.
    let plan = crate::plan::pending(&config.problems, &config.broken, agent.as_ref(), |k| {
        run_dir.is_recorded(k)
    })?;
    let (total, skipped) = (plan.total(), plan.skipped);
    if skipped > 0 {
        say(&format!(
            "resuming: {skipped} kernel(s) already recorded, {total} to go"
        ));
    }
    let progress = progress_bar(total as u64, config.quiet);
    let heartbeat = Heartbeat::of_bar(config.quiet, &progress);
    let env_base = environment_base(&engine.info, &engine.jail.containment, engine.bounds());
    let added = Added(Mutex::new(Vec::new()));
    // Missing kernels and broken problem files: recorded now, no worker started.
    let tol = Tolerance {
        profile: config.profile,
        precision: config.precision,
    };
    for u in &plan.unjudged {
        let env = env_base.clone();
        let record = unjudged_record(
            tol,
            config.device,
            &run_dir,
            agent.name(),
            u,
            env,
            config.baselines.as_deref(),
        );
        run_dir.append(&record)?;
        report_line(config.quiet, &progress, &record);
        added.recorded(&u.key, &record, 0.0);
    }
    let mut ctx = engine.ctx(config, &stop);

    // Write every pending candidate out and queue the ones with extensions for building.
    let mut batches = Vec::with_capacity(plan.pending.len());
    let mut to_build = Vec::new();
    for (problem, candidates) in plan.pending {
        let problem_path = materialize_problem(&config.cache, problem)?;
        let mut items = Vec::with_capacity(candidates.len());
        for cand in candidates {
            let prep = prepare_candidate(&ctx, problem, &cand, agent.name(), &run_dir)?;
            let key = record_key(problem, agent.name(), &cand);
            items.push(Item { cand, prep, key });
        }
        batches.push(Batch {
            problem: problem.clone(),
            pkey: problem.key(),
            problem_path,
            items,
            queued: Instant::now(),
            last: true,
        });
    }
    // Baselines are measured cheapest compile first (see `order`). Several GPUs take other
    // problems longest expected first, and the builds ahead go in the same order (else the
    // pool works through short problems while the GPUs wait for the long ones' builds).
    if let AgentConfig::Baselines { plan, store } = &config.agent {
        let times = kbench_baselines::CompileTimes::load(store);
        super::order::cheapest_compile_first(&mut batches, plan, &times);
    } else if matches!(config.device, kbench_record::Device::Cuda(_)) && config.gpus.len() > 1 {
        let eager =
            kbench_baselines::EagerTimes::load(&kbench_baselines::default_root(&config.cache));
        super::order::longest_first(&mut batches, &eager);
    }
    for b in &batches {
        for item in &b.items {
            if crate::worker::build::builds_extensions(&item.cand.source) {
                to_build.push(build_job(&run_dir, &b.problem_path, &item.prep));
            }
        }
    }
    if config.build_jobs > 0 && !to_build.is_empty() {
        let jobs = config.build_jobs.min(to_build.len());
        let pool = engine.build_pool(config, &stop, jobs);
        say(&format!(
            "building {} candidate extension(s) ahead on {} process(es), {} at once until the first is built",
            to_build.len(),
            jobs,
            crate::worker::build::first_wave(jobs)
        ));
        pool.journal_to(&run_dir.logs_dir().join("builds.jsonl"));
        for job in to_build {
            pool.submit(job);
        }
        ctx.builds = Some(pool);
    }
    let ctx = ctx;

    // One executor per GPU (or one for the CPU), each taking whole problems from the queue,
    // so a problem's reference cases stay on the GPU that made them.
    let (stations, sampler) = engine.stations(config, &run_dir)?;
    let queue = Queue::new(stations.len());
    for b in batches {
        queue.push(b);
    }
    queue.close();
    if let Some((_, at)) = config.stop_starting {
        queue.stop_taking_at(at);
    }
    let shared = Shared {
        queue: &queue,
        run_dir: &run_dir,
        env_base: &env_base,
        agent: agent.name(),
        progress: &progress,
        sink: &added,
        alive: AtomicUsize::new(stations.len()),
        opened: &AtomicU64::new(0),
        reused: &AtomicU64::new(0),
    };
    // Baseline modes compile while they wait (their load is sent ahead): more of them ahead
    // hide more of the compile.
    let ahead = if config.gpus.is_empty() {
        1
    } else {
        config.lookahead.unwrap_or_else(|| match &config.agent {
            AgentConfig::Baselines { plan, .. } => baseline_lookahead(plan),
            _ => LOOKAHEAD,
        })
    };
    let depth = Depth { ahead, keep: 1 };
    let error = run_executors(&ctx, &stations, depth, &shared, &|_| {}, || {});
    drop(heartbeat);
    if let Some(s) = sampler {
        s.stop();
    }
    if let Some(e) = error {
        progress.finish_and_clear();
        return Err(e);
    }
    let added = added.0.into_inner().unwrap_or_else(|e| e.into_inner());
    let interrupted = stop.load(Ordering::SeqCst);
    // Problems never taken: the deadline came first, or no executor was left to take them
    // (the last healthy GPU left as an unhealthy one put its batches back). None when
    // interrupted: those count as interrupted.
    let not_started = if interrupted { 0 } else { queue.drain().len() };
    let cut_off = queue.cut_off();
    progress.finish_and_clear();
    if let Some(pool) = ctx.builds {
        pool.shutdown();
    }
    let added_n = added.len();
    let mut records = std::mem::take(&mut run_dir.existing);
    records.extend(added);
    Ok(RunResult {
        records,
        added: added_n,
        skipped,
        interrupted,
        not_started,
        cut_off,
        run_dir: run_dir.root.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbench_baselines::Mode;

    #[test]
    fn an_autotuning_mode_takes_one_problem_ahead_the_others_four() {
        let plan = |modes: &[Mode]| {
            [("kernelbench/L3/1".to_string(), modes.to_vec())]
                .into_iter()
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        assert_eq!(baseline_lookahead(&plan(&[Mode::Eager, Mode::Compile])), 4);
        assert_eq!(
            baseline_lookahead(&plan(&[Mode::Compile, Mode::MaxAutotune])),
            1
        );
        assert_eq!(
            baseline_lookahead(&plan(&[Mode::MaxAutotuneNoCudagraphs])),
            1
        );
        assert_eq!(baseline_lookahead(&plan(&[Mode::ReduceOverhead])), 4);
    }
}
