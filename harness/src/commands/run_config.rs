//! Arguments to configuration: the clap structs of `cli` turned into the plain values
//! `config/` checks ([`SuiteSpec`], [`EvalSpec`]) and the [`RunConfig`] of `kbench run`, and
//! the options of the LLM agents.

use std::path::Path;

use anyhow::{bail, Context, Result};
use kbench_record::{ModelMode, Precision, ToleranceProfile};

use crate::cli::{
    AgentArgs, AgentKind, EvalArgs, PrecisionArg, ProfileArg, PythonArgs, RunArgs, SuiteArgs,
};
use crate::config::shard::Shard;
use crate::config::{self, AgentConfig, EvalSpec, RunConfig, Suite, SuiteSpec};

/// The suite the arguments name (the built-in suite is the smoke suite, taken when no file
/// or KernelBench checkout is given).
pub(crate) fn suite_spec(s: &SuiteArgs) -> SuiteSpec {
    SuiteSpec {
        problem: s.problem.clone(),
        kernelbench: s.kernelbench.clone(),
        levels: s.levels.clone(),
        select: s.select.clone(),
    }
}

/// Loads the problems the suite arguments name, filtered by `--select`: those that loaded
/// and the broken problem files.
pub(crate) fn load_suite(s: &SuiteArgs) -> Result<Suite> {
    let spec = suite_spec(s);
    let suite = config::load_suite(&spec)?;
    say_default_levels(&spec);
    Ok(suite)
}

/// Says which levels a KernelBench folder without every level folder gave, `--levels` left
/// out (after the suite loaded: a folder that is no KernelBench folder says so instead).
fn say_default_levels(spec: &SuiteSpec) {
    if let Some(note) = spec.default_levels_note() {
        eprintln!("kbench: note: {note}");
    }
}

/// The evaluation and timing settings of the arguments, not yet checked.
pub(crate) fn eval_spec(a: &EvalArgs) -> EvalSpec {
    EvalSpec {
        device: a.device.clone(),
        gpus: a.gpus.clone(),
        precision: match a.precision {
            PrecisionArg::Fp32 => Precision::Fp32,
            PrecisionArg::Fp16 => Precision::Fp16,
            PrecisionArg::Bf16 => Precision::Bf16,
        },
        profile: match a.profile {
            ProfileArg::Strict => ToleranceProfile::Strict,
            ProfileArg::Kernelbench => ToleranceProfile::KernelBench,
            ProfileArg::KernelbenchV01 => ToleranceProfile::KernelBenchV01,
        },
        model_mode: if a.model_mode == "eval" {
            ModelMode::Eval
        } else {
            ModelMode::Train
        },
        trials: a.trials,
        families: a.families.clone(),
        timed_calls: a.timed_calls,
        min_timed_calls: a.min_timed_calls,
        warmup: a.warmup,
        round_warmup: a.round_warmup.clone(),
        no_timing: a.no_timing,
        require_custom_kernels: a.require_custom_kernels,
        no_l2_flush: a.no_l2_flush,
        time_as: a.time_as.clone(),
        no_sandbox: a.no_sandbox,
        memory_cap: a.memory_cap.clone(),
        timeout_start: a.timeout_start,
        timeout_load: a.timeout_load,
        timeout_run: a.timeout_run,
        timeout_time: a.timeout_time,
        stop_starting_after: a.stop_starting_after,
        build_jobs: a.build_jobs,
        case_cache_mb: a.case_cache_mb,
        cpu_threads: a.cpu_threads,
        weight_seed: a.weight_seed,
        quiet: a.quiet,
    }
}

/// The checked configuration of an evaluation of `agent` over `suite` into `out`
/// ([`RunConfig::build`] of the arguments).
pub(crate) fn build(
    suite: &SuiteArgs,
    python: &PythonArgs,
    a: &EvalArgs,
    agent: AgentConfig,
    out: &Path,
    shard: Option<Shard>,
) -> Result<RunConfig> {
    let spec = suite_spec(suite);
    let config = RunConfig::build(
        &spec,
        python.python.as_deref(),
        &eval_spec(a),
        agent,
        out,
        shard,
    )?;
    say_default_levels(&spec);
    Ok(config)
}

