//! The run directory: `run.json` (what was asked), `records.jsonl` (one eval record per line,
//! appended and fsynced as each kernel finishes), `secret` (the run's seed, mode 0600),
//! `kernels/` (every candidate source evaluated), `logs/` (worker output, capped).
//!
//! Nothing recorded is ever lost: a run killed mid-write leaves at most one partial line, which
//! `--resume` cuts off (and reports) before appending.

mod names;
pub mod seed;

pub use names::sanitize;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kbench_record::{EvalRecord, SCHEMA_VERSION};
use serde::{Deserialize, Serialize};

use crate::config::RunConfig;
use crate::runlog::seed::RunSecret;

/// What a run was asked to do; a resumed run must ask for the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunManifest {
    pub schema_version: u32,
    pub kbench_version: String,
    pub run_id: String,
    pub created_unix_s: f64,
    pub agent: String,
    pub suite: String,
    pub device: String,
    pub precision: String,
    pub profile: String,
    pub trials: u32,
    /// Stress case families after the random trials (absent in runs made before them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub families: Vec<String>,
    pub timed_calls: Option<u32>,
    pub weight_seed: u64,
    /// `i/N` when this run is one shard of a larger run (`--shard`); absent for a whole or
    /// merged run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
}

impl RunManifest {
    pub fn for_config(c: &RunConfig, run_id: String) -> Self {
        Self {
            schema_version: SCHEMA_VERSION,
            kbench_version: env!("CARGO_PKG_VERSION").into(),
            run_id,
            created_unix_s: now_unix(),
            agent: c.agent.name().into(),
            suite: c.suite_label.clone(),
            device: c.device.to_string(),
            precision: c.precision.to_string(),
            profile: c.profile.to_string(),
            trials: c.trials,
            families: c.families.iter().map(|f| f.to_string()).collect(),
            timed_calls: c.timing.as_ref().map(|t| t.timed_calls),
            weight_seed: c.weight_seed,
            shard: c.shard.map(|s| s.to_string()),
        }
    }

    /// Names the first setting in which `other` differs from this run (suite excepted: a
    /// resumed run may select a different subset of problems).
    pub fn conflict(&self, other: &RunManifest) -> Option<String> {
        let pairs = [
            ("agent", &self.agent, &other.agent),
            ("device", &self.device, &other.device),
            ("precision", &self.precision, &other.precision),
            ("profile", &self.profile, &other.profile),
        ];
        for (name, a, b) in pairs {
            if a != b {
                return Some(format!("{name}: recorded {a}, now {b}"));
            }
        }
        if self.trials != other.trials {
            return Some(format!(
                "trials: recorded {}, now {}",
                self.trials, other.trials
            ));
        }
        if self.families != other.families {
            let show = |f: &[String]| {
                if f.is_empty() {
                    "random only".to_string()
                } else {
                    f.join(",")
                }
            };
            return Some(format!(
                "case families: recorded {}, now {}",
                show(&self.families),
                show(&other.families)
            ));
        }
        if self.timed_calls != other.timed_calls {
            return Some(format!(
                "timed calls: recorded {:?}, now {:?}",
                self.timed_calls, other.timed_calls
            ));
        }
        if self.weight_seed != other.weight_seed {
            return Some(format!(
                "weight seed: recorded {}, now {}",
                self.weight_seed, other.weight_seed
            ));
        }
        if self.shard != other.shard {
            let show = |s: &Option<String>| s.clone().unwrap_or_else(|| "none (whole run)".into());
            return Some(format!(
                "shard: recorded {}, now {}",
                show(&self.shard),
                show(&other.shard)
            ));
        }
        None
    }
}

/// An open run directory.
pub struct RunDir {
    pub root: PathBuf,
    pub manifest: RunManifest,
    pub secret: RunSecret,
    /// Records already in the log when the run was opened.
    pub existing: Vec<EvalRecord>,
    recorded: std::sync::Mutex<HashSet<String>>,
    /// Appends come from every GPU's executor; one line at a time.
    log: std::sync::Mutex<std::fs::File>,
    /// Set when a partial trailing line was cut off on resume.
    pub repaired: Option<String>,
}

pub const RECORDS: &str = "records.jsonl";
pub const MANIFEST: &str = "run.json";
pub const SECRET: &str = "secret";

