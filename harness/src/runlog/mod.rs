//! The run directory: `run.json` (what was asked and every evaluation planned, signed),
//! `records.jsonl` (one eval record per line, signed with a MAC keyed by the run's secret,
//! appended and fsynced as each kernel finishes), `secret` (the run's seed, mode 0600), `lock` (held by the one kbench writing the
//! folder, with its pid), `kernels/` (every candidate source evaluated), `logs/` (worker
//! output, capped), `eval_results.json` (KernelBench's layout of the records, per level).
//!
//! Nothing recorded is ever lost: a run killed mid-write leaves at most one partial line, which
//! `--resume` cuts off (and reports) before appending. A line that does not verify (changed,
//! forged, truncated, not JSON) costs itself only: every reader names it, skips it, reports
//! count its planned evaluation as missing, and `--resume` evaluates its kernel again.
//!
//! Owns the manifest and its signature (`manifest`), the open directory (`dir`), what an
//! `--out` folder may hold (`out_dir`), its writer lock (`lock`), signing (`mac`) and reading
//! the record log (`records`), reading a run folder for a report or a merge (`read`) and the
//! run's secret seed (`seed`). A run directory is opened from a plain [`RunManifest`] its
//! caller builds (from a `RunConfig`: `exec::run_dir`), not from the configuration. May
//! import the boxes below it (`exit`, `gpu/`, `worker/`, `config/`, `cli/`); today it needs
//! none of them, only `kbench_record`.

mod dir;
mod eval_results;
mod lock;
pub(crate) mod mac;
mod manifest;
mod names;
mod out_dir;
pub(crate) mod read;
mod records;
pub mod seed;

pub(crate) use dir::{write_atomic, RunDir, MANIFEST, RECORDS, SECRET};
pub(crate) use eval_results::write_eval_results;
pub(crate) use lock::{WriterLock, LOCK};
pub(crate) use manifest::ManifestFile;
pub use manifest::RunManifest;
#[cfg(test)]
pub(crate) use manifest::Seal;
pub(crate) use manifest::{now_unix, write_signed};
pub(crate) use names::sanitize;
pub(crate) use out_dir::{check_out, foreign_error, out_folder, OutFolder};
#[cfg(test)]
pub(crate) use records::LEGACY_RECORD_MAC;
pub use records::{line_verifies, records_key, signed_line, LineFault, RecordLog, RECORD_MAC};
