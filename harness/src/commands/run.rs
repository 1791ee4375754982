//! `kbench run`: evaluate an agent's kernels over a suite, optionally against baseline
//! times; the LLM agents go through `llm::run`.

use anyhow::{Context, Result};

use crate::cli::{AgentKind, RunArgs};
use crate::commands::baselines;
use crate::commands::run_config::{agent_options, run_config};
use crate::commands::stop::install_stop_flag;
use crate::config::RunConfig;
use crate::exit;

pub fn command(a: RunArgs) -> Result<i32> {
    // From the start: a SIGTERM while the run is being set up stops it like one later.
    install_stop_flag();
    let request = match &a.baselines {
        Some(spec) => Some(kbench_baselines::BaselineRequest::parse(spec)?),
        None if !a.baseline_file.is_empty() => Some(kbench_baselines::BaselineRequest::default()),
        None => None,
    };
    let request = request.map(|mut r| -> Result<_> {
        for f in &a.baseline_file {
            let (mode, path) = f.split_once('=').with_context(|| {
                format!("--baseline-file {f:?}: expected MODE=FILE, e.g. compile=baselines/data/x/torch-2.11.0/compile.json")
            })?;
            let mode = kbench_baselines::Mode::parse(mode)
                .map_err(|e| anyhow::anyhow!("--baseline-file {f:?}: {e}"))?;
            r.files.push((mode, std::path::PathBuf::from(path)));
        }
        r.force = a.force_baselines;
        r.store = a.baseline_store.clone();
        Ok(r)
    });
    let request = request.transpose()?;
    let agent_opts = match a.agent {
        AgentKind::Reference | AgentKind::Replay => None,
        k => Some(agent_options(k, &a.agent_args)?),
    };
    let mut config = run_config(a)?;
    // Before anything is written there (live baselines, an agent's calls): never another
    // tool's folder.
    crate::runlog::check_out(&config.out)?;
    if let Some(opts) = agent_opts {
        if request.is_some() {
            anyhow::bail!("--baselines is not yet supported with the LLM agents");
        }
        if config.stop_starting.is_some() {
            anyhow::bail!(
                "--stop-starting-after is for kernels on disk and baselines; the LLM agents stop starting rounds with --max-minutes"
            );
        }
        return crate::llm::run(&config, &opts, install_stop_flag());
    }
    if let Some(req) = &request {
        if config.timing.is_none() {
            anyhow::bail!("--baselines compares times: drop --no-timing");
        }
        config.baselines =
            baselines::prepare_for_run(&config, req, install_stop_flag())?.map(std::sync::Arc::new);
    }
    evaluate(&config)
}

/// Runs `config` through the engine and prints its summary; the exit code says whether
/// every kernel came out `ok`.
pub(crate) fn evaluate(config: &RunConfig) -> Result<i32> {
    let stop = install_stop_flag();
    let result = crate::exec::run(config, stop)?;
    let summary = kbench_reports::summarize(&result.records);
    println!("{}", kbench_reports::render_summary(&summary));
    if let Some(table) = &config.baselines {
        // The GPUs that timed this run's candidates, against which the stored times' GPUs
        // are told.
        let run_gpus: Vec<String> = result
            .records
            .iter()
            .filter_map(|r| r.env.gpu_uuid.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        for line in table.describe(&config.problems, &run_gpus) {
            println!("{line}");
        }
        for line in baselines::summary_lines(&result.records, table) {
            println!("{line}");
        }
        let used = result.run_dir.join("baselines_used.json");
        crate::runlog::write_atomic(
            &used,
            serde_json::to_string_pretty(&table.manifest(&config.problems))?.as_bytes(),
        )?;
    }
    // KernelBench's layout of the same records, for its analysis scripts.
    crate::runlog::write_eval_results(&result.run_dir, &result.records)?;
    println!(
        "run log: {}",
        result.run_dir.join(crate::runlog::RECORDS).display()
    );
    if result.interrupted {
        eprintln!(
            "kbench: interrupted; what was recorded is kept: rerun with --resume to continue"
        );
        return Ok(exit::INTERRUPTED);
    }
    if result.not_started > 0 {
        if result.cut_off {
            eprintln!(
                "kbench: stopped starting problems after {} s (--stop-starting-after): {} problem(s) not started; rerun with --resume to continue",
                config.stop_starting.map_or(0.0, |(s, _)| s),
                result.not_started
            );
        } else {
            eprintln!(
                "kbench: {} problem(s) left unevaluated (no GPU was left to take them); rerun with --resume to continue",
                result.not_started
            );
        }
        return Ok(exit::STOPPED_STARTING);
    }
    Ok(if result.records.iter().all(|r| r.outcome.is_ok()) {
        exit::OK
    } else {
        exit::KERNELS_FAILED
    })
}
