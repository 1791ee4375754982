//! Arguments of `kbench merge`: the shards of one run into one run directory.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Run directories to combine (shards of one run), or the --out directory of
    /// `kbench slurm submit` (all its shards).
    #[arg(required = true, value_name = "DIR")]
    pub inputs: Vec<PathBuf>,
    /// Where the merged run goes (default: the submission directory, when merging one).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Merge a submission even though some of its shards have not finished.
    #[arg(long)]
    pub partial: bool,
    /// Merge runs that cannot be verified (no `secret`, a changed `run.json`) instead of
    /// refusing them: the merged run gets no secret, so every report of it says UNVERIFIED.
    #[arg(long)]
    pub unverified: bool,
}
