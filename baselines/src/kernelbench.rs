//! Import of KernelBench's baseline JSON files (`results/timing/<hardware>/*.json`).
//!
//! Schema (KernelBench `scripts/generate_baseline_time.py`):
//! `{"level1": {"<file>.py": {"mean", "std", "min", "max", "num_trials", "hardware",
//! "device"}}, "level2": {..}, "level3": {..}}`, times in milliseconds rounded to three
//! significant digits, measured with CUDA events under `torch.no_grad()`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One problem's timing from a KernelBench baseline file. Times are milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelBenchTiming {
    #[serde(rename = "mean")]
    pub mean_ms: f64,
    #[serde(rename = "std")]
    pub std_ms: f64,
    #[serde(rename = "min")]
    pub min_ms: f64,
    #[serde(rename = "max")]
    pub max_ms: f64,
    pub num_trials: u32,
    /// `torch.cuda.get_device_name()`, e.g. `NVIDIA H100 80GB HBM3`.
    pub hardware: String,
    /// e.g. `cuda:0`.
    pub device: String,
}

/// What a KernelBench baseline file measured, read from its file name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KernelBenchMode {
    /// `baseline_time_torch.json`: PyTorch eager.
    Eager,
    /// `baseline_time_torch_compile_<backend>[_<mode>].json`, e.g. backend `inductor`,
    /// mode `default` or `max-autotune`; `cudagraphs` has no mode.
    Compile {
        backend: String,
        mode: Option<String>,
    },
}

impl KernelBenchMode {
    /// Reads the mode from a file name as KernelBench writes it; `None` for other names.
    pub fn from_file_name(file: &str) -> Option<Self> {
        let stem = file
            .strip_suffix(".json")?
            .strip_prefix("baseline_time_torch")?;
        if stem.is_empty() {
            return Some(Self::Eager);
        }
        let rest = stem.strip_prefix("_compile_")?;
        let (backend, mode) = match rest.split_once('_') {
            Some((backend, mode)) => (backend, Some(mode.to_string())),
            None => (rest, None),
        };
        (!backend.is_empty()).then(|| Self::Compile {
            backend: backend.to_string(),
            mode,
        })
    }
}

impl std::fmt::Display for KernelBenchMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Eager => f.write_str("eager"),
            Self::Compile {
                backend,
                mode: Some(mode),
            } => write!(f, "compile:{backend}:{mode}"),
            Self::Compile {
                backend,
                mode: None,
            } => write!(f, "compile:{backend}"),
        }
    }
}

/// Why a KernelBench baseline file could not be imported. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    #[error("reading baseline file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "baseline file {path} is not KernelBench baseline JSON \
         ({{\"level1\": {{\"<file>.py\": {{\"mean\", \"std\", ...}}}}}}): {source}"
    )]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "baseline file {path}: top-level key '{key}' is not a level: expected level1, level2, ..."
    )]
    BadLevelKey { path: PathBuf, key: String },
    #[error("baseline file {path}: level{level} entry '{file}': {reason}")]
    BadEntry {
        path: PathBuf,
        level: u8,
        file: String,
        reason: String,
    },
}

/// The contents of one KernelBench baseline JSON file.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelBenchBaselines {
    /// The file it was read from.
    pub path: PathBuf,
    /// From the file name; `None` when the name is not one KernelBench writes.
    pub mode: Option<KernelBenchMode>,
    /// level → problem file name (e.g. `19_ReLU.py`) → timing.
    pub levels: BTreeMap<u8, BTreeMap<String, KernelBenchTiming>>,
}

