//! Arguments of `kbench setup`, and `--python` of every command that runs workers.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args, Clone)]
pub struct PythonArgs {
    /// Python interpreter with torch (default: $KBENCH_PYTHON, else kbench's own environment).
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct SetupArgs {
    #[command(flatten)]
    pub python: PythonArgs,
    /// No spinner or progress lines.
    #[arg(long)]
    pub quiet: bool,
    /// Install this torch version instead of the locked one (resolved unlocked; stored
    /// baselines were measured with the locked torch). `kbench setup` alone goes back to the lock.
    #[arg(long, value_name = "VERSION")]
    pub torch: Option<String>,
    /// Package index replacing PyPI for an unlocked install, e.g.
    /// https://download.pytorch.org/whl/cu126 for another CUDA build of torch.
    #[arg(long, value_name = "URL")]
    pub index_url: Option<String>,
    /// Package index besides PyPI for an unlocked install (repeatable).
    #[arg(long, value_name = "URL")]
    pub extra_index_url: Vec<String>,
}
