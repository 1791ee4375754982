//! Statistics over kbench's timing samples and eval records, the metrics of the papers it
//! reproduces, and their renderings: terminal tables, CSV / JSON / Markdown exports, paper
//! table presets, plots and a static leaderboard page.
//!
//! Measure → analyse → report, joined by plain data: [`build_report`] turns eval records
//! into a [`Report`] with pure functions (nothing here measures); every renderer reads the
//! `Report` and computes no statistics. Only the plot module writes files (PNG through
//! plotters); everything else returns strings.
//!
//! - [`Sample`]: checked timing samples with median, mean, percentiles, IQR;
//!   [`percentile_sorted`], kbench's one quantile function (numpy's linear interpolation).
//! - [`timing_stats`]: samples into the record's `TimingStats`; [`speedup`] as ratios.
//! - [`summarize`] / [`RunSummary`]: the summary `kbench run` ends with.
//! - [`stats`]: Wilson intervals (z from statrs' normal quantile), fixed-seed bootstrap
//!   intervals, geometric means.
//! - [`task`] / [`metrics`]: tasks from records and each paper's metric by name.
//! - [`claims`]: a published set's claims against a run's records, every gap explained.
//! - [`completeness`]: a run's records matched with its plan: missing, invalid, duplicate
//!   and unplanned records, so that no change to a log raises a rate.

mod basis;
mod case_table;
pub mod claims;
pub mod completeness;
mod error;
pub mod export;
pub mod extras;
pub mod leaderboard;
pub mod metrics;
pub mod papers;
pub mod plot;
mod report;
mod sample;
pub mod stats;
mod summary;
mod table;
pub mod task;
mod timing;

#[cfg(test)]
mod task_tests;
#[cfg(test)]
mod tests;

pub use basis::SpeedupBasis;
pub use case_table::render_case_table;
pub use error::SampleError;
pub use extras::RecordExtras;
pub use report::{
    build_report, build_report_picking, drift_note, run_report, FamilyRow, IntegrityRow,
    ProblemRow, Report, RunInput, RunReport, EAGER_DRIFT_NOTED, REPORT_VERSION,
};
pub use sample::{percentile_sorted, Sample};
pub use summary::{fast_p, summarize, RunSummary, SOL_SLACK};
pub use table::render_summary;
pub use task::correct_on_random;
pub use timing::{
    paired_round_ratios, paired_speedup, speedup, speedup_of_samples, timing_stats,
    timing_stats_of, Speedup,
};