impl KernelBenchBaselines {
    /// Reads and checks a baseline file.
    pub fn load(path: &Path) -> Result<Self, BaselineError> {
        let text = std::fs::read_to_string(path).map_err(|source| BaselineError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_json_str(path, &text)
    }

    /// Parses baseline JSON; `path` names it in errors and gives the mode.
    pub fn from_json_str(path: &Path, text: &str) -> Result<Self, BaselineError> {
        let raw: BTreeMap<String, serde_json::Value> =
            serde_json::from_str(text).map_err(|source| BaselineError::Json {
                path: path.to_path_buf(),
                source,
            })?;
        let mut levels = BTreeMap::new();
        for (key, entries) in raw {
            // kbench's own store files are a superset: these blocks are not levels.
            if key == "kbench" || key == "errors" {
                continue;
            }
            let entries: BTreeMap<String, KernelBenchTiming> = serde_json::from_value(entries)
                .map_err(|source| BaselineError::Json {
                    path: path.to_path_buf(),
                    source,
                })?;
            let level = key
                .strip_prefix("level")
                .and_then(|n| n.parse::<u8>().ok())
                .ok_or_else(|| BaselineError::BadLevelKey {
                    path: path.to_path_buf(),
                    key: key.clone(),
                })?;
            for (file, timing) in &entries {
                check_entry(timing).map_err(|reason| BaselineError::BadEntry {
                    path: path.to_path_buf(),
                    level,
                    file: file.clone(),
                    reason,
                })?;
            }
            levels.insert(level, entries);
        }
        let mode = path
            .file_name()
            .and_then(|f| f.to_str())
            .and_then(KernelBenchMode::from_file_name);
        Ok(Self {
            path: path.to_path_buf(),
            mode,
            levels,
        })
    }

    /// The timing of problem `file` (e.g. `40_Matmul_Scaling_ResidualAdd.py`) in `level`.
    pub fn get(&self, level: u8, file: &str) -> Option<&KernelBenchTiming> {
        self.levels.get(&level)?.get(file)
    }

    /// Number of problems with a timing, over all levels.
    pub fn len(&self) -> usize {
        self.levels.values().map(BTreeMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of problems with a timing in `level`.
    pub fn level_len(&self, level: u8) -> usize {
        self.levels.get(&level).map_or(0, BTreeMap::len)
    }

    /// Every `(level, file, timing)`, by level then file name.
    pub fn iter(&self) -> impl Iterator<Item = (u8, &str, &KernelBenchTiming)> {
        self.levels.iter().flat_map(|(&level, entries)| {
            entries
                .iter()
                .map(move |(file, timing)| (level, file.as_str(), timing))
        })
    }

    /// The distinct `hardware` strings in the file, sorted (one in every shipped file).
    pub fn hardware(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.iter().map(|(_, _, t)| t.hardware.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

fn check_entry(t: &KernelBenchTiming) -> Result<(), String> {
    for (name, value) in [
        ("mean", t.mean_ms),
        ("std", t.std_ms),
        ("min", t.min_ms),
        ("max", t.max_ms),
    ] {
        if !value.is_finite() || value < 0.0 {
            return Err(format!("{name} = {value} is not a non-negative time in ms"));
        }
    }
    if t.num_trials == 0 {
        return Err("num_trials is 0".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENTRY: &str = r#"{"mean": 1.5, "std": 0.1, "min": 1.4, "max": 2.0,
        "num_trials": 100, "hardware": "GPU X", "device": "cuda:0"}"#;

    #[test]
    fn modes_from_file_names() {
        let m = KernelBenchMode::from_file_name;
        assert_eq!(m("baseline_time_torch.json"), Some(KernelBenchMode::Eager));
        assert_eq!(
            m("baseline_time_torch_compile_inductor_max-autotune-no-cudagraphs.json"),
            Some(KernelBenchMode::Compile {
                backend: "inductor".into(),
                mode: Some("max-autotune-no-cudagraphs".into())
            })
        );
        let cg = m("baseline_time_torch_compile_cudagraphs.json").unwrap();
        assert_eq!(cg.to_string(), "compile:cudagraphs");
        assert_eq!(m("times.json"), None);
        assert_eq!(m("baseline_time_torch_x.json"), None);
    }

    #[test]
    fn parses_and_looks_up() {
        let text = format!(r#"{{"level2": {{"7_A.py": {ENTRY}}}, "level1": {{}}}}"#);
        let b = KernelBenchBaselines::from_json_str(Path::new("baseline_time_torch.json"), &text)
            .unwrap();
        assert_eq!(b.mode, Some(KernelBenchMode::Eager));
        assert_eq!((b.len(), b.level_len(1), b.level_len(2)), (1, 0, 1));
        assert_eq!(b.get(2, "7_A.py").unwrap().mean_ms, 1.5);
        assert!(b.get(1, "7_A.py").is_none());
        assert_eq!(b.hardware(), ["GPU X"]);
    }

    #[test]
    fn errors_name_the_file() {
        let p = Path::new("dir/bad.json");
        let cases = [
            (
                r#"{"level1": {"1_A.py": null}}"#.to_string(),
                "not KernelBench baseline JSON",
            ),
            (
                format!(r#"{{"levelX": {{"1_A.py": {ENTRY}}}}}"#),
                "'levelX' is not a level",
            ),
            (
                format!(
                    r#"{{"level1": {{"1_A.py": {}}}}}"#,
                    ENTRY.replace("1.5", "-1")
                ),
                "level1 entry '1_A.py': mean = -1",
            ),
        ];
        for (text, want) in cases {
            let err = KernelBenchBaselines::from_json_str(p, &text)
                .unwrap_err()
                .to_string();
            assert!(err.contains("dir/bad.json"), "{err}");
            assert!(err.contains(want), "{err}");
        }
    }
}
