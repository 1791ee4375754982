//! `DIR/slurm/submission.json`: what was submitted (the sharded command, the sbatch options,
//! every sbatch call), and which kbench command the tasks run.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::{SUBMISSION, SUBMISSION_SCHEMA};
use crate::runlog::write_atomic;

/// sbatch options shared by every task of a submission.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SbatchOptions {
    pub(crate) job_name: String,
    pub(crate) partition: Option<String>,
    pub(crate) account: Option<String>,
    pub(crate) time: Option<String>,
    /// `N` or `TYPE:N`; `None` asks for no GPU.
    pub(crate) gpus_per_task: Option<String>,
    pub(crate) cpus_per_task: Option<u32>,
    /// More options, each written as an `#SBATCH` line.
    pub(crate) extra: Vec<String>,
}

/// One sbatch call: the array job it made and the shards it covers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SubmittedJob {
    pub(crate) job_id: String,
    pub(crate) shards: Vec<u32>,
    pub(crate) submitted_unix_s: f64,
}

/// `DIR/slurm/submission.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Submission {
    pub(crate) schema_version: u32,
    pub(crate) kbench_version: String,
    pub(crate) shards: u32,
    /// kbench's arguments after the program name, without `--out`.
    pub(crate) command: Vec<String>,
    /// The executable the tasks run.
    pub(crate) kbench: PathBuf,
    /// Working directory of the tasks (where `kbench slurm submit` ran), so that relative
    /// paths in the command mean what they meant there.
    pub(crate) workdir: PathBuf,
    pub(crate) sbatch: SbatchOptions,
    /// kbench's environment variables as they were at submission (`KBENCH_PYTHON`,
    /// `KBENCH_CACHE_DIR`), exported by the script so that tasks use the same Python even
    /// where a site's sbatch does not pass the submitting shell's environment on.
    #[serde(default)]
    pub(crate) env: Vec<(String, String)>,
    /// Every sbatch call, oldest first; a shard's latest job is the last one naming it.
    pub(crate) jobs: Vec<SubmittedJob>,
}

impl Submission {
    pub(crate) fn load(dir: &Path) -> Result<Submission> {
        let path = dir.join(SUBMISSION);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "reading {}: is {} the --out directory of `kbench slurm submit`?",
                path.display(),
                dir.display()
            )
        })?;
        let s: Submission = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a kbench submission record", path.display()))?;
        if s.schema_version > SUBMISSION_SCHEMA {
            bail!(
                "{} was written by a newer kbench (schema {}); use that version",
                path.display(),
                s.schema_version
            );
        }
        Ok(s)
    }

    pub(super) fn save(&self, dir: &Path) -> Result<()> {
        write_atomic(&dir.join(SUBMISSION), &serde_json::to_vec_pretty(self)?)
    }

    /// The last job that ran or runs `shard`.
    pub(crate) fn latest_job(&self, shard: u32) -> Option<&SubmittedJob> {
        self.jobs.iter().rev().find(|j| j.shards.contains(&shard))
    }

    /// Which kbench command the tasks run.
    pub(crate) fn sharded(&self) -> Sharded {
        Sharded::of(&self.command)
    }

    /// The baseline store a `baselines measure` submission's shards commit into: its
    /// `--store`, which `submit` always writes into the command, absolute.
    pub(crate) fn store(&self) -> Option<PathBuf> {
        if self.sharded() != Sharded::Measure {
            return None;
        }
        flag_value(&self.command, "--store").map(PathBuf::from)
    }
}

/// The kbench commands that `kbench slurm submit` shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum Sharded {
    /// `kbench run`: shards are run directories, joined by `kbench merge`.
    #[serde(rename = "run")]
    Run,
    /// `kbench baselines measure`: shards commit into one baseline store as they go.
    #[serde(rename = "baselines measure")]
    Measure,
}

impl Sharded {
    /// The kind of a command line (after `kbench`): kbench has no global options, so the
    /// subcommand comes first.
    pub(super) fn of(argv: &[String]) -> Sharded {
        match argv.first().map(String::as_str) {
            Some("baselines") => Sharded::Measure,
            _ => Sharded::Run,
        }
    }

    /// Whether a shard whose kbench exited with `code` has done all it had to.
    pub(super) fn finished(self, code: i32) -> bool {
        match self {
            // 3: all evaluated, some kernels failed.
            Sharded::Run => matches!(code, crate::exit::OK | crate::exit::KERNELS_FAILED),
            // 3: some problems still lack a time or a recorded failure; run it again.
            Sharded::Measure => code == crate::exit::OK,
        }
    }
}

/// The value of the last `FLAG VALUE` / `FLAG=VALUE` in `argv`.
pub(super) fn flag_value(argv: &[String], flag: &str) -> Option<String> {
    let mut value = None;
    let mut it = argv.iter();
    let eq = format!("{flag}=");
    while let Some(a) = it.next() {
        if a == flag {
            value = it.next().cloned();
        } else if let Some(v) = a.strip_prefix(&eq) {
            value = Some(v.to_string());
        }
    }
    value
}

pub(crate) fn shard_dir(dir: &Path, shard: u32) -> PathBuf {
    dir.join("shards").join(shard.to_string())
}
