//! Statistics over kbench's timing samples and eval records, and their plain-text rendering.
//!
//! Pure functions over plain data: nothing here measures, and nothing here prints
//! (renderers return strings and compute no statistics).
//!
//! - [`Sample`]: checked timing samples (non-empty, finite, non-negative) with median, mean,
//!   min, max, sample standard deviation, numpy-compatible percentiles and IQR.
//! - [`timing_stats`]: samples into the record's `TimingStats`; [`speedup`] as ratios.
//! - [`summarize`] / [`RunSummary`]: evaluated, compiled, correct, fast_1, median speedup,
//!   outcome counts; [`fast_p`] for any threshold; [`render_summary`] as a text table.

mod error;
mod sample;
mod summary;
mod table;
mod timing;

#[cfg(test)]
mod tests;

pub use error::SampleError;
pub use sample::Sample;
pub use summary::{fast_p, summarize, RunSummary, SpeedupBasis};
pub use table::render_summary;
pub use timing::{
    paired_speedup, speedup, speedup_of_samples, timing_stats, timing_stats_of, Speedup,
};
