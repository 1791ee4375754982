//! `records.jsonl`: a record signed into a line, and a log read back with every line verified.
//!
//! A line the harness writes is the record's JSON serialisation with a `mac` member spliced
//! in first (`mac`: HMAC-SHA256 over exactly the record's bytes). Runs written since kbench
//! signs `run.json` (`record_mac` [`RECORD_MAC`]) key it with the records' own key, derived
//! from the run's secret ([`RunSecret::subkey`] `records`); runs written before
//! ([`LEGACY_RECORD_MAC`]) key it with the secret itself. A line signed under the current
//! scheme never verifies under the old one, so a `run.json` stripped of its signature to pass
//! for an older run's is recognised ([`RecordLog::replaced_manifest`]).
//!
//! Reading never refuses a log because of a line: a line that is truncated, not JSON, without
//! a valid MAC, or not a record is named (file, line, why) and skipped. It is not counted, and
//! `--resume` evaluates its kernel again; reports count its evaluation as missing. A run whose
//! `run.json` does not say its records are signed (written before kbench signed them), or
//! that has no `secret`, is read unverified, unless some line of it verifies: then every
//! line without a MAC is a forgery. Whether a reader may read a run unverified at all is the
//! reader's decision (`runlog::read`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kbench_record::{EvalRecord, SCHEMA_VERSION};
use serde::Deserialize;

use super::mac::{claim, sign_object, Claim};
use super::seed::RunSecret;
use super::{MANIFEST, SECRET};

/// What `run.json`'s `record_mac` says of a run whose lines carry a MAC keyed by the records'
/// own key and whose `run.json` is signed too (every run since kbench signed its manifest).
pub const RECORD_MAC: &str = "hmac-sha256-v2";
/// What it said of runs whose lines carry a MAC keyed by the secret itself, and whose
/// `run.json` was not signed.
pub(crate) const LEGACY_RECORD_MAC: &str = "hmac-sha256";
/// The purpose the records' key is derived for ([`RunSecret::subkey`]).
const RECORDS_KEY: &str = "records";

/// The key a run's lines are signed with, from its secret and `run.json`'s `record_mac`.
pub fn records_key(secret: &RunSecret, record_mac: Option<&str>) -> Result<RunSecret> {
    match record_mac {
        Some(RECORD_MAC) => Ok(secret.subkey(RECORDS_KEY)),
        None | Some(LEGACY_RECORD_MAC) => Ok(secret.clone()),
        Some(other) => anyhow::bail!(
            "records signed as {other:?}, a scheme this kbench does not know: use the newer kbench that wrote them"
        ),
    }
}

/// Whether one line of a log (without its newline) carries a MAC that verifies under `key`:
/// the check a holder of the run's secret makes on a record line it was handed (`kbench
/// serve`'s export), on the line's bytes as they came.
pub fn line_verifies(key: &RunSecret, line: &str) -> bool {
    super::mac::claim(line).verifies(key)
}

/// `record` as one signed line of the log, with its newline; `key` is the run's
/// [`records_key`].
pub fn signed_line(key: &RunSecret, record: &EvalRecord) -> Result<Vec<u8>> {
    let body = serde_json::to_string(record).context("serialising an eval record")?;
    Ok(format!("{}\n", sign_object(key, &body)?).into_bytes())
}

/// How the lines of one log are checked.
#[derive(Debug, Clone)]
pub(crate) struct Verifier {
    /// The key the run's lines are signed with ([`records_key`]).
    key: Option<RunSecret>,
    /// The run's manifest says its records are signed: a line without a MAC fails.
    signed: bool,
    /// Why lines cannot be checked, when there is no key.
    no_key: String,
    /// For a run whose `run.json` claims the legacy scheme: the current scheme's key. A line
    /// that verifies under it was written by a kbench that signs `run.json`, so this run's
    /// `run.json` is not the one its kbench wrote.
    current: Option<RunSecret>,
}

impl Verifier {
    #[cfg(test)]
    /// Lines checked against `key`; `signed` when the run's manifest says its records are.
    pub(crate) fn new(key: RunSecret, signed: bool) -> Verifier {
        Verifier {
            key: Some(key),
            signed,
            no_key: String::new(),
            current: None,
        }
    }

    /// For a run with `secret` whose `run.json` says `record_mac`.
    pub(crate) fn for_scheme(secret: &RunSecret, record_mac: Option<&str>) -> Result<Verifier> {
        let key = records_key(secret, record_mac)?;
        let legacy = record_mac != Some(RECORD_MAC);
        Ok(Verifier {
            key: Some(key),
            signed: record_mac.is_some(),
            no_key: String::new(),
            current: legacy.then(|| secret.subkey(RECORDS_KEY)),
        })
    }

    /// No line can be checked, because of `why`.
    pub(crate) fn unchecked(why: impl Into<String>) -> Verifier {
        Verifier {
            key: None,
            signed: false,
            no_key: why.into(),
            current: None,
        }
    }

