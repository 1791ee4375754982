//! `kbench audit`: which problems of a suite a trivial kernel passes under KernelBench's check.
//!
//! KernelBench compares a kernel's outputs with the reference's on inputs from each problem's
//! own `get_inputs()` (`torch.rand` for 247 of its 250 problems: uniform on [0, 1)) with
//! `allclose` at atol = rtol = 1e-4 (HEAD) or 1e-2 (v0.1, the papers'). On such inputs some
//! problems are passed by kernels that do nothing: ReLU is the identity on [0, 1), a softmax
//! over 393,216 columns is below atol everywhere, so zeros pass.
//!
//! For each problem a trusted reference worker loads the problem (weights from the public
//! weight seed, as `run` does) and answers the `audit` command (PROTOCOL.md): for each input
//! family (`random`: the problem's own inputs; `signed`: the same shapes, signed values) it
//! measures, per output, how far zeros, the best constant and each same-shaped input are from
//! the reference output, and how much the output moves when each input and each parameter is
//! perturbed, all as *excesses* `max(|a − b| − rtol·|b|)`: a quantity passes `allclose` iff
//! its excess is ≤ atol. Which of those are weaknesses is decided here, by the pure functions
//! [`family_flags`] and [`findings`].
//!
//! The seeds are public and derived from each problem's sha256: an audit is reproducible,
//! not secret.
//!
//! The parts: `findings` (the worker's measurements and the flags and findings computed
//! from them) and `report` (each problem's audit, the counts, `audit.md`) are pure;
//! `setup` checks the arguments and builds the workers' configuration; `runner` drives the
//! reference workers on a pool of job threads under a memory guard; `progress` keeps the
//! file `--resume` continues from. [`command`] joins them: set up, measure, analyse, then
//! print and write.
//!
//! May import every box below `commands/` (exec, measure, config, runlog, worker, cli, ...),
//! and `commands::baselines` for its calendar.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};

use crate::cli::AuditArgs;

mod findings;
mod progress;
mod report;
mod runner;
mod setup;
#[cfg(test)]
mod tests;

pub use findings::findings_from_json;
pub(crate) use report::{render_markdown, AuditReport};

/// The input families an audit measures: KernelBench's own, and the one that should remove
/// its weaknesses.
pub(crate) const FAMILIES: [&str; 2] = ["random", "signed"];
/// Parameters perturbed per problem, at most (the worker picks them; `weights_total` says how
/// many the model has).
pub(crate) const MAX_WEIGHTS: u64 = 64;
/// Schema of `audit.json`.
pub(crate) const SCHEMA: &str = "kbench-audit/1";

/// `kbench audit`.
pub fn command(a: &AuditArgs, stop: Arc<AtomicBool>) -> Result<i32> {
    let setup = setup::Setup::new(a)?;
    let (progress, resumed) =
        progress::Progress::open(a.out.as_deref(), a.resume, &setup.settings)?;
    eprintln!("{}", setup.banner());
    let total = setup.config.problems.len();
    let prefilled = progress.reuse(&setup.config.problems, resumed)?;
    let reused = prefilled.iter().filter(|p| p.is_some()).count();
    if a.resume {
        eprintln!(
            "kbench audit: resuming: {reused} problem(s) already audited, {} to go",
            total - reused
        );
    }
    let measured = runner::measure(&setup, prefilled, &progress, &stop);
    let was_interrupted = measured.interrupted || stop.load(Ordering::SeqCst);
    let report = setup.report(measured, was_interrupted);
    let md = render_markdown(&report);
    print!("{md}");
    if let Some(out) = &a.out {
        write_report(out, &report, &md)?;
        if !was_interrupted {
            progress.finish(out);
        }
        eprintln!(
            "kbench audit: wrote {} and {}",
            out.join("audit.json").display(),
            out.join("audit.md").display()
        );
    }
    let c = &report.counts;
    eprintln!(
        "kbench audit: {} audited, {} flagged, {} not audited",
        c.audited, c.flagged, c.not_audited
    );
    Ok(if was_interrupted {
        crate::exit::INTERRUPTED
    } else {
        crate::exit::OK
    })
}

/// `audit.json` and `audit.md` into `out`.
fn write_report(out: &Path, report: &AuditReport, md: &str) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut js = serde_json::to_string_pretty(report)?;
    js.push('\n');
    crate::runlog::write_atomic(&out.join("audit.json"), js.as_bytes())?;
    crate::runlog::write_atomic(&out.join("audit.md"), md.as_bytes())
}
