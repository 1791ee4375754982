//! An open run directory: created or reopened from the manifest of what the run asks for,
//! its secret seed, and the record log appended to as kernels finish.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kbench_record::{EvalRecord, SCHEMA_VERSION};

use crate::runlog::manifest::RunManifest;
use crate::runlog::records::read_records_repairing;
use crate::runlog::seed::RunSecret;

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
    /// Creates a new run directory at `root`, or reopens one with `resume`. `asked` is what
    /// this run asks for, its `run_id` aside: a new run records it under the id its secret
    /// derives; a resumed run must ask what it recorded, and keeps its recorded manifest. The
    /// secret seed of a new run comes from `secret_from` when given (and a resumed run's must
    /// be that one).
    pub fn open(
        root: &Path,
        resume: bool,
        secret_from: Option<&Path>,
        asked: RunManifest,
    ) -> Result<RunDir> {
        let root = root.to_path_buf();
        let records_path = root.join(RECORDS);
        let manifest_path = root.join(MANIFEST);
        let exists = manifest_path.exists();
        if exists && !resume {
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
            let now = RunManifest {
                run_id: recorded.run_id.clone(),
                ..asked
            };
            if let Some(diff) = recorded.conflict(&now) {
                bail!(
                    "cannot resume {}: the settings differ ({diff}); rerun with the recorded settings or choose another --out",
                    root.display()
                );
            }
            let secret = RunSecret::load(&root.join(SECRET))?;
            if let Some(from) = secret_from {
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
            let secret = match secret_from {
                Some(from) => RunSecret::load(from)?,
                None => RunSecret::generate()?,
            };
            let run_id = format!("{:016x}", secret.derive("run-id"));
            let manifest = RunManifest { run_id, ..asked };
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
