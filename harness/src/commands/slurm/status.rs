//! `kbench slurm status`: each shard's state from its directory (the exit code its task
//! wrote, the records it made) and from Slurm (`squeue`, and `sacct` where accounting is
//! on), rendered as a table or as JSON.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command as Process;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::script::quote;
use super::submission::{shard_dir, Sharded, Submission};
use super::{EXIT_CODE, SUBMISSION_SCHEMA};
use crate::runlog::RECORDS;

/// Where a shard stands.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub(crate) enum ShardState {
    /// kbench finished the shard: everything it plans is recorded (`run`: exit 0 or 3;
    /// `baselines measure`: exit 0, everything measured or its failure recorded).
    Done { exit_code: i32 },
    /// Queued or running; `slurm_state` is squeue's (PENDING, RUNNING, ...).
    Active { slurm_state: String },
    /// Neither finished nor queued: resubmit it.
    Stopped { why: String },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ShardStatus {
    pub(crate) shard: u32,
    #[serde(flatten)]
    pub(crate) state: ShardState,
    /// Records in the shard's run log (for `baselines measure`: in all its measuring runs).
    pub(crate) records: usize,
    /// `JOB_TASK` of the shard's latest task, if it was ever submitted.
    pub(crate) job: Option<String>,
    /// Slurm's output of that task.
    pub(crate) log: Option<PathBuf>,
}

/// Slurm job states in which a task is still queued, running or about to run again.
const ACTIVE_STATES: &[&str] = &[
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "SUSPENDED",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "STOPPED",
];

/// `JOB_TASK` → state, from `squeue` (every state it still remembers).
fn squeue_states() -> Result<BTreeMap<String, String>> {
    let out = Process::new("squeue")
        .args(["--noheader", "--array", "--states=all", "--format=%i|%T"])
        .output()
        .context("running squeue: is this a Slurm login node (squeue on PATH)?")?;
    if !out.status.success() {
        bail!(
            "squeue failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(parse_states(&String::from_utf8_lossy(&out.stdout)))
}

/// `JOB_TASK` → state from `sacct`, for tasks squeue has forgotten. Empty when accounting is
/// off (sacct then fails), which is common on small clusters.
fn sacct_states(job_ids: &BTreeSet<&str>) -> BTreeMap<String, String> {
    if job_ids.is_empty() {
        return BTreeMap::new();
    }
    let ids: Vec<&str> = job_ids.iter().copied().collect();
    match Process::new("sacct")
        .args(["--noheader", "--parsable2", "--allocations"])
        .arg(format!("--jobs={}", ids.join(",")))
        .arg("--format=JobID,State")
        .output()
    {
        Ok(out) if out.status.success() => parse_states(&String::from_utf8_lossy(&out.stdout)),
        _ => BTreeMap::new(),
    }
}

/// Lines of `ID|STATE[ by ...]` into a map; the state's first word only ("CANCELLED by 0").
pub(super) fn parse_states(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let (id, state) = l.trim().split_once('|')?;
            let state = state.split_whitespace().next()?;
            Some((id.trim().to_string(), state.to_string()))
        })
        .collect()
}

fn read_exit_code(shard_dir: &Path) -> Option<i32> {
    std::fs::read_to_string(shard_dir.join(EXIT_CODE))
        .ok()
        .and_then(|t| t.trim().parse().ok())
}

/// Non-empty lines of a run log (a partial last line counts; it is cut on resume).
fn count_lines(records: &Path) -> usize {
    std::fs::read_to_string(records)
        .map(|t| t.lines().filter(|l| !l.trim().is_empty()).count())
        .unwrap_or(0)
}

/// Records the shard has made: its run log, or for `baselines measure` the logs of all its
/// measuring runs (`shard-i-of-N/STAMP-PID/`, one per attempt), which together hold each
/// measured entry once.
pub(super) fn count_records(kind: Sharded, shard_dir: &Path) -> usize {
    match kind {
        Sharded::Run => count_lines(&shard_dir.join(RECORDS)),
        Sharded::Measure => {
            let subdirs = |d: &Path| -> Vec<PathBuf> {
                std::fs::read_dir(d)
                    .map(|rd| {
                        rd.filter_map(|e| e.ok().map(|e| e.path()))
                            .filter(|p| p.is_dir())
                            .collect()
                    })
                    .unwrap_or_default()
            };
            subdirs(shard_dir)
                .iter()
                .flat_map(|w| subdirs(w))
                .map(|run| count_lines(&run.join(RECORDS)))
                .sum()
        }
    }
}

/// Whether the shard's kbench ended having done all it planned (`kbench run`: exit 0 or 3;
/// `kbench baselines measure`: exit 0).
pub(crate) fn shard_finished(dir: &Path, shard: u32) -> bool {
    let kind = Submission::load(dir).map_or(Sharded::Run, |s| s.sharded());
    read_exit_code(&shard_dir(dir, shard)).is_some_and(|c| kind.finished(c))
}

