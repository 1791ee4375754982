//! `kbench setup`: make (or check) the Python environment and say what it holds.

use std::time::Instant;

use anyhow::Result;

use crate::cli::SetupArgs;
use crate::exit;
use crate::worker::python::{self, PythonChoice, PythonInfo, PythonSource};
use crate::worker::setup::{self as env, SetupRequest};

/// [`env::setup`], saying off a terminal, every so often while it works, that it still is:
/// there the spinner is hidden, and installing torch takes minutes in which uv says nothing
/// between resolving and installing. A ready environment returns before the first line.
pub(crate) fn setup_saying_progress(
    choice: &PythonChoice,
    quiet: bool,
    req: &SetupRequest,
) -> Result<PythonInfo> {
    let started = Instant::now();
    let log = match &choice.source {
        PythonSource::PrivateVenv(venv) => venv
            .parent()
            .map(|cache| format!("; its log: {}", cache.join("setup.log").display()))
            .unwrap_or_default(),
        _ => String::new(),
    };
    let _heartbeat = crate::exec::Heartbeat::start(quiet, move || {
        (
            0,
            format!(
                "setup: still setting up the Python environment after {} (the first time, torch takes minutes to download{log})",
                indicatif::FormattedDuration(started.elapsed())
            ),
        )
    });
    env::setup(choice, quiet, req)
}

pub fn command(a: SetupArgs) -> Result<i32> {
    let cache = python::cache_dir();
    let choice = PythonChoice::resolve(a.python.python.as_deref(), &cache);
    let req = SetupRequest {
        torch: a.torch,
        index_url: a.index_url,
        extra_index_urls: a.extra_index_url,
        keep_chosen: false,
    };
    let info = setup_saying_progress(&choice, a.quiet, &req)?;
    let built = match &choice.source {
        PythonSource::PrivateVenv(venv) => match env::read_stamp(venv) {
            Some(s) if s.mode == "locked" => " (from kbench's lock)".to_string(),
            Some(s) => format!(
                " (chosen torch {}, not the lock's {})",
                s.torch.as_deref().unwrap_or("?"),
                env::locked_torch()
            ),
            None => String::new(),
        },
        _ => String::new(),
    };
    println!(
        "python {} ({}), torch {}{}{}, ninja {}",
        info.python,
        info.executable,
        info.torch,
        built,
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
