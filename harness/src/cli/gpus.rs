//! Arguments of `kbench gpus`.

use clap::Args;

#[derive(Debug, Args)]
pub struct GpusArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}
