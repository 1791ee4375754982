//! `kbench check --problem P --kernel K`: one kernel, every case family, a per-case table —
//! the way a reviewer checks one correctness claim.
//!
//! The kernel goes through the same engine as `kbench run` (separate trusted reference
//! process, verdicts in Rust, the same case families and tolerance profiles); only the
//! output differs: each case with its verdict, error statistics and, where a case did not
//! apply or a denormal result was flushed, why ([`kbench_reports::render_case_table`]).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::agents::untrusted_file::UntrustedDir;
use crate::agents::Candidate;
use crate::cli::{CheckArgs, SuiteArgs};
use crate::config::AgentConfig;

/// The agent named in a check's record: its kernel is a file replayed, as `--agent replay`
/// does, so its record reads like theirs.
pub(crate) const CHECK_AGENT: &str = "replay";

/// Runs the check; exit code 0 when the kernel is correct under every family that applies,
/// 3 (kernels failed, as for `kbench run`) otherwise.
pub fn command(a: &CheckArgs, stop: Arc<AtomicBool>) -> Result<i32> {
    if a.eval.stop_starting_after.is_some() {
        bail!("--stop-starting-after is for runs of many problems (`kbench run`, `kbench baselines measure`); `check` evaluates one kernel");
    }
    // Anything there (a link, a FIFO) is read as a replayed kernel is, and judged so.
    if a.kernel.symlink_metadata().is_err() {
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
    // The kernel is read like a replayed one (no link out of its folder, size capped, a file
    // that is not UTF-8 is its verdict) and named by the user's own path in its record.
    let kernel_path = std::path::absolute(&a.kernel)
        .with_context(|| format!("resolving {}", a.kernel.display()))?;
    let kernel_dir = kernel_path.parent().unwrap_or(Path::new("/")).to_path_buf();
    let file = a.kernel.file_name().map(PathBuf::from).unwrap_or_default();
    let folder = UntrustedDir::new(&kernel_dir, std::slice::from_ref(&out))
        .with_context(|| format!("reading the folder of {}", a.kernel.display()))?;
    let name = a
        .kernel
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("kernel")
        .replace(|c: char| !c.is_ascii_alphanumeric() && c != '_', "_");
    let candidate = Candidate::from_file(&folder, &file, name, 0);
    let mut config = crate::commands::run_config::build(
        &suite,
        &a.python,
        &a.eval,
        AgentConfig::Given {
            agent: CHECK_AGENT,
            candidates: Vec::new(),
        },
        &out,
        None,
    )?;
    // The check's record is keyed by the problem's id, which only the file's name gives
    // (once the file has loaded: a missing or unreadable one says so first).
    if let Err(e) = kbench_suites::parse_problem_file_name(&a.problem) {
        bail!("{e}: `kbench check` keys its record by that id; copy or rename the file");
    }
    config.agent = AgentConfig::Given {
        agent: CHECK_AGENT,
        candidates: vec![(config.problems[0].key(), candidate)],
    };
    // The run's own lines are not shown (the table is the output), so off a terminal the
    // check says every so often that it is still at it, as a run would.
    config.quiet = true;
    let started = std::time::Instant::now();
    let heartbeat = crate::exec::Heartbeat::start(a.eval.quiet, {
        let (kernel, problem) = (a.kernel.clone(), a.problem.clone());
        move || {
            (
                0,
                format!(
                    "check: still checking {} against {} after {}",
                    kernel.display(),
                    problem.display(),
                    indicatif::FormattedDuration(started.elapsed())
                ),
            )
        }
    });
    let result = crate::exec::run(&config, stop);
    drop(heartbeat);
    let result = result?;
    if result.interrupted && result.added == 0 {
        eprintln!("kbench: interrupted before the kernel's verdict");
        return Ok(crate::exit::INTERRUPTED);
    }
    let Some(record) = result.records.last() else {
        bail!("the run recorded nothing (interrupted?)");
    };
    let shown = named_by_users_file(record, &result.run_dir, &kernel_path);
    print!("{}", kbench_reports::render_case_table(&shown));
    if a.out.is_some() {
        println!("run directory: {}", result.run_dir.display());
    }
    Ok(if record.outcome.is_ok() {
        crate::exit::OK
    } else {
        crate::exit::KERNELS_FAILED
    })
}

/// The record as shown: the run's copy of the kernel (`kernels/` of the run folder, gone
/// with a temporary one) named by the user's own file in its outcome's messages.
fn named_by_users_file(
    record: &kbench_record::EvalRecord,
    run_dir: &Path,
    kernel: &Path,
) -> kbench_record::EvalRecord {
    let mut shown = record.clone();
    let (Ok(text), Some(file)) = (serde_json::to_string(&record.outcome), kernel.file_name())
    else {
        return shown;
    };
    let quoted = |p: &Path| {
        let q = serde_json::to_string(&p.display().to_string()).unwrap_or_default();
        q.trim_matches('"').to_string()
    };
    let copies = quoted(&run_dir.join("kernels"));
    let mut rewritten = text.clone();
    // Every `<run>/kernels/<copy>.py` and then the copy's bare name.
    while let Some(at) = rewritten.find(&format!("{copies}/")) {
        let rest = &rewritten[at + copies.len() + 1..];
        let Some(end) = rest.find(".py") else {
            break;
        };
        let copy = rest[..end + 3].to_string();
        rewritten = rewritten
            .replace(&format!("{copies}/{copy}"), &quoted(kernel))
            .replace(&copy, &quoted(Path::new(file)));
    }
    if let Ok(outcome) = serde_json::from_str(&rewritten) {
        shown.outcome = outcome;
    }
    shown
}
