//! The process boundary: starting Python workers (trusted reference, untrusted candidate,
//! build jobs), the channel to them, their environment, the extension build pool, and the
//! wire helpers that read their answers.
//!
//! May import: `exit`, `gpu`, and the record/suites crates. Knows nothing of runs, cases or
//! verdicts.

pub(crate) mod bounds;
pub(crate) mod build;
pub(crate) mod cgroup;
pub(crate) mod freeze;
mod gate;
pub(crate) mod host_builds;
mod launch;
pub(crate) mod light_headers;
mod log_sink;
pub(crate) mod pch;
mod prestart;
pub(crate) mod probe_cache;
mod process;
pub mod python;
pub(crate) mod sandbox;
pub(crate) mod setup;
pub(crate) mod spawn;
mod wire;

pub(crate) use gate::Gates;
pub(crate) use launch::{
    allow_bytecode_writes, build_niceness, check_keep_cached, worker_env, BUILD_NICENESS,
    KEEP_CACHED_ENV, MAX_PAYLOAD,
};
pub(crate) use prestart::Prestart;
pub(crate) use process::*;
pub use python::pycache_dir;
pub(crate) use wire::{device_for_worker, error_text, first_line, str_field};

/// A folder for files the harness shares with workers by mapping them: `/dev/shm` (memory,
/// no writeback to a disk while timing) where the host has it, else the temporary folder.
pub(crate) fn fast_temp_dir() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    let writable = tempfile::Builder::new()
        .prefix(".kbench-probe-")
        .tempfile_in(shm)
        .is_ok();
    if writable {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}