impl RunDir {
    /// Creates a new run directory, or reopens one with `config.resume`.
    pub fn open(config: &RunConfig) -> Result<RunDir> {
        let root = config.out.clone();
        let records_path = root.join(RECORDS);
        let manifest_path = root.join(MANIFEST);
        let exists = manifest_path.exists();
        if exists && !config.resume {
            bail!(
                "{} already holds a run; pass --resume to continue it, or choose another --out",
                root.display()
            );
        }
        if !exists && records_path.exists() {
            bail!(
                "{} has {} but no {}; it is not a kbench run directory that can be resumed",
                root.display(),
                RECORDS,
                MANIFEST
            );
        }
        for sub in ["", "logs", "kernels"] {
            std::fs::create_dir_all(root.join(sub))
                .with_context(|| format!("creating {}", root.join(sub).display()))?;
        }
        let (manifest, secret) = if exists {
            let text = std::fs::read_to_string(&manifest_path)
                .with_context(|| format!("reading {}", manifest_path.display()))?;
            let recorded: RunManifest = serde_json::from_str(&text).with_context(|| {
                format!("{} is not a kbench run manifest", manifest_path.display())
            })?;
            if recorded.schema_version > SCHEMA_VERSION {
                bail!(
                    "{} was written by a newer kbench (schema {}); use that version to resume",
                    manifest_path.display(),
                    recorded.schema_version
                );
            }
            let now = RunManifest::for_config(config, recorded.run_id.clone());
            if let Some(diff) = recorded.conflict(&now) {
                bail!(
                    "cannot resume {}: the settings differ ({diff}); rerun with the recorded settings or choose another --out",
                    root.display()
                );
            }
            let secret = RunSecret::load(&root.join(SECRET))?;
            if let Some(from) = &config.secret_from {
                if RunSecret::load(from)? != secret {
                    bail!(
                        "cannot resume {}: its secret seed is not the one in --secret-from {}; it belongs to another run",
                        root.display(),
                        from.display()
                    );
                }
            }
            (recorded, secret)
        } else {
            let secret = match &config.secret_from {
                Some(from) => RunSecret::load(from)?,
                None => RunSecret::generate()?,
            };
            let run_id = format!("{:016x}", secret.derive("run-id"));
            let manifest = RunManifest::for_config(config, run_id);
            secret.save(&root.join(SECRET))?;
            write_atomic(&manifest_path, &serde_json::to_vec_pretty(&manifest)?)?;
            (manifest, secret)
        };
        let (existing, repaired) = read_records_repairing(&records_path)?;
        let recorded = existing.iter().map(EvalRecord::key).collect();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&records_path)
            .with_context(|| format!("opening {}", records_path.display()))?;
        Ok(RunDir {
            root,
            manifest,
            secret,
            existing,
            recorded: std::sync::Mutex::new(recorded),
            log: std::sync::Mutex::new(log),
            repaired,
        })
    }

    /// Whether a record with this key is already in the log.
    pub fn is_recorded(&self, key: &str) -> bool {
        self.recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(key)
    }

    /// Appends one record and forces it to disk before returning.
    pub fn append(&self, record: &EvalRecord) -> Result<()> {
        let mut line = serde_json::to_vec(record).context("serialising an eval record")?;
        line.push(b'\n');
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.write_all(&line)
            .and_then(|_| log.sync_data())
            .with_context(|| format!("appending to {}", self.root.join(RECORDS).display()))?;
        self.recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(record.key());
        Ok(())
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    pub fn kernels_dir(&self) -> PathBuf {
        self.root.join("kernels")
    }
}

/// Reads every record of a run log. A partial last line (a run killed mid-write) is skipped;
/// a bad line elsewhere is an error naming the line.
pub fn read_records(path: &Path) -> Result<Vec<EvalRecord>> {
    Ok(read_record_lines(path)?
        .into_iter()
        .map(|(_, r)| r)
        .collect())
}

/// [`read_records`], each record with its line as written (without the newline), for
/// copying records unchanged: a float parsed and printed again need not keep its digits.
pub fn read_record_lines(path: &Path) -> Result<Vec<(String, EvalRecord)>> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let lines: Vec<String> = BufReader::new(f)
        .lines()
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::with_capacity(lines.len());
    let n = lines.len();
    for (i, line) in lines.into_iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match parse_record(&line) {
            Ok(r) => out.push((line, r)),
            Err(_) if i + 1 == n => break,
            Err(e) => bail!("{} line {}: {e}", path.display(), i + 1),
        }
    }
    Ok(out)
}

fn parse_record(line: &str) -> Result<EvalRecord> {
    let v: serde_json::Value = serde_json::from_str(line).context("not JSON")?;
    let version = v
        .get("schema_version")
        .and_then(|s| s.as_u64())
        .unwrap_or(0);
    if version > u64::from(SCHEMA_VERSION) {
        bail!("record has schema_version {version}; this kbench reads up to {SCHEMA_VERSION}");
    }
    serde_json::from_value(v).context("not an eval record")
}

/// Reads the log for resuming: cuts a partial trailing line off the file itself.
fn read_records_repairing(path: &Path) -> Result<(Vec<EvalRecord>, Option<String>)> {
    if !path.exists() {
        return Ok((Vec::new(), None));
    }
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut records = Vec::new();
    let mut good_end = 0usize;
    let mut start = 0usize;
    let mut repaired = None;
    let mut line_no = 0;
    while start < bytes.len() {
        line_no += 1;
        let end = bytes[start..]
            .iter()
            .position(|&b| b == b'\n')
            .map(|p| start + p);
        let Some(end) = end else {
            repaired = Some(format!(
                "cut a partial record ({} bytes, line {line_no}) off the end of {}",
                bytes.len() - start,
                path.display()
            ));
            break;
        };
        let line = String::from_utf8_lossy(&bytes[start..end]);
        if !line.trim().is_empty() {
            match parse_record(&line) {
                Ok(r) => records.push(r),
                Err(e) if end + 1 >= bytes.len() => {
                    repaired = Some(format!(
                        "cut an unreadable last record (line {line_no}: {e}) off {}",
                        path.display()
                    ));
                    break;
                }
                Err(e) => bail!(
                    "{} line {line_no} is not a readable record ({e}); the log is damaged: move it aside and resume",
                    path.display()
                ),
            }
        }
        good_end = end + 1;
        start = end + 1;
    }
    if repaired.is_some() {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .with_context(|| format!("repairing {}", path.display()))?;
        f.set_len(good_end as u64)?;
        let mut f = f;
        f.seek(SeekFrom::End(0))?;
        f.sync_all()?;
    }
    Ok((records, repaired))
}

/// Writes `bytes` to `path` through a temporary file and a rename, so that readers see the
/// old content or the new, never a part.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Seconds since the Unix epoch.
pub fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
