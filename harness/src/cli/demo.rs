//! Arguments of `kbench demo`: set up, then the reference agent on the smoke suite.

use std::path::PathBuf;

use clap::Args;

use super::setup::PythonArgs;

#[derive(Debug, Args)]
pub struct DemoArgs {
    #[command(flatten)]
    pub python: PythonArgs,
    /// Run directory (default: ./kbench-demo, replaced on each demo).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// auto (a GPU when there is one), cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    pub device: String,
}
