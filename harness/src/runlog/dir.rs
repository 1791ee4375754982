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
use crate::runlog::manifest::{
    broken_seal, check_not_downgraded, write_signed, ManifestFile, RunManifest, Seal,
};
use crate::runlog::out_dir::{check_out, OutFolder};
use crate::runlog::records::{records_key, signed_line, RecordLog, Verifier, RECORD_MAC};
use crate::runlog::seed::RunSecret;

/// An open run directory.
pub(crate) struct RunDir {
    pub(crate) root: PathBuf,
    /// `run.json` as the run was opened (a resumed run's recorded settings; its plan
    /// extended by what this invocation plans).
    pub(crate) manifest: RunManifest,
    pub(crate) secret: RunSecret,
    /// Records already in the log when the run was opened.
    pub(crate) existing: Vec<EvalRecord>,
    recorded: std::sync::Mutex<HashSet<String>>,
    /// Appends come from every GPU's executor; one line at a time.
    log: std::sync::Mutex<std::fs::File>,
    /// The key record lines are signed with (`records::records_key`).
    record_key: RunSecret,
    /// The plan as `run.json` holds it now, and its keys: a record whose key it lacks joins
    /// it (and `run.json` is signed again) before its line is written. `None` for a run
    /// written before kbench listed planned evaluations, whose `run.json` stays as it was.
    plan: std::sync::Mutex<Option<(RunManifest, HashSet<String>)>>,
    /// What reading the log on resume found: each line skipped (and why), a truncated last
    /// line cut off, records read unverified.
    pub(crate) notes: Vec<String>,
    _lock: WriterLock,
}

pub(crate) const RECORDS: &str = "records.jsonl";
pub(crate) const MANIFEST: &str = "run.json";
pub(crate) const SECRET: &str = "secret";

