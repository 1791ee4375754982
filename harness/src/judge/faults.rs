//! Worker faults and error answers as outcomes.

use kbench_record::protocol::{reply, Frame};
use kbench_record::{Outcome, Phase};

use crate::worker::{error_text, WorkerFault};

/// Maps a worker fault in `phase` to an outcome; `None` for an interrupt (nothing recorded).
pub(crate) fn fault_outcome(fault: WorkerFault, phase: Phase) -> Option<Outcome> {
    Some(match fault {
        WorkerFault::Interrupted => return None,
        WorkerFault::Timeout { limit } => Outcome::Timeout {
            phase,
            limit_s: limit.as_secs_f64(),
        },
        WorkerFault::Died { signal, exit_code } => Outcome::Crashed {
            phase,
            signal,
            exit_code,
        },
        WorkerFault::Protocol(m) => Outcome::Integrity {
            flag: super::integrity::PROTOCOL_VIOLATION.into(),
            detail: m,
        },
        WorkerFault::Spawn(m) => Outcome::RuntimeError {
            phase: Phase::Start,
            message: m,
        },
    })
}

/// Maps a worker's `error` answer to an outcome.
pub(crate) fn error_outcome(reply: &Frame, phase: Phase) -> Outcome {
    let error: reply::Error = reply.reply();
    let message = error_text(reply);
    if let Some(o) = super::integrity::non_plain_output(&error, &message) {
        return o;
    }
    match error.kind.as_deref().unwrap_or("") {
        "compile_error" => Outcome::CompileError { message },
        _ => Outcome::RuntimeError { phase, message },
    }
}

/// Whether a failure is the GPU running out of memory (torch's allocator or the harness's
/// own allocations for the reference's cases).
pub(crate) fn out_of_memory(m: &str) -> bool {
    m.contains("OutOfMemoryError")
        || m.contains("CUDA_ERROR_OUT_OF_MEMORY")
        || m.to_ascii_lowercase().contains("out of memory")
        // The tail of torch's report, all that older stores kept of a long one.
        || (m.contains("GiB memory in use") && m.contains("Process "))
}
