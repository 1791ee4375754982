//! `kbench check --problem P --kernel K`: one kernel, every case family, a per-case table —
//! the way a reviewer checks one correctness claim.
//!
//! The kernel goes through the same engine as `kbench run` (separate trusted reference
//! process, verdicts in Rust, the same case families and tolerance profiles); only the
//! output differs: each case with its verdict, error statistics and, where a case did not
//! apply or a denormal result was flushed, why ([`kbench_reports::render_case_table`]).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use crate::cli::{CheckArgs, SuiteArgs};
use crate::config::AgentConfig;

/// Runs the check; exit code 0 when the kernel is correct under every family that applies,
/// 3 (kernels failed, as for `kbench run`) otherwise.
pub fn command(a: &CheckArgs, stop: Arc<AtomicBool>) -> Result<i32> {
    if a.eval.stop_starting_after.is_some() {
        bail!("--stop-starting-after is for runs of many problems (`kbench run`, `kbench baselines measure`); `check` evaluates one kernel");
    }
    if !a.kernel.is_file() {
        bail!(
            "kernel file {} not found: pass the candidate module (defining class ModelNew) with --kernel",
            a.kernel.display()
        );
    }
    let temp = tempfile::tempdir().context("creating a temporary folder")?;
    let out = match &a.out {
        Some(o) => o.clone(),
        None => temp.path().join("run"),
    };
    let suite = SuiteArgs {
        problem: Some(a.problem.clone()),
        ..SuiteArgs::default()
    };
    // The replay agent takes `<id>_<label>.py`: the kernel is copied under that name.
    let replay = temp.path().join("kernel");
    std::fs::create_dir_all(&replay)?;
    let mut config = crate::commands::run_config::build(
        &suite,
        &a.python,
        &a.eval,
        AgentConfig::Replay {
            dir: replay.clone(),
        },
        &out,
        None,
    )?;
    config.quiet = true;
    let problem = config.problems[0].clone();
    let stem = a
        .kernel
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("kernel")
        .replace(|c: char| !c.is_ascii_alphanumeric() && c != '_', "_");
    let prefix = format!("{}_", problem.id);
    let name = if stem.starts_with(&prefix) {
        stem
    } else {
        format!("{prefix}{stem}")
    };
    std::fs::copy(&a.kernel, replay.join(format!("{name}.py")))
        .with_context(|| format!("reading {}", a.kernel.display()))?;
    let result = crate::exec::run(&config, stop)?;
    if result.interrupted && result.added == 0 {
        eprintln!("kbench: interrupted before the kernel's verdict");
        return Ok(crate::exit::INTERRUPTED);
    }
    let Some(record) = result.records.last() else {
        bail!("the run recorded nothing (interrupted?)");
    };
    print!("{}", kbench_reports::render_case_table(record));
    if a.out.is_some() {
        println!("run directory: {}", result.run_dir.display());
    }
    Ok(if record.outcome.is_ok() {
        crate::exit::OK
    } else {
        crate::exit::KERNELS_FAILED
    })
}
