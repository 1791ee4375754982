use std::path::PathBuf;

/// Why a suite or a problem file could not be loaded. Every variant names the file or
/// folder at fault and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// The cause is in the message, not in `source()`: `{:#}` would print it twice.
    #[error("reading {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },

    #[error("problem file {path} is not UTF-8 text ({detail}): save it as UTF-8")]
    NotUtf8 { path: PathBuf, detail: String },

    #[error(
        "KernelBench folder {path} does not exist: pass a KernelBench checkout \
         (holding KernelBench/level1..3) or a folder holding level1/ level2/ level3/"
    )]
    MissingRoot { path: PathBuf },

    #[error(
        "KernelBench level {level} folder not found at {path}: pass a KernelBench checkout \
         (holding KernelBench/level1..3) or a folder holding level1/ level2/ level3/, \
         or ask only for the levels it has with --levels (left out, it takes every level it has)"
    )]
    MissingLevelDir { level: u8, path: PathBuf },

    #[error("level {level} is not a KernelBench level: use 1, 2 or 3")]
    UnknownLevel { level: u8 },

    #[error("problem file {path}: {reason}")]
    BadFileName { path: PathBuf, reason: String },

    #[error(
        "duplicate problem id {id} in level {level}: {first} and {second}; \
         remove or renumber one of them"
    )]
    DuplicateId {
        level: u8,
        id: u32,
        first: PathBuf,
        second: PathBuf,
    },

    #[error("problem file {file} {}", missing_definitions(missing))]
    InvalidProblem {
        file: String,
        missing: Vec<&'static str>,
    },
}

/// What a problem source lacking `missing` is told: which definitions, and what a problem
/// must define.
pub(crate) fn missing_definitions(missing: &[&str]) -> String {
    format!(
        "does not define {} at top level: a KernelBench problem must define \
         `class Model(nn.Module)`, `def get_inputs()` and `def get_init_inputs()` at column 0",
        missing.join(", ")
    )
}
