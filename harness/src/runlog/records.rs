//! Reading `records.jsonl`: every record, or (for resuming) with a partial last line cut off.

use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::Path;

use anyhow::{bail, Context, Result};
use kbench_record::{EvalRecord, SCHEMA_VERSION};

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
pub(super) fn read_records_repairing(path: &Path) -> Result<(Vec<EvalRecord>, Option<String>)> {
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
