//! Runs sharded over a Slurm job array. kbench does not manage a cluster: it writes one
//! sbatch script whose array task `i` runs the given kbench command with `--shard i/N`,
//! submits it, reads the tasks' states back from `squeue` (and `sacct` where accounting is
//! on), and resubmits the shards that stopped unfinished. Every task resumes its own run log,
//! so a resubmitted or requeued shard evaluates only what it has not recorded.
//!
//! The shared output directory (`--out` of the sharded command; compute nodes must see it):
//!
//! ```text
//! DIR/secret                 the run's secret seed, written once at submission; every shard
//!                            reads it (--secret-from), so inputs are those of one run
//! DIR/slurm/submission.json  what was submitted: the command, the sbatch options, the jobs
//! DIR/slurm/job.sbatch       the job array script
//! DIR/slurm/logs/J_i.out     Slurm's output of job J, task i
//! DIR/shards/i/              shard i's own run directory, plus `exit_code` when it ends
//! DIR/run.json, records.jsonl, kernels/, logs/   the merged run, after `kbench merge DIR`
//! ```
//!
//! Generic over the subcommand: a task runs `kbench <command> --out DIR/shards/i --shard i/N
//! --secret-from DIR/secret --resume`. `kbench run` takes these today; `kbench baselines
//! measure` is to take the same flags and so shard through this same path.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command as Process;

use anyhow::{bail, Context, Result};
use clap::Parser;
use serde::{Deserialize, Serialize};

use crate::cli::{Cli, Command, SlurmSubmitArgs};
use crate::runlog::{now_unix, write_atomic, RECORDS, SECRET};
use crate::seed::RunSecret;

/// Version of `submission.json` and of `kbench slurm status --json`.
pub const SUBMISSION_SCHEMA: u32 = 1;
pub const SUBMISSION: &str = "slurm/submission.json";
pub const SCRIPT: &str = "slurm/job.sbatch";
/// Written by the job script into a shard's directory with kbench's exit code.
pub const EXIT_CODE: &str = "exit_code";

/// sbatch options shared by every task of a submission.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SbatchOptions {
    pub job_name: String,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub time: Option<String>,
    /// `N` or `TYPE:N`; `None` asks for no GPU.
    pub gpus_per_task: Option<String>,
    pub cpus_per_task: Option<u32>,
    /// More options, each written as an `#SBATCH` line.
    pub extra: Vec<String>,
}

/// One sbatch call: the array job it made and the shards it covers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmittedJob {
    pub job_id: String,
    pub shards: Vec<u32>,
    pub submitted_unix_s: f64,
}

/// `DIR/slurm/submission.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Submission {
    pub schema_version: u32,
    pub kbench_version: String,
    pub shards: u32,
    /// kbench's arguments after the program name, without `--out`.
    pub command: Vec<String>,
    /// The executable the tasks run.
    pub kbench: PathBuf,
    /// Working directory of the tasks (where `kbench slurm submit` ran), so that relative
    /// paths in the command mean what they meant there.
    pub workdir: PathBuf,
    pub sbatch: SbatchOptions,
    /// kbench's environment variables as they were at submission (`KBENCH_PYTHON`,
    /// `KBENCH_CACHE_DIR`), exported by the script so that tasks use the same Python even
    /// where a site's sbatch does not pass the submitting shell's environment on.
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// Every sbatch call, oldest first; a shard's latest job is the last one naming it.
    pub jobs: Vec<SubmittedJob>,
}

impl Submission {
    pub fn load(dir: &Path) -> Result<Submission> {
        let path = dir.join(SUBMISSION);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "reading {}: is {} the --out directory of `kbench slurm submit`?",
                path.display(),
                dir.display()
            )
        })?;
        let s: Submission = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a kbench submission record", path.display()))?;
        if s.schema_version > SUBMISSION_SCHEMA {
            bail!(
                "{} was written by a newer kbench (schema {}); use that version",
                path.display(),
                s.schema_version
            );
        }
        Ok(s)
    }

    fn save(&self, dir: &Path) -> Result<()> {
        write_atomic(&dir.join(SUBMISSION), &serde_json::to_vec_pretty(self)?)
    }

    /// The last job that ran or runs `shard`.
    pub fn latest_job(&self, shard: u32) -> Option<&SubmittedJob> {
        self.jobs.iter().rev().find(|j| j.shards.contains(&shard))
    }
}

