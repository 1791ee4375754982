//! Plain data shared by every kbench crate: what a problem and a candidate are, what an
//! evaluation produced, and the framed protocol spoken with the Python workers.
//!
//! Everything here is a contract: eval records are written to JSONL run logs and read back
//! by `kbench report` and `--resume`, so every record carries [`SCHEMA_VERSION`].

mod case;
pub mod claims;
pub mod eval_results;
mod outcome;
pub mod perf;
mod planned;
pub mod protocol;
mod record;
mod tensor;

pub use case::{CaseFamily, CaseRef, FamilySpec, FAMILIES};
pub use outcome::{human_bytes, Outcome, Phase};
pub use planned::{Plan, PlannedKernel, PlannedKernels, PlannedProblem};
pub use record::{
    eval_key, AgentCost, ArtefactCount, BaselineRatio, Bounds, CandidateRef, CaseResult, CaseTimes,
    Device, Environment, EvalRecord, FlushCount, HarnessClock, IntegrityReport, KernelProfile,
    MethodTiming, ModelMode, PhaseTimes, Precision, ProblemRef, Selection, SelectionRole,
    TimingStats, TimingSummary, ToleranceProfile,
};
pub use tensor::{Dtype, HostTensor, TensorError};

/// Version of the JSONL eval-record schema. Bump on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;