    /// For the log of run folder `dir` as kbench itself reads a folder it wrote (an agent
    /// run's final kernels, baselines measured before an interruption): keyed by its
    /// `secret` under the scheme its `run.json` names. A missing or corrupt secret does not
    /// stop the reading: the lines are then read unverified, and the warning says why.
    /// Reports and merges read through `runlog::read`, which refuses that unless asked.
    pub(crate) fn of_run(dir: &Path) -> Verifier {
        let record_mac: Option<String> = std::fs::read(dir.join(MANIFEST))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|m| m.get("record_mac")?.as_str().map(str::to_string));
        let path = dir.join(SECRET);
        if !path.exists() {
            return Verifier::unchecked(if record_mac.is_some() {
                format!(
                    "{} is missing though {MANIFEST} says the records are signed",
                    path.display()
                )
            } else {
                format!("{} has no {SECRET}", dir.display())
            });
        }
        RunSecret::load(&path)
            .and_then(|s| Verifier::for_scheme(&s, record_mac.as_deref()))
            .unwrap_or_else(|e| Verifier::unchecked(format!("{e:#}")))
    }
}

/// Why a line of a log is not read.
#[derive(Debug, Clone, PartialEq)]
pub enum LineFault {
    /// The last line, without its newline and not a whole record.
    Truncated,
    NotJson(String),
    /// The run signs its records; this line carries no MAC.
    NoMac,
    /// The MAC does not match the line (or is not 64 hex digits).
    BadMac,
    /// Written by a newer kbench.
    Newer(u64),
    NotARecord(String),
}

impl LineFault {
    /// The fault's kind in a few words, for counts.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            LineFault::Truncated => "truncated",
            LineFault::NotJson(_) => "not JSON",
            LineFault::NoMac => "no MAC",
            LineFault::BadMac => "bad MAC",
            LineFault::Newer(_) => "newer schema",
            LineFault::NotARecord(_) => "not a record",
        }
    }
}

impl std::fmt::Display for LineFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LineFault::Truncated => f.write_str(
                "truncated (a partial last line: a run killed mid-write, or not written by kbench)",
            ),
            LineFault::NotJson(e) => write!(f, "not JSON ({e})"),
            LineFault::NoMac => f.write_str(
                "no MAC (this run signs every record it writes: the line was not written by its kbench)",
            ),
            LineFault::BadMac => f.write_str(
                "bad MAC (the line was changed after kbench wrote it, or not written by this run's kbench)",
            ),
            LineFault::Newer(v) => write!(
                f,
                "record has schema_version {v}; this kbench reads up to {SCHEMA_VERSION}: use a newer kbench"
            ),
            LineFault::NotARecord(e) => write!(f, "not an eval record ({e})"),
        }
    }
}

/// Bad lines named one by one in [`RecordLog::warnings`]; the rest are counted.
pub(crate) const WARNED_LINES: usize = 10;

/// A line that was read, as written (without its newline), and its record.
#[derive(Debug, Clone)]
pub struct LogLine {
    /// 1-based line number in the file.
    pub(crate) no: usize,
    pub(crate) text: String,
    pub record: EvalRecord,
}

/// A log read back: its good lines, and each bad line with why.
#[derive(Debug, Clone)]
pub struct RecordLog {
    pub(crate) path: PathBuf,
    pub lines: Vec<LogLine>,
    pub bad: Vec<(usize, LineFault)>,
    /// Lines read without a MAC check (see [`Verifier`]), and why they could not be checked.
    pub unverified: usize,
    unverified_why: String,
    /// Bytes up to the end of the last line that ended with a newline: a truncated tail
    /// starts there.
    pub(crate) complete_len: u64,
    /// Lines that fail under the legacy scheme `run.json` claims but verify under the
    /// current one: that `run.json` was put in place of the one the run's kbench signed.
    pub(crate) replaced_manifest: usize,
}