pub fn shard_dir(dir: &Path, shard: u32) -> PathBuf {
    dir.join("shards").join(shard.to_string())
}

/// What `kbench slurm submit` needs from the sharded command.
#[derive(Debug)]
struct Shardable {
    out: PathBuf,
    /// The command without `--out`.
    argv: Vec<String>,
    problems: usize,
    on_cpu: bool,
}

/// Checks that `argv` (after `kbench`) is a command that can be sharded and takes it apart.
fn shardable(argv: &[String]) -> Result<Shardable> {
    let cli =
        Cli::try_parse_from(std::iter::once("kbench".to_string()).chain(argv.iter().cloned()))
            .map_err(|e| {
                anyhow::anyhow!(
                    "the command after `--` is not a kbench command line: {}",
                    e.to_string().trim()
                )
            })?;
    let Command::Run(run) = cli.command else {
        bail!(
            "`kbench slurm submit` shards `kbench run` (and `kbench baselines measure`, once it exists); `{}` cannot be sharded",
            argv.first().map_or("", String::as_str)
        );
    };
    for (given, flag, why) in [
        (run.shard.is_some(), "--shard", "each task adds its own"),
        (
            run.secret_from.is_some(),
            "--secret-from",
            "the tasks share the secret made at submission",
        ),
        (run.resume, "--resume", "every task resumes its shard"),
        (
            run.eval.gpus.is_some(),
            "--gpus",
            "Slurm picks each task's GPUs (CUDA_VISIBLE_DEVICES); use --gpus-per-task",
        ),
    ] {
        if given {
            bail!("drop {flag} from the command: {why}");
        }
    }
    let problems = crate::config::load_suite(&run.suite)?.len();
    let out = std::path::absolute(&run.out)
        .with_context(|| format!("resolving --out {}", run.out.display()))?;
    Ok(Shardable {
        out,
        argv: without_out(argv),
        problems,
        on_cpu: run.eval.device == "cpu",
    })
}

/// `argv` without its `--out DIR` / `--out=DIR`.
fn without_out(argv: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        if a == "--out" {
            it.next();
        } else if !a.starts_with("--out=") {
            out.push(a.clone());
        }
    }
    out
}

/// `[TYPE:]N` with N ≥ 0; `0` means no GPU.
fn parse_gpus(spec: &str) -> Result<Option<String>> {
    let count = spec.rsplit(':').next().unwrap_or(spec);
    let n: u32 = count.trim().parse().map_err(|_| {
        anyhow::anyhow!("--gpus-per-task {spec}: expected N or TYPE:N, e.g. 1 or a100:2")
    })?;
    Ok((n > 0).then(|| spec.trim().to_string()))
}