impl RunDir {
    /// Creates a new run directory at `root`, or reopens one with `resume`. `asked` is what
    /// this run asks for, its `run_id` aside, with the evaluations it plans: a new run
    /// records it under the id its secret derives; a resumed run must ask what it recorded,
    /// keeps its recorded settings and adds what it plans to the recorded plan. The secret
    /// seed of a new run comes from `secret_from` when given (and a resumed run's must be
    /// that one). `root` must be new, empty or a kbench run folder (never another tool's
    /// files); one another kbench is writing is refused, naming its pid; a resumed run whose
    /// `run.json` does not verify is refused.
    pub(crate) fn open(
        root: &Path,
        resume: bool,
        secret_from: Option<&Path>,
        asked: RunManifest,
    ) -> Result<RunDir> {
        let root = root.to_path_buf();
        let records_path = root.join(RECORDS);
        let manifest_path = root.join(MANIFEST);
        let state = check_out(&root)?;
        std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
        let lock = WriterLock::acquire(&root)?;
        let exists = state == OutFolder::Run;
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
            let file = ManifestFile::read(&manifest_path)?;
            let recorded = file.manifest.clone();
            if recorded.schema_version > SCHEMA_VERSION {
                bail!(
                    "{} was written by a newer kbench (schema {}); use that version to resume",
                    manifest_path.display(),
                    recorded.schema_version
                );
            }
            let planned = asked.planned.clone();
            let now = RunManifest {
                run_id: recorded.run_id.clone(),
                ..asked
            };
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
            // What run.json says counts only once it is known to be what kbench wrote.
            let seal = file.seal(&secret);
            if seal == Seal::Broken {
                bail!("cannot resume {}: {}", root.display(), broken_seal(&root));
            }
            check_not_downgraded(&root, &recorded, seal)
                .with_context(|| format!("cannot resume {}", root.display()))?;
            if let Some(diff) = recorded.conflict(&now) {
                bail!(
                    "cannot resume {}: the settings differ ({diff}); rerun with the recorded settings or choose another --out",
                    root.display()
                );
            }
            let mut manifest = recorded;
            // A run from before run.json was signed keeps its file as it was.
            if seal == Seal::Intact {
                if let (Some(have), Some(more)) = (manifest.planned.as_mut(), planned) {
                    let before = have.clone();
                    have.extend(&more);
                    if *have != before {
                        write_signed(&manifest_path, &secret, &manifest)?;
                    }
                }
            }
            (manifest, secret)
        } else {
            let secret = match secret_from {
                Some(from) => RunSecret::load(from)?,
                None => RunSecret::generate()?,
            };
            let run_id = format!("{:016x}", secret.derive("run-id"));
            let manifest = RunManifest {
                run_id,
                record_mac: Some(RECORD_MAC.into()),
                planned: Some(asked.planned.clone().unwrap_or_else(|| {
                    kbench_record::Plan::new(kbench_record::PlannedKernels::Ahead)
                })),
                ..asked
            };
            secret.save(&root.join(SECRET))?;
            write_signed(&manifest_path, &secret, &manifest)?;
            (manifest, secret)
        };
        let verifier = Verifier::for_scheme(&secret, manifest.record_mac.as_deref())?;
        let record_key = records_key(&secret, manifest.record_mac.as_deref())?;
        let read = RecordLog::read(&records_path, &verifier)?;
        if read.replaced_manifest > 0 {
            bail!(
                "cannot resume {}: {} is not the one kbench wrote ({} line(s) are signed by a kbench that signs it); restore it, or choose another --out",
                root.display(),
                manifest_path.display(),
                read.replaced_manifest
            );
        }
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
        let plan = manifest.planned.as_ref().map(|p| {
            let keys = p.keys(&manifest.agent).into_iter().collect();
            (manifest.clone(), keys)
        });
        Ok(RunDir {
            root,
            manifest,
            secret,
            existing,
            recorded: std::sync::Mutex::new(recorded),
            log: std::sync::Mutex::new(log),
            record_key,
            plan: std::sync::Mutex::new(plan),
            notes,
            _lock: lock,
        })
    }

    /// Whether a record with this key is already in the log.
    pub(crate) fn is_recorded(&self, key: &str) -> bool {
        self.recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(key)
    }

    /// Appends one record, signed with the run's records key (see `records`), and forces it
    /// to disk before returning. A record the plan does not list yet (an agent that writes its
    /// kernels as it goes) joins the plan first, so that `run.json` lists every record
    /// written: a crash between the two leaves a planned evaluation missing, never a record
    /// unplanned. It always starts a line of its own: a line something else left unfinished
    /// (a process of a candidate writing to the log) is ended first, so that it costs only
    /// itself, never the record after it.
    pub(crate) fn append(&self, record: &EvalRecord) -> Result<()> {
        let mut line = signed_line(&self.record_key, record)?;
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        self.plan_record(record)?;
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

    /// Adds `record`'s evaluation to the plan in `run.json` when it is not there yet.
    fn plan_record(&self, record: &EvalRecord) -> Result<()> {
        let mut plan = self.plan.lock().unwrap_or_else(|e| e.into_inner());
        let Some((manifest, keys)) = plan.as_mut() else {
            return Ok(());
        };
        let key = record.key();
        if keys.contains(&key) {
            return Ok(());
        }
        if let Some(p) = manifest.planned.as_mut() {
            p.add_kernel(
                &record.problem,
                &record.candidate.name,
                record.candidate.sample,
            );
        }
        write_signed(&self.root.join(MANIFEST), &self.secret, manifest)?;
        keys.insert(key);
        Ok(())
    }

    pub(crate) fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    pub(crate) fn kernels_dir(&self) -> PathBuf {
        self.root.join("kernels")
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename, so that readers see the
/// old content or the new, never a part.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
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
            min_timed_calls: None,
            weight_seed: 42,
            shard: None,
            record_mac: None,
            cuda_header: None,
            cxx_header: None,
            planned: None,
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

    #[test]
    fn a_run_with_the_light_cuda_header_records_it_and_resumes_under_it_only() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("run");
        let light = || RunManifest {
            cuda_header: Some("light".into()),
            cxx_header: None,
            ..asked()
        };
        let run = RunDir::open(&root, false, None, light()).unwrap();
        assert_eq!(run.manifest.cuda_header.as_deref(), Some("light"));
        drop(run);
        assert!(RunDir::open(&root, true, None, light()).is_ok());
        let err = RunDir::open(&root, true, None, asked()).err().unwrap();
        assert!(
            format!("{err:#}").contains("KBENCH_CUDA_HEADER: recorded light, now full"),
            "{err:#}"
        );
    }
}
