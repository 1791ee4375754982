//! The process boundary: starting Python workers (trusted reference, untrusted candidate,
//! build jobs), the channel to them, their environment, the extension build pool, and the
//! wire helpers that read their answers.
//!
//! May import: `exit`, `gpu`, and the record/suites crates. Knows nothing of runs, cases or
//! verdicts.

pub mod bounds;
pub mod build;
pub mod cgroup;
pub mod freeze;
mod gate;
mod launch;
mod log_sink;
mod prestart;
pub mod probe_cache;
mod process;
pub mod python;
pub mod sandbox;
pub mod setup;
pub mod spawn;
mod wire;

pub use gate::{GateHold, Gates, StartGate};
pub use launch::{
    allow_bytecode_writes, check_keep_cached, pycache_dir, worker_env, BUILD_NICENESS,
    KEEP_CACHED_ENV, MAX_PAYLOAD,
};
pub use prestart::{Prestart, Prestarted};
pub use process::*;
pub use wire::{device_for_worker, error_text, first_line, str_field};

/// A folder for files the harness shares with workers by mapping them: `/dev/shm` (memory,
/// no writeback to a disk while timing) where the host has it, else the temporary folder.
pub fn fast_temp_dir() -> std::path::PathBuf {
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