/// Quotes `s` for bash: single quotes, with `'` written as `'\''`.
fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,+@%".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The job array script. Array task `i` runs shard `i/N` in `DIR/shards/i`.
pub fn render_script(dir: &Path, sub: &Submission) -> String {
    let o = &sub.sbatch;
    let mut s = String::from("#!/bin/bash\n");
    s += &format!(
        "# Written by `kbench slurm submit` (kbench {}): array task i evaluates shard i of {} of\n",
        sub.kbench_version, sub.shards
    );
    s += &format!("#   kbench {}\n", sub.command.join(" "));
    s += &format!(
        "# Follow with `kbench slurm status {d}`, continue stopped shards with `kbench slurm \
         resubmit {d}`,\n# then join them with `kbench merge {d}`.\n",
        d = quote(&dir.display().to_string())
    );
    let mut opts = vec![
        format!("--job-name={}", o.job_name),
        format!(
            "--output={}",
            dir.join("slurm").join("logs").join("%A_%a.out").display()
        ),
        format!("--chdir={}", sub.workdir.display()),
        // Pre-empted or failed-node tasks go back to the queue and resume their shard; their
        // output is appended to, so the log keeps every attempt.
        "--requeue".to_string(),
        "--open-mode=append".to_string(),
    ];
    opts.extend(o.partition.iter().map(|p| format!("--partition={p}")));
    opts.extend(o.account.iter().map(|a| format!("--account={a}")));
    opts.extend(o.time.iter().map(|t| format!("--time={t}")));
    opts.extend(o.gpus_per_task.iter().map(|g| format!("--gres=gpu:{g}")));
    opts.extend(
        o.cpus_per_task
            .iter()
            .map(|c| format!("--cpus-per-task={c}")),
    );
    opts.extend(o.extra.iter().cloned());
    for opt in opts {
        s += &format!("#SBATCH {opt}\n");
    }
    let shards = quote(&dir.join("shards").display().to_string());
    let secret = quote(&dir.join(SECRET).display().to_string());
    let mut cmd = quote(&sub.kbench.display().to_string());
    for a in &sub.command {
        cmd.push(' ');
        cmd += &quote(a);
    }
    s += "set -u\n";
    for (k, v) in &sub.env {
        s += &format!("export {k}={}\n", quote(v));
    }
    s += &format!(
        r#"shard=${{SLURM_ARRAY_TASK_ID:?submit this script with sbatch --array}}
dir={shards}/"$shard"
mkdir -p "$dir"
rm -f "$dir/{EXIT_CODE}"
echo "kbench shard $shard/{n}: job ${{SLURM_JOB_ID:-?}} on $(hostname), CUDA_VISIBLE_DEVICES=${{CUDA_VISIBLE_DEVICES:-}}" >&2
{cmd} --out "$dir" --shard "$shard/{n}" --secret-from {secret} --resume
rc=$?
echo "$rc" > "$dir/{EXIT_CODE}"
# 3 means "all evaluated, some kernels failed": the shard is complete, so Slurm sees success.
if [ "$rc" -eq 3 ]; then exit 0; fi
exit "$rc"
"#,
        n = sub.shards
    );
    s
}

/// Writes the submission into the shared output directory and, unless `dry_run`, submits
/// the array. Returns the directory and the submission.
pub fn submit(a: &SlurmSubmitArgs) -> Result<(PathBuf, Submission)> {
    if a.shards == 0 {
        bail!("--shards must be at least 1");
    }
    let cmd = shardable(&a.command)?;
    if a.shards as usize > cmd.problems {
        bail!(
            "--shards {}: the command selects only {} problem(s); use at most {} shards",
            a.shards,
            cmd.problems,
            cmd.problems
        );
    }
    let dir = cmd.out;
    if dir.join(SUBMISSION).exists() {
        bail!(
            "{} already holds a submission: follow it with `kbench slurm status`, continue it with `kbench slurm resubmit`, or choose another --out",
            dir.display()
        );
    }
    if dir.join(crate::runlog::MANIFEST).exists() || dir.join(RECORDS).exists() {
        bail!(
            "{} already holds a run; choose another --out for the sharded run",
            dir.display()
        );
    }
    for (flag, value) in a
        .sbatch_lines
        .iter()
        .map(|v| ("--sbatch", v))
        .chain(a.partition.iter().map(|v| ("--partition", v)))
        .chain(a.account.iter().map(|v| ("--account", v)))
        .chain(a.time.iter().map(|v| ("--time", v)))
        .chain(std::iter::once(("--job-name", &a.job_name)))
    {
        // Each becomes one `#SBATCH` line of the script: a line break would end it there.
        if value.contains(['\n', '\r']) || value.trim().is_empty() {
            bail!("{flag} {value:?}: give one value on one line");
        }
    }
    if let Some(bad) = a.sbatch_lines.iter().find(|l| !l.starts_with('-')) {
        bail!("--sbatch {bad:?}: give an sbatch option, e.g. --sbatch=--qos=high");
    }
    let gpus_per_task = match &a.gpus_per_task {
        Some(spec) => parse_gpus(spec)?,
        None if cmd.on_cpu => None,
        None => Some("1".into()),
    };
    let kbench = match &a.kbench {
        Some(p) => std::path::absolute(p)?,
        None => std::env::current_exe().context("finding the kbench executable")?,
    };
    let mut sub = Submission {
        schema_version: SUBMISSION_SCHEMA,
        kbench_version: env!("CARGO_PKG_VERSION").into(),
        shards: a.shards,
        command: cmd.argv,
        kbench,
        workdir: std::env::current_dir().context("reading the working directory")?,
        env: ["KBENCH_PYTHON", "KBENCH_CACHE_DIR"]
            .iter()
            .filter_map(|k| {
                let v = std::env::var(k).ok().filter(|v| !v.is_empty())?;
                // Relative paths meant the submitting directory; the tasks run there too
                // (--chdir), but an absolute path survives a changed script.
                let v = std::path::absolute(&v).map_or(v, |p| p.display().to_string());
                Some((k.to_string(), v))
            })
            .collect(),
        sbatch: SbatchOptions {
            job_name: a.job_name.clone(),
            partition: a.partition.clone(),
            account: a.account.clone(),
            time: a.time.clone(),
            gpus_per_task,
            cpus_per_task: a.cpus_per_task,
            extra: a.sbatch_lines.clone(),
        },
        jobs: Vec::new(),
    };
    for sub_dir in ["slurm/logs", "shards"] {
        std::fs::create_dir_all(dir.join(sub_dir))
            .with_context(|| format!("creating {}", dir.join(sub_dir).display()))?;
    }
    RunSecret::generate()?.save(&dir.join(SECRET))?;
    write_script(&dir, &sub)?;
    sub.save(&dir)?;
    if !a.dry_run {
        let shards: Vec<u32> = (0..a.shards).collect();
        let job_id = sbatch(&dir, &shards)?;
        sub.jobs.push(SubmittedJob {
            job_id,
            shards,
            submitted_unix_s: now_unix(),
        });
        sub.save(&dir)?;
    }
    Ok((dir, sub))
}

