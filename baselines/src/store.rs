//! The baseline store: `<root>/<gpu-slug>/torch-<version>/<mode>.json`.
//!
//! Each file is a superset of KernelBench's baseline schema, so KernelBench's own readers
//! (`data["level1"]["19_ReLU.py"]["mean"]`) read it unchanged:
//!
//! ```text
//! {
//!   "kbench":  { format, mode, origin, caveats, environment, timing, updated_unix_s },
//!   "level1":  { "19_ReLU.py": { mean, std, min, max, num_trials, hardware, device,   <- KernelBench
//!                                median, p25, p75, samples_ms, compile_s,            <- kbench
//!                                problem_sha256, measured_unix_s, run_id, stale } },
//!   "errors":  { "level3": { "9_ResNet18.py": { outcome, message, compile_s, ... } } }
//! }
//! ```
//!
//! A mode that failed for a problem (a compile error, a timeout, wrong results) is kept
//! under `errors` with its message, never dropped; the `levelN` maps hold only usable times.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kbench_reports::percentile_sorted;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use statrs::statistics::Statistics;

use crate::Mode;

/// Written into every store file's `kbench.format`.
pub const FORMAT: &str = "kbench-baseline-1";

/// Where a store file's times came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// Measured by `kbench baselines measure` with kbench's timer.
    Measured,
    /// Read from someone else's file (e.g. KernelBench's published JSON).
    Imported,
}

/// The machine and software a file's times belong to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BaselineEnv {
    /// Device name as torch reports it, e.g. `NVIDIA H100 80GB HBM3`.
    pub gpu: String,
    /// [`gpu_slug`] of `gpu`: the store's first directory level.
    pub gpu_slug: String,
    /// `torch.__version__`, or `unknown` for an import that did not say.
    pub torch: String,
    #[serde(default)]
    pub cuda: Option<String>,
    #[serde(default)]
    pub driver: Option<String>,
    /// Compute capability, SMs, peak clocks (kHz) and memory of the GPU, when known.
    #[serde(default)]
    pub gpu_properties: Option<Value>,
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub kbench: Option<String>,
    #[serde(default)]
    pub python: Option<String>,
}

/// How the times were taken (kbench's timer settings), for measured files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimingSettings {
    pub timed_calls: u32,
    pub warmup: u32,
    pub rounds: u32,
    pub l2_flush: bool,
    pub precision: String,
    pub profile: String,
}

/// The `kbench` block of a store file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoreMeta {
    pub format: String,
    pub mode: String,
    pub origin: Origin,
    /// For imports: the file the times were read from.
    #[serde(default)]
    pub imported_from: Option<String>,
    /// What a reader must know about these times (e.g. timed without an L2 flush).
    #[serde(default)]
    pub caveats: Vec<String>,
    pub environment: BaselineEnv,
    #[serde(default)]
    pub timing: Option<TimingSettings>,
    pub updated_unix_s: f64,
}

/// One problem's time in one mode. The first seven fields are KernelBench's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub mean: f64,
    pub std: f64,
    pub min: f64,
    pub max: f64,
    pub num_trials: u32,
    pub hardware: String,
    pub device: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p25: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p75: Option<f64>,
    /// Every timed call, ms, in the order taken.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples_ms: Vec<f64>,
    /// Seconds to load the model and compile it (first call included) in this mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_s: Option<f64>,
    /// SHA-256 of the problem source that was timed: an entry for a changed problem is stale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_unix_s: Option<f64>,
    /// The kbench run whose record this came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Why this entry must not be used (e.g. the problem changed after it was timed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale: Option<String>,
    /// The tolerance profile whose correctness checks this mode passed before it was timed
    /// (`strict`, `kernelbench`, ...); absent in imported entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The physical GPU that timed it (`GPU-xxxxxxxx-...`; the record's `env.gpu_uuid`): the
    /// file's `environment` is only the last measurement's. Absent on the CPU, in imported
    /// entries and in those measured before kbench recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_uuid: Option<String>,
}

