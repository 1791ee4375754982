//! Baselines through the evaluation engine: `kbench baselines measure`, and the baselines
//! of `kbench run --baselines`.
//!
//! A baseline mode is measured as a candidate: `ModelNew` subclasses the problem's `Model`
//! (same weights from the same seed) and, for a compile mode, sends `forward` through
//! `torch.compile(mode=...)` (see [`Mode::candidate_source`]). So a mode is loaded in a
//! fresh process (which is stronger than `torch._dynamo.reset()` between problems),
//! compiled by one warm-up call inside the load timeout (the per-problem compile timeout),
//! checked for correctness like any kernel, and timed by the same interleaved timer as
//! every candidate, against the eager reference. The eager baseline is the reference
//! side of those same timings: exactly the time `kbench run`'s own speedups divide.
//!
//! Measurements land in a run directory under a work folder first (each record appended
//! and fsynced as it is made), and are folded from there into the store, so an interrupted
//! measurement loses nothing: the next `measure` folds what the killed one recorded and
//! plans only what is still missing.
//!
//! - `store`: the store files of one GPU and torch version, and folding records into them.
//! - `measuring`: measuring the missing times through the engine, and resolving the
//!   baselines of `kbench run --baselines`.
//! - `coverage`: `show`'s coverage table (per file and level: measured, failed, stale, gaps).
//! - `subcommands`: the `measure`, `import` and `show` subcommands and the run summary's
//!   baseline lines, the only printing.
//!
//! The baseline table a run compares against (and what `--baselines` asked for) is plain data
//! in `kbench_baselines`; the agent that proposes baseline candidates is
//! `crate::agents::baseline`.
//!
//! May import every box below `commands/` (it runs the engine through `crate::exec::run`).

mod coverage;
mod measuring;
mod store;
mod subcommands;

pub(crate) use measuring::civil_from_days;
pub(crate) use measuring::prepare_for_run;
pub(crate) use store::default_store;
pub use subcommands::{import_command, measure_command, show_command, summary_lines};
