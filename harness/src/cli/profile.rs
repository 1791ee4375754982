//! Arguments of `kbench profile`: one kernel on one problem under Nsight Compute or the
//! PyTorch profiler.

use std::path::PathBuf;

use clap::Args;

use super::eval::PrecisionArg;
use super::setup::PythonArgs;

#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// The problem file (class Model, get_inputs, get_init_inputs).
    #[arg(long, value_name = "FILE")]
    pub problem: PathBuf,
    /// The kernel to profile: a module defining class ModelNew.
    #[arg(long, value_name = "FILE")]
    pub kernel: PathBuf,
    /// auto (a GPU when there is one), cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    pub device: String,
    #[arg(long, value_enum, default_value = "fp32")]
    pub precision: PrecisionArg,
    /// Profiled calls of the kernel (after the warm-up).
    #[arg(long, default_value_t = 5)]
    pub calls: u32,
    /// Unprofiled warm-up calls.
    #[arg(long, default_value_t = 3)]
    pub warmup: u32,
    /// The ncu executable (default: `ncu` on PATH, else /usr/local/cuda/bin/ncu).
    #[arg(long, value_name = "PATH")]
    pub ncu: Option<PathBuf>,
    /// Use the PyTorch profiler even where ncu is available.
    #[arg(long)]
    pub no_ncu: bool,
    /// Keep the worker's specs, results and ncu's CSV in this folder.
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub python: PythonArgs,
}
