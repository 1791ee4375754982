//! `kbench setup`: make (or check) the Python environment and say what it holds.

use std::path::Path;
use std::time::Instant;

use anyhow::Result;

use crate::cli::SetupArgs;
use crate::exit;
use crate::worker::pch::{Kind, Pch};
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
    // On stderr: what setup did, not what the environment holds (a second setup's stdout is
    // the first's).
    if let Some(line) = precompiled_header(&cache, &choice, &info) {
        eprintln!("{line}");
    }
    Ok(exit::OK)
}

/// Makes the precompiled `torch/extension.h` that candidates' C++ builds use (see
/// `worker::pch`), for the extensions this host builds (CUDA ones where torch sees a GPU);
/// one line on it. A failure costs only build time, so it is said, not fatal.
fn precompiled_header(cache: &Path, choice: &PythonChoice, info: &PythonInfo) -> Option<String> {
    let script = python::materialize_worker(cache).ok()?;
    let kind = if info.cuda_available {
        Kind::Cuda
    } else {
        Kind::Cpu
    };
    let pch = Pch::of(cache, info, &choice.python, &script, kind)?;
    if pch.complete() {
        return pch
            .none_made()
            .map(|why| format!("precompiled torch/extension.h: none here ({why})"));
    }
    let started = Instant::now();
    // Both variants at once where there are cores (each compiler takes about 2 GiB).
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get().min(2));
    Some(match pch.make_now(jobs) {
        Ok(()) if pch.complete() => format!(
            "precompiled torch/extension.h for candidates' C++ builds: made in {:.0} s ({})",
            started.elapsed().as_secs_f64(),
            pch.dir().display()
        ),
        Ok(()) => format!(
            "precompiled torch/extension.h: none made here ({}); C++ builds parse it in full",
            pch.none_made()
                .unwrap_or_else(|| "the helper said nothing".into())
        ),
        Err(e) => format!(
            "warning: precompiled torch/extension.h not made, C++ builds parse it in full: {}",
            e.trim()
        ),
    })
}
