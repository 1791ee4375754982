//! A run folder read for a report or a merge: `run.json` checked against its signature, every
//! line of `records.jsonl` against its MAC, both keyed by the run's `secret`.
//!
//! What cannot be checked is refused unless the reader was asked to read it anyway
//! (`--unverified`): a folder without its secret (or with a corrupt one), without `run.json`,
//! a `run.json` whose signature does not hold, one stripped of its signature, records
//! written before kbench signed them, a records file outside a run folder. Read anyway,
//! nothing of it is checked and every output marks it UNVERIFIED ([`Trust::Unverified`]).
//! Runs written before kbench signed `run.json` (whose lines it did sign) are read with
//! their lines verified and a note: they list no planned evaluations ([`Trust::Legacy`]).

use std::path::Path;

use anyhow::{bail, Result};

use super::manifest::{broken_seal, check_not_downgraded, ManifestFile, RunManifest, Seal};
use super::records::{RecordLog, Verifier};
use super::seed::RunSecret;
use super::{MANIFEST, RECORDS, SECRET};

/// How far a run's files were checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Trust {
    /// `run.json`'s signature and every record line verified with the run's secret.
    Verified,
    /// Every record line verified; `run.json` was written by a kbench from before it signed
    /// `run.json` and listed planned evaluations (the note says so).
    Legacy(String),
    /// Nothing checked, read because `--unverified` asked for it; why it could not be.
    Unverified(String),
}

/// A run folder (or a records file) as read.
#[derive(Debug)]
pub(crate) struct RunFolder {
    /// `run.json`, when there is one that parses.
    pub(crate) manifest: Option<RunManifest>,
    pub(crate) secret: Option<RunSecret>,
    pub(crate) log: RecordLog,
    pub(crate) trust: Trust,
}

/// Reads the run at `path` (a run folder, or a records file: a run folder's own
/// `records.jsonl` stands for its folder). With `unverified_ok` what cannot be verified is
/// read unchecked, as [`Trust::Unverified`]; without, it is refused, naming the file and
/// what to do.
pub(crate) fn read_run_folder(path: &Path, unverified_ok: bool) -> Result<RunFolder> {
    let dir = if path.is_dir() {
        Some(path.to_path_buf())
    } else {
        path.parent()
            .filter(|_| path.file_name().is_some_and(|n| n == RECORDS))
            .filter(|d| d.join(MANIFEST).exists() || d.join(SECRET).exists())
            .map(Path::to_path_buf)
    };
    let Some(dir) = dir else {
        if !path.exists() {
            bail!(
                "{} has no {RECORDS}: pass a run directory written by `kbench run --out DIR` or a records file",
                path.display()
            );
        }
        let why = format!(
            "{} is a records file outside a run folder: there is no secret to verify it with",
            path.display()
        );
        return unchecked(path, None, why, unverified_ok);
    };
    let records = dir.join(RECORDS);
    if !records.exists() {
        bail!(
            "{} has no {RECORDS}: pass a run directory written by `kbench run --out DIR` or a records file",
            path.display()
        );
    }
    let manifest = ManifestFile::read(&dir.join(MANIFEST));
    let secret_path = dir.join(SECRET);
    let secret = if secret_path.exists() {
        RunSecret::load(&secret_path).map_err(|e| format!("{e:#}"))
    } else {
        Err(format!(
            "{} has no {SECRET} (a copy made without it, or deleted): its records and {MANIFEST} cannot be verified",
            dir.display()
        ))
    };
    let (file, secret) = match (manifest, secret) {
        (_, Err(why)) => return unchecked(&dir, None, why, unverified_ok),
        (Err(e), Ok(_)) => {
            let why = if dir.join(MANIFEST).exists() {
                format!("{e:#}")
            } else {
                format!(
                    "{} has no {MANIFEST}: its settings and plan are gone",
                    dir.display()
                )
            };
            return unchecked(&dir, None, why, unverified_ok);
        }
        (Ok(f), Ok(s)) => (f, s),
    };
    let seal = file.seal(&secret);
    let refused = match seal {
        Seal::Broken => Some(broken_seal(&dir)),
        _ => check_not_downgraded(&dir, &file.manifest, seal)
            .err()
            .map(|e| format!("{e:#}")),
    };
    if let Some(why) = refused {
        return unchecked(&dir, Some(file.manifest), why, unverified_ok);
    }
    let verifier = match Verifier::for_scheme(&secret, file.manifest.record_mac.as_deref()) {
        Ok(v) => v,
        Err(e) => bail!("{}: {e:#}", dir.join(MANIFEST).display()),
    };
    let log = RecordLog::read(&records, &verifier)?;
    if log.replaced_manifest > 0 {
        let why = format!(
            "{} is not the one kbench wrote: {} line(s) of {} are signed by a kbench that signs {MANIFEST}, which this one is not",
            dir.join(MANIFEST).display(),
            log.replaced_manifest,
            records.display()
        );
        return unchecked(&dir, Some(file.manifest), why, unverified_ok);
    }
    if log.unverified > 0 {
        let why = format!(
            "{}: its {} record(s) carry no MAC (written by a kbench from before records were signed)",
            records.display(),
            log.unverified
        );
        return unchecked(&dir, Some(file.manifest), why, unverified_ok);
    }
    let trust = match seal {
        Seal::Intact => Trust::Verified,
        _ => Trust::Legacy(format!(
            "{} was written by a kbench from before run.json was signed and listed the planned evaluations: its record lines are verified, but a deleted record cannot be told from one never planned",
            dir.join(MANIFEST).display()
        )),
    };
    Ok(RunFolder {
        manifest: Some(file.manifest),
        secret: Some(secret),
        log,
        trust,
    })
}

/// The run read with nothing checked, when `unverified_ok`; else refused with `why`.
fn unchecked(
    path: &Path,
    manifest: Option<RunManifest>,
    why: String,
    unverified_ok: bool,
) -> Result<RunFolder> {
    if !unverified_ok {
        bail!(
            "{why}; to read it anyway, pass --unverified (every output then marks it UNVERIFIED)"
        );
    }
    let (records, manifest) = if path.is_dir() {
        let m = manifest.or_else(|| {
            ManifestFile::read(&path.join(MANIFEST))
                .ok()
                .map(|f| f.manifest)
        });
        (path.join(RECORDS), m)
    } else {
        (path.to_path_buf(), None)
    };
    let log = RecordLog::read(&records, &Verifier::unchecked(why.clone()))?;
    Ok(RunFolder {
        manifest,
        secret: None,
        log,
        trust: Trust::Unverified(why),
    })
}

#[cfg(test)]
#[path = "read_tests.rs"]
mod tests;
