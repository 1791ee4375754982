//! The claims file: what a published kernel set says about its kernels (`kbench import`
//! writes it beside the kernels, `kbench report --claims` reads it against a run).
//!
//! One entry per kernel: where it is in the replay layout, the speedups the set claims and
//! against which baseline, whether the set called it correct, and the set's own reference
//! code when it ships one. Entries the importer could not read are kept in `errors`, named
//! by line or key, so a malformed source costs one entry and is still visible.

use serde::{Deserialize, Serialize};

/// Version of the claims-file schema. Bump on any incompatible change.
pub const CLAIMS_SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimsFile {
    pub schema_version: u32,
    pub set: ClaimSet,
    pub kernels: Vec<ClaimedKernel>,
    #[serde(default)]
    pub errors: Vec<ImportError>,
}

/// The set as a whole and the conventions of its own evaluation, where known.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimSet {
    pub name: String,
    /// `kernelbench-runs`, `jsonl` or `leaderboard`.
    pub format: String,
    pub source: String,
    /// The tolerance the set's own correctness check used (`atol`, `rtol`), if declared.
    #[serde(default)]
    pub tolerance: Option<DeclaredTolerance>,
    /// `train` or `eval`: the module mode the set's own evaluation ran both models in.
    #[serde(default)]
    pub model_mode: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DeclaredTolerance {
    pub atol: f64,
    pub rtol: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimedKernel {
    pub level: u8,
    pub problem: u32,
    pub sample: u32,
    /// The replay candidate's name (the kernel file's stem).
    pub name: String,
    /// The kernel file, relative to the claims file; absent for `no_kernel` entries.
    #[serde(default)]
    pub kernel: Option<String>,
    /// Who made it, e.g. a leaderboard's model name.
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub claims: Vec<Claim>,
    #[serde(default)]
    pub claimed_correct: Option<bool>,
    /// The set's own reference code, relative to the claims file, when it ships one.
    #[serde(default)]
    pub reference: Option<String>,
    /// Why there is no kernel (empty or placeholder source).
    #[serde(default)]
    pub no_kernel: Option<String>,
}

/// One claimed speedup and the baseline it is against.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    pub speedup: f64,
    /// `eager`, `compile`, `max-autotune` or `unknown` (compared with eager).
    pub baseline: String,
    /// The source's field name, e.g. `score_eager` or `torch_speedup`.
    pub field: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImportError {
    /// Where in the source: `line 17`, `key "Level 1: 3_X"`, a file name.
    pub at: String,
    pub message: String,
}

impl ClaimsFile {
    /// Reads and checks a claims file; the error names the file and says what is wrong.
    pub fn read(path: &std::path::Path) -> Result<ClaimsFile, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read claims file {}: {e}", path.display()))?;
        let file: ClaimsFile = serde_json::from_str(&text).map_err(|e| {
            format!(
                "{} is not a kbench claims file ({e}); make one with `kbench import`",
                path.display()
            )
        })?;
        if file.schema_version != CLAIMS_SCHEMA_VERSION {
            return Err(format!(
                "{} has claims schema {} but this kbench reads {}; re-import the set",
                path.display(),
                file.schema_version,
                CLAIMS_SCHEMA_VERSION
            ));
        }
        Ok(file)
    }
}
