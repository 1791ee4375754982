//! Arguments of `kbench list`.

use clap::Args;

use super::suite::SuiteArgs;

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub suite: SuiteArgs,
}
