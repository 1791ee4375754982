//! `records.jsonl`: a record signed into a line, and a log read back with every line verified.
//!
//! A line the harness writes is the record's JSON serialisation `R` (one object) with a `mac`
//! member spliced in first:
//!
//! ```text
//! {"mac":"<64 lowercase hex digits>",<R without its opening brace>
//! ```
//!
//! The MAC is HMAC-SHA256, keyed by the run's secret (`seed`), over exactly the bytes of `R`.
//! A reader takes the line apart by bytes (`{` and everything after the MAC's `",`) and
//! recomputes the MAC over them; it never parses the JSON and prints it again, which need not
//! reproduce a float's digits (merge copies lines as written for the same reason). The line
//! stays one JSON object whose extra `mac` member record readers ignore.
//!
//! Reading never refuses a log because of a line: a line that is truncated, not JSON, without
//! a valid MAC, or not a record is named (file, line, why) and skipped. It is not counted, and
//! `--resume` evaluates its kernel again. A run whose `run.json` does not say its records are
//! signed (written before kbench signed them), or that has no `secret`, is read unverified
//! with one warning, unless some line of it verifies: then every line without a MAC is a
//! forgery.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kbench_record::{EvalRecord, SCHEMA_VERSION};
use serde::Deserialize;

use super::seed::RunSecret;
use super::{MANIFEST, SECRET};

/// What `run.json`'s `record_mac` says of a run whose lines carry a MAC.
pub const RECORD_MAC: &str = "hmac-sha256";

const MAC_PREFIX: &str = "{\"mac\":\"";
const MAC_HEX_LEN: usize = 64;

/// `record` as one signed line of the log, with its newline.
pub fn signed_line(secret: &RunSecret, record: &EvalRecord) -> Result<Vec<u8>> {
    let body = serde_json::to_string(record).context("serialising an eval record")?;
    let Some(members) = body.strip_prefix('{').filter(|m| m.len() > 1) else {
        anyhow::bail!("an eval record serialised to {body}, not an object with members");
    };
    let mac = secret.mac_hex(body.as_bytes());
    Ok(format!("{MAC_PREFIX}{mac}\",{members}\n").into_bytes())
}

/// The MAC a line claims and the bytes it must cover.
enum Claim<'a> {
    None,
    Malformed,
    Mac { hex: &'a str, body: String },
}

fn claim(line: &str) -> Claim<'_> {
    let Some(rest) = line.strip_prefix(MAC_PREFIX) else {
        return Claim::None;
    };
    let Some(hex) = rest.get(..MAC_HEX_LEN) else {
        return Claim::Malformed;
    };
    match rest[MAC_HEX_LEN..].strip_prefix("\",") {
        Some(members) => Claim::Mac {
            hex,
            body: format!("{{{members}"),
        },
        None => Claim::Malformed,
    }
}

/// How the lines of one log are checked.
#[derive(Debug, Clone)]
pub struct Verifier {
    secret: Option<RunSecret>,
    /// The run's manifest says its records are signed: a line without a MAC fails.
    signed: bool,
    /// Why lines cannot be checked, when there is no secret.
    no_key: String,
}

impl Verifier {
    /// Lines checked against `secret`; `signed` when the run's manifest says its records are.
    pub fn new(secret: RunSecret, signed: bool) -> Verifier {
        Verifier {
            secret: Some(secret),
            signed,
            no_key: String::new(),
        }
    }

    /// For the log of run folder `dir`: keyed by its `secret` when it has one, strict when its
    /// `run.json` says its records are signed. A missing or corrupt secret does not stop the
    /// reading: the lines are then read unverified, and the warning says why.
    pub fn of_run(dir: &Path) -> Verifier {
        let signed = std::fs::read(dir.join(MANIFEST))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .is_some_and(|m| m.get("record_mac").is_some_and(|v| !v.is_null()));
        let path = dir.join(SECRET);
        let (secret, no_key) = if path.exists() {
            match RunSecret::load(&path) {
                Ok(s) => (Some(s), String::new()),
                Err(e) => (None, format!("{e:#}")),
            }
        } else {
            let why = if signed {
                format!(
                    "{} is missing though {MANIFEST} says the records are signed",
                    path.display()
                )
            } else {
                format!("{} has no {SECRET}", dir.display())
            };
            (None, why)
        };
        Verifier {
            secret,
            signed,
            no_key,
        }
    }

    /// For a records file named directly: its run folder's, when it is a run folder's
    /// `records.jsonl`; else nothing to check against.
    pub fn of_records_file(path: &Path) -> Verifier {
        match path.parent() {
            Some(dir) if dir.join(MANIFEST).exists() || dir.join(SECRET).exists() => {
                Verifier::of_run(dir)
            }
            _ => Verifier {
                secret: None,
                signed: false,
                no_key: "it is not in a run folder with a secret".into(),
            },
        }
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

/// A line that was read, as written (without its newline), and its record.
#[derive(Debug, Clone)]
pub struct LogLine {
    /// 1-based line number in the file.
    pub no: usize,
    pub text: String,
    pub record: EvalRecord,
}

/// A log read back: its good lines, and each bad line with why.
#[derive(Debug, Clone)]
pub struct RecordLog {
    pub path: PathBuf,
    pub lines: Vec<LogLine>,
    pub bad: Vec<(usize, LineFault)>,
    /// Lines read without a MAC check (see [`Verifier`]), and why they could not be checked.
    pub unverified: usize,
    unverified_why: String,
    /// Bytes up to the end of the last line that ended with a newline: a truncated tail
    /// starts there.
    pub complete_len: u64,
}

impl RecordLog {
    /// Reads `path` (a missing file is an empty log). Fails only when the file cannot be read.
    pub fn read(path: &Path, verifier: &Verifier) -> Result<RecordLog> {
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
            match (claim(text), &verifier.secret) {
                (Claim::None, _) => has_mac = false,
                (Claim::Malformed, Some(_)) => {
                    log.bad.push((no, LineFault::BadMac));
                    continue;
                }
                (Claim::Mac { hex, body }, Some(secret)) => {
                    if !secret.verify_mac(body.as_bytes(), hex) {
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
        let strict = verifier.secret.is_some() && (verifier.signed || verified > 0);
        if strict {
            for &i in unsigned.iter().rev() {
                let line = log.lines.remove(i);
                log.bad.push((line.no, LineFault::NoMac));
            }
            log.bad.sort_by_key(|(no, _)| *no);
        } else {
            log.unverified = unchecked + unsigned.len();
            log.unverified_why = if verifier.secret.is_none() {
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

    /// One line per bad line (file, line number, why; skipped), and one for unverified lines.
    pub fn warnings(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .bad
            .iter()
            .map(|(no, why)| format!("{} line {no}: {why}; skipped", self.path.display()))
            .collect();
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

    /// Whether the last line is a truncated one (cut off by `--resume`).
    pub fn truncated_tail(&self) -> bool {
        matches!(self.bad.last(), Some((_, LineFault::Truncated)))
    }

    /// The records of the good lines, in order.
    pub fn records(self) -> Vec<EvalRecord> {
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
