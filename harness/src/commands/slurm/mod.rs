//! Runs sharded over a Slurm job array. kbench does not manage a cluster: it writes one
//! sbatch script whose array task `i` runs the given kbench command with `--shard i/N`,
//! submits it, reads the tasks' states back from `squeue` (and `sacct` where accounting is
//! on), and resubmits the shards that stopped unfinished. Every task resumes its own run log,
//! so a resubmitted or requeued shard evaluates only what it has not recorded.
//!
//! The shared output directory (`--out` of the sharded command; compute nodes must see it):
//!
//! ```text
//! DIR/secret                 the run's secret seed, written once at submission; every shard
//!                            reads it (--secret-from), so inputs are those of one run
//! DIR/slurm/submission.json  what was submitted: the command, the sbatch options, the jobs
//! DIR/slurm/job.sbatch       the job array script
//! DIR/slurm/logs/J_i.out     Slurm's output of job J, task i
//! DIR/shards/i/              shard i's own run directory, plus `exit_code` when it ends
//! DIR/run.json, records.jsonl, kernels/, logs/   the merged run, after `kbench merge DIR`
//! ```
//!
//! Two commands shard this way:
//!
//! - `kbench run ... --out DIR`: a task runs `kbench run ... --out DIR/shards/i --shard i/N
//!   --secret-from DIR/secret --resume`; `kbench merge DIR` joins the shards into one run.
//! - `kbench baselines measure ... --work DIR [--store STORE]`: `--work` names DIR (it
//!   holds the measuring runs' logs, as `--out` holds a run), and a task runs `kbench
//!   baselines measure ... --store STORE --work DIR/shards/i --shard i/N`. Its run
//!   directories are under `DIR/shards/i/shard-i-of-N/`. All tasks commit into the one
//!   store, made absolute at submission (the default store of a local measure where none is
//!   given); commits are serialised by a lock on the store. A measure task resumes by
//!   itself: it folds what its earlier attempts recorded and measures only what the store
//!   lacks, so a requeued or resubmitted shard measures nothing twice. There is no secret
//!   and nothing to merge: the store is the result. A shard is done only when measure exited
//!   0 (its 3 means "problems still unmeasured", so the task fails and is resubmitted).
//!
//! The parts: `submission` (the record of what was submitted), `script` (the job array
//! script), `submit` (`submit` and `resubmit`), `status` (each shard's state, as a table or
//! JSON) and `merge` (`kbench merge` of a measure submission). [`command`] runs `kbench slurm`
//! and is the only part that prints.
//!
//! May import every box below `commands/` (runlog, config, worker, cli, ...) and
//! `commands::baselines` (the default baseline store).

use anyhow::Result;

use crate::cli::{SlurmArgs, SlurmCommand, SlurmResubmitArgs, SlurmStatusArgs, SlurmSubmitArgs};
use crate::exit;

mod merge;
mod script;
mod status;
mod submission;
mod submit;
#[cfg(test)]
mod tests;

pub(crate) use merge::merge_measure;
pub(crate) use status::{render_status, shard_finished, status, status_exit_code, status_json};
pub(crate) use submission::{shard_dir, Submission};
pub(crate) use submit::{resubmit, submit};

/// Version of `submission.json` and of `kbench slurm status --json`.
pub(crate) const SUBMISSION_SCHEMA: u32 = 1;
pub(crate) const SUBMISSION: &str = "slurm/submission.json";
pub(crate) const SCRIPT: &str = "slurm/job.sbatch";
/// Written by the job script into a shard's directory with kbench's exit code.
pub(crate) const EXIT_CODE: &str = "exit_code";

/// `kbench slurm`: submits, follows or resubmits a sharded command, and says what it did.
pub fn command(a: &SlurmArgs) -> Result<i32> {
    match &a.command {
        SlurmCommand::Submit(a) => submit_command(a),
        SlurmCommand::Status(a) => status_command(a),
        SlurmCommand::Resubmit(a) => resubmit_command(a),
    }
}

fn submit_command(a: &SlurmSubmitArgs) -> Result<i32> {
    let (dir, sub) = submit(a)?;
    match sub.jobs.last() {
        Some(job) => println!(
            "submitted job {} ({} shard(s)); follow it with: kbench slurm status {}",
            job.job_id,
            sub.shards,
            dir.display()
        ),
        None => println!(
            "dry run: wrote {} (submit its {} shard(s) with `kbench slurm resubmit {}`)",
            dir.join(SCRIPT).display(),
            sub.shards,
            dir.display()
        ),
    }
    if let Some(store) = sub.store() {
        println!(
            "the shards commit their baselines into the store {}",
            store.display()
        );
    }
    Ok(exit::OK)
}

fn status_command(a: &SlurmStatusArgs) -> Result<i32> {
    let dir = std::path::absolute(&a.dir)?;
    let (sub, rows) = status(&dir)?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&status_json(&dir, &sub, &rows))?
        );
    } else {
        print!("{}", render_status(&dir, &sub, &rows));
    }
    Ok(status_exit_code(&rows))
}

fn resubmit_command(a: &SlurmResubmitArgs) -> Result<i32> {
    let (shards, job) = resubmit(&std::path::absolute(&a.dir)?, a.dry_run)?;
    let list = shards
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    match job {
        _ if shards.is_empty() => {
            println!("nothing to resubmit: every shard is done, queued or running")
        }
        Some(job) => println!("resubmitted shard(s) {list} as job {job}"),
        None => println!("would resubmit shard(s) {list}"),
    }
    Ok(exit::OK)
}
