//! An open run directory: created or reopened from the manifest of what the run asks for,
//! its secret seed, and the record log appended to as kernels finish. Its writer lock is held
//! for as long as it is open.

use std::collections::HashSet;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kbench_record::{EvalRecord, SCHEMA_VERSION};

use crate::runlog::lock::WriterLock;
use crate::runlog::manifest::RunManifest;
use crate::runlog::records::{signed_line, RecordLog, Verifier, RECORD_MAC};
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
    /// What reading the log on resume found: each line skipped (and why), a truncated last
    /// line cut off, records read unverified.
    pub notes: Vec<String>,
    _lock: WriterLock,
}

pub const RECORDS: &str = "records.jsonl";
pub const MANIFEST: &str = "run.json";
pub const SECRET: &str = "secret";

impl RunDir {
    /// Creates a new run directory at `root`, or reopens one with `resume`. `asked` is what
    /// this run asks for, its `run_id` aside: a new run records it under the id its secret
    /// derives; a resumed run must ask what it recorded, and keeps its recorded manifest. The
    /// secret seed of a new run comes from `secret_from` when given (and a resumed run's must
    /// be that one). A folder another kbench is writing is refused, naming its pid.
    pub fn open(
        root: &Path,
        resume: bool,
        secret_from: Option<&Path>,
        asked: RunManifest,
    ) -> Result<RunDir> {
        let root = root.to_path_buf();
        let records_path = root.join(RECORDS);
        let manifest_path = root.join(MANIFEST);
        std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
        let lock = WriterLock::acquire(&root)?;
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
        for sub in ["logs", "kernels"] {
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
            let manifest = RunManifest {
                run_id,
                record_mac: Some(RECORD_MAC.into()),
                ..asked
            };
            secret.save(&root.join(SECRET))?;
            write_atomic(&manifest_path, &serde_json::to_vec_pretty(&manifest)?)?;
            (manifest, secret)
        };
        let verifier = Verifier::new(secret.clone(), manifest.record_mac.is_some());
        let read = RecordLog::read(&records_path, &verifier)?;
        let mut notes = read.warnings();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&records_path)
            .with_context(|| format!("opening {}", records_path.display()))?;
        if read.truncated_tail() {
            // Appends go after it: cut it off, so the next record starts a line of its own.
            log.set_len(read.complete_len)
                .and_then(|_| log.sync_all())
                .with_context(|| {
                    format!(
                        "cutting the truncated last line off {}",
                        records_path.display()
                    )
                })?;
            notes.push(format!(
                "cut the truncated last line off {} (it is evaluated again)",
                records_path.display()
            ));
        }
        let existing = read.records();
        let recorded = existing.iter().map(EvalRecord::key).collect();
        Ok(RunDir {
            root,
            manifest,
            secret,
            existing,
            recorded: std::sync::Mutex::new(recorded),
            log: std::sync::Mutex::new(log),
            notes,
            _lock: lock,
        })
    }

    /// Whether a record with this key is already in the log.
    pub fn is_recorded(&self, key: &str) -> bool {
        self.recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(key)
    }

    /// Appends one record, signed with the run's secret (see `records`), and forces it to
    /// disk before returning. It always starts a line of its own: a line something else left
    /// unfinished (a process of a candidate writing to the log) is ended first, so that it
    /// costs only itself, never the record after it.
    pub fn append(&self, record: &EvalRecord) -> Result<()> {
        let mut line = signed_line(&self.secret, record)?;
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let len = log.metadata().map(|m| m.len()).unwrap_or(0);
        let mut last = [b'\n'];
        if len > 0 && log.read_at(&mut last, len - 1).is_ok() && last[0] != b'\n' {
            line.insert(0, b'\n');
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::one_shot_records;

    fn asked() -> RunManifest {
        RunManifest {
            schema_version: SCHEMA_VERSION,
            kbench_version: "0.1.0".into(),
            run_id: String::new(),
            created_unix_s: 0.0,
            agent: "one-shot".into(),
            suite: "smoke".into(),
            device: "cpu".into(),
            precision: "fp32".into(),
            profile: "strict".into(),
            model_mode: "train".into(),
            trials: 5,
            families: Vec::new(),
            timed_calls: None,
            weight_seed: 42,
            shard: None,
            record_mac: None,
        }
    }

    #[test]
    fn a_line_left_unfinished_in_the_log_costs_only_itself() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("run");
        let recs = one_shot_records();
        let run = RunDir::open(&root, false, None, asked()).unwrap();
        assert_eq!(run.manifest.record_mac.as_deref(), Some(RECORD_MAC));
        run.append(&recs[0]).unwrap();
        // Something else appends half a line while the run goes on.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(root.join(RECORDS))
            .unwrap();
        f.write_all(b"{\"mac\":\"0000").unwrap();
        run.append(&recs[1]).unwrap();
        assert!(
            RunDir::open(&root, true, None, asked()).is_err(),
            "a second writer while the first is open"
        );
        drop(run);
        let run = RunDir::open(&root, true, None, asked()).unwrap();
        assert_eq!(run.existing.len(), 2, "{:?}", run.notes);
        assert!(run.is_recorded(&recs[1].key()));
        assert_eq!(run.notes.len(), 1, "{:?}", run.notes);
        assert!(run.notes[0].contains("line 2: not JSON"), "{:?}", run.notes);
    }
}
