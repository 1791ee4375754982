//! What a run shows while it runs: the progress bar on a terminal, one line per record, and
//! off a terminal (a Slurm log, CI, `nohup`), where no bar is drawn, a plain line every so
//! often while nothing else is said, so that a long step is never silent.

use std::io::IsTerminal;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use kbench_record::EvalRecord;

/// Seconds of silence before a plain progress line off a terminal, unless
/// `KBENCH_PROGRESS_EVERY_S` says otherwise: often enough that a job log shows the run is
/// alive, rarely enough that a day's run logs a few hundred lines.
const PROGRESS_EVERY_S: f64 = 60.0;

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
    say(progress, line);
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
    // Off a terminal indicatif hides the bar itself; the run then prints per-kernel lines,
    // and a `Heartbeat` says where it is in between.
    pb
}

/// A line for the user: above the bar on a terminal, on stderr off one (where the bar is
/// hidden and would swallow it).
pub(crate) fn say(progress: &indicatif::ProgressBar, line: String) {
    if progress.is_hidden() {
        eprintln!("{line}");
    } else {
        progress.println(line);
    }
}

/// The seconds between plain progress lines: `KBENCH_PROGRESS_EVERY_S` when it is a positive
/// number, else [`PROGRESS_EVERY_S`].
fn progress_every() -> Duration {
    let s = std::env::var("KBENCH_PROGRESS_EVERY_S")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(PROGRESS_EVERY_S);
    Duration::from_secs_f64(s)
}

/// A thread that, off a terminal, prints a plain progress line when nothing changed over
/// [`progress_every`]: `status` gives a counter that moves when the run says something of
/// its own (a record's line) and the line to print. It wakes once a period, no more (CPU
/// timing is disturbed by anything that runs), so a line comes after one to two periods of
/// silence. Stops when dropped.
pub(crate) struct Heartbeat {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Heartbeat {
    /// Starts it, unless `quiet` or stderr is a terminal (where the bar shows progress).
    pub(crate) fn start(
        quiet: bool,
        status: impl Fn() -> (u64, String) + Send + 'static,
    ) -> Heartbeat {
        if quiet || std::io::stderr().is_terminal() {
            return Heartbeat {
                stop: None,
                thread: None,
            };
        }
        let every = progress_every();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("kbench-progress".into())
            .spawn(move || {
                let (mut last, _) = status();
                // Wakes each period until the sender is dropped.
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                    let (now, line) = status();
                    if now == last {
                        eprintln!("kbench: {line}");
                    }
                    last = now;
                }
            })
            .ok();
        Heartbeat {
            stop: Some(stop),
            thread,
        }
    }

    /// The heartbeat of a run's progress bar: evaluations done, time, and what is running.
    pub(crate) fn of_bar(quiet: bool, bar: &indicatif::ProgressBar) -> Heartbeat {
        let bar = bar.clone();
        Heartbeat::start(quiet, move || {
            let msg = bar.message();
            let now = if msg.is_empty() {
                String::new()
            } else {
                format!("; running {msg}")
            };
            (
                bar.position(),
                format!(
                    "{}/{} evaluated after {}{now}",
                    bar.position(),
                    bar.length().unwrap_or(0),
                    indicatif::FormattedDuration(bar.elapsed())
                ),
            )
        })
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