/// The checked configuration of `kbench run`.
pub(crate) fn run_config(a: RunArgs) -> Result<RunConfig> {
    let agent = match a.agent {
        AgentKind::Reference => {
            if a.replay_dir.is_some() {
                bail!("--replay-dir is only for --agent replay");
            }
            AgentConfig::Reference
        }
        AgentKind::Replay => {
            let dir = a
                .replay_dir
                .clone()
                .context("--agent replay needs --replay-dir DIR (a folder of kernel files)")?;
            if !dir.is_dir() {
                bail!(
                    "replay folder {} does not exist or is not a directory",
                    dir.display()
                );
            }
            AgentConfig::Replay { dir }
        }
        AgentKind::CoderJudge | AgentKind::Kevin | AgentKind::CudaAgent | AgentKind::Command => {
            if a.replay_dir.is_some() {
                bail!("--replay-dir is only for --agent replay (replaying model replies is --llm-replay RUN_DIR)");
            }
            AgentConfig::Given {
                agent: agent_kind(a.agent).name(),
                candidates: Vec::new(),
            }
        }
    };
    let mut c = build(&a.suite, &a.python, &a.eval, agent, &a.out, a.shard)?;
    c.resume = a.resume;
    c.secret_from = a
        .secret_from
        .as_deref()
        .map(std::path::absolute)
        .transpose()
        .context("resolving --secret-from")?;
    Ok(c)
}

/// The LLM agent kind of `--agent`, for the agent kinds that loop with feedback.
pub(crate) fn agent_kind(k: AgentKind) -> crate::llm::Kind {
    use crate::llm::Kind;
    match k {
        AgentKind::Kevin => Kind::Kevin,
        AgentKind::CudaAgent => Kind::CudaAgent,
        AgentKind::Command => Kind::Command,
        _ => Kind::CoderJudge,
    }
}

/// The options of an LLM or command agent run, checked.
pub(crate) fn agent_options(kind: AgentKind, a: &AgentArgs) -> Result<crate::llm::Options> {
    let kind = agent_kind(kind);
    for (name, v) in [
        ("--max-cost-usd", a.max_cost_usd),
        ("--max-task-cost-usd", a.max_task_cost_usd),
        ("--max-minutes", a.max_minutes),
        ("--max-task-minutes", a.max_task_minutes),
    ] {
        if let Some(v) = v {
            if !(v.is_finite() && v >= 0.0) {
                bail!("{name} must be a non-negative number, got {v}");
            }
        }
    }
    if a.trajectories == 0 {
        bail!("--trajectories must be at least 1");
    }
    if let Some(r) = &a.llm_replay {
        if !r.is_dir() {
            bail!("--llm-replay {}: no such run directory", r.display());
        }
    }
    Ok(crate::llm::Options {
        kind,
        llm_config: Some(a.llm_config.clone()),
        model: a.model.clone(),
        coder: a.coder.clone(),
        judge: a.judge.clone(),
        max_rounds: a.max_rounds,
        trajectories: a.trajectories,
        trajectory_jobs: a.trajectory_jobs,
        kevin_format_checks: a.kevin_format_checks,
        context_tokens: a.context_tokens,
        max_cost_usd: a.max_cost_usd,
        max_task_cost_usd: a.max_task_cost_usd,
        max_minutes: a.max_minutes,
        max_task_minutes: a.max_task_minutes,
        jobs: a.jobs,
        llm_replay: a.llm_replay.clone(),
        command: a.command.clone(),
        runs_name: a.runs_name.clone(),
        gpu: a.target_gpu.clone(),
        finalists: a.finalists,
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    /// `--finalists` defaults to the agents' own default (cli/ may not import llm).
    #[test]
    fn the_finalists_default_is_the_agents() {
        let cli = crate::cli::Cli::try_parse_from(["kbench", "run", "--out", "x"]).unwrap();
        let crate::cli::Command::Run(a) = cli.command else {
            panic!("parsed as another command");
        };
        assert_eq!(a.agent_args.finalists, crate::llm::DEFAULT_FINALISTS);
    }
}
