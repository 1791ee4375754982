//! Named exit codes. "Some kernels failed" is not "the harness failed", and neither is
//! "interrupted".

/// Everything asked for was evaluated and every kernel came out `ok`.
pub const OK: i32 = 0;
/// The harness itself failed (bad configuration, missing Python environment, I/O error).
pub const HARNESS_ERROR: i32 = 1;
/// The command line could not be parsed (clap's own code).
pub const USAGE: i32 = 2;
/// Everything asked for was evaluated, and at least one kernel was not `ok`.
pub const KERNELS_FAILED: i32 = 3;
/// Stopped by SIGINT/SIGTERM; what was recorded is kept and `--resume` continues.
pub const INTERRUPTED: i32 = 130;
