//! Named exit codes. "Some kernels failed" is not "the harness failed", and neither is
//! "interrupted".

/// Everything asked for was evaluated and every kernel came out `ok`.
pub(crate) const OK: i32 = 0;
/// The harness itself failed (bad configuration, missing Python environment, I/O error).
pub const HARNESS_ERROR: i32 = 1;
/// Everything asked for was evaluated, and at least one kernel was not `ok`.
pub(crate) const KERNELS_FAILED: i32 = 3;
/// `kbench slurm status`: no shard needs resubmitting, but some are still queued or running.
pub(crate) const SHARDS_ACTIVE: i32 = 4;
/// `kbench slurm status`: some shards stopped unfinished; `kbench slurm resubmit` continues them.
pub(crate) const SHARDS_STOPPED: i32 = 5;
/// Stopped by SIGINT, SIGTERM or SIGHUP: the workers were ended, what was recorded is kept,
/// and `--resume` continues.
pub(crate) const INTERRUPTED: i32 = 130;
/// Problems were left unevaluated without an interruption: `--stop-starting-after` came
/// before the last one was taken (what was taken finished and is recorded, the rest was never
/// started), or no healthy GPU was left to take them. `--resume` (for `baselines measure`, the
/// same command) continues. 75 is sysexits' EX_TEMPFAIL: "run me again".
pub(crate) const STOPPED_STARTING: i32 = 75;
