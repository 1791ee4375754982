//! Statistics and summaries over kbench's eval records. Pure functions: nothing here measures,
//! and nothing here prints (renderers return strings).

mod stats;
mod summary;

pub use stats::{speedup, timing_stats, Sample, SampleError};
pub use summary::{render_summary, summarize, RunSummary};
