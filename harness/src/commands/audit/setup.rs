//! What an audit runs with: its arguments checked, the run configuration of its reference
//! workers, the Python environment, and the settings a `--resume` must match; and the
//! report's header built from them.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use kbench_record::{Device, Precision, ToleranceProfile};
use serde_json::{json, Value};

use super::report::{count, AuditReport, ProblemAudit};

use super::{FAMILIES, MAX_WEIGHTS, SCHEMA};
use crate::cli::{AuditArgs, AuditProfileArg, EvalArgs, ProfileArg};
use crate::config::{AgentConfig, RunConfig};
use crate::worker::python::{self, PythonInfo};

/// Everything an audit needs before its first worker starts.
pub(super) struct Setup {
    pub(crate) config: RunConfig,
    pub(crate) info: PythonInfo,
    /// The worker script, written into the cache.
    pub(crate) script: PathBuf,
    /// Worker logs, removed with the audit.
    pub(crate) logs: tempfile::TempDir,
    pub(crate) opts: Opts,
    /// What a `--resume` must match (the first line of the progress file).
    pub(crate) settings: Value,
    pub(crate) cpu_threads: u32,
    /// `--jobs`.
    pub(crate) jobs: usize,
}

impl Setup {
    pub(super) fn new(a: &AuditArgs) -> Result<Setup> {
        if !(a.timeout.is_finite() && a.timeout > 0.0) {
            bail!(
                "--timeout must be a positive number of seconds, got {}",
                a.timeout
            );
        }
        if a.jobs == 0 {
            bail!("--jobs must be at least 1");
        }
        if a.max_rows == Some(0) {
            bail!("--max-rows must be at least 1");
        }
        let cores = crate::config::resolve::host_cores();
        let cpu_threads = a
            .cpu_threads
            .unwrap_or_else(|| (cores / a.jobs).max(1) as u32);
        let profile = match a.profile {
            AuditProfileArg::Kernelbench => ProfileArg::Kernelbench,
            AuditProfileArg::KernelbenchV01 => ProfileArg::KernelbenchV01,
        };
        let eval = eval_args(a, profile, cpu_threads)?;
        let out_dir = a.out.clone().unwrap_or_else(|| PathBuf::from("."));
        let config = crate::commands::run_config::build(
            &a.suite,
            &a.python,
            &eval,
            AgentConfig::Reference,
            &out_dir,
            None,
        )?;
        let tol = kbench_adversarial::tolerance(config.profile, Precision::Fp32);
        let info = crate::worker::probe_cache::probe_persisted(&config.python, &config.cache)?;
        if matches!(config.device, Device::Cuda(_)) && !info.cuda_available {
            bail!(
                "--device {}: torch {} in {} cannot use CUDA; use --device cpu",
                config.device,
                info.torch,
                info.executable
            );
        }
        let script = python::materialize_worker(&config.cache)?;
        let logs = tempfile::Builder::new()
            .prefix("kbench-audit-logs")
            .tempdir()
            .context("creating a folder for worker logs")?;
        let opts = Opts {
            atol: tol.atol,
            rtol: tol.rtol,
            timeout: Duration::from_secs_f64(a.timeout),
            max_rows: a.max_rows,
        };
        let settings = json!({
            "profile": profile_name(config.profile),
            "atol": tol.atol,
            "rtol": tol.rtol,
            "device": config.device.to_string(),
            "torch": info.torch,
            "families": FAMILIES,
            "max_weights": MAX_WEIGHTS,
            "max_rows": a.max_rows,
            "weight_seed": config.weight_seed,
            "kbench": env!("CARGO_PKG_VERSION"),
        });
        Ok(Setup {
            config,
            info,
            script,
            logs,
            opts,
            settings,
            cpu_threads,
            jobs: a.jobs,
        })
    }

    /// The line an audit starts with.
    pub(super) fn banner(&self) -> String {
        let (config, total) = (&self.config, self.config.problems.len());
        format!(
            "kbench audit: {total} problem(s) on {} ({} job(s), {} thread(s) each), profile {} (atol = rtol = {:e}){}",
            config.device,
            self.jobs,
            self.cpu_threads,
            profile_name(config.profile),
            self.opts.atol,
            self.opts
                .max_rows
                .map(|n| format!(", batch cut to {n} rows"))
                .unwrap_or_default()
        )
    }

