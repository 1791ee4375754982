//! `--export-markdown`: the terminal report's tables as GitHub-flavoured Markdown, plus the
//! per-problem table, ready to paste into a paper draft or a pull request.

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
        out.push_str("### Correctness\n\n");
        out.push_str(&views::correctness(run).markdown());
        out.push_str("\n### Speedups\n\n");
        out.push_str(&views::speedups(run).markdown());
        if !run.families.is_empty() {
            out.push_str("\n### Correctness by case family\n\n");
            out.push_str(&views::families(run).markdown());
        }
        if let Some(k) = views::kevin(run) {
            out.push_str("\n### Trajectories (Kevin)\n\n");
            out.push_str(&k.markdown());
        }
        out.push_str("\n### Cost and time per task\n\n");
        out.push_str(&views::cost(run).markdown());
        if let Some(g) = views::integrity(run) {
            out.push_str("\n### Integrity flags\n\n");
            out.push_str(&g.markdown());
        }
        out.push_str("\n### Problems\n\n");
        out.push_str(&views::problems(run).markdown());
    }
    out
}
