//! The run directory: `run.json` (what was asked), `records.jsonl` (one eval record per line,
//! signed with a MAC keyed by the run's secret, appended and fsynced as each kernel
//! finishes), `secret` (the run's seed, mode 0600), `lock` (held by the one kbench writing the
//! folder, with its pid), `kernels/` (every candidate source evaluated), `logs/` (worker
//! output, capped), `eval_results.json` (KernelBench's layout of the records, per level).
//!
//! Nothing recorded is ever lost: a run killed mid-write leaves at most one partial line, which
//! `--resume` cuts off (and reports) before appending. A line that does not verify (changed,
//! forged, truncated, not JSON) costs itself only: every reader names it, skips it, and
//! `--resume` evaluates its kernel again.
//!
//! Owns the manifest (`manifest`), the open directory (`dir`), its writer lock (`lock`),
//! signing and reading the record log (`records`) and the run's secret seed (`seed`). A run directory is opened from a plain
//! [`RunManifest`] its caller builds (from a `RunConfig`: `exec::run_dir`), not from the
//! configuration. May import the boxes below it (`exit`, `gpu/`, `worker/`, `config/`,
//! `cli.rs`); today it needs none of them, only `kbench_record`.

mod dir;
mod eval_results;
mod lock;
mod manifest;
mod names;
mod records;
pub mod seed;

pub use dir::{write_atomic, RunDir, MANIFEST, RECORDS, SECRET};
pub use eval_results::{write_eval_results, EVAL_RESULTS};
pub use lock::{WriterLock, LOCK};
pub use manifest::{now_unix, RunManifest};
pub use names::sanitize;
pub use records::{signed_line, LineFault, LogLine, RecordLog, Verifier, RECORD_MAC};
