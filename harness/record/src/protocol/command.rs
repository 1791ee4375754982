//! The commands the harness sends its workers: one variant per command, its fields typed.
//! Serialised with the command's name under `cmd`; the frame's `id` is added when it is
//! sent. The worker checks every command against its own table of the same commands and
//! fields (`COMMANDS` in `kbench_worker/protocol.py`; the test below keeps the two equal).
//! Fields named after a command-line option carry that option's name (`timed_calls`,
//! `cpu_threads`, `round_warmup`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

fn is_false(b: &bool) -> bool {
    !*b
}

/// One command to a worker (PROTOCOL.md, "Commands").
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Command {
    Load(Load),
    Build(Build),
    MakeCase(MakeCase),
    RunCase(RunCase),
    EvalCase(EvalCase),
    Export(Export),
    Audit(Audit),
    Cost(Seeds),
    Profile {
        forward_seed: u64,
    },
    TimeAs(TimeAs),
    TimeOpen(TimeOpen),
    StageInputs {
        seeds: Vec<u64>,
    },
    /// A timed call; with `round_warmup`, that many untimed calls instead. `staged_set`:
    /// which of the side's staged sets holds the call's inputs (0 when absent).
    TimedCall {
        #[serde(skip_serializing_if = "Option::is_none")]
        round_warmup: Option<u32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        staged_set: Option<u32>,
    },
    Release,
    TimeClose {
        #[serde(skip_serializing_if = "Option::is_none")]
        release: Option<bool>,
    },
    /// The go-ahead for a gated load's device work; `id` is the load's.
    Proceed {
        id: u64,
    },
    Exit,
}

/// `load`: the problem (and for a candidate its kernel) built into a model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Load {
    pub problem_path: PathBuf,
    /// Candidate role only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate_path: Option<PathBuf>,
    pub device: String,
    pub precision: String,
    pub model_mode: String,
    pub weight_seed: u64,
    /// Reference role only: also build a float64 copy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub want_f64: Option<bool>,
    /// CPU intra-op threads; sent as null on a GPU.
    pub cpu_threads: Option<u32>,
    /// Candidate role only: where its extensions are built.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_dir: Option<PathBuf>,
    /// Candidate role only: one untimed call inside the load (baseline modes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_up: Option<bool>,
    /// Stop after building on the host and wait for `proceed` (a load sent ahead on a GPU).
    #[serde(skip_serializing_if = "is_false")]
    pub gate_device_work: bool,
}

/// `build`: a build job's pass over a candidate, without a GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Build {
    pub problem_path: PathBuf,
    pub candidate_path: PathBuf,
    pub build_dir: PathBuf,
    pub weight_seed: u64,
    pub forward_s: u64,
}

/// `make_case`: the reference makes one case's inputs and outputs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MakeCase {
    pub seed: u64,
    pub forward_seed: u64,
    pub device_io: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stability_rtol: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_rtol: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_atol: Option<f64>,
}

/// The sizes a candidate worker poisons before a call: one reference output's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Poison {
    pub dtype: String,
    pub nbytes: u64,
}

/// A tensor in memory the harness shares with a worker: a CUDA IPC `handle`, or an `offset`
/// in the timing exchange file; `name` where it names a pending tensor to export.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TensorSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub nbytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `run_case`: the candidate runs one case (tensors `in:I` in the payload, or on a GPU in
/// `device_inputs`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunCase {
    pub forward_seed: u64,
    /// The argument list as the reference described it (`[{"tensor": ..} | {"value": ..}]`).
    pub inputs: Value,
    pub poison: Vec<Poison>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_inputs: Option<BTreeMap<String, TensorSpec>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_outputs: Option<Vec<TensorSpec>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release_case: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub return_inputs: Option<bool>,
}

/// `eval_case`: one case in eval mode; the reference with `seed`, the candidate with `inputs`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalCase {
    pub forward_seed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inputs: Option<Value>,
}

/// `export`: pending device tensors copied into the harness's buffers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Export {
    pub targets: Vec<TensorSpec>,
    pub partial: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub drop_case: bool,
}

/// `audit`: the measurements of `kbench audit`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Audit {
    pub seed: u64,
    pub forward_seed: u64,
    pub families: Vec<String>,
    pub rtol: f64,
    pub max_weights: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_rows: Option<u64>,
}

/// An input seed and a forward seed (`cost`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Seeds {
    pub seed: u64,
    pub forward_seed: u64,
}

/// `time_as`: the worker's model timed under another evaluator's convention.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimeAs {
    pub method: String,
    pub timed_calls: u32,
    pub seed: u64,
    pub budget_s: f64,
}

/// `time_open`: the timing phase's buffers mapped until `time_close`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimeOpen {
    /// `[{"staged": j} | {"value": v}]`.
    pub args: Value,
    pub forward_seed: u64,
    pub staged: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    /// Reference only: the source sets `stage_inputs` writes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<Vec<Vec<TensorSpec>>>,
    /// CPU only: the file the specs' offsets are in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exchange: Option<ExchangeFile>,
    /// CUDA only: the core the worker's main thread runs on for the phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<usize>,
    /// CUDA only: further staged sets, laid out as `staged`, that calls use in turn
    /// (`staged_set`), so that a call's inputs do not always lie in the same memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub staged_sets: Option<Vec<Vec<TensorSpec>>>,
    /// CUDA only: how many of the latest calls' outputs the worker keeps alive, so that the
    /// next call's outputs are allocated elsewhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold_outputs: Option<u32>,
}

/// The exchange file of a CPU timing phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExchangeFile {
    pub path: PathBuf,
}

impl Command {
    /// The command's wire name (`cmd`).
    pub fn name(&self) -> &'static str {
        match self {
            Command::Load(_) => "load",
            Command::Build(_) => "build",
            Command::MakeCase(_) => "make_case",
            Command::RunCase(_) => "run_case",
            Command::EvalCase(_) => "eval_case",
            Command::Export(_) => "export",
            Command::Audit(_) => "audit",
            Command::Cost(_) => "cost",
            Command::Profile { .. } => "profile",
            Command::TimeAs(_) => "time_as",
            Command::TimeOpen(_) => "time_open",
            Command::StageInputs { .. } => "stage_inputs",
            Command::TimedCall { .. } => "timed_call",
            Command::Release => "release",
            Command::TimeClose { .. } => "time_close",
            Command::Proceed { .. } => "proceed",
            Command::Exit => "exit",
        }
    }

    /// The frame header: the command's fields and `cmd`, keys in order (as every header).
    pub fn to_header(&self) -> Value {
        // Only strings, numbers, paths and maps of them: serialising cannot fail (a path
        // that is not UTF-8 is the one exception, and no path the harness makes is one).
        serde_json::to_value(self).unwrap_or_else(
            |e| serde_json::json!({"cmd": self.name(), "unserialisable": e.to_string()}),
        )
    }
}

#[cfg(test)]
#[path = "command_tests.rs"]
mod tests;