fn write_script(dir: &Path, sub: &Submission) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(SCRIPT);
    write_atomic(&path, render_script(dir, sub).as_bytes())?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making {} executable", path.display()))
}

/// `0-3,7`: sbatch's `--array` list for `shards` (sorted).
fn array_spec(shards: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < shards.len() {
        let start = shards[i];
        let mut end = start;
        while i + 1 < shards.len() && shards[i + 1] == end + 1 {
            i += 1;
            end = shards[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

/// Submits the array tasks `shards` of the script in `dir`; returns the job id.
fn sbatch(dir: &Path, shards: &[u32]) -> Result<String> {
    let script = dir.join(SCRIPT);
    let out = Process::new("sbatch")
        .arg("--parsable")
        .arg(format!("--array={}", array_spec(shards)))
        .arg(&script)
        .output()
        .context("running sbatch: is this a Slurm login node (sbatch on PATH)?")?;
    if !out.status.success() {
        bail!(
            "sbatch {} failed ({}): {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    // `--parsable` prints `JOBID` or `JOBID;CLUSTER`.
    let text = String::from_utf8_lossy(&out.stdout);
    let id = text
        .trim()
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        bail!("sbatch printed no job id (got {:?})", text.trim());
    }
    Ok(id)
}

/// Where a shard stands.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ShardState {
    /// kbench finished the shard: everything it plans is recorded (exit 0 or 3).
    Done { exit_code: i32 },
    /// Queued or running; `slurm_state` is squeue's (PENDING, RUNNING, ...).
    Active { slurm_state: String },
    /// Neither finished nor queued: resubmit it.
    Stopped { why: String },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShardStatus {
    pub shard: u32,
    #[serde(flatten)]
    pub state: ShardState,
    /// Records in the shard's run log.
    pub records: usize,
    /// `JOB_TASK` of the shard's latest task, if it was ever submitted.
    pub job: Option<String>,
    /// Slurm's output of that task.
    pub log: Option<PathBuf>,
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
fn parse_states(text: &str) -> BTreeMap<String, String> {
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

/// Non-empty lines of the shard's run log (a partial last line counts; it is cut on resume).
fn count_records(shard_dir: &Path) -> usize {
    std::fs::read_to_string(shard_dir.join(RECORDS))
        .map(|t| t.lines().filter(|l| !l.trim().is_empty()).count())
        .unwrap_or(0)
}

/// Whether the shard's kbench run ended having evaluated all it planned.
pub fn shard_finished(dir: &Path, shard: u32) -> bool {
    matches!(
        read_exit_code(&shard_dir(dir, shard)),
        Some(crate::exit::OK | crate::exit::KERNELS_FAILED)
    )
}

/// Every shard's state, from the shard directories and Slurm.
pub fn status(dir: &Path) -> Result<(Submission, Vec<ShardStatus>)> {
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
    let mut rows = Vec::new();
    for i in 0..sub.shards {
        let sdir = shard_dir(dir, i);
        let exit_code = read_exit_code(&sdir);
        let job = sub.latest_job(i).map(|j| format!("{}_{i}", j.job_id));
        let slurm_state = job
            .as_ref()
            .and_then(|j| queue.get(j).or_else(|| accounting.get(j)));
        let state = match (exit_code, slurm_state) {
            (Some(c @ (crate::exit::OK | crate::exit::KERNELS_FAILED)), _) => {
                ShardState::Done { exit_code: c }
            }
            (_, Some(s)) if ACTIVE_STATES.contains(&s.as_str()) => ShardState::Active {
                slurm_state: s.clone(),
            },
            (code, s) => ShardState::Stopped {
                why: stopped_why(job.is_some(), code, s.map(String::as_str)),
            },
        };
        rows.push(ShardStatus {
            shard: i,
            state,
            records: count_records(&sdir),
            log: job
                .as_ref()
                .map(|j| dir.join("slurm").join("logs").join(format!("{j}.out"))),
            job,
        });
    }
    Ok((sub, rows))
}

fn stopped_why(submitted: bool, exit_code: Option<i32>, slurm: Option<&str>) -> String {
    if !submitted {
        return "never submitted (`kbench slurm resubmit` submits it)".into();
    }
    let kbench = match exit_code {
        Some(crate::exit::INTERRUPTED) => "kbench was interrupted".to_string(),
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
pub fn render_status(dir: &Path, rows: &[ShardStatus]) -> String {
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
        s += &format!(
            "all shards done; join them with: kbench merge {}\n",
            quote(&dir.display().to_string())
        );
    }
    s
}

/// The JSON of `kbench slurm status --json` (versioned).
pub fn status_json(dir: &Path, rows: &[ShardStatus]) -> serde_json::Value {
    serde_json::json!({
        "schema_version": SUBMISSION_SCHEMA,
        "dir": dir,
        "shards": rows,
    })
}

/// The exit code of `kbench slurm status`.
pub fn status_exit_code(rows: &[ShardStatus]) -> i32 {
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

/// Submits the stopped shards again as one array job (same script: each resumes its log).
/// Returns the shards and the new job id (`None` when there was nothing to resubmit or with
/// `dry_run`).
pub fn resubmit(dir: &Path, dry_run: bool) -> Result<(Vec<u32>, Option<String>)> {
    let (mut sub, rows) = status(dir)?;
    let stopped: Vec<u32> = rows
        .iter()
        .filter(|r| matches!(r.state, ShardState::Stopped { .. }))
        .map(|r| r.shard)
        .collect();
    if stopped.is_empty() || dry_run {
        return Ok((stopped, None));
    }
    // The script is rewritten from the record, so a job script edited by hand does not
    // silently change what the resubmitted shards run.
    write_script(dir, &sub)?;
    let job_id = sbatch(dir, &stopped)?;
    sub.jobs.push(SubmittedJob {
        job_id: job_id.clone(),
        shards: stopped.clone(),
        submitted_unix_s: now_unix(),
    });
    sub.save(dir)?;
    Ok((stopped, Some(job_id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn array_specs_compress_runs() {
        assert_eq!(array_spec(&[0, 1, 2]), "0-2");
        assert_eq!(array_spec(&[1]), "1");
        assert_eq!(array_spec(&[0, 2, 3, 4, 7]), "0,2-4,7");
    }

    #[test]
    fn out_is_taken_out_of_the_command() {
        assert_eq!(
            without_out(&args(&["run", "--out", "x", "--suite", "smoke"])),
            args(&["run", "--suite", "smoke"])
        );
        assert_eq!(
            without_out(&args(&["run", "--out=x", "--quiet"])),
            args(&["run", "--quiet"])
        );
    }

    #[test]
    fn only_shardable_commands_without_shard_flags_are_accepted() {
        let ok = shardable(&args(&[
            "run", "--suite", "smoke", "--device", "cpu", "--out", "r",
        ]))
        .unwrap();
        assert!(ok.on_cpu);
        assert!(ok.out.is_absolute());
        assert_eq!(
            ok.argv,
            args(&["run", "--suite", "smoke", "--device", "cpu"])
        );
        assert_eq!(ok.problems, kbench_suites::smoke().len());
        for (bad, says) in [
            (vec!["list", "--suite", "smoke"], "cannot be sharded"),
            (vec!["run", "--out", "r", "--shard", "0/2"], "drop --shard"),
            (vec!["run", "--out", "r", "--resume"], "drop --resume"),
            (vec!["run", "--out", "r", "--gpus", "0"], "--gpus-per-task"),
            (vec!["run", "--bogus"], "not a kbench command line"),
        ] {
            let e = shardable(&args(&bad)).unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }

    #[test]
    fn gpus_per_task_takes_a_count_or_type_and_count() {
        assert_eq!(parse_gpus("2").unwrap(), Some("2".into()));
        assert_eq!(parse_gpus("a100:4").unwrap(), Some("a100:4".into()));
        assert_eq!(parse_gpus("0").unwrap(), None);
        assert!(parse_gpus("two").is_err());
    }

    #[test]
    fn quoting_survives_spaces_and_quotes() {
        assert_eq!(quote("plain/path-1"), "plain/path-1");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn the_script_runs_each_shard_resuming_with_the_shared_secret() {
        let dir = Path::new("/shared/runs/x y");
        let sub = Submission {
            schema_version: SUBMISSION_SCHEMA,
            kbench_version: "0.1.0".into(),
            shards: 3,
            command: args(&["run", "--suite", "smoke", "--device", "cpu"]),
            kbench: "/opt/kbench".into(),
            workdir: "/home/u".into(),
            env: vec![("KBENCH_CACHE_DIR".into(), "/shared/kbench cache".into())],
            sbatch: SbatchOptions {
                job_name: "kbench".into(),
                partition: Some("gpu".into()),
                account: Some("lab".into()),
                time: Some("4:00:00".into()),
                gpus_per_task: Some("a100:2".into()),
                cpus_per_task: Some(8),
                extra: vec!["--qos=high".into()],
            },
            jobs: vec![],
        };
        let s = render_script(dir, &sub);
        for line in [
            "#SBATCH --partition=gpu\n",
            "#SBATCH --account=lab\n",
            "#SBATCH --time=4:00:00\n",
            "#SBATCH --gres=gpu:a100:2\n",
            "#SBATCH --cpus-per-task=8\n",
            "#SBATCH --qos=high\n",
            "#SBATCH --requeue\n",
            "#SBATCH --open-mode=append\n",
            "#SBATCH --chdir=/home/u\n",
            "#SBATCH --output=/shared/runs/x y/slurm/logs/%A_%a.out\n",
            "dir='/shared/runs/x y/shards'/\"$shard\"\n",
            "export KBENCH_CACHE_DIR='/shared/kbench cache'\n",
            "/opt/kbench run --suite smoke --device cpu --out \"$dir\" --shard \"$shard/3\" \
             --secret-from '/shared/runs/x y/secret' --resume\n",
        ] {
            assert!(s.contains(line), "missing {line:?} in\n{s}");
        }
        // All #SBATCH lines come before the first command, or sbatch ignores them.
        let first_cmd = s.find("set -u").unwrap();
        assert!(s.rfind("#SBATCH").unwrap() < first_cmd);
    }

    #[test]
    fn states_parse_from_squeue_and_sacct_lines() {
        let m = parse_states("12_0|RUNNING\n12_1|CANCELLED by 0\n\n13_2|PENDING\n");
        assert_eq!(m["12_0"], "RUNNING");
        assert_eq!(m["12_1"], "CANCELLED");
        assert_eq!(m["13_2"], "PENDING");
    }
}