impl Entry {
    /// Summary of `samples_ms` (which must not be empty; an empty one gives NaNs) with
    /// KernelBench's statistics — mean and population standard deviation (numpy's `std`),
    /// from statrs — plus median and quartiles by kbench's one quantile function
    /// ([`kbench_reports::percentile_sorted`], numpy's linear interpolation).
    pub fn from_samples(samples_ms: Vec<f64>, hardware: &str, device: &str) -> Entry {
        let mut sorted = samples_ms.clone();
        sorted.sort_by(f64::total_cmp);
        let q = |p: f64| {
            if sorted.is_empty() {
                f64::NAN
            } else {
                percentile_sorted(&sorted, p)
            }
        };
        Entry {
            mean: samples_ms.iter().mean(),
            std: samples_ms.iter().population_std_dev(),
            min: sorted.first().copied().unwrap_or(f64::NAN),
            max: sorted.last().copied().unwrap_or(f64::NAN),
            num_trials: samples_ms.len() as u32,
            hardware: hardware.into(),
            device: device.into(),
            median: Some(q(50.0)),
            p25: Some(q(25.0)),
            p75: Some(q(75.0)),
            samples_ms,
            compile_s: None,
            problem_sha256: None,
            measured_unix_s: None,
            run_id: None,
            stale: None,
            profile: None,
            gpu_uuid: None,
        }
    }

    /// The time to compare against: the median when known (kbench's basis), else the mean
    /// (all an imported KernelBench entry has).
    pub fn center_ms(&self) -> f64 {
        self.median.unwrap_or(self.mean)
    }
}

/// `entries` per GPU that timed them ([`Entry::gpu_uuid`]), and how many do not name one.
pub(crate) fn gpus_of<'a>(
    entries: impl IntoIterator<Item = &'a Entry>,
) -> (BTreeMap<String, usize>, usize) {
    let mut on = BTreeMap::new();
    let mut unnamed = 0;
    for e in entries {
        match &e.gpu_uuid {
            Some(g) => *on.entry(g.clone()).or_insert(0) += 1,
            None => unnamed += 1,
        }
    }
    (on, unnamed)
}

/// A mode that did not produce a usable time for a problem.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorEntry {
    /// The record's outcome, e.g. `compile_error`, `timeout`, `mismatch`.
    pub outcome: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_unix_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The tolerance profile the mode was checked under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The failure happened with the GPU to itself (nothing else loaded on it), so running
    /// out of memory was the mode's own doing and is not retried on its own again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gpu_alone: bool,
    /// The physical GPU it failed on, as [`Entry::gpu_uuid`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_uuid: Option<String>,
}

/// What a store file says about one problem.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup<'a> {
    Usable(&'a Entry),
    /// An entry exists but must not be used; the reason says why.
    Stale(String),
    Failed(&'a ErrorEntry),
    Missing,
}

/// Why a store file could not be read or used. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("reading baseline file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("baseline file {path} is not valid: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error(
        "baseline file {path} was timed on {file_gpu} with torch {file_torch}, but this run uses {gpu} with torch {torch}; \
         its times are not comparable. Measure baselines here (`kbench baselines measure`), or pass --force-baselines to use them anyway"
    )]
    Mismatch {
        path: PathBuf,
        file_gpu: String,
        file_torch: String,
        gpu: String,
        torch: String,
    },
}

/// One mode's times for one GPU and torch version.
#[derive(Debug, Clone, PartialEq)]
pub struct BaselineFile {
    pub meta: StoreMeta,
    pub levels: BTreeMap<u8, BTreeMap<String, Entry>>,
    pub errors: BTreeMap<u8, BTreeMap<String, ErrorEntry>>,
}

fn level_of(key: &str) -> Option<u8> {
    key.strip_prefix("level")?.parse().ok()
}

impl BaselineFile {
    pub fn new(mode: Mode, origin: Origin, environment: BaselineEnv) -> Self {
        BaselineFile {
            meta: StoreMeta {
                format: FORMAT.into(),
                mode: mode.as_str().into(),
                origin,
                imported_from: None,
                caveats: Vec::new(),
                environment,
                timing: None,
                updated_unix_s: 0.0,
            },
            levels: BTreeMap::new(),
            errors: BTreeMap::new(),
        }
    }

    pub fn mode(&self) -> Option<Mode> {
        Mode::parse(&self.meta.mode).ok()
    }

    pub fn load(path: &Path) -> Result<Self, StoreError> {
        let text = std::fs::read_to_string(path).map_err(|source| StoreError::Io {
            path: path.into(),
            source,
        })?;
        Self::from_json_str(path, &text)
    }