/// Every shard's state, from the shard directories and Slurm.
pub(crate) fn status(dir: &Path) -> Result<(Submission, Vec<ShardStatus>)> {
    let sub = Submission::load(dir)?;
    let queue = if sub.jobs.is_empty() {
        BTreeMap::new()
    } else {
        squeue_states()?
    };
    let unknown: BTreeSet<&str> = (0..sub.shards)
        .filter_map(|i| {
            let job = sub.latest_job(i)?;
            (!queue.contains_key(&format!("{}_{i}", job.job_id))).then_some(job.job_id.as_str())
        })
        .collect();
    let accounting = sacct_states(&unknown);
    let kind = sub.sharded();
    let mut rows = Vec::new();
    for i in 0..sub.shards {
        let sdir = shard_dir(dir, i);
        let exit_code = read_exit_code(&sdir);
        let job = sub.latest_job(i).map(|j| format!("{}_{i}", j.job_id));
        let slurm_state = job
            .as_ref()
            .and_then(|j| queue.get(j).or_else(|| accounting.get(j)));
        let state = match (exit_code, slurm_state) {
            (Some(c), _) if kind.finished(c) => ShardState::Done { exit_code: c },
            (_, Some(s)) if ACTIVE_STATES.contains(&s.as_str()) => ShardState::Active {
                slurm_state: s.clone(),
            },
            (code, s) => ShardState::Stopped {
                why: stopped_why(kind, job.is_some(), code, s.map(String::as_str)),
            },
        };
        rows.push(ShardStatus {
            shard: i,
            state,
            records: count_records(kind, &sdir),
            log: job
                .as_ref()
                .map(|j| dir.join("slurm").join("logs").join(format!("{j}.out"))),
            job,
        });
    }
    Ok((sub, rows))
}

pub(super) fn stopped_why(
    kind: Sharded,
    submitted: bool,
    exit_code: Option<i32>,
    slurm: Option<&str>,
) -> String {
    if !submitted {
        return "never submitted (`kbench slurm resubmit` submits it)".into();
    }
    let kbench = match exit_code {
        Some(crate::exit::KERNELS_FAILED) if kind == Sharded::Measure => {
            "baselines measure left problems without a time or a recorded failure".to_string()
        }
        Some(crate::exit::INTERRUPTED) => "kbench was interrupted".to_string(),
        Some(crate::exit::STOPPED_STARTING) => {
            "kbench stopped starting problems at its --stop-starting-after deadline".to_string()
        }
        Some(crate::exit::HARNESS_ERROR) => {
            "kbench failed (harness error: see the task's log)".to_string()
        }
        Some(c) => format!("kbench exited with code {c}"),
        None => "kbench did not finish (killed, pre-empted, timed out or never started)".into(),
    };
    match slurm {
        Some(s) => format!("{kbench}; Slurm state {s}"),
        None => format!("{kbench}; no longer in the queue"),
    }
}

/// Renders the status table.
pub(crate) fn render_status(dir: &Path, sub: &Submission, rows: &[ShardStatus]) -> String {
    let count = |f: fn(&ShardState) -> bool| rows.iter().filter(|r| f(&r.state)).count();
    let done = count(|s| matches!(s, ShardState::Done { .. }));
    let active = count(|s| matches!(s, ShardState::Active { .. }));
    let stopped = count(|s| matches!(s, ShardState::Stopped { .. }));
    let mut s = format!(
        "{}: {} shard(s): {done} done, {active} queued or running, {stopped} stopped\n",
        dir.display(),
        rows.len()
    );
    s += &format!(
        "{:<6} {:<12} {:>8}  {:<12} note\n",
        "shard", "state", "records", "job"
    );
    for r in rows {
        let (state, note) = match &r.state {
            ShardState::Done { exit_code } => (
                "done".to_string(),
                if *exit_code == crate::exit::KERNELS_FAILED {
                    "some kernels failed".to_string()
                } else {
                    String::new()
                },
            ),
            ShardState::Active { slurm_state } => (slurm_state.to_lowercase(), String::new()),
            ShardState::Stopped { why } => (
                "stopped".to_string(),
                match &r.log {
                    Some(log) => format!("{why}; log {}", log.display()),
                    None => why.clone(),
                },
            ),
        };
        s += &format!(
            "{:<6} {:<12} {:>8}  {:<12} {note}\n",
            r.shard,
            state,
            r.records,
            r.job.as_deref().unwrap_or("-")
        );
    }
    if stopped > 0 {
        s += &format!(
            "continue the stopped shards with: kbench slurm resubmit {}\n",
            quote(&dir.display().to_string())
        );
    } else if active == 0 {
        s += &match sub.store() {
            Some(store) => format!(
                "all shards done; their baselines are in the store: kbench baselines show --store {}\n",
                quote(&store.display().to_string())
            ),
            None => format!(
                "all shards done; join them with: kbench merge {}\n",
                quote(&dir.display().to_string())
            ),
        };
    }
    s
}

/// The JSON of `kbench slurm status --json` (versioned). `store` is given for a `baselines
/// measure` submission only.
pub(crate) fn status_json(dir: &Path, sub: &Submission, rows: &[ShardStatus]) -> serde_json::Value {
    let mut v = serde_json::json!({
        "schema_version": SUBMISSION_SCHEMA,
        "dir": dir,
        "command": sub.sharded(),
        "shards": rows,
    });
    if let Some(store) = sub.store() {
        v["store"] = serde_json::json!(store);
    }
    v
}

/// The exit code of `kbench slurm status`.
pub(crate) fn status_exit_code(rows: &[ShardStatus]) -> i32 {
    if rows
        .iter()
        .any(|r| matches!(r.state, ShardState::Stopped { .. }))
    {
        crate::exit::SHARDS_STOPPED
    } else if rows
        .iter()
        .any(|r| matches!(r.state, ShardState::Active { .. }))
    {
        crate::exit::SHARDS_ACTIVE
    } else {
        crate::exit::OK
    }
}