impl RecordLog {
    /// Reads `path` (a missing file is an empty log). Fails only when the file cannot be read.
    pub(crate) fn read(path: &Path, verifier: &Verifier) -> Result<RecordLog> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let mut log = RecordLog {
            path: path.to_path_buf(),
            lines: Vec::new(),
            bad: Vec::new(),
            unverified: 0,
            unverified_why: String::new(),
            complete_len: 0,
            replaced_manifest: 0,
        };
        // Lines that carry no MAC, with their place in `lines`, until it is known whether
        // the run signs its lines.
        let mut unsigned = Vec::new();
        let mut verified = 0usize;
        let mut unchecked = 0usize;
        let (mut pos, mut no) = (0usize, 0usize);
        while pos < bytes.len() {
            no += 1;
            let newline = bytes[pos..].iter().position(|&b| b == b'\n');
            let end = newline.map_or(bytes.len(), |p| pos + p);
            let raw = &bytes[pos..end];
            pos = end + 1;
            if newline.is_some() {
                log.complete_len = pos as u64;
            }
            let last_unended = newline.is_none();
            let Ok(text) = std::str::from_utf8(raw) else {
                log.bad
                    .push((no, fault_at_end(last_unended, || "not UTF-8".into())));
                continue;
            };
            if text.trim().is_empty() {
                continue;
            }
            let value: serde_json::Value = match serde_json::from_str(text) {
                Ok(v) => v,
                Err(e) => {
                    log.bad
                        .push((no, fault_at_end(last_unended, || e.to_string())));
                    continue;
                }
            };
            let mut has_mac = true;
            match (claim(text), &verifier.key) {
                (Claim::None, _) => has_mac = false,
                (Claim::Malformed, Some(_)) => {
                    log.bad.push((no, LineFault::BadMac));
                    continue;
                }
                (c @ Claim::Mac { .. }, Some(key)) => {
                    if !c.verifies(key) {
                        if verifier.current.as_ref().is_some_and(|k| c.verifies(k)) {
                            log.replaced_manifest += 1;
                        }
                        log.bad.push((no, LineFault::BadMac));
                        continue;
                    }
                    verified += 1;
                }
                (_, None) => unchecked += 1,
            }
            let version = value
                .get("schema_version")
                .and_then(|s| s.as_u64())
                .unwrap_or(0);
            if version > u64::from(SCHEMA_VERSION) {
                log.bad.push((no, LineFault::Newer(version)));
                continue;
            }
            match EvalRecord::deserialize(&value) {
                Ok(record) => {
                    if !has_mac {
                        unsigned.push(log.lines.len());
                    }
                    log.lines.push(LogLine {
                        no,
                        text: text.to_string(),
                        record,
                    });
                }
                Err(e) => log.bad.push((no, LineFault::NotARecord(e.to_string()))),
            }
        }
        let strict = verifier.key.is_some() && (verifier.signed || verified > 0);
        if strict {
            for &i in unsigned.iter().rev() {
                let line = log.lines.remove(i);
                log.bad.push((line.no, LineFault::NoMac));
            }
            log.bad.sort_by_key(|(no, _)| *no);
        } else {
            log.unverified = unchecked + unsigned.len();
            log.unverified_why = if verifier.key.is_none() {
                verifier.no_key.clone()
            } else {
                format!("{MANIFEST} does not say its records are signed: written by a kbench from before records were signed")
            };
        }
        Ok(log)
    }

    /// For the log of run folder `dir`, checked with [`Verifier::of_run`].
    pub fn of_run(dir: &Path) -> Result<RecordLog> {
        RecordLog::read(&dir.join(super::RECORDS), &Verifier::of_run(dir))
    }

    /// One line per bad line (file, line number, why; skipped), the first
    /// [`WARNED_LINES`] of them and then one line for the rest, by kind; and one for
    /// unverified lines. A file of junk costs a screenful, not a line per line.
    pub fn warnings(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .bad
            .iter()
            .take(WARNED_LINES)
            .map(|(no, why)| format!("{} line {no}: {why}; skipped", self.path.display()))
            .collect();
        if self.bad.len() > WARNED_LINES {
            let mut kinds: std::collections::BTreeMap<&str, usize> = Default::default();
            for (_, why) in &self.bad[WARNED_LINES..] {
                *kinds.entry(why.kind()).or_default() += 1;
            }
            let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
            out.push(format!(
                "{}: {} more bad line(s) skipped ({}); {} in all",
                self.path.display(),
                self.bad.len() - WARNED_LINES,
                kinds.join(", "),
                self.bad.len()
            ));
        }
        if self.unverified > 0 {
            out.push(format!(
                "{}: {} record(s) read unverified, without a MAC check ({})",
                self.path.display(),
                self.unverified,
                self.unverified_why
            ));
        }
        out
    }

    /// Bad lines that are not a truncated last line: changed, forged, not JSON, not records.
    pub(crate) fn invalid(&self) -> usize {
        self.bad.len() - usize::from(self.truncated_tail())
    }

    /// Whether the last line is a truncated one (cut off by `--resume`).
    pub(crate) fn truncated_tail(&self) -> bool {
        matches!(self.bad.last(), Some((_, LineFault::Truncated)))
    }

    /// The records of the good lines, in order.
    pub(crate) fn records(self) -> Vec<EvalRecord> {
        self.lines.into_iter().map(|l| l.record).collect()
    }
}

/// A line that does not parse: truncated when it is the last and has no newline.
fn fault_at_end(last_unended: bool, why: impl FnOnce() -> String) -> LineFault {
    if last_unended {
        LineFault::Truncated
    } else {
        LineFault::NotJson(why())
    }
}

#[cfg(test)]
#[path = "records_tests.rs"]
mod tests;
