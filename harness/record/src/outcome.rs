use serde::{Deserialize, Serialize};

use crate::case::CaseRef;

/// The phase of an evaluation in which something happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Starting the worker process and its handshake.
    Start,
    /// Executing the candidate module, building its extensions, constructing `ModelNew`.
    Load,
    /// A correctness case.
    Run,
    /// Timed calls.
    Time,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::Start => "start",
            Phase::Load => "load",
            Phase::Run => "run",
            Phase::Time => "time",
        })
    }
}

/// What became of one candidate kernel. A failed kernel is data, never an `Err`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// Correct on every case (and timed, when timing was asked for).
    Ok,
    /// The candidate did not load: syntax error, failed extension build, no `ModelNew`.
    CompileError { message: String },
    /// The candidate raised (or returned something that is not a tensor).
    RuntimeError { phase: Phase, message: String },
    /// A phase ran past its limit; the process group was killed.
    Timeout { phase: Phase, limit_s: f64 },
    /// The candidate process died: by a signal, or by exiting on its own.
    Crashed {
        phase: Phase,
        signal: Option<i32>,
        exit_code: Option<i32>,
    },
    /// The candidate's worker went past its memory cap (`--memory-cap`): killed by its
    /// cgroup's `memory.max`, or an allocation refused under its address-space limit.
    /// `limit_bytes` is the cap it met (each worker's, or all workers' together); `message`
    /// says how it was told.
    MemoryCap {
        phase: Phase,
        limit_bytes: u64,
        message: String,
    },
    WrongShape {
        case: CaseRef,
        output: u32,
        expected: Vec<u64>,
        got: Vec<u64>,
    },
    WrongDtype {
        case: CaseRef,
        output: u32,
        expected: String,
        got: String,
    },
    /// Values outside the tolerance profile.
    Mismatch {
        case: CaseRef,
        output: u32,
        max_abs: f64,
        max_rel: f64,
        /// Elements outside tolerance.
        count: u64,
        /// Elements compared.
        total: u64,
        /// Multi-index of the first element outside tolerance.
        first_index: Vec<u64>,
        /// Which rule failed, e.g. "elementwise", "drops-nan", "nonfinite-invented", "float64 gate"
        /// (README, "NaN and Inf"; records written before the NaN/Inf rules were split by name
        /// say "nan/inf position").
        rule: String,
    },
    /// The candidate broke an integrity rule (see `flag`).
    Integrity { flag: String, detail: String },
    /// The problem's own reference could not be run; the candidate was not judged.
    ReferenceError { message: String },
    /// The agent gave no kernel for a selected problem (none at all, or an empty or
    /// whitespace-only source): a missing answer, counted as a wrong one. Recorded without
    /// starting any worker.
    NoKernel { message: String },
    /// The problem file could not be loaded as a problem (the message names the file and
    /// what is wrong with it); nothing was run. Recorded without starting any worker.
    ProblemError { message: String },
}

impl Outcome {
    pub fn is_ok(&self) -> bool {
        matches!(self, Outcome::Ok)
    }

    /// Whether the candidate got as far as running (KernelBench's `compiled`). False, too,
    /// where no candidate ran at all (`no_kernel`, and the unjudged `reference_error` and
    /// `problem_error`, which the run summary counts on a line of their own).
    pub fn compiled(&self) -> bool {
        !matches!(
            self,
            Outcome::CompileError { .. }
                | Outcome::ReferenceError { .. }
                | Outcome::NoKernel { .. }
                | Outcome::ProblemError { .. }
                | Outcome::Timeout {
                    phase: Phase::Load | Phase::Start,
                    ..
                }
                | Outcome::Crashed {
                    phase: Phase::Load | Phase::Start,
                    ..
                }
                | Outcome::MemoryCap {
                    phase: Phase::Load | Phase::Start,
                    ..
                }
        )
    }

