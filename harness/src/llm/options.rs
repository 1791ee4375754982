//! What an agent run is asked to do: the agent [`Kind`], its [`Options`] (from `kbench run`),
//! the models each role calls, and the run-wide [`Budget`] (dollars and minutes, per task
//! and per run).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};

use super::client::{Llm, Spend};

/// The agent kinds that produce kernels in a feedback loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    CoderJudge,
    Kevin,
    CudaAgent,
    Command,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::CoderJudge => "coder-judge",
            Kind::Kevin => "kevin",
            Kind::CudaAgent => "cuda-agent",
            Kind::Command => "command",
        }
    }
}

/// Options of an agent run (from `kbench run`).
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) kind: Kind,
    pub(crate) llm_config: Option<PathBuf>,
    /// The model for kevin / cuda-agent, and the Coder's by default.
    pub(crate) model: Option<String>,
    pub(crate) coder: Option<String>,
    pub(crate) judge: Option<String>,
    /// Rounds (coder-judge), turns (kevin) or steps (cuda-agent); `None`: the paper's.
    pub(crate) max_rounds: Option<u32>,
    pub(crate) trajectories: u32,
    /// kevin: trajectories of a task run at once.
    pub(crate) trajectory_jobs: u32,
    /// kevin: apply the paper's format / reward-hacking checks (a violation scores 0).
    pub(crate) kevin_format_checks: bool,
    /// cuda-agent: stop when a prompt grows past this many tokens.
    pub(crate) context_tokens: u64,
    pub(crate) max_cost_usd: Option<f64>,
    pub(crate) max_task_cost_usd: Option<f64>,
    pub(crate) max_minutes: Option<f64>,
    pub(crate) max_task_minutes: Option<f64>,
    pub(crate) jobs: usize,
    pub(crate) llm_replay: Option<PathBuf>,
    /// `command`: the program (run with `sh -c`).
    pub(crate) command: Option<String>,
    /// Name of the KernelBench `runs/<name>/` folder (default: the agent's name).
    pub(crate) runs_name: Option<String>,
    /// GPU named in the prompts (default: the run's GPU, or "CPU").
    pub(crate) gpu: Option<String>,
    /// Finalists re-timed together to choose a task's final kernel (0: keep the fastest
    /// measurement, as the papers do); see [`super::select`].
    pub(crate) finalists: u32,
}

/// Run-wide budgets and the clock.
pub(crate) struct Budget {
    pub(crate) started: Instant,
    pub(crate) opts: Options,
}

impl Budget {
    /// `Some(reason)` when this task (started at `task_started`, having spent `spent`) or the
    /// run must stop before another model call or round.
    pub(crate) fn exceeded(
        &self,
        llm: Option<&Llm>,
        task_started: Instant,
        spent: &Spend,
    ) -> Option<String> {
        let o = &self.opts;
        if let (Some(max), Some(llm)) = (o.max_cost_usd, llm) {
            let total = llm.spent().cost_usd;
            if total >= max {
                return Some(format!(
                    "run budget: ${total:.4} spent of --max-cost-usd {max}"
                ));
            }
        }
        if let Some(max) = o.max_task_cost_usd {
            if spent.cost_usd >= max {
                return Some(format!(
                    "task budget: ${:.4} spent of --max-task-cost-usd {max}",
                    spent.cost_usd
                ));
            }
        }
        if let Some(max) = o.max_minutes {
            let m = self.started.elapsed().as_secs_f64() / 60.0;
            if m >= max {
                return Some(format!("run budget: {m:.2} min of --max-minutes {max}"));
            }
        }
        if let Some(max) = o.max_task_minutes {
            let m = task_started.elapsed().as_secs_f64() / 60.0;
            if m >= max {
                return Some(format!(
                    "task budget: {m:.2} min of --max-task-minutes {max}"
                ));
            }
        }
        None
    }
}

pub(super) fn model_roles(opts: &Options) -> Result<Vec<String>> {
    Ok(match opts.kind {
        Kind::CoderJudge => vec![coder_model(opts)?, judge_model(opts)?],
        Kind::Kevin | Kind::CudaAgent => vec![opts
            .model
            .clone()
            .context("this agent needs --model NAME (a model of kbench.toml)")?],
        Kind::Command => vec![],
    })
}

pub(crate) fn coder_model(opts: &Options) -> Result<String> {
    opts.coder
        .clone()
        .or_else(|| opts.model.clone())
        .context("coder-judge needs --coder NAME (or --model NAME for both roles)")
}

pub(crate) fn judge_model(opts: &Options) -> Result<String> {
    opts.judge
        .clone()
        .or_else(|| opts.coder.clone())
        .or_else(|| opts.model.clone())
        .context("coder-judge needs --judge NAME (or --model NAME for both roles)")
}
