//! The stop flag of a long command: raised by SIGINT, SIGTERM (what Slurm sends on
//! pre-emption, and `kill`'s default) and SIGHUP (the terminal went away), so that a run
//! stops between kernels: the workers in flight are killed with their process groups (they
//! notice the flag within 0.2 s), what was recorded is kept, and the command exits with
//! `exit::INTERRUPTED`; `--resume` continues.
//!
//! The handlers are `signal-hook`'s `flag::register` (an async-signal-safe store into the
//! flag), chosen over `ctrlc` because it installs each signal on its own: a SIGHUP ignored
//! when kbench started (`nohup kbench run ...`) stays ignored, as the user asked the run to
//! outlive the terminal.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// The process's stop flag, its signal handlers installed on first use.
pub fn install_stop_flag() -> Arc<AtomicBool> {
    static STOP: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    Arc::clone(STOP.get_or_init(|| {
        let stop = Arc::new(AtomicBool::new(false));
        let mut signals = vec![SIGINT, SIGTERM];
        if !ignored_at_start(SIGHUP) {
            signals.push(SIGHUP);
        }
        for sig in signals {
            // Failing to install a handler only loses graceful stops.
            let _ = signal_hook::flag::register(sig, Arc::clone(&stop));
        }
        stop
    }))
}

/// Whether `sig` is ignored by this process (inherited from its parent): `SigIgn` of
/// `/proc/self/status`, a hex mask with bit n-1 for signal n.
fn ignored_at_start(sig: i32) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("SigIgn:"))
                .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        })
        .is_some_and(|mask| sig >= 1 && mask & (1u64 << (sig - 1)) != 0)
}
