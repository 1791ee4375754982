//! `--export-json`: the whole [`Report`], pretty-printed. A stable, versioned contract
//! (`report_version`): consumers may rely on every field documented on the report types.

use crate::report::Report;

/// The report as pretty JSON, ending in a newline.
pub fn render_json(report: &Report) -> String {
    let mut s = serde_json::to_string_pretty(report).expect("a report has only finite numbers");
    s.push('\n');
    s
}
