//! What a run shows while it runs: the progress bar and one line per record.

use kbench_record::EvalRecord;

pub(crate) fn report_line(quiet: bool, progress: &indicatif::ProgressBar, record: &EvalRecord) {
    if quiet {
        return;
    }
    let line = format!(
        "{} {:<32} {:<20} {}{}",
        record.problem.key(),
        truncate(&record.problem.name, 32),
        truncate(&record.candidate.name, 20),
        record.outcome,
        record
            .timing
            .as_ref()
            .map(|t| format!("  speedup {:.3}x", t.speedup))
            .unwrap_or_default()
    );
    if progress.is_hidden() {
        eprintln!("{line}");
    } else {
        progress.println(line);
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

pub(crate) fn progress_bar(total: u64, quiet: bool) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(total);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} {wide_msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    // Off a terminal indicatif hides the bar itself; the run then prints per-kernel lines.
    pb
}
