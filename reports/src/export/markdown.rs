//! `--export-markdown`: every table of `views::SECTIONS` (the terminal report's, plus the
//! per-problem table) as GitHub-flavoured Markdown, ready to paste into a paper draft or a
//! pull request.

use super::views;
use super::{records_line, shown_label, unverified_banner};
use crate::report::Report;

/// The report as Markdown.
pub fn render_markdown(report: &Report) -> String {
    let mut out = String::from("# kbench report\n\n");
    if let Some(banner) = unverified_banner(report) {
        out.push_str(&format!("> **{banner}**\n\n"));
    }
    out.push_str(&format!(
        "Speedups are {basis}; a task's result is its {}. \
         Intervals are 95%: Wilson for rates, percentile bootstrap \
         ({} resamples, seed `{:#x}`) for speedup statistics, and {} resamples of the timing \
         samples for per-problem speedups. \"0 if wrong\" statistics count a task without a \
         correct kernel as speedup 0 (CudaForge); geomeans are over correct tasks only \
         (KernelBench, CUDA Agent).\n",
        report.pick.as_str(),
        report.bootstrap_resamples,
        report.bootstrap_seed,
        report.speedup_resamples,
        basis = report.basis.describe(),
    ));
    for run in &report.runs {
        out.push_str(&format!(
            "\n## {}\n\n{}\n\n{}\n\n",
            shown_label(run),
            views::run_line(run),
            records_line(&run.records_check)
        ));
        for note in &run.notes {
            out.push_str(&format!("> {note}\n\n"));
        }
        let grids = views::SECTIONS
            .iter()
            .filter_map(|s| (s.build)(run).map(|grid| (s.title, grid)));
        for (i, (title, grid)) in grids.enumerate() {
            let gap = if i == 0 { "" } else { "\n" };
            out.push_str(&format!("{gap}### {title}\n\n"));
            out.push_str(&grid.markdown());
        }
    }
    out
}
