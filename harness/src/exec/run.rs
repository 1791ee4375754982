//! `kbench run`'s evaluation: the whole plan queued at once, one executor per device.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Result;
use kbench_record::{Environment, EvalRecord};
use kbench_suites::Problem;

use super::engine::{build_job, run_executors, Engine};
use super::executor::{Depth, Shared, Sink};
use super::progress::{progress_bar, report_line, Heartbeat};
use super::queue::{lock, Batch, Item, Queue};
use crate::agents::{Agent, Candidate, GivenAgent, ReferenceAgent, ReplayAgent};
use crate::config::{materialize_problem, AgentConfig, RunConfig};
use crate::eval::prepare::prepare_candidate;
use crate::eval::record::{environment_base, unjudged_record};
use crate::judge::Tolerance;
use crate::measure::{Ctx, Station};
use crate::plan::{record_key, Unjudged};
use crate::runlog::RunDir;
use crate::worker::bounds::MemoryCapChoice;
use crate::worker::build::BuildPool;

/// What a `kbench run` produced.
#[derive(Debug)]
pub(crate) struct RunResult {
    /// Records in the log: the ones found on resume, then the ones added now.
    pub(crate) records: Vec<EvalRecord>,
    /// Records added by this invocation.
    pub(crate) added: usize,
    pub(crate) interrupted: bool,
    /// Problems not started: `--stop-starting-after` came first (`cut_off`), or no executor
    /// was left to take them.
    pub(crate) not_started: usize,
    pub(crate) cut_off: bool,
    pub(crate) run_dir: std::path::PathBuf,
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

/// Says `msg` on stderr unless the run is `--quiet`.
fn say(config: &RunConfig, msg: &str) {
    if !config.quiet {
        eprintln!("kbench: {msg}");
    }
}

/// Runs the whole plan. `stop` is raised by the signal handler.
pub(crate) fn run(config: &RunConfig, stop: Arc<AtomicBool>) -> Result<RunResult> {
    // LLM agents evaluate one call at a time in one process: the probe kept in memory. A
    // kernel file given to `check` (a `replay` agent's) is evaluated once: the one on disk.
    let repeated = matches!(&config.agent, AgentConfig::Given { agent, .. } if *agent != "replay");
    let engine = Engine::prepare(config, repeated)?;
    // The agent before the run folder: a replay folder that cannot be read at all leaves no
    // half-made run behind (a kernel file that cannot be read is that kernel's verdict).
    let agent = make_agent(config)?;
    let run_dir = open_run_dir(config, &engine, agent.as_ref())?;

    // The plan: every (problem, candidate) not yet recorded.
    let plan = crate::plan::pending(&config.problems, &config.broken, agent.as_ref(), |k| {
        run_dir.is_recorded(k)
    })?;
    let (total, skipped) = (plan.total(), plan.skipped);
    if skipped > 0 {
        say(
            config,
            &format!("resuming: {skipped} kernel(s) already recorded, {total} to go"),
        );
    }
    let progress = progress_bar(total as u64, config.quiet);
    let heartbeat = Heartbeat::of_bar(config.quiet, &progress);
    let run = Run {
        config,
        env_base: environment_base(&engine.info, &engine.jail.containment, engine.bounds()),
        agent,
        run_dir,
        progress,
        added: Added(Mutex::new(Vec::new())),
    };
    run.record_unjudged(&plan.unjudged)?;
    let mut ctx = engine.ctx(config, &stop);
    let batches = run.prepare_batches(&ctx, plan.pending)?;
    ctx.builds = run.start_builds(&engine, &stop, &batches);
    let ctx = ctx;

    // One executor per GPU (or one for the CPU), each taking whole problems from the queue,
    // so a problem's reference cases stay on the GPU that made them.
    let (stations, sampler) = engine.stations(config, &run.run_dir)?;
    let queue = queue_batches(config, stations.len(), batches);
    let error = run.evaluate(&ctx, &stations, &queue);
    drop(heartbeat);
    if let Some(s) = sampler {
        s.stop();
    }
    if let Some(e) = error {
        run.progress.finish_and_clear();
        return Err(e);
    }
    let interrupted = stop.load(Ordering::SeqCst);
    // Problems never taken: the deadline came first, or no executor was left to take them
    // (the last healthy GPU left as an unhealthy one put its batches back). None when
    // interrupted: those count as interrupted.
    let not_started = if interrupted { 0 } else { queue.drain().len() };
    let cut_off = queue.cut_off();
    run.progress.finish_and_clear();
    if let Some(pool) = ctx.builds {
        pool.shutdown();
    }
    Ok(run.into_result(interrupted, not_started, cut_off))
}

/// The run's agent, from its configuration.
fn make_agent(config: &RunConfig) -> Result<Box<dyn Agent + '_>> {
    Ok(match &config.agent {
        AgentConfig::Reference => Box::new(ReferenceAgent),
        AgentConfig::Replay { dir } => {
            // Never read on a kernel's behalf, even from inside the replay folder.
            let mut guarded = vec![config.out.clone()];
            guarded.extend(config.secret_from.clone());
            let a = ReplayAgent::scan(dir, &config.problems, &guarded)?;
            for p in &a.unmatched {
                say(
                    config,
                    &format!(
                        "replay file {} matches no selected problem; skipped",
                        p.display()
                    ),
                );
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
    })
}

/// Opens the run folder with every evaluation the run plans in run.json (before anything is
/// recorded), and says the workers' bounds and what the folder's log had to say.
fn open_run_dir(config: &RunConfig, engine: &Engine, agent: &dyn Agent) -> Result<RunDir> {
    let planned = crate::plan::planned(&config.problems, &config.broken, agent)?;
    let run_dir = super::run_dir::open(config, planned)?;
    // Said even with --quiet where the workers have no memory cap.
    if engine.memory.each.is_none() && config.memory_cap != MemoryCapChoice::Off {
        eprintln!("kbench: {}", engine.bounds_line());
    } else {
        say(config, &engine.bounds_line());
    }
    // Said even with --quiet: a line skipped may be a forgery.
    for note in &run_dir.notes {
        eprintln!("kbench: {note}");
    }
    Ok(run_dir)
}

/// Queues every batch for the executors of `stations` stations, closed to more, and stopping
/// at `--stop-starting-after`'s deadline if given.
fn queue_batches(config: &RunConfig, stations: usize, batches: Vec<Batch>) -> Queue {
    let queue = Queue::new(stations);
    for b in batches {
        queue.push(b);
    }
    queue.close();
    if let Some((_, at)) = config.stop_starting {
        queue.stop_taking_at(at);
    }
    queue
}

/// Problems an executor takes ahead of the one running. Baseline modes compile while they
/// wait (their load is sent ahead): more of them ahead hide more of the compile.
pub(super) fn lookahead(config: &RunConfig) -> usize {
    if config.gpus.is_empty() {
        1
    } else {
        config.lookahead.unwrap_or_else(|| match &config.agent {
            AgentConfig::Baselines { plan, .. } => baseline_lookahead(plan),
            _ => LOOKAHEAD,
        })
    }
}

/// A run under way: what its steps share.
struct Run<'a> {
    config: &'a RunConfig,
    agent: Box<dyn Agent + 'a>,
    run_dir: RunDir,
    progress: indicatif::ProgressBar,
    env_base: Environment,
    added: Added,
}

impl Run<'_> {
    /// Records missing kernels and broken problem files now, no worker started.
    fn record_unjudged(&self, unjudged: &[Unjudged]) -> Result<()> {
        let config = self.config;
        let tol = Tolerance {
            profile: config.profile,
            precision: config.precision,
        };
        for u in unjudged {
            let env = self.env_base.clone();
            let record = unjudged_record(
                tol,
                config.device,
                &self.run_dir,
                self.agent.name(),
                u,
                env,
                config.baselines.as_deref(),
            );
            self.run_dir.append(&record)?;
            report_line(config.quiet, &self.progress, &record);
            self.added.recorded(&u.key, &record, 0.0);
        }
        Ok(())
    }