    /// Short machine name, e.g. `mismatch`.
    pub fn kind(&self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::CompileError { .. } => "compile_error",
            Outcome::RuntimeError { .. } => "runtime_error",
            Outcome::Timeout { .. } => "timeout",
            Outcome::Crashed { .. } => "crashed",
            Outcome::MemoryCap { .. } => "memory_cap",
            Outcome::WrongShape { .. } => "wrong_shape",
            Outcome::WrongDtype { .. } => "wrong_dtype",
            Outcome::Mismatch { .. } => "mismatch",
            Outcome::Integrity { .. } => "integrity",
            Outcome::ReferenceError { .. } => "reference_error",
            Outcome::NoKernel { .. } => "no_kernel",
            Outcome::ProblemError { .. } => "problem_error",
        }
    }

    /// Whether the candidate could not be judged because the problem itself failed (its
    /// file, or its reference): not the candidate's failure, though it is never correct.
    pub fn unjudged(&self) -> bool {
        matches!(
            self,
            Outcome::ReferenceError { .. } | Outcome::ProblemError { .. }
        )
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Ok => f.write_str("ok"),
            Outcome::CompileError { message } => write!(f, "compile_error: {}", first_line(message)),
            Outcome::RuntimeError { phase, message } => {
                write!(f, "runtime_error ({phase}): {}", first_line(message))
            }
            Outcome::Timeout { phase, limit_s } => write!(f, "timeout ({phase}, {limit_s} s)"),
            Outcome::Crashed {
                phase,
                signal,
                exit_code,
            } => match (signal, exit_code) {
                (Some(s), _) => write!(f, "crashed ({phase}, signal {s})"),
                (None, Some(c)) => write!(f, "crashed ({phase}, exited early with code {c})"),
                (None, None) => write!(f, "crashed ({phase})"),
            },
            Outcome::MemoryCap {
                phase, limit_bytes, ..
            } => write!(f, "memory_cap ({phase}, {})", human_bytes(*limit_bytes)),
            Outcome::WrongShape {
                case,
                output,
                expected,
                got,
            } => write!(f, "wrong_shape ({case}, output {output}): expected {expected:?}, got {got:?}"),
            Outcome::WrongDtype {
                case,
                output,
                expected,
                got,
            } => write!(f, "wrong_dtype ({case}, output {output}): expected {expected}, got {got}"),
            Outcome::Mismatch {
                case,
                max_abs,
                max_rel,
                count,
                total,
                first_index,
                rule,
                ..
            } => write!(
                f,
                "mismatch ({case}, {rule}): {count}/{total} elements, max abs {max_abs:.3e}, max rel {max_rel:.3e}, first at {first_index:?}"
            ),
            Outcome::Integrity { flag, detail } => write!(f, "integrity ({flag}): {detail}"),
            Outcome::ReferenceError { message } => {
                write!(f, "reference_error: {}", first_line(message))
            }
            Outcome::NoKernel { message } => write!(f, "no_kernel: {}", first_line(message)),
            Outcome::ProblemError { message } => {
                write!(f, "problem_error: {}", first_line(message))
            }
        }
    }
}

/// Bytes in binary units, one decimal: `2.0 GiB`, `512.0 MiB`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

fn first_line(s: &str) -> &str {
    s.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_json_is_tagged() {
        let o = Outcome::Crashed {
            phase: Phase::Run,
            signal: Some(11),
            exit_code: None,
        };
        let s = serde_json::to_string(&o).unwrap();
        assert_eq!(
            s,
            r#"{"kind":"crashed","phase":"run","signal":11,"exit_code":null}"#
        );
        assert_eq!(serde_json::from_str::<Outcome>(&s).unwrap(), o);
        assert_eq!(o.to_string(), "crashed (run, signal 11)");
        assert!(o.compiled());
        assert!(!Outcome::CompileError {
            message: "x".into()
        }
        .compiled());
    }

    #[test]
    fn a_worker_past_its_memory_cap_is_tagged_and_never_correct() {
        let o = Outcome::MemoryCap {
            phase: Phase::Run,
            limit_bytes: 2 << 30,
            message: "killed at its cgroup's memory.max".into(),
        };
        let s = serde_json::to_string(&o).unwrap();
        assert_eq!(
            s,
            r#"{"kind":"memory_cap","phase":"run","limit_bytes":2147483648,"message":"killed at its cgroup's memory.max"}"#
        );
        assert_eq!(serde_json::from_str::<Outcome>(&s).unwrap(), o);
        assert_eq!(o.to_string(), "memory_cap (run, 2.0 GiB)");
        assert_eq!(
            (o.kind(), o.is_ok(), o.compiled(), o.unjudged()),
            ("memory_cap", false, true, false)
        );
        let at_load = Outcome::MemoryCap {
            phase: Phase::Load,
            limit_bytes: 1,
            message: String::new(),
        };
        assert!(!at_load.compiled());
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
    }

    #[test]
    fn missing_kernels_and_broken_problems_are_tagged_and_never_compiled() {
        let o = Outcome::NoKernel {
            message: "no kernel file".into(),
        };
        let s = serde_json::to_string(&o).unwrap();
        assert_eq!(s, r#"{"kind":"no_kernel","message":"no kernel file"}"#);
        assert_eq!(serde_json::from_str::<Outcome>(&s).unwrap(), o);
        assert_eq!(
            (o.kind(), o.compiled(), o.is_ok(), o.unjudged()),
            ("no_kernel", false, false, false)
        );
        assert_eq!(o.to_string(), "no_kernel: no kernel file");
        let p = Outcome::ProblemError {
            message: "problem file level1/7_X.py: no class Model".into(),
        };
        let s = serde_json::to_string(&p).unwrap();
        assert_eq!(
            s,
            r#"{"kind":"problem_error","message":"problem file level1/7_X.py: no class Model"}"#
        );
        assert_eq!(serde_json::from_str::<Outcome>(&s).unwrap(), p);
        assert_eq!(
            (p.kind(), p.compiled(), p.unjudged()),
            ("problem_error", false, true)
        );
        assert!(Outcome::ReferenceError {
            message: "x".into()
        }
        .unjudged());
        assert!(!Outcome::Ok.unjudged());
    }
}
