//! `kbench slurm submit` and `kbench slurm resubmit`: the sharded command taken apart and
//! checked, the submission written, and the array (or its stopped shards) handed to sbatch.

use std::path::{Path, PathBuf};
use std::process::Command as Process;

use anyhow::{bail, Context, Result};
use clap::Parser;

use super::script::render_script;
use super::status::{status, ShardState};
use super::submission::{SbatchOptions, Sharded, Submission, SubmittedJob};
use super::{SCRIPT, SUBMISSION, SUBMISSION_SCHEMA};
use crate::cli::{BaselinesCommand, Cli, Command, SlurmSubmitArgs};
use crate::runlog::seed::RunSecret;
use crate::runlog::{now_unix, write_atomic, RECORDS, SECRET};

/// What `kbench slurm submit` needs from the sharded command.
#[derive(Debug)]
pub(super) struct Shardable {
    pub(crate) kind: Sharded,
    /// The shared directory: `run`'s `--out`, `baselines measure`'s `--work`.
    pub(crate) out: PathBuf,
    /// The command without that flag (and, for measure, with an absolute `--store`).
    pub(crate) argv: Vec<String>,
    pub(crate) problems: usize,
    pub(crate) on_cpu: bool,
}

/// Checks that `argv` (after `kbench`) is a command that can be sharded and takes it apart.
pub(super) fn shardable(argv: &[String]) -> Result<Shardable> {
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
            // A broken problem file gets its record in a shard, as a problem does.
            let suite = crate::commands::run_config::load_suite(&run.suite)?;
            let problems = suite.problems.len() + suite.broken.len();
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
            let problems = crate::commands::run_config::load_suite(&m.suite)?
                .problems
                .len();
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
pub(super) fn without_flag(argv: &[String], flag: &str) -> Vec<String> {
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
pub(super) fn parse_gpus(spec: &str) -> Result<Option<String>> {
    let count = spec.rsplit(':').next().unwrap_or(spec);
    let n: u32 = count.trim().parse().map_err(|_| {
        anyhow::anyhow!("--gpus-per-task {spec}: expected N or TYPE:N, e.g. 1 or a100:2")
    })?;
    Ok((n > 0).then(|| spec.trim().to_string()))
}

/// Writes the submission into the shared output directory and, unless `dry_run`, submits
/// the array. Returns the directory and the submission.
pub(crate) fn submit(a: &SlurmSubmitArgs) -> Result<(PathBuf, Submission)> {
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
    // The submission folder becomes the merged run folder: never another tool's files.
    if cmd.kind == Sharded::Run {
        if let crate::runlog::OutFolder::Foreign(names) = crate::runlog::out_folder(&dir)? {
            return Err(crate::runlog::foreign_error(&dir, &names));
        }
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
pub(super) fn array_spec(shards: &[u32]) -> String {
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

/// Submits the stopped shards again as one array job (same script: each resumes its log).
/// Returns the shards and the new job id (`None` when there was nothing to resubmit or with
/// `dry_run`).
pub(crate) fn resubmit(dir: &Path, dry_run: bool) -> Result<(Vec<u32>, Option<String>)> {
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
