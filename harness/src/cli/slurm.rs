//! Arguments of `kbench slurm submit|status|resubmit`: a kbench command sharded over a
//! Slurm job array.

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct SlurmArgs {
    #[command(subcommand)]
    pub command: SlurmCommand,
}

#[derive(Debug, Subcommand)]
pub enum SlurmCommand {
    /// Write a job array over N shards of a kbench command and submit it with sbatch.
    Submit(SlurmSubmitArgs),
    /// Each shard's state: done, queued or running (squeue), or stopped unfinished.
    Status(SlurmStatusArgs),
    /// Submit again the shards that stopped unfinished (failed, pre-empted, cancelled, timed
    /// out); each resumes its own run log, so nothing is evaluated twice or lost.
    Resubmit(SlurmResubmitArgs),
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples: kbench slurm submit --shards 8 --partition gpu --time 4:00:00 \
                  -- run --kernelbench KernelBench --agent replay --replay-dir runs/x --out runs/x-eval\n\
                  kbench slurm submit --shards 8 --partition gpu \
                  -- baselines measure --kernelbench KernelBench --work runs/baselines --store baselines/data"
)]
pub struct SlurmSubmitArgs {
    /// Number of shards, one array task each.
    #[arg(long, value_name = "N")]
    pub shards: u32,
    /// Slurm partition (sbatch --partition).
    #[arg(long)]
    pub partition: Option<String>,
    /// Slurm account to charge (sbatch --account).
    #[arg(long)]
    pub account: Option<String>,
    /// Time limit per task in sbatch's format, e.g. 90, 4:00:00 or 1-00:00:00.
    #[arg(long)]
    pub time: Option<String>,
    /// GPUs per task, `N` or `TYPE:N` (sbatch --gres=gpu:...); Slurm sets each task's
    /// CUDA_VISIBLE_DEVICES and the run uses all of them. Default: 1, or 0 with --device cpu.
    #[arg(long, value_name = "[TYPE:]N")]
    pub gpus_per_task: Option<String>,
    /// CPU cores per task (sbatch --cpus-per-task).
    #[arg(long, value_name = "N")]
    pub cpus_per_task: Option<u32>,
    /// Job name in squeue.
    #[arg(long, default_value = "kbench")]
    pub job_name: String,
    /// Another `#SBATCH` option for every task, repeatable, e.g. --sbatch=--qos=high.
    #[arg(long = "sbatch", value_name = "OPTION", allow_hyphen_values = true)]
    pub sbatch_lines: Vec<String>,
    /// kbench executable the tasks run (default: this one); compute nodes must reach it.
    #[arg(long, value_name = "PATH")]
    pub kbench: Option<PathBuf>,
    /// Write the job script and the submission record, but do not call sbatch.
    #[arg(long)]
    pub dry_run: bool,
    /// The kbench command to shard, after `--`: `run ... --out DIR` or `baselines measure
    /// ... --work DIR [--store STORE]`. DIR, which compute nodes must share, gets the shards
    /// (DIR/shards/i) and later the merged run; measure's shards all commit into STORE
    /// (default: the store a local measure would use).
    #[arg(last = true, required = true, num_args = 1.., value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct SlurmStatusArgs {
    /// The directory of `kbench slurm submit` (the command's --out, or measure's --work).
    pub dir: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SlurmResubmitArgs {
    /// The directory of `kbench slurm submit` (the command's --out, or measure's --work).
    pub dir: PathBuf,
    /// Say which shards would be resubmitted, without calling sbatch.
    #[arg(long)]
    pub dry_run: bool,
}
