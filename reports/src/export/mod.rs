//! Renderings of a [`crate::Report`]: one file per format, each a pure function from the
//! report to a string. They format numbers; they compute none.

mod check;
mod csv;
pub(crate) mod fmt;
mod json;
mod markdown;
mod terminal;
mod views;

pub use self::csv::render_csv;
pub use self::json::render_json;
pub use self::markdown::render_markdown;
pub use self::terminal::render_terminal;
pub(crate) use check::{records_line, shown_label, unverified_banner};
pub(crate) use fmt::{pct, speedup, Grid};
