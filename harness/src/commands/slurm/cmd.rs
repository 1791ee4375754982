//! `kbench slurm submit|status|resubmit`: what each prints and its exit code.

use anyhow::Result;

use crate::cli::{SlurmArgs, SlurmCommand};
use crate::commands::slurm;
use crate::exit;

pub(crate) fn command(a: &SlurmArgs) -> Result<i32> {
    match &a.command {
        SlurmCommand::Submit(a) => {
            let (dir, sub) = slurm::submit(a)?;
            match sub.jobs.last() {
                Some(job) => println!(
                    "submitted job {} ({} shard(s)); follow it with: kbench slurm status {}",
                    job.job_id,
                    sub.shards,
                    dir.display()
                ),
                None => println!(
                    "dry run: wrote {} (submit its {} shard(s) with `kbench slurm resubmit {}`)",
                    dir.join(slurm::SCRIPT).display(),
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
        SlurmCommand::Status(a) => {
            let dir = std::path::absolute(&a.dir)?;
            let (sub, rows) = slurm::status(&dir)?;
            if a.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&slurm::status_json(&dir, &sub, &rows))?
                );
            } else {
                print!("{}", slurm::render_status(&dir, &sub, &rows));
            }
            Ok(slurm::status_exit_code(&rows))
        }
        SlurmCommand::Resubmit(a) => {
            let (shards, job) = slurm::resubmit(&std::path::absolute(&a.dir)?, a.dry_run)?;
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
    }
}
