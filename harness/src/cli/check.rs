//! Arguments of `kbench check`: one kernel on one problem under every case family.

use std::path::PathBuf;

use clap::Args;

use super::eval::EvalArgs;
use super::setup::PythonArgs;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The problem file (class Model, get_inputs, get_init_inputs), named `<id>_<Name>.py`.
    #[arg(long, value_name = "FILE")]
    pub problem: PathBuf,
    /// The kernel to check: a module defining class ModelNew.
    #[arg(long, value_name = "FILE")]
    pub kernel: PathBuf,
    /// Keep the run directory (record, logs) here; default: a temporary one.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub python: PythonArgs,
    #[command(flatten)]
    pub eval: EvalArgs,
}
