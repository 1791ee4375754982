//! `--resume`: the problems audited so far, one JSON line each after a line of settings, in
//! `--out` ([`PROGRESS`]), written as they finish and read back by an audit with the same
//! settings.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use kbench_suites::Problem;
use serde::Serialize;
use serde_json::{json, Value};

use super::report::ProblemAudit;

/// Problems audited so far, one JSON line each after a line of settings, in `--out`: what
/// `--resume` continues from. Removed once the audit is complete.
pub(crate) const PROGRESS: &str = "audit.progress.jsonl";

/// The audits an interrupted run with the same `settings` left in `path` (a problem whose
/// audit was interrupted is audited again).
pub(super) fn read_progress(
    path: &Path,
    settings: &Value,
) -> Result<BTreeMap<String, ProblemAudit>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let Some(first) = lines.next() else {
        return Ok(BTreeMap::new());
    };
    let head: Value = serde_json::from_str(first)
        .with_context(|| format!("{}: the first line is not JSON", path.display()))?;
    if head.get("settings") != Some(settings) {
        bail!(
            "{} was written by an audit with other settings ({}), not {settings}: use another --out, or drop --resume to start again",
            path.display(),
            head.get("settings").unwrap_or(&Value::Null)
        );
    }
    let mut done = BTreeMap::new();
    // A line cut short by a kill is the last one; it is left out.
    for line in lines {
        if let Ok(pa) = serde_json::from_str::<ProblemAudit>(line) {
            if !pa
                .not_audited
                .as_deref()
                .unwrap_or("")
                .starts_with("interrupted")
            {
                done.insert(format!("{}/{}", pa.key, pa.sha256), pa);
            }
        }
    }
    Ok(done)
}

fn append_line(file: &Mutex<Option<std::fs::File>>, value: &impl Serialize) -> Result<()> {
    use std::io::Write;
    let mut guard = file.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = guard.as_mut() {
        let mut line = serde_json::to_string(value)?;
        line.push('\n');
        f.write_all(line.as_bytes())?;
        f.sync_data()?;
    }
    Ok(())
}

/// The progress file of an audit with `--out` (an audit without `--out` keeps none).
pub(super) struct Progress {
    file: Mutex<Option<std::fs::File>>,
}

impl Progress {
    /// Starts `out/PROGRESS` afresh with its settings line; with `resume`, first reads back
    /// what an interrupted audit with the same `settings` left there.
    pub(super) fn open(
        out: Option<&Path>,
        resume: bool,
        settings: &Value,
    ) -> Result<(Progress, BTreeMap<String, ProblemAudit>)> {
        let mut resumed: BTreeMap<String, ProblemAudit> = BTreeMap::new();
        let progress_file: Mutex<Option<std::fs::File>> = Mutex::new(None);
        if let Some(out) = out {
            std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
            let path = out.join(PROGRESS);
            if resume {
                resumed = read_progress(&path, settings)?;
            }
            let f = std::fs::File::create(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            *progress_file.lock().unwrap_or_else(|e| e.into_inner()) = Some(f);
            append_line(&progress_file, &json!({ "settings": settings }))?;
        }
        Ok((
            Progress {
                file: progress_file,
            },
            resumed,
        ))
    }

    /// The audits of `problems` taken from `resumed` (in the problems' order, `None` for
    /// those still to audit), each recorded again in the new progress file.
    pub(super) fn reuse(
        &self,
        problems: &[Problem],
        mut resumed: BTreeMap<String, ProblemAudit>,
    ) -> Result<Vec<Option<ProblemAudit>>> {
        let mut prefilled: Vec<Option<ProblemAudit>> = vec![None; problems.len()];
        for (i, p) in problems.iter().enumerate() {
            if let Some(pa) = resumed.remove(&format!("{}/{}", p.key(), p.sha256)) {
                append_line(&self.file, &pa)?;
                prefilled[i] = Some(pa);
            }
        }
        Ok(prefilled)
    }

    /// Records one problem's audit.
    pub(super) fn record(&self, pa: &ProblemAudit) -> Result<()> {
        append_line(&self.file, pa)
    }

    /// The audit is complete: closes the file and removes it from `out`.
    pub(super) fn finish(&self, out: &Path) {
        drop(self.file.lock().unwrap_or_else(|e| e.into_inner()).take());
        let _ = std::fs::remove_file(out.join(PROGRESS));
    }
}