    /// Writes every pending candidate out, one batch per problem, in the order the
    /// executors should take them.
    fn prepare_batches(
        &self,
        ctx: &Ctx,
        pending: Vec<(&Problem, Vec<Candidate>)>,
    ) -> Result<Vec<Batch>> {
        let config = self.config;
        let mut batches = Vec::with_capacity(pending.len());
        for (problem, candidates) in pending {
            let problem_path = materialize_problem(&config.cache, problem)?;
            let mut items = Vec::with_capacity(candidates.len());
            for cand in candidates {
                let prep =
                    prepare_candidate(ctx, problem, &cand, self.agent.name(), &self.run_dir)?;
                let key = record_key(problem, self.agent.name(), &cand);
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
        // Baselines are measured cheapest compile first (see `order`). Several GPUs take
        // other problems longest expected first, and the builds ahead go in the same order
        // (else the pool works through short problems while the GPUs wait for the long
        // ones' builds).
        if let AgentConfig::Baselines { plan, store } = &config.agent {
            let times = kbench_baselines::CompileTimes::load(store);
            super::order::cheapest_compile_first(&mut batches, plan, &times);
        } else if matches!(config.device, kbench_record::Device::Cuda(_)) && config.gpus.len() > 1 {
            let eager =
                kbench_baselines::EagerTimes::load(&kbench_baselines::default_root(&config.cache));
            super::order::longest_first(&mut batches, &eager);
        }
        Ok(batches)
    }

    /// Starts building, in the batches' order, the candidates with extensions: the pool
    /// doing it, if any.
    fn start_builds(
        &self,
        engine: &Engine,
        stop: &Arc<AtomicBool>,
        batches: &[Batch],
    ) -> Option<BuildPool> {
        let config = self.config;
        let mut to_build = Vec::new();
        for b in batches {
            for item in &b.items {
                if crate::worker::build::builds_extensions(&item.cand.source) {
                    to_build.push(build_job(&self.run_dir, &b.problem_path, &item.prep));
                }
            }
        }
        if !to_build.is_empty() {
            if let Some(pch) = &engine.jail.pch {
                pch.start(&self.run_dir.logs_dir().join("pch.log"));
            }
        }
        if config.build_jobs > 0 && !to_build.is_empty() {
            let jobs = config.build_jobs.min(to_build.len());
            let pool = engine.build_pool(config, stop, jobs);
            say(config, &format!(
                "building {} candidate extension(s) ahead on {} process(es), those needed first at a higher priority",
                to_build.len(),
                jobs
            ));
            pool.journal_to(&self.run_dir.logs_dir().join("builds.jsonl"));
            for job in to_build {
                pool.submit(job);
            }
            return Some(pool);
        }
        None
    }

    /// Runs one executor per station on the queue until it is done (or the run stops): the
    /// first error, if any.
    fn evaluate(&self, ctx: &Ctx, stations: &[Station], queue: &Queue) -> Option<anyhow::Error> {
        let shared = Shared {
            queue,
            run_dir: &self.run_dir,
            env_base: &self.env_base,
            agent: self.agent.name(),
            progress: &self.progress,
            sink: &self.added,
            alive: AtomicUsize::new(stations.len()),
            opened: &AtomicU64::new(0),
            reused: &AtomicU64::new(0),
        };
        let depth = Depth {
            ahead: lookahead(self.config),
            keep: 1,
        };
        run_executors(ctx, stations, depth, &shared, &|_| {}, || {})
    }

    /// The run's records (those found on resume, then the ones added now) and counts.
    fn into_result(mut self, interrupted: bool, not_started: usize, cut_off: bool) -> RunResult {
        let added = self.added.0.into_inner().unwrap_or_else(|e| e.into_inner());
        let added_n = added.len();
        let mut records = std::mem::take(&mut self.run_dir.existing);
        records.extend(added);
        RunResult {
            records,
            added: added_n,
            interrupted,
            not_started,
            cut_off,
            run_dir: self.run_dir.root.clone(),
        }
    }
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