    pub fn from_json_str(path: &Path, text: &str) -> Result<Self, StoreError> {
        let invalid = |reason: String| StoreError::Invalid {
            path: path.into(),
            reason,
        };
        let v: Map<String, Value> =
            serde_json::from_str(text).map_err(|e| invalid(format!("not a JSON object: {e}")))?;
        let meta: StoreMeta = serde_json::from_value(
            v.get("kbench")
                .cloned()
                .ok_or_else(|| invalid("no \"kbench\" block (a KernelBench file must be imported first: `kbench baselines import`)".into()))?,
        )
        .map_err(|e| invalid(format!("\"kbench\" block: {e}")))?;
        if meta.format != FORMAT {
            return Err(invalid(format!(
                "format '{}' is not '{FORMAT}'",
                meta.format
            )));
        }
        if Mode::parse(&meta.mode).is_err() {
            return Err(invalid(format!("unknown mode '{}'", meta.mode)));
        }
        let mut levels = BTreeMap::new();
        let mut errors = BTreeMap::new();
        for (key, value) in &v {
            if key == "kbench" {
                continue;
            }
            if key == "errors" {
                let m: BTreeMap<String, BTreeMap<String, ErrorEntry>> =
                    serde_json::from_value(value.clone())
                        .map_err(|e| invalid(format!("\"errors\": {e}")))?;
                for (lk, entries) in m {
                    let level = level_of(&lk)
                        .ok_or_else(|| invalid(format!("\"errors\" key '{lk}' is not a level")))?;
                    errors.insert(level, entries);
                }
                continue;
            }
            let level = level_of(key).ok_or_else(|| {
                invalid(format!(
                    "top-level key '{key}' is not a level (level1, level2, ...), kbench or errors"
                ))
            })?;
            let entries: BTreeMap<String, Entry> = serde_json::from_value(value.clone())
                .map_err(|e| invalid(format!("{key}: {e}")))?;
            for (file, e) in &entries {
                if !(e.mean.is_finite() && e.mean > 0.0) {
                    return Err(invalid(format!(
                        "{key} entry '{file}': mean {} is not a positive time",
                        e.mean
                    )));
                }
            }
            levels.insert(level, entries);
        }
        Ok(BaselineFile {
            meta,
            levels,
            errors,
        })
    }

    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert(
            "kbench".into(),
            serde_json::to_value(&self.meta).expect("meta serializes"),
        );
        for (level, entries) in &self.levels {
            m.insert(
                format!("level{level}"),
                serde_json::to_value(entries).expect("entries serialize"),
            );
        }
        if self.errors.values().any(|e| !e.is_empty()) {
            let errs: BTreeMap<String, &BTreeMap<String, ErrorEntry>> = self
                .errors
                .iter()
                .filter(|(_, e)| !e.is_empty())
                .map(|(l, e)| (format!("level{l}"), e))
                .collect();
            m.insert(
                "errors".into(),
                serde_json::to_value(errs).expect("errors serialize"),
            );
        }
        Value::Object(m)
    }

    /// Writes the file atomically (temporary file, then rename), creating its directory.
    pub fn save(&self, path: &Path) -> Result<(), StoreError> {
        let io = |source| StoreError::Io {
            path: path.into(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let mut text = serde_json::to_string_pretty(&self.to_json()).expect("json");
        text.push('\n');
        let tmp = path.with_extension(format!("json.tmp{}", std::process::id()));
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// Records a usable time (replacing any earlier time or error for the problem).
    pub fn put(&mut self, level: u8, file: &str, entry: Entry) {
        if let Some(e) = self.errors.get_mut(&level) {
            e.remove(file);
        }
        self.levels
            .entry(level)
            .or_default()
            .insert(file.into(), entry);
    }

    /// Records a failure (replacing any earlier time or error for the problem).
    pub fn put_error(&mut self, level: u8, file: &str, error: ErrorEntry) {
        if let Some(e) = self.levels.get_mut(&level) {
            e.remove(file);
        }
        self.errors
            .entry(level)
            .or_default()
            .insert(file.into(), error);
    }

    /// What the file says about a problem whose current source hashes to `sha256`.
    pub fn lookup(&self, level: u8, file: &str, sha256: &str) -> Lookup<'_> {
        if let Some(e) = self.levels.get(&level).and_then(|m| m.get(file)) {
            if let Some(why) = &e.stale {
                return Lookup::Stale(why.clone());
            }
            return match &e.problem_sha256 {
                Some(h) if h != sha256 => Lookup::Stale(
                    "the problem's source changed after it was timed (sha256 differs)".into(),
                ),
                _ => Lookup::Usable(e),
            };
        }
        if let Some(e) = self.errors.get(&level).and_then(|m| m.get(file)) {
            return match &e.problem_sha256 {
                Some(h) if h != sha256 => Lookup::Stale(
                    "the problem's source changed after it failed (sha256 differs)".into(),
                ),
                _ => Lookup::Failed(e),
            };
        }
        Lookup::Missing
    }

    pub fn len(&self) -> usize {
        self.levels.values().map(BTreeMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries kept but marked stale (never used).
    pub fn stale_count(&self) -> usize {
        self.levels
            .values()
            .flat_map(BTreeMap::values)
            .filter(|e| e.stale.is_some())
            .count()
    }

    pub fn error_count(&self) -> usize {
        self.errors.values().map(BTreeMap::len).sum()
    }

    /// The timed entries per GPU that timed them ([`Entry::gpu_uuid`]), and how many do not
    /// name one.
    pub fn gpus(&self) -> (BTreeMap<String, usize>, usize) {
        gpus_of(self.levels.values().flat_map(BTreeMap::values))
    }

    /// Refuses a file timed on another GPU or torch version than the one given.
    pub fn check_environment(&self, path: &Path, gpu: &str, torch: &str) -> Result<(), StoreError> {
        let env = &self.meta.environment;
        if gpu_slug(&env.gpu) != gpu_slug(gpu) || env.torch != torch {
            return Err(StoreError::Mismatch {
                path: path.into(),
                file_gpu: env.gpu.clone(),
                file_torch: env.torch.clone(),
                gpu: gpu.into(),
                torch: torch.into(),
            });
        }
        Ok(())
    }
}

/// A directory name for a device: lower case, runs of other characters as one `-`, e.g.
/// `NVIDIA H100 80GB HBM3` → `nvidia-h100-80gb-hbm3`.
pub fn gpu_slug(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        "unknown-device".into()
    } else {
        out
    }
}

/// The baseline store: a directory of [`BaselineFile`]s.
#[derive(Debug, Clone)]
pub struct Store {
    pub root: PathBuf,
}

impl Store {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Store { root: root.into() }
    }

    /// `<root>/<gpu-slug>/torch-<version>/`.
    pub fn dir(&self, gpu: &str, torch: &str) -> PathBuf {
        self.root
            .join(gpu_slug(gpu))
            .join(format!("torch-{}", torch.replace('/', "_")))
    }

    pub fn path(&self, gpu: &str, torch: &str, mode: Mode) -> PathBuf {
        self.dir(gpu, torch).join(format!("{}.json", mode.as_str()))
    }

    /// The file for `mode`, or `None` when there is none yet.
    pub fn load(
        &self,
        gpu: &str,
        torch: &str,
        mode: Mode,
    ) -> Result<Option<BaselineFile>, StoreError> {
        let path = self.path(gpu, torch, mode);
        if !path.exists() {
            return Ok(None);
        }
        let f = BaselineFile::load(&path)?;
        if f.meta.mode != mode.as_str() {
            return Err(StoreError::Invalid {
                path,
                reason: format!("holds mode '{}', not '{}'", f.meta.mode, mode),
            });
        }
        f.check_environment(&path, gpu, torch)?;
        Ok(Some(f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;

    fn env() -> BaselineEnv {
        BaselineEnv {
            gpu: "NVIDIA H100 80GB HBM3".into(),
            gpu_slug: gpu_slug("NVIDIA H100 80GB HBM3"),
            torch: "2.11.0+cu130".into(),
            ..Default::default()
        }
    }

    #[test]
    fn slugs() {
        assert_eq!(gpu_slug("NVIDIA H100 80GB HBM3"), "nvidia-h100-80gb-hbm3");
        assert_eq!(
            gpu_slug("  AMD EPYC 7R13 (48-Core) "),
            "amd-epyc-7r13-48-core"
        );
        assert_eq!(gpu_slug("???"), "unknown-device");
    }

    #[test]
    fn stats_follow_numpy() {
        let e = Entry::from_samples(vec![4.0, 1.0, 3.0, 2.0], "G", "cuda:0");
        assert_eq!((e.mean, e.min, e.max, e.num_trials), (2.5, 1.0, 4.0, 4));
        assert_abs_diff_eq!(e.std, 1.118_033_988_749_895, epsilon = 1e-12);
        assert_eq!(
            (e.median, e.p25, e.p75),
            (Some(2.5), Some(1.75), Some(3.25))
        );
        assert_eq!(e.samples_ms, vec![4.0, 1.0, 3.0, 2.0]);
    }

    #[test]
    fn round_trip_lookup_and_kernelbench_compatibility() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let mut f = BaselineFile::new(Mode::Compile, Origin::Measured, env());
        let mut e = Entry::from_samples(vec![1.0, 2.0, 3.0], "NVIDIA H100 80GB HBM3", "cuda:0");
        e.problem_sha256 = Some("aa".into());
        f.put(1, "19_ReLU.py", e.clone());
        f.put_error(
            3,
            "9_ResNet18.py",
            ErrorEntry {
                outcome: "timeout".into(),
                message: "compile took over 900 s".into(),
                compile_s: Some(900.0),
                problem_sha256: Some("bb".into()),
                measured_unix_s: None,
                run_id: None,
                profile: Some("strict".into()),
                gpu_alone: false,
                gpu_uuid: None,
            },
        );
        let path = store.path(&env().gpu, &env().torch, Mode::Compile);
        assert!(path.ends_with("nvidia-h100-80gb-hbm3/torch-2.11.0+cu130/compile.json"));
        f.save(&path).unwrap();
        let back = store
            .load(&env().gpu, &env().torch, Mode::Compile)
            .unwrap()
            .unwrap();
        assert_eq!(back, f);
        assert_eq!(back.lookup(1, "19_ReLU.py", "aa"), Lookup::Usable(&e));
        assert!(matches!(
            back.lookup(1, "19_ReLU.py", "zz"),
            Lookup::Stale(_)
        ));
        assert!(
            matches!(back.lookup(3, "9_ResNet18.py", "bb"), Lookup::Failed(x) if x.outcome == "timeout")
        );
        assert_eq!(back.lookup(2, "1_A.py", "aa"), Lookup::Missing);
        // KernelBench's reader (kbench's importer of its schema) reads the superset.
        let kb = crate::KernelBenchBaselines::load(&path).unwrap();
        assert_eq!(kb.len(), 1);
        assert_eq!(kb.get(1, "19_ReLU.py").unwrap().mean_ms, 2.0);
        // A result replaces an error and the other way round.
        let mut g = back.clone();
        g.put(3, "9_ResNet18.py", e.clone());
        assert_eq!(g.error_count(), 0);
        assert_eq!(g.len(), 2);
    }

    #[test]
    fn other_gpu_or_torch_is_refused_with_the_file_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let f = BaselineFile::new(Mode::Eager, Origin::Measured, env());
        let path = dir.path().join("eager.json");
        f.save(&path).unwrap();
        let err = f
            .check_environment(&path, "NVIDIA H200", "2.11.0+cu130")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("eager.json")
                && err.contains("NVIDIA H200")
                && err.contains("--force-baselines"),
            "{err}"
        );
        assert!(f
            .check_environment(&path, "NVIDIA H100 80GB HBM3", "2.9.0")
            .is_err());
        assert!(f
            .check_environment(&path, "NVIDIA H100 80GB HBM3", "2.11.0+cu130")
            .is_ok());
        // A file saved under the wrong directory is caught on load.
        let wrong = store.path("NVIDIA H200", "2.11.0+cu130", Mode::Eager);
        f.save(&wrong).unwrap();
        assert!(store
            .load("NVIDIA H200", "2.11.0+cu130", Mode::Eager)
            .is_err());
    }

    #[test]
    fn bad_files_are_named() {
        let p = Path::new("x/compile.json");
        for (text, want) in [
            ("[]", "not a JSON object"),
            (r#"{"level1": {}}"#, "kbench baselines import"),
            (
                r#"{"kbench": {"format": "other", "mode": "eager", "origin": "measured", "environment": {"gpu": "g", "gpu_slug": "g", "torch": "t"}, "updated_unix_s": 0}}"#,
                "format 'other'",
            ),
        ] {
            let err = BaselineFile::from_json_str(p, text)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("x/compile.json") && err.contains(want),
                "{err}"
            );
        }
    }
}
