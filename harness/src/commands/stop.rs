//! The stop flag of a long command: set by SIGINT/SIGTERM, so that a run stops between
//! kernels and keeps what it recorded.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The process's stop flag, its signal handler installed on first use.
pub fn install_stop_flag() -> Arc<AtomicBool> {
    static STOP: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    Arc::clone(STOP.get_or_init(|| {
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        // Failing to install a handler only loses graceful stops.
        let _ = ctrlc::set_handler(move || s.store(true, Ordering::SeqCst));
        stop
    }))
}
