//! `kbench setup`: make (or check) the Python environment and say what it holds.

use anyhow::Result;

use crate::cli::SetupArgs;
use crate::exit;
use crate::worker::python::{self, PythonChoice};

pub fn command(a: SetupArgs) -> Result<i32> {
    let cache = python::cache_dir();
    let choice = PythonChoice::resolve(a.python.python.as_deref(), &cache);
    let info = python::setup(&choice, a.quiet)?;
    println!(
        "python {} ({}), torch {}{}, ninja {}",
        info.python,
        info.executable,
        info.torch,
        if info.cuda_available {
            format!(
                ", CUDA {} with {} GPU(s)",
                info.torch_cuda.as_deref().unwrap_or("?"),
                info.device_count
            )
        } else {
            ", CPU only".to_string()
        },
        info.ninja
            .as_deref()
            .unwrap_or("not found (C++/CUDA candidates cannot build)")
    );
    Ok(exit::OK)
}
