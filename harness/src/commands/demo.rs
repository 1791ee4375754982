//! `kbench demo`: set up the Python environment and evaluate the reference agent on the
//! smoke suite, replacing the previous demo run.

use anyhow::{Context, Result};

use crate::cli::{DemoArgs, RunArgs};
use crate::commands::run::evaluate;
use crate::commands::run_config::run_config;
use crate::config;
use crate::worker::python::{self, PythonChoice};

pub fn command(a: DemoArgs) -> Result<i32> {
    let cache = python::cache_dir();
    let choice = PythonChoice::resolve(a.python.python.as_deref(), &cache);
    eprintln!(
        "kbench demo: checking the Python environment (first time: installs torch, a few minutes)"
    );
    let req = crate::worker::setup::SetupRequest {
        keep_chosen: true,
        ..Default::default()
    };
    let info = crate::commands::setup::setup_saying_progress(&choice, false, &req)?;
    let device = config::resolve_device(&a.device)?;
    eprintln!(
        "kbench demo: torch {} on {}; evaluating the reference agent on the smoke suite",
        info.torch, device
    );
    let out = a
        .out
        .unwrap_or_else(|| std::path::PathBuf::from("kbench-demo"));
    // Only a kbench run is cleared: another tool's folder (even one with a run.json) is
    // refused, never removed.
    if crate::runlog::check_out(&out)? == crate::runlog::OutFolder::Run {
        std::fs::remove_dir_all(&out)
            .with_context(|| format!("clearing the previous demo run {}", out.display()))?;
    }
    let args = RunArgs::parse_demo(&out, &device.to_string(), a.python.python.as_deref());
    let config = run_config(args)?;
    evaluate(&config)
}