    /// The report of what was measured: every problem (those never reached as not
    /// audited), in suite order, with the counts and the settings.
    pub(super) fn report(&self, measured: Measured, was_interrupted: bool) -> AuditReport {
        let (config, info, total) = (&self.config, &self.info, self.config.problems.len());
        let mut problems: Vec<ProblemAudit> = measured
            .results
            .into_iter()
            .zip(&config.problems)
            .map(|(r, p)| {
                r.unwrap_or_else(|| {
                    let mut pa = ProblemAudit::new(p);
                    pa.not_audited = Some("interrupted before it was reached".into());
                    pa
                })
            })
            .collect();
        problems.sort_by(|x, y| (x.level, x.id, &x.file).cmp(&(y.level, y.id, &y.file)));
        let device_name = measured.device_name;
        AuditReport {
            schema: SCHEMA,
            profile: profile_name(config.profile).into(),
            atol: self.opts.atol,
            rtol: self.opts.rtol,
            precision: "fp32",
            device: config.device.to_string(),
            device_name: if device_name.is_empty() {
                "unknown".into()
            } else {
                device_name
            },
            torch: info.torch.clone(),
            python: info.python.clone(),
            kbench: env!("CARGO_PKG_VERSION").into(),
            date: utc_now(),
            command: command_line(),
            suite: format!("{} ({} problems)", config.suite_label, total),
            families: FAMILIES.to_vec(),
            weight_seed: config.weight_seed,
            max_weights: MAX_WEIGHTS,
            max_rows: self.opts.max_rows,
            interrupted: was_interrupted,
            counts: count(&problems),
            problems,
        }
    }
}

/// The evaluation settings of an audit's workers, through `run`'s own parser so that every
/// setting an audit does not name keeps `run`'s default.
fn eval_args(a: &AuditArgs, profile: ProfileArg, cpu_threads: u32) -> Result<EvalArgs> {
    #[derive(clap::Parser)]
    struct Eval {
        #[command(flatten)]
        eval: EvalArgs,
    }
    let profile = match profile {
        ProfileArg::Kernelbench => "kernelbench",
        ProfileArg::KernelbenchV01 => "kernelbench-v0.1",
        ProfileArg::Strict => "strict",
    };
    let secs = |x: f64| format!("{x}");
    let argv: Vec<String> = vec![
        "kbench-audit".into(),
        "--device".into(),
        a.device.clone(),
        "--precision".into(),
        "fp32".into(),
        "--profile".into(),
        profile.into(),
        "--no-timing".into(),
        "--timeout-start".into(),
        secs(120f64.min(a.timeout)),
        "--timeout-load".into(),
        secs(a.timeout),
        "--timeout-run".into(),
        secs(a.timeout),
        "--build-jobs".into(),
        "0".into(),
        "--cpu-threads".into(),
        cpu_threads.to_string(),
        "--weight-seed".into(),
        a.weight_seed.to_string(),
        "--quiet".into(),
    ];
    use clap::Parser;
    Ok(Eval::try_parse_from(argv)
        .context("the audit's evaluation settings")?
        .eval)
}

pub(super) fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = crate::commands::baselines::civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

fn command_line() -> String {
    let mut args = std::env::args();
    let _ = args.next();
    std::iter::once("kbench".to_string())
        .chain(args.map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./,=:+".contains(c))
            {
                a
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        }))
        .collect::<Vec<_>>()
        .join(" ")
}

fn profile_name(p: ToleranceProfile) -> &'static str {
    match p {
        ToleranceProfile::KernelBench => "kernelbench",
        ToleranceProfile::KernelBenchV01 => "kernelbench-v0.1",
        ToleranceProfile::Strict => "strict",
    }
}

/// What one audit needs besides the context.
pub(super) struct Opts {
    pub(crate) atol: f64,
    pub(crate) rtol: f64,
    pub(crate) timeout: Duration,
    pub(crate) max_rows: Option<u64>,
}

/// What the job threads measured.
pub(super) struct Measured {
    /// Per problem, in the suite's order: its audit, or `None` when it was never reached.
    pub(crate) results: Vec<Option<ProblemAudit>>,
    /// The device the workers ran on, as the first that named it said (empty: none did).
    pub(crate) device_name: String,
    /// A worker was interrupted (the stop flag is the caller's to read as well).
    pub(crate) interrupted: bool,
}
