//! The messages of a reference worker's failures: what it was doing, the cause in words (the
//! limit it ran past and the option that raises it, the memory cap it met, the signal that
//! ended it), then what it printed last. Records show a message's last line (a traceback's
//! last line is its exception), so the cause is the first line and again the last, around
//! the worker's output.

use crate::worker::{CapMet, WorkerFault};

/// How a message of a reference that went past its memory cap begins: such a failure is the
/// problem's own at this cap, on every case family, and is not retried on a fresh worker.
pub(crate) const MEMORY_CAP_MET: &str = "memory cap:";

/// How a message of a worker fault that a fresh worker may not repeat begins (a hang, a
/// crash): the case is made once more on a fresh worker.
pub(crate) const WORKER_FAULT: &str = "worker fault:";

/// Whether a reference's failure message says it went past its memory cap.
pub(crate) fn met_memory_cap(message: &str) -> bool {
    message.starts_with(MEMORY_CAP_MET)
}

/// The message of the reference worker of `file` failing with `fault` while `doing` (e.g.
/// "making case random#0"), whose limit is set by `option` (e.g. `--timeout-run`); `cap`:
/// the memory cap it met, if it met one; `tail`: what it printed last.
pub(crate) fn fault_message(
    file: &str,
    doing: &str,
    fault: &WorkerFault,
    option: &str,
    cap: Option<CapMet>,
    tail: &str,
) -> String {
    if let Some(cap) = cap {
        return cap_message(file, doing, &cap, tail);
    }
    let cause = match fault {
        WorkerFault::Timeout { limit } => format!(
            "no answer within {:.1} s while {doing}; the option to raise the limit is {option}",
            limit.as_secs_f64()
        ),
        WorkerFault::Died {
            signal: Some(s), ..
        } => format!("killed by signal {s} while {doing}"),
        WorkerFault::Died {
            exit_code: Some(c), ..
        } => format!("exited with code {c} while {doing}"),
        other => format!("{other} while {doing}"),
    };
    with_tail(
        &format!("{WORKER_FAULT} reference worker for {file}: {cause}"),
        tail,
        &format!("reference worker for {file}: {cause}"),
    )
}

/// The message of the reference worker of `file` going past its memory cap while `doing`.
pub(crate) fn cap_message(file: &str, doing: &str, cap: &CapMet, tail: &str) -> String {
    let cause = format!(
        "the reference worker for {file} {}",
        cap.text(&format!(" while {doing}"))
    );
    with_tail(&format!("{MEMORY_CAP_MET} {cause}"), tail, &cause)
}

/// `first`, the worker's output, and `last` (the line records show), or `first` alone when
/// the worker printed nothing.
fn with_tail(first: &str, tail: &str, last: &str) -> String {
    if tail.trim().is_empty() {
        first.to_string()
    } else {
        format!("{first}\n{}\n{last}", tail.trim_end())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn shown(message: &str) -> String {
        kbench_record::Outcome::ReferenceError {
            message: message.into(),
        }
        .to_string()
    }

    #[test]
    fn a_reference_timeout_names_its_phase_limit_and_option_not_the_log() {
        let m = fault_message(
            "3_Slow.py",
            "making case random#0",
            &WorkerFault::Timeout {
                limit: Duration::from_secs(3),
            },
            "--timeout-run",
            None,
            "kbench worker: loaded 3_Slow.py in 0.01s\n",
        );
        assert!(m.starts_with(WORKER_FAULT), "{m}");
        assert!(m.contains("kbench worker: loaded"), "{m}");
        assert_eq!(
            shown(&m),
            "reference_error: reference worker for 3_Slow.py: no answer within 3.0 s while making case random#0; the option to raise the limit is --timeout-run"
        );
        let died = fault_message(
            "p.py",
            "loading the problem",
            &WorkerFault::Died {
                signal: Some(9),
                exit_code: None,
            },
            "--timeout-load",
            None,
            "",
        );
        assert_eq!(
            died,
            "worker fault: reference worker for p.py: killed by signal 9 while loading the problem"
        );
    }

    #[test]
    fn a_reference_past_its_cap_names_the_cap_and_the_option() {
        let cap = CapMet {
            limit_bytes: 2 << 30,
            all_workers: false,
            how: "its cgroup's memory.max was met; the kernel killed it".into(),
        };
        let m = fault_message(
            "1_Huge.py",
            "making case random#0",
            &WorkerFault::Died {
                signal: Some(9),
                exit_code: None,
            },
            "--timeout-run",
            Some(cap),
            "log line\n",
        );
        assert!(met_memory_cap(&m), "{m}");
        let line = shown(&m);
        assert!(
            line.contains("1_Huge.py")
                && line.contains("memory cap of 2.0 GiB")
                && line.contains("--memory-cap")
                && line.contains("making case random#0"),
            "{line}"
        );
    }
}
