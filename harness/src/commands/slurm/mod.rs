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
//! Two commands shard this way:
//!
//! - `kbench run ... --out DIR`: a task runs `kbench run ... --out DIR/shards/i --shard i/N
//!   --secret-from DIR/secret --resume`; `kbench merge DIR` joins the shards into one run.
//! - `kbench baselines measure ... --work DIR [--store STORE]`: `--work` names DIR (it
//!   holds the measuring runs' logs, as `--out` holds a run), and a task runs `kbench
//!   baselines measure ... --store STORE --work DIR/shards/i --shard i/N`. Its run
//!   directories are under `DIR/shards/i/shard-i-of-N/`. All tasks commit into the one
//!   store, made absolute at submission (the default store of a local measure where none is
//!   given); commits are serialised by a lock on the store. A measure task resumes by
//!   itself: it folds what its earlier attempts recorded and measures only what the store
//!   lacks, so a requeued or resubmitted shard measures nothing twice. There is no secret
//!   and nothing to merge: the store is the result. A shard is done only when measure exited
//!   0 (its 3 means "problems still unmeasured", so the task fails and is resubmitted).

mod cmd;
pub use cmd::command;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command as Process;

use anyhow::{bail, Context, Result};
use clap::Parser;
use serde::{Deserialize, Serialize};

use crate::cli::{BaselinesCommand, Cli, Command, SlurmSubmitArgs};
use crate::runlog::seed::RunSecret;
use crate::runlog::{now_unix, write_atomic, RECORDS, SECRET};

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

    /// Which kbench command the tasks run.
    pub fn sharded(&self) -> Sharded {
        Sharded::of(&self.command)
    }

    /// The baseline store a `baselines measure` submission's shards commit into: its
    /// `--store`, which `submit` always writes into the command, absolute.
    pub fn store(&self) -> Option<PathBuf> {
        if self.sharded() != Sharded::Measure {
            return None;
        }
        flag_value(&self.command, "--store").map(PathBuf::from)
    }
}

/// The kbench commands that `kbench slurm submit` shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Sharded {
    /// `kbench run`: shards are run directories, joined by `kbench merge`.
    #[serde(rename = "run")]
    Run,
    /// `kbench baselines measure`: shards commit into one baseline store as they go.
    #[serde(rename = "baselines measure")]
    Measure,
}

impl Sharded {
    /// The kind of a command line (after `kbench`): kbench has no global options, so the
    /// subcommand comes first.
    fn of(argv: &[String]) -> Sharded {
        match argv.first().map(String::as_str) {
            Some("baselines") => Sharded::Measure,
            _ => Sharded::Run,
        }
    }

    /// Whether a shard whose kbench exited with `code` has done all it had to.
    fn finished(self, code: i32) -> bool {
        match self {
            // 3: all evaluated, some kernels failed.
            Sharded::Run => matches!(code, crate::exit::OK | crate::exit::KERNELS_FAILED),
            // 3: some problems still lack a time or a recorded failure; run it again.
            Sharded::Measure => code == crate::exit::OK,
        }
    }
}

/// The value of the last `FLAG VALUE` / `FLAG=VALUE` in `argv`.
fn flag_value(argv: &[String], flag: &str) -> Option<String> {
    let mut value = None;
    let mut it = argv.iter();
    let eq = format!("{flag}=");
    while let Some(a) = it.next() {
        if a == flag {
            value = it.next().cloned();
        } else if let Some(v) = a.strip_prefix(&eq) {
            value = Some(v.to_string());
        }
    }
    value
}

pub fn shard_dir(dir: &Path, shard: u32) -> PathBuf {
    dir.join("shards").join(shard.to_string())
}

