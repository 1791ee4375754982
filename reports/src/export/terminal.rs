//! What `kbench report` prints: per run, its title and notes, then the tables of
//! `views::SECTIONS` that the terminal shows (correctness and speedups per level and overall,
//! then case families, Kevin's trajectory metrics, costs and integrity flags when present).

use super::views;
use super::{records_line, shown_label, unverified_banner};
use crate::report::Report;

/// The terminal report. Lists every run in the order given.
pub fn render_terminal(report: &Report) -> String {
    let mut out = String::new();
    if let Some(banner) = unverified_banner(report) {
        out.push_str(&format!("{banner}\n\n"));
    }
    for (i, run) in report.runs.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!(
            "== {}: {}\n",
            shown_label(run),
            views::run_line(run)
        ));
        out.push_str(&format!("{}\n", records_line(&run.records_check)));
        for note in &run.notes {
            out.push_str(&format!("{note}\n"));
        }
        for section in views::SECTIONS.iter().filter(|s| s.in_terminal) {
            if let Some(grid) = (section.build)(run) {
                out.push('\n');
                out.push_str(&grid.text());
            }
        }
    }
    out.push_str(&format!(
        "\nspeedups: {basis}; task = {}; \
         intervals 95% (Wilson for rates, bootstrap of {} resamples, seed {:#x}, for speedups)\n",
        report.pick.as_str(),
        report.bootstrap_resamples,
        report.bootstrap_seed,
        basis = report.basis.describe(),
    ));
    out
}