/// What `kbench slurm submit` needs from the sharded command.
#[derive(Debug)]
struct Shardable {
    kind: Sharded,
    /// The shared directory: `run`'s `--out`, `baselines measure`'s `--work`.
    out: PathBuf,
    /// The command without that flag (and, for measure, with an absolute `--store`).
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
    match cli.command {
        Command::Run(run) => {
            refuse(&[
                (run.shard.is_some(), "--shard", "each task adds its own"),
                (
                    run.secret_from.is_some(),
                    "--secret-from",
                    "the tasks share the secret made at submission",
                ),
                (run.resume, "--resume", "every task resumes its shard"),
                (run.eval.gpus.is_some(), "--gpus", GPUS_WHY),
            ])?;
            let problems = crate::commands::run_config::load_suite(&run.suite)?.len();
            let out = std::path::absolute(&run.out)
                .with_context(|| format!("resolving --out {}", run.out.display()))?;
            Ok(Shardable {
                kind: Sharded::Run,
                out,
                argv: without_flag(argv, "--out"),
                problems,
                on_cpu: run.eval.device == "cpu",
            })
        }
        Command::Baselines(crate::cli::BaselinesArgs {
            command: BaselinesCommand::Measure(m),
        }) => {
            refuse(&[
                (
                    m.shard.is_some(),
                    "--shard",
                    "each task adds its own, with --work DIR/shards/i",
                ),
                (m.eval.gpus.is_some(), "--gpus", GPUS_WHY),
                (
                    m.eval.no_timing,
                    "--no-timing",
                    "baselines are times, so measuring them needs timing",
                ),
            ])?;
            // Checked here, so that a bad list fails once instead of in every task.
            kbench_baselines::Mode::parse_list(&m.modes)
                .map_err(|e| anyhow::anyhow!("--modes: {e}"))?;
            let Some(work) = &m.work else {
                bail!(
                    "give `baselines measure` a --work DIR that compute nodes share: it gets the submission and each shard's measuring runs (DIR/shards/i), as --out does for `kbench run`"
                );
            };
            let problems = crate::commands::run_config::load_suite(&m.suite)?.len();
            let out = std::path::absolute(work)
                .with_context(|| format!("resolving --work {}", work.display()))?;
            // Every task commits into the one store: the one a local measure here would use,
            // absolute, so tasks on other hosts (other caches, other directories) agree.
            let store = match &m.store {
                Some(s) => std::path::absolute(s)
                    .with_context(|| format!("resolving --store {}", s.display()))?,
                None => crate::commands::baselines::default_store(&crate::worker::python::cache_dir()),
            };
            let mut argv = without_flag(&without_flag(argv, "--work"), "--store");
            argv.push("--store".into());
            argv.push(store.display().to_string());
            Ok(Shardable {
                kind: Sharded::Measure,
                out,
                argv,
                problems,
                on_cpu: m.eval.device == "cpu",
            })
        }
        _ => bail!(
            "`kbench slurm submit` shards `kbench run` and `kbench baselines measure`; `{}` cannot be sharded",
            argv.iter()
                .take_while(|a| !a.starts_with('-'))
                .take(2)
                .cloned()
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

const GPUS_WHY: &str = "Slurm picks each task's GPUs (CUDA_VISIBLE_DEVICES); use --gpus-per-task";

/// Fails on the first flag given that the tasks set themselves.
fn refuse(flags: &[(bool, &str, &str)]) -> Result<()> {
    for (given, flag, why) in flags {
        if *given {
            bail!("drop {flag} from the command: {why}");
        }
    }
    Ok(())
}

/// `argv` without its `FLAG VALUE` / `FLAG=VALUE`.
fn without_flag(argv: &[String], flag: &str) -> Vec<String> {
    let eq = format!("{flag}=");
    let mut out = Vec::with_capacity(argv.len());
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        if a == flag {
            it.next();
        } else if !a.starts_with(&eq) {
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
    let kind = sub.sharded();
    let mut s = String::from("#!/bin/bash\n");
    s += &format!(
        "# Written by `kbench slurm submit` (kbench {}): array task i evaluates shard i of {} of\n",
        sub.kbench_version, sub.shards
    );
    s += &format!("#   kbench {}\n", sub.command.join(" "));
    let d = quote(&dir.display().to_string());
    s += &format!(
        "# Follow with `kbench slurm status {d}`, continue stopped shards with `kbench slurm \
         resubmit {d}`,\n"
    );
    s += &match (kind, sub.store()) {
        (Sharded::Measure, Some(store)) => format!(
            "# then list the baselines with `kbench baselines show --store {}`.\n",
            quote(&store.display().to_string())
        ),
        _ => format!("# then join them with `kbench merge {d}`.\n"),
    };
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
    let n = sub.shards;
    s += &format!(
        r#"shard=${{SLURM_ARRAY_TASK_ID:?submit this script with sbatch --array}}
dir={shards}/"$shard"
mkdir -p "$dir"
rm -f "$dir/{EXIT_CODE}"
echo "kbench shard $shard/{n}: job ${{SLURM_JOB_ID:-?}} on $(hostname), CUDA_VISIBLE_DEVICES=${{CUDA_VISIBLE_DEVICES:-}}" >&2
"#
    );
    s += &match kind {
        Sharded::Run => format!(
            r#"{cmd} --out "$dir" --shard "$shard/{n}" --secret-from {secret} --resume
rc=$?
echo "$rc" > "$dir/{EXIT_CODE}"
# 3 means "all evaluated, some kernels failed": the shard is complete, so Slurm sees success.
if [ "$rc" -eq 3 ]; then exit 0; fi
exit "$rc"
"#
        ),
        // measure resumes by itself from the run directories under --work; its 3 means
        // "problems still unmeasured", a failure to resubmit.
        Sharded::Measure => format!(
            r#"{cmd} --work "$dir" --shard "$shard/{n}"
rc=$?
echo "$rc" > "$dir/{EXIT_CODE}"
exit "$rc"
"#
        ),
    };
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
            "{} already holds a submission: follow it with `kbench slurm status`, continue it with `kbench slurm resubmit`, or choose another {}",
            dir.display(),
            match cmd.kind {
                Sharded::Run => "--out",
                Sharded::Measure => "--work",
            }
        );
    }
    if cmd.kind == Sharded::Run
        && (dir.join(crate::runlog::MANIFEST).exists() || dir.join(RECORDS).exists())
    {
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
    if cmd.kind == Sharded::Run {
        RunSecret::generate()?.save(&dir.join(SECRET))?;
    }
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
    /// kbench finished the shard: everything it plans is recorded (`run`: exit 0 or 3;
    /// `baselines measure`: exit 0, everything measured or its failure recorded).
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
    /// Records in the shard's run log (for `baselines measure`: in all its measuring runs).
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

/// Non-empty lines of a run log (a partial last line counts; it is cut on resume).
fn count_lines(records: &Path) -> usize {
    std::fs::read_to_string(records)
        .map(|t| t.lines().filter(|l| !l.trim().is_empty()).count())
        .unwrap_or(0)
}

/// Records the shard has made: its run log, or for `baselines measure` the logs of all its
/// measuring runs (`shard-i-of-N/STAMP-PID/`, one per attempt), which together hold each
/// measured entry once.
fn count_records(kind: Sharded, shard_dir: &Path) -> usize {
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
pub fn shard_finished(dir: &Path, shard: u32) -> bool {
    let kind = Submission::load(dir).map_or(Sharded::Run, |s| s.sharded());
    read_exit_code(&shard_dir(dir, shard)).is_some_and(|c| kind.finished(c))
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

fn stopped_why(
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
pub fn render_status(dir: &Path, sub: &Submission, rows: &[ShardStatus]) -> String {
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
pub fn status_json(dir: &Path, sub: &Submission, rows: &[ShardStatus]) -> serde_json::Value {
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

/// `kbench merge` of a `baselines measure` submission: its shards committed into the
/// baseline store as they measured, so there is nothing to merge. Returns what to say, or
/// `None` when no input is such a submission (then merge goes on as usual).
pub fn merge_measure(
    inputs: &[PathBuf],
    out: Option<&Path>,
    partial: bool,
) -> Result<Option<String>> {
    for input in inputs {
        let dir =
            std::path::absolute(input).with_context(|| format!("resolving {}", input.display()))?;
        if !dir.join(SUBMISSION).exists() {
            continue;
        }
        let sub = Submission::load(&dir)?;
        let Some(store) = sub.store() else {
            continue;
        };
        let (d, st) = (dir.display(), store.display());
        if inputs.len() > 1 || out.is_some() {
            bail!(
                "{d} is a `kbench baselines measure` submission: its shards commit into the baseline store {st}, so it has no run to merge with others or into --out; list the store with `kbench baselines show --store {st}`"
            );
        }
        let unfinished: Vec<String> = (0..sub.shards)
            .filter(|&i| !shard_finished(&dir, i))
            .map(|i| i.to_string())
            .collect();
        let mut say = format!(
            "nothing to merge: {d} is a `kbench baselines measure` submission, whose shards commit their baselines into the store {st} as they measure them; list them with `kbench baselines show --store {st}`"
        );
        if !unfinished.is_empty() {
            let which = unfinished.join(",");
            if !partial {
                bail!(
                    "shard(s) {which} of {d} have not finished (see `kbench slurm status {d}`; `kbench slurm resubmit {d}` continues them); what the shards measured so far is in the store {st} already: there is nothing to merge"
                );
            }
            say += &format!(
                "\nshard(s) {which} have not finished: the store lacks what they have still to measure (`kbench slurm resubmit {d}`)"
            );
        }
        return Ok(Some(say));
    }
    Ok(None)
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
            without_flag(&args(&["run", "--out", "x", "--suite", "smoke"]), "--out"),
            args(&["run", "--suite", "smoke"])
        );
        assert_eq!(
            without_flag(&args(&["run", "--out=x", "--quiet"]), "--out"),
            args(&["run", "--quiet"])
        );
        // Only that flag: `--output` or a value that merely starts alike stays.
        assert_eq!(
            without_flag(
                &args(&["x", "--work", "w", "--workers=2", "--work=v"]),
                "--work"
            ),
            args(&["x", "--workers=2"])
        );
        assert_eq!(
            flag_value(&args(&["x", "--store", "a", "--store=b"]), "--store").as_deref(),
            Some("b")
        );
        assert_eq!(flag_value(&args(&["x", "--store"]), "--store"), None);
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
            (
                vec!["baselines", "show", "--store", "s"],
                "`baselines show` cannot be sharded",
            ),
            (
                vec![
                    "baselines",
                    "measure",
                    "--suite",
                    "smoke",
                    "--work",
                    "w",
                    "--shard",
                    "0/2",
                ],
                "drop --shard",
            ),
            (
                vec!["baselines", "measure", "--work", "w", "--gpus", "0,1"],
                "--gpus-per-task",
            ),
            (
                vec!["baselines", "measure", "--work", "w", "--no-timing"],
                "drop --no-timing",
            ),
            (
                vec!["baselines", "measure", "--work", "w", "--modes", "turbo"],
                "--modes",
            ),
            // The shared directory of a measure submission is its --work: it must be given.
            (
                vec!["baselines", "measure", "--suite", "smoke", "--store", "s"],
                "give `baselines measure` a --work DIR",
            ),
        ] {
            let e = shardable(&args(&bad)).unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }

    #[test]
    fn baselines_measure_shards_with_its_work_as_the_directory_and_one_absolute_store() {
        let m = shardable(&args(&[
            "baselines",
            "measure",
            "--suite",
            "smoke",
            "--select",
            "1/1,1/2,1/4",
            "--work",
            "w",
            "--store",
            "rel/store",
            "--modes",
            "eager,compile",
            "--device",
            "cpu",
        ]))
        .unwrap();
        assert_eq!(m.kind, Sharded::Measure);
        assert!(m.on_cpu);
        assert_eq!(m.problems, 3);
        assert_eq!(m.out, std::path::absolute("w").unwrap());
        let store = std::path::absolute("rel/store").unwrap();
        assert_eq!(
            m.argv,
            args(&[
                "baselines",
                "measure",
                "--suite",
                "smoke",
                "--select",
                "1/1,1/2,1/4",
                "--modes",
                "eager,compile",
                "--device",
                "cpu",
                "--store",
                &store.display().to_string(),
            ])
        );
        assert_eq!(Sharded::of(&m.argv), Sharded::Measure);
        assert_eq!(
            flag_value(&m.argv, "--store"),
            Some(store.display().to_string())
        );
        // `--work=DIR`, `--store=DIR` and no --store: the store a local measure would use.
        let m = shardable(&args(&[
            "baselines",
            "measure",
            "--suite=smoke",
            "--work=/shared/w",
        ]))
        .unwrap();
        assert_eq!(m.out, PathBuf::from("/shared/w"));
        assert!(!m.on_cpu);
        let default =
            crate::commands::baselines::default_store(&crate::worker::python::cache_dir());
        assert!(default.is_absolute(), "{}", default.display());
        assert_eq!(
            m.argv,
            args(&[
                "baselines",
                "measure",
                "--suite=smoke",
                "--store",
                &default.display().to_string(),
            ])
        );
        let m = shardable(&args(&[
            "baselines",
            "measure",
            "--suite",
            "smoke",
            "--work",
            "/w",
            "--store=/s",
        ]))
        .unwrap();
        assert_eq!(flag_value(&m.argv, "--store").as_deref(), Some("/s"));
        assert_eq!(
            m.argv.iter().filter(|a| a.starts_with("--store")).count(),
            1
        );
    }

    #[test]
    fn a_measure_shard_is_done_only_when_measure_exited_0() {
        assert!(Sharded::Run.finished(0) && Sharded::Run.finished(3));
        assert!(Sharded::Measure.finished(0));
        for code in [1, 3, 130] {
            assert!(!Sharded::Measure.finished(code), "{code}");
        }
        assert!(!Sharded::Run.finished(130));
        assert!(stopped_why(Sharded::Measure, true, Some(3), None)
            .contains("without a time or a recorded failure"));
        assert!(stopped_why(Sharded::Run, true, Some(1), Some("FAILED")).contains("FAILED"));
    }

    #[test]
    fn measure_records_are_counted_over_every_run_of_the_shard() {
        let tmp = tempfile::tempdir().unwrap();
        let shard = tmp.path();
        let runs = shard.join("shard-1-of-2");
        for (run, lines) in [
            ("20260101T000000-1", "{}\n{}\n"),
            ("20260101T000100-2", "{}\n"),
        ] {
            std::fs::create_dir_all(runs.join(run)).unwrap();
            std::fs::write(runs.join(run).join(RECORDS), lines).unwrap();
        }
        std::fs::write(shard.join(EXIT_CODE), "0").unwrap();
        assert_eq!(count_records(Sharded::Measure, shard), 3);
        assert_eq!(count_records(Sharded::Run, shard), 0);
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
    fn the_script_runs_each_measure_shard_in_its_own_work_dir_with_the_shared_store() {
        let dir = Path::new("/shared/bl");
        let sub = Submission {
            schema_version: SUBMISSION_SCHEMA,
            kbench_version: "0.1.0".into(),
            shards: 4,
            command: args(&[
                "baselines",
                "measure",
                "--kernelbench",
                "KB",
                "--store",
                "/shared/my store",
            ]),
            kbench: "/opt/kbench".into(),
            workdir: "/home/u".into(),
            env: vec![],
            sbatch: SbatchOptions {
                job_name: "kbench".into(),
                partition: None,
                account: None,
                time: None,
                gpus_per_task: Some("1".into()),
                cpus_per_task: None,
                extra: vec![],
            },
            jobs: vec![],
        };
        assert_eq!(sub.sharded(), Sharded::Measure);
        assert_eq!(sub.store(), Some(PathBuf::from("/shared/my store")));
        let s = render_script(dir, &sub);
        for line in [
            "#SBATCH --gres=gpu:1\n",
            "dir=/shared/bl/shards/\"$shard\"\n",
            "/opt/kbench baselines measure --kernelbench KB --store '/shared/my store' \
             --work \"$dir\" --shard \"$shard/4\"\n",
            "echo \"$rc\" > \"$dir/exit_code\"\nexit \"$rc\"\n",
            "kbench baselines show --store '/shared/my store'",
        ] {
            assert!(s.contains(line), "missing {line:?} in\n{s}");
        }
        // No run flags, and measure's 3 (problems still unmeasured) is not turned into success.
        for absent in ["--secret-from", "--resume", " --out ", "-eq 3"] {
            assert!(!s.contains(absent), "{absent:?} in\n{s}");
        }
        // A run submission has no store.
        let run = Submission {
            command: args(&["run", "--suite", "smoke", "--store", "x"]),
            ..sub
        };
        assert_eq!(run.sharded(), Sharded::Run);
        assert_eq!(run.store(), None);
    }

    #[test]
    fn states_parse_from_squeue_and_sacct_lines() {
        let m = parse_states("12_0|RUNNING\n12_1|CANCELLED by 0\n\n13_2|PENDING\n");
        assert_eq!(m["12_0"], "RUNNING");
        assert_eq!(m["12_1"], "CANCELLED");
        assert_eq!(m["13_2"], "PENDING");
    }
}
