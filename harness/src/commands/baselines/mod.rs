//! Baselines through the evaluation engine: `kbench baselines measure`, and the baselines
//! of `kbench run --baselines`.
//!
//! A baseline mode is measured as a candidate: `ModelNew` subclasses the problem's `Model`
//! (same weights from the same seed) and, for a compile mode, sends `forward` through
//! `torch.compile(mode=...)` (see [`Mode::candidate_source`]). So a mode is loaded in a
//! fresh process (which is stronger than `torch._dynamo.reset()` between problems),
//! compiled by one warm-up call inside the load timeout (the per-problem compile timeout),
//! checked for correctness like any kernel, and timed by the same interleaved timer as
//! every candidate, against the eager reference. The eager baseline is the reference
//! side of those same timings: exactly the time `kbench run`'s own speedups divide.
//!
//! Measurements land in a run directory under a work folder first (each record appended
//! and fsynced as it is made), and are folded from there into the store, so an interrupted
//! measurement loses nothing: the next `measure` folds what the killed one recorded and
//! plans only what is still missing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use kbench_baselines::{
    BaselineEnv, BaselineFile, Entry, ErrorEntry, Lookup, Mode, Origin, Store, TimingSettings,
};
use kbench_record::{BaselineRatio, Device, EvalRecord, Outcome, TimingStats};
use kbench_suites::Problem;

use crate::agents::{read_dir_sorted, Agent, Candidate};
use crate::config::{AgentConfig, RunConfig};

/// Agent name of baseline candidates in records.
pub const AGENT: &str = "baseline";

/// Proposes, per problem, one candidate per baseline mode still to measure.
pub struct BaselineAgent {
    /// Problem key (`kernelbench/L1/19`) → modes to measure.
    pub plan: BTreeMap<String, Vec<Mode>>,
}

impl Agent for BaselineAgent {
    fn name(&self) -> &str {
        AGENT
    }

    fn candidates(&self, problem: &Problem) -> Result<Vec<Candidate>> {
        let Some(modes) = self.plan.get(&problem.to_ref().key()) else {
            return Ok(Vec::new());
        };
        let compiled: Vec<Mode> = modes
            .iter()
            .copied()
            .filter(|m| *m != Mode::Eager)
            .collect();
        // Eager comes from the reference side of any record; only when no compile mode is
        // measured for the problem does an eager candidate carry the timing.
        let modes = if compiled.is_empty() {
            vec![Mode::Eager]
        } else {
            compiled
        };
        Ok(modes
            .into_iter()
            .map(|m| {
                let mut c = Candidate::new(
                    m.as_str().into(),
                    0,
                    m.candidate_source(&problem.source),
                    None,
                );
                c.warm_up = m != Mode::Eager;
                c
            })
            .collect())
    }
}

/// The name of the device a run on `device` reports in its records (`env.device_name`):
/// the CUDA device name, or the CPU model name as the worker reads it.
pub fn device_name(device: Device) -> Result<String> {
    match device {
        Device::Cuda(i) => {
            let gpus = crate::gpu::describe()
                .map_err(|e| anyhow::anyhow!("listing GPUs: {}", e.why_none()))?;
            gpus.get(i as usize)
                .map(|g| g.name.clone())
                .with_context(|| format!("no GPU {i}"))
        }
        Device::Cpu => Ok(cpu_name()),
    }
}

/// `model name` of /proc/cpuinfo, as the worker's `_cpu_name` reads it.
fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// The environment of the machine and torch a run uses, for a store file.
pub fn environment(
    config: &RunConfig,
    info: &crate::worker::python::PythonInfo,
) -> Result<BaselineEnv> {
    let (torch, cuda) = (info.torch.as_str(), info.torch_cuda.clone());
    let gpu = device_name(config.device)?;
    let (driver, gpu_properties) = match config.device {
        Device::Cuda(i) => {
            let props = crate::gpu::describe().ok().and_then(|g| {
                g.get(i as usize)
                    .and_then(|g| serde_json::to_value(g).ok())
                    .map(|mut v| {
                        if let Some(live) = crate::gpu::nvml::live(i as usize) {
                            v["live_at_measure"] = serde_json::to_value(live).unwrap_or_default();
                        }
                        v
                    })
            });
            (crate::gpu::nvml::driver_version(), props)
        }
        Device::Cpu => (None, None),
    };
    Ok(BaselineEnv {
        gpu_slug: kbench_baselines::gpu_slug(&gpu),
        gpu,
        torch: torch.into(),
        cuda,
        driver,
        gpu_properties,
        hostname: Some(crate::exec::hostname()),
        kbench: Some(env!("CARGO_PKG_VERSION").into()),
        python: Some(info.python.clone()),
    })
}

fn settings(config: &RunConfig) -> Option<TimingSettings> {
    config.timing.as_ref().map(|t| TimingSettings {
        timed_calls: t.timed_calls,
        warmup: t.warmup,
        rounds: t.rounds,
        l2_flush: t.l2_flush,
        precision: config.precision.as_str().into(),
        profile: config.profile.as_str().into(),
    })
}

/// The store files of one GPU and torch version, loaded (or new) and ready to update.
pub struct StoreFiles {
    pub store: Store,
    pub env: BaselineEnv,
    pub files: BTreeMap<Mode, BaselineFile>,
}

impl StoreFiles {
    /// Loads the files of `modes` (a missing file is a new, empty one).
    pub fn open(store: Store, env: BaselineEnv, modes: &[Mode]) -> Result<Self> {
        let mut files = BTreeMap::new();
        for &m in modes {
            let f = store
                .load(&env.gpu, &env.torch, m)?
                .unwrap_or_else(|| BaselineFile::new(m, Origin::Measured, env.clone()));
            if f.meta.origin == Origin::Imported {
                bail!(
                    "{} holds imported times; measured times are not mixed into it: move it out of the store or choose another --store",
                    store.path(&env.gpu, &env.torch, m).display()
                );
            }
            files.insert(m, f);
        }
        Ok(StoreFiles { store, env, files })
    }

    pub fn path(&self, m: Mode) -> PathBuf {
        self.store.path(&self.env.gpu, &self.env.torch, m)
    }

    /// Problem key → modes of `want` that have neither a usable time nor a recorded
    /// failure (with `retry_failed`, failures are measured again).
    pub fn missing(
        &self,
        problems: &[Problem],
        want: &[Mode],
        retry_failed: bool,
    ) -> BTreeMap<String, Vec<Mode>> {
        self.missing_or(problems, want, |_| retry_failed)
    }

    /// As [`missing`](Self::missing), measuring again the failures `retry` picks.
    pub fn missing_or(
        &self,
        problems: &[Problem],
        want: &[Mode],
        retry: impl Fn(&ErrorEntry) -> bool,
    ) -> BTreeMap<String, Vec<Mode>> {
        let mut plan = BTreeMap::new();
        for p in problems {
            let r = p.to_ref();
            let modes: Vec<Mode> = want
                .iter()
                .copied()
                .filter(|m| match self.files.get(m) {
                    None => true,
                    Some(f) => match f.lookup(r.level, &r.file, &r.sha256) {
                        Lookup::Usable(_) => false,
                        Lookup::Failed(e) => retry(e),
                        Lookup::Stale(_) | Lookup::Missing => true,
                    },
                })
                .collect();
            if !modes.is_empty() {
                plan.insert(r.key(), modes);
            }
        }
        plan
    }

    /// Folds baseline records into the files (later records win). Returns how many entries
    /// changed.
    pub fn fold(&mut self, records: &[EvalRecord], timing: Option<TimingSettings>) -> usize {
        let mut changed = 0;
        for r in records.iter().filter(|r| r.candidate.agent == AGENT) {
            let Ok(mode) = Mode::parse(&r.candidate.name) else {
                continue;
            };
            let p = &r.problem;
            let device = match r.device {
                Device::Cpu => "cpu".to_string(),
                Device::Cuda(_) => "cuda:0".to_string(),
            };
            let entry_of = |stats: &TimingStats, compile_s: Option<f64>| {
                let mut e =
                    Entry::from_samples(stats.samples_ms.clone(), &r.env.device_name, &device);
                e.compile_s = compile_s;
                e.problem_sha256 = Some(p.sha256.clone());
                e.measured_unix_s = Some(r.finished_unix_s);
                e.run_id = Some(r.run_id.clone());
                e.profile = Some(r.profile.as_str().into());
                e
            };
            // Folding the same record again changes nothing (and is not counted), and nor
            // does folding one older than what the file holds: earlier measurements are
            // folded again on every start, and a later one (a retry) must stay.
            let from_this = |f: &BaselineFile| {
                let mine = |run: &Option<String>, at: &Option<f64>| {
                    (run.as_deref() == Some(r.run_id.as_str()) && *at == Some(r.finished_unix_s))
                        || at.is_some_and(|t| t > r.finished_unix_s)
                };
                f.levels
                    .get(&p.level)
                    .and_then(|m| m.get(&p.file))
                    .is_some_and(|e| mine(&e.run_id, &e.measured_unix_s))
                    || f.errors
                        .get(&p.level)
                        .and_then(|m| m.get(&p.file))
                        .is_some_and(|e| mine(&e.run_id, &e.measured_unix_s))
            };
            if self.files.get(&mode).is_some_and(from_this) {
                continue;
            }
            match (&r.outcome, &r.timing) {
                (Outcome::Ok, Some(t)) => {
                    if let Some(f) = self.files.get_mut(&mode) {
                        let compile_s = (mode != Mode::Eager).then_some(r.load_s).flatten();
                        f.put(p.level, &p.file, entry_of(&t.candidate, compile_s));
                        changed += 1;
                    }
                    // The eager time is the reference side of any baseline record.
                    if let Some(f) = self.files.get_mut(&Mode::Eager) {
                        if !matches!(f.lookup(p.level, &p.file, &p.sha256), Lookup::Usable(_))
                            || mode == Mode::Eager
                        {
                            f.put(p.level, &p.file, entry_of(&t.reference, None));
                            changed += 1;
                        }
                    }
                }
                (Outcome::Ok, None) => {}
                (outcome, _) => {
                    let gpu_alone = r.notes.iter().any(|n| n == crate::exec::GPU_ALONE_NOTE);
                    // A reference that failed (e.g. its float64 copy does not fit) leaves
                    // eager without a time too; recorded, so it is not retried every time.
                    let reference_failed = matches!(outcome, Outcome::ReferenceError { .. });
                    let eager_too = reference_failed && mode != Mode::Eager;
                    let error = ErrorEntry {
                        outcome: outcome.kind().into(),
                        message: failure_message(outcome),
                        compile_s: None,
                        problem_sha256: Some(p.sha256.clone()),
                        measured_unix_s: Some(r.finished_unix_s),
                        run_id: Some(r.run_id.clone()),
                        profile: Some(r.profile.as_str().into()),
                        gpu_alone,
                    };
                    if let (true, Some(f)) = (eager_too, self.files.get_mut(&Mode::Eager)) {
                        if !matches!(f.lookup(p.level, &p.file, &p.sha256), Lookup::Usable(_)) {
                            f.put_error(p.level, &p.file, error.clone());
                            changed += 1;
                        }
                    }
                    if let Some(f) = self.files.get_mut(&mode) {
                        f.put_error(
                            p.level,
                            &p.file,
                            ErrorEntry {
                                outcome: outcome.kind().into(),
                                message: failure_message(outcome),
                                compile_s: r.load_s,
                                problem_sha256: Some(p.sha256.clone()),
                                measured_unix_s: Some(r.finished_unix_s),
                                run_id: Some(r.run_id.clone()),
                                profile: Some(r.profile.as_str().into()),
                                gpu_alone,
                            },
                        );
                        changed += 1;
                    }
                }
            }
        }
        if changed > 0 {
            for f in self.files.values_mut() {
                f.meta.environment = self.env.clone();
                if timing.is_some() {
                    f.meta.timing = timing.clone();
                }
                f.meta.updated_unix_s = crate::runlog::now_unix();
            }
        }
        changed
    }

    /// Folds `records` into the files as they are on disk now, under a lock on the store
    /// directory, and saves them: the shards of one measurement (Slurm array tasks) share a
    /// store, and none may overwrite another's times.
    pub fn commit(
        &mut self,
        records: &[EvalRecord],
        timing: Option<TimingSettings>,
    ) -> Result<usize> {
        let dir = self.store.dir(&self.env.gpu, &self.env.torch);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let lock_path = dir.join(".lock");
        let lock_file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .with_context(|| format!("opening {}", lock_path.display()))?;
        let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| anyhow::anyhow!("locking {}: {e}", lock_path.display()))?;
        let modes: Vec<Mode> = self.files.keys().copied().collect();
        let fresh = StoreFiles::open(self.store.clone(), self.env.clone(), &modes)?;
        self.files = fresh.files;
        let changed = self.fold(records, timing);
        if changed > 0 {
            self.save()?;
        }
        Ok(changed)
    }

    pub fn save(&self) -> Result<()> {
        for (m, f) in &self.files {
            if f.is_empty() && f.error_count() == 0 {
                continue;
            }
            f.save(&self.path(*m))?;
        }
        Ok(())
    }
}

fn failure_message(o: &Outcome) -> String {
    let full = match o {
        Outcome::CompileError { message } | Outcome::RuntimeError { message, .. } => {
            format!("{}: {}", o.kind(), message)
        }
        other => other.to_string(),
    };
    // Tracebacks and torch's out-of-memory reports are long: the head says what kind of
    // failure it was, the tail what failed last.
    let chars: Vec<char> = full.chars().collect();
    if chars.len() > 2000 {
        format!(
            "{} … {}",
            chars[..400].iter().collect::<String>(),
            chars[chars.len() - 1600..].iter().collect::<String>()
        )
    } else {
        full
    }
}

/// Every run directory under `work` (one per `measure` invocation), oldest first.
fn run_dirs(work: &Path) -> Result<Vec<PathBuf>> {
    if !work.exists() {
        return Ok(Vec::new());
    }
    let mut dirs = read_dir_sorted(work, "baseline work folder")?;
    dirs.retain(|p| p.join(crate::runlog::RECORDS).is_file());
    Ok(dirs)
}

/// What a measurement did.
#[derive(Debug, Default)]
pub struct Measured {
    /// Entries folded from earlier, interrupted measurements.
    pub recovered: usize,
    /// Baseline candidates evaluated now.
    pub evaluated: usize,
    pub interrupted: bool,
    /// Modes measured in the last pass with the GPU to themselves, after running out of GPU
    /// memory beside loads sent ahead.
    pub retried_alone: usize,
    /// Problem key → modes still without a time or a recorded failure.
    pub still_missing: BTreeMap<String, Vec<Mode>>,
}

/// Measures the `modes` of every problem of `base` that `files` lacks, through the engine,
/// in run directories under `work`; folds the results into `files` and saves them.
pub fn measure(
    base: &RunConfig,
    files: &mut StoreFiles,
    modes: &[Mode],
    work: &Path,
    retry_failed: bool,
    stop: Arc<AtomicBool>,
) -> Result<Measured> {
    if base.timing.is_none() {
        bail!("baselines are times: measuring them needs timing (drop --no-timing)");
    }
    let mut out = Measured::default();
    // First what earlier, interrupted measurements recorded.
    for dir in run_dirs(work)? {
        let records = crate::runlog::read_records(&dir.join(crate::runlog::RECORDS))?;
        out.recovered += files.commit(&records, None)?;
    }
    // Up to three passes. The eager time comes with a compile mode's record, so when that
    // mode failed for a problem, eager is measured on its own in a second pass. A mode that
    // ran out of GPU memory while other problems' loads waited beside it on the GPU (their
    // compiled graphs, CUDA-graph pools and weights hold memory) failed through the
    // harness, not by itself: such failures, this run's or stored ones, are measured again
    // in a last pass that takes nothing ahead, so each has the GPU alone. A failure there is
    // the mode's own and is kept (only --retry-failed measures it again).
    let gpu = base.device != Device::Cpu;
    let mut normal_passes = 0;
    let mut alone = false;
    loop {
        let plan = files.missing_or(&base.problems, modes, |e| {
            let oom = out_of_memory(&e.message);
            if alone {
                oom && (retry_failed || !e.gpu_alone)
            } else {
                retry_failed && normal_passes == 0 && !(gpu && oom)
            }
        });
        if plan.is_empty() {
            if !alone && gpu {
                alone = true;
                continue;
            }
            break;
        }
        let mut config = base.clone();
        if alone {
            out.retried_alone = plan.values().map(Vec::len).sum();
            config.lookahead = Some(1);
        }
        config.agent = AgentConfig::Baselines { plan };
        config.resume = false;
        config.shard = None;
        config.secret_from = None;
        // A baseline is a time: the random trials check it computes the problem, and the
        // stress families (which judge kernels, not torch) are not run.
        config.families.clear();
        config.out = work.join(format!("{}-{}", chrono_stamp(), std::process::id()));
        let result = crate::exec::run(&config, Arc::clone(&stop))?;
        out.evaluated += result.added;
        files.commit(&result.records, settings(&config))?;
        if result.interrupted {
            out.interrupted = true;
            break;
        }
        if alone {
            break;
        }
        normal_passes += 1;
        if normal_passes == 2 {
            if !gpu {
                break;
            }
            alone = true;
        }
    }
    out.still_missing = files.missing(&base.problems, modes, false);
    Ok(out)
}

/// Whether a failure is the GPU running out of memory (torch's allocator or the harness's
/// own allocations for the reference's cases).
fn out_of_memory(m: &str) -> bool {
    m.contains("OutOfMemoryError")
        || m.contains("CUDA_ERROR_OUT_OF_MEMORY")
        || m.to_ascii_lowercase().contains("out of memory")
        // The tail of torch's report, all that older stores kept of a long one.
        || (m.contains("GiB memory in use") && m.contains("Process "))
}

/// `YYYYmmddTHHMMSS` in UTC, for run directory names that sort by time.
fn chrono_stamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's
/// `civil_from_days`).
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// One baseline file a run compares against.
#[derive(Debug, Clone)]
pub struct UsedFile {
    pub mode: Mode,
    pub path: PathBuf,
    /// `measured`, `live` or `imported`.
    pub origin: String,
    pub file: BaselineFile,
}

/// The baselines a run's records are compared against.
#[derive(Debug, Clone, Default)]
pub struct BaselineTable {
    pub used: Vec<UsedFile>,
}

impl BaselineTable {
    /// Speedups of a timed candidate over every baseline with a usable time for `problem`.
    pub fn ratios(
        &self,
        problem: &kbench_record::ProblemRef,
        candidate: &TimingStats,
    ) -> BTreeMap<String, BaselineRatio> {
        let mut out = BTreeMap::new();
        for u in &self.used {
            let Lookup::Usable(e) = u.file.lookup(problem.level, &problem.file, &problem.sha256)
            else {
                continue;
            };
            // An imported entry has no median: then both sides use their means.
            let (basis, base, cand) = match e.median {
                Some(m) => ("median", m, candidate.median_ms),
                None => ("mean", e.mean, candidate.mean_ms),
            };
            if !(base > 0.0 && cand > 0.0) {
                continue;
            }
            out.insert(
                u.mode.as_str().to_string(),
                BaselineRatio {
                    speedup: base / cand,
                    speedup_mean: (candidate.mean_ms > 0.0).then(|| e.mean / candidate.mean_ms),
                    baseline_ms: base,
                    basis: basis.into(),
                    origin: u.origin.clone(),
                    file: u.path.display().to_string(),
                },
            );
        }
        out
    }

    /// How many of `problems` each file has a usable time for.
    pub fn coverage(&self, problems: &[Problem]) -> Vec<(usize, usize)> {
        self.used
            .iter()
            .map(|u| {
                let n = problems
                    .iter()
                    .filter(|p| {
                        let r = p.to_ref();
                        matches!(
                            u.file.lookup(r.level, &r.file, &r.sha256),
                            Lookup::Usable(_)
                        )
                    })
                    .count();
                (n, problems.len())
            })
            .collect()
    }

    /// `baselines_used.json` of a run: which file each mode came from and what it covers.
    pub fn manifest(&self, problems: &[Problem]) -> serde_json::Value {
        let cov = self.coverage(problems);
        serde_json::Value::Array(
            self.used
                .iter()
                .zip(cov)
                .map(|(u, (n, total))| {
                    serde_json::json!({
                        "mode": u.mode.as_str(),
                        "file": u.path.display().to_string(),
                        "origin": u.origin,
                        "gpu": u.file.meta.environment.gpu,
                        "torch": u.file.meta.environment.torch,
                        "caveats": u.file.meta.caveats,
                        "problems_with_time": n,
                        "problems": total,
                    })
                })
                .collect(),
        )
    }

    /// Lines for the run's summary: one per baseline file.
    pub fn describe(&self, problems: &[Problem]) -> Vec<String> {
        self.used
            .iter()
            .zip(self.coverage(problems))
            .map(|(u, (n, total))| {
                let mut s = format!(
                    "baseline {:<12} {} ({}; {} torch {}; {n}/{total} problems)",
                    u.mode.as_str(),
                    u.path.display(),
                    u.origin,
                    u.file.meta.environment.gpu,
                    u.file.meta.environment.torch,
                );
                for c in &u.file.meta.caveats {
                    s.push_str(&format!("\n    caveat: {c}"));
                }
                s
            })
            .collect()
    }
}

/// What `kbench run --baselines` asked for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BaselineRequest {
    pub modes: Vec<Mode>,
    /// Measure every selected problem now, into the run directory, instead of using the
    /// store.
    pub live: bool,
    /// Explicit files, e.g. an imported KernelBench file: mode → path.
    pub files: Vec<(Mode, PathBuf)>,
    /// Use files timed on another GPU or torch version.
    pub force: bool,
    pub store: Option<PathBuf>,
}

impl BaselineRequest {
    /// Parses `--baselines eager,compile` / `live` / `live,max-autotune`: `live` alone means
    /// eager and compile, measured now.
    pub fn parse(spec: &str) -> Result<BaselineRequest> {
        let mut live = false;
        let mut rest = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "live" {
                live = true;
            } else {
                rest.push(part);
            }
        }
        let modes = if rest.is_empty() {
            if !live {
                bail!("--baselines {spec:?} names no baseline mode: e.g. eager,compile,max-autotune or live");
            }
            vec![Mode::Eager, Mode::Compile]
        } else {
            Mode::parse_list(&rest.join(",")).map_err(|e| anyhow::anyhow!("--baselines: {e}"))?
        };
        Ok(BaselineRequest {
            modes,
            live,
            ..Default::default()
        })
    }
}

/// The default store: `baselines/data` under the working directory when it exists (the
/// repository's committed data), else `baselines` in kbench's cache.
pub fn default_store(cache: &Path) -> PathBuf {
    let here = PathBuf::from("baselines/data");
    if here.is_dir() {
        std::path::absolute(&here).unwrap_or(here)
    } else {
        cache.join("baselines")
    }
}

/// Resolves the baselines of `kbench run`: explicit files are checked against this GPU and
/// torch (refused on a mismatch unless forced); the store's files are used where they have
/// a time and the missing ones are measured first (or, `live`, everything is measured now
/// into the run directory).
pub fn prepare_for_run(
    config: &RunConfig,
    req: &BaselineRequest,
    stop: Arc<AtomicBool>,
) -> Result<Option<BaselineTable>> {
    let info = crate::worker::python::probe(&config.python)?;
    let env = environment(config, &info)?;
    let mut table = BaselineTable::default();
    let mut explicit: BTreeSet<Mode> = BTreeSet::new();
    for (mode, path) in &req.files {
        let f = BaselineFile::load(path)?;
        if f.mode() != Some(*mode) {
            bail!(
                "--baseline-file {}={}: the file holds mode '{}'",
                mode,
                path.display(),
                f.meta.mode
            );
        }
        if !req.force {
            f.check_environment(path, &env.gpu, &env.torch)?;
        }
        let origin = match f.meta.origin {
            Origin::Imported => "imported",
            Origin::Measured => "measured",
        };
        explicit.insert(*mode);
        table.used.push(UsedFile {
            mode: *mode,
            path: path.clone(),
            origin: origin.into(),
            file: f,
        });
    }
    let modes: Vec<Mode> = req
        .modes
        .iter()
        .copied()
        .filter(|m| !explicit.contains(m))
        .collect();
    if !modes.is_empty() {
        let (store_root, work, origin) = if req.live {
            (
                config.out.join("baselines").join("store"),
                config.out.join("baselines").join("runs"),
                "live",
            )
        } else {
            let root = store_root(req.store.as_ref(), &config.cache);
            let work = config
                .cache
                .join("baseline-runs")
                .join(&env.gpu_slug)
                .join(format!("torch-{}", env.torch));
            (root, work, "measured")
        };
        let mut files = StoreFiles::open(Store::new(&store_root), env.clone(), &modes)?;
        let missing = files.missing(&config.problems, &modes, false);
        if !missing.is_empty() {
            if !config.quiet {
                let n: usize = missing.values().map(Vec::len).sum();
                eprintln!(
                    "kbench: measuring {n} baseline time(s) of {} problem(s) first ({}), into {}",
                    missing.len(),
                    if req.live { "live" } else { "not in the store" },
                    store_root.display()
                );
            }
            let m = measure(config, &mut files, &modes, &work, false, Arc::clone(&stop))?;
            if m.interrupted {
                bail!("interrupted while measuring baselines; rerun to continue (what was measured is kept)");
            }
        }
        for m in modes {
            let path = files.path(m);
            if let Some(f) = files.files.remove(&m) {
                table.used.push(UsedFile {
                    mode: m,
                    path,
                    origin: origin.into(),
                    file: f,
                });
            }
        }
    }
    table.used.sort_by_key(|u| u.mode);
    Ok(Some(table))
}

/// Per baseline mode: how the run's correct kernels compare with it.
pub fn summary_lines(records: &[EvalRecord], table: &BaselineTable) -> Vec<String> {
    let mut out = Vec::new();
    for u in &table.used {
        let name = u.mode.as_str();
        let speedups: Vec<f64> = records
            .iter()
            .filter(|r| r.outcome.is_ok())
            .filter_map(|r| r.baselines.get(name).map(|b| b.speedup))
            .filter(|s| s.is_finite() && *s > 0.0)
            .collect();
        if speedups.is_empty() {
            out.push(format!(
                "vs {name:<12} no correct kernel has a {name} time to compare with"
            ));
            continue;
        }
        let geomean = (speedups.iter().map(|s| s.ln()).sum::<f64>() / speedups.len() as f64).exp();
        let fast1 = speedups.iter().filter(|s| **s > 1.0).count();
        out.push(format!(
            "vs {name:<12} {} of {} kernel(s) compared; geomean speedup {geomean:.3}x; fast_1 {fast1}/{} ({:.1}%)",
            speedups.len(),
            records.len(),
            records.len(),
            100.0 * fast1 as f64 / records.len().max(1) as f64
        ));
    }
    out
}

fn store_root(given: Option<&PathBuf>, cache: &Path) -> PathBuf {
    given
        .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
        .unwrap_or_else(|| default_store(cache))
}

/// `kbench baselines measure`.
pub fn measure_command(m: &crate::cli::MeasureArgs, stop: Arc<AtomicBool>) -> Result<i32> {
    let modes = Mode::parse_list(&m.modes).map_err(|e| anyhow::anyhow!("--modes: {e}"))?;
    // `out` is set per measuring run below.
    let config = crate::commands::run_config::build(
        &m.suite,
        &m.python,
        &m.eval,
        AgentConfig::Reference,
        Path::new("."),
        m.shard,
    )?;
    let info = crate::worker::python::probe(&config.python)?;
    let env = environment(&config, &info)?;
    let root = store_root(m.store.as_ref(), &config.cache);
    let mut work = match &m.work {
        Some(w) => std::path::absolute(w).unwrap_or_else(|_| w.clone()),
        None => config
            .cache
            .join("baseline-runs")
            .join(&env.gpu_slug)
            .join(format!("torch-{}", env.torch)),
    };
    if let Some(shard) = m.shard {
        // Shards of one measurement keep their logs apart; the store is shared (locked).
        work = work.join(format!("shard-{}-of-{}", shard.index, shard.count));
    }
    let mut files = StoreFiles::open(Store::new(&root), env.clone(), &modes)?;
    let before = files.missing(&config.problems, &modes, m.retry_failed);
    let todo: usize = before.values().map(Vec::len).sum();
    if !config.quiet {
        eprintln!(
            "kbench: baselines {} for {} problem(s) on {} with torch {}: {todo} to measure, the rest stored in {}",
            modes.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(","),
            config.problems.len(),
            env.gpu,
            env.torch,
            files.store.dir(&env.gpu, &env.torch).display()
        );
    }
    let r = measure(&config, &mut files, &modes, &work, m.retry_failed, stop)?;
    if r.recovered > 0 {
        println!(
            "recovered {} entr(ies) recorded by an earlier, interrupted measurement",
            r.recovered
        );
    }
    if r.retried_alone > 0 {
        println!(
            "{} mode(s) had run out of GPU memory beside loads sent ahead and were measured again with the GPU to themselves",
            r.retried_alone
        );
    }
    for &mode in &modes {
        let f = &files.files[&mode];
        let (mut ok, mut failed) = (0, Vec::new());
        for p in &config.problems {
            let pr = p.to_ref();
            match f.lookup(pr.level, &pr.file, &pr.sha256) {
                Lookup::Usable(_) => ok += 1,
                Lookup::Failed(e) => failed.push(format!("{} ({})", pr.key(), e.outcome)),
                _ => {}
            }
        }
        println!(
            "{:<12} {ok}/{} timed, {} failed: {}",
            mode.as_str(),
            config.problems.len(),
            failed.len(),
            files.path(mode).display()
        );
        for f in failed.iter().take(20) {
            println!("    failed: {f}");
        }
        if failed.len() > 20 {
            println!(
                "    ... and {} more (see the file's \"errors\")",
                failed.len() - 20
            );
        }
    }
    if r.interrupted {
        eprintln!(
            "kbench: interrupted; what was measured is kept: rerun the same command to continue"
        );
        return Ok(crate::exit::INTERRUPTED);
    }
    if !r.still_missing.is_empty() {
        eprintln!(
            "kbench: {} problem(s) still lack a time or a recorded failure (e.g. {}); rerun to continue",
            r.still_missing.len(),
            r.still_missing.keys().next().map_or("", String::as_str)
        );
        return Ok(crate::exit::KERNELS_FAILED);
    }
    Ok(crate::exit::OK)
}

/// `kbench baselines import`.
pub fn import_command(a: &crate::cli::ImportArgs) -> Result<i32> {
    let cache = crate::worker::python::cache_dir();
    let store = Store::new(store_root(a.store.as_ref(), &cache));
    let mut stale = Vec::new();
    for s in &a.stale {
        let (l, i) = s
            .split_once('/')
            .and_then(|(l, i)| Some((l.parse::<u8>().ok()?, i.parse::<u32>().ok()?)))
            .with_context(|| format!("--stale {s:?}: expected LEVEL/ID, e.g. 1/12"))?;
        stale.push((l, i));
    }
    let opts = kbench_baselines::ImportOptions {
        mode: a
            .mode
            .as_deref()
            .map(Mode::parse)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--mode: {e}"))?,
        torch: a.torch.clone(),
        gpu: a.gpu.clone(),
        caveats: a.caveat.clone(),
        stale,
    };
    for path in &a.files {
        let f = kbench_baselines::import_kernelbench(path, &opts).map_err(anyhow::Error::msg)?;
        let mode = f.mode().context("imported file has a mode")?;
        let env = &f.meta.environment;
        let dest = store.path(&env.gpu, &env.torch, mode);
        if dest.exists() && !a.force {
            bail!(
                "{} already exists; pass --force to replace it with {}",
                dest.display(),
                path.display()
            );
        }
        f.save(&dest)?;
        let stale_n = f.stale_count();
        println!(
            "imported {} {} time(s) ({} marked stale) of {} (torch {}) from {} into {}",
            f.len(),
            mode,
            stale_n,
            env.gpu,
            env.torch,
            path.display(),
            dest.display()
        );
        for c in &f.meta.caveats {
            println!("    caveat: {c}");
        }
    }
    Ok(crate::exit::OK)
}

/// `kbench baselines show`.
pub fn show_command(a: &crate::cli::ShowArgs) -> Result<i32> {
    let cache = crate::worker::python::cache_dir();
    let root = store_root(a.store.as_ref(), &cache);
    let mut rows = Vec::new();
    let mut paths: Vec<PathBuf> = Vec::new();
    for gpu in sorted_dirs(&root)? {
        for torch in sorted_dirs(&gpu)? {
            let mut files = read_dir_sorted(&torch, "baseline store folder")?;
            files.retain(|p| p.extension().is_some_and(|e| e == "json"));
            paths.extend(files);
        }
    }
    for path in paths {
        let f = BaselineFile::load(&path)?;
        let stale = f.stale_count();
        let per_level: Vec<String> = f
            .levels
            .iter()
            .map(|(l, m)| format!("L{l}:{}", m.len()))
            .collect();
        rows.push(serde_json::json!({
            "path": path.display().to_string(),
            "gpu": f.meta.environment.gpu,
            "torch": f.meta.environment.torch,
            "mode": f.meta.mode,
            "origin": f.meta.origin,
            "timed": f.len(),
            "per_level": per_level.join(" "),
            "failed": f.error_count(),
            "stale": stale,
            "caveats": f.meta.caveats,
        }));
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(crate::exit::OK);
    }
    if rows.is_empty() {
        println!("no baseline files in {}", root.display());
        return Ok(crate::exit::OK);
    }
    println!("store: {}", root.display());
    println!(
        "{:<28} {:<16} {:<27} {:<9} {:>6} {:>6} {:>6}  per level",
        "gpu", "torch", "mode", "origin", "timed", "failed", "stale"
    );
    for r in &rows {
        let s = |k: &str| r[k].as_str().unwrap_or("").to_string();
        println!(
            "{:<28} {:<16} {:<27} {:<9} {:>6} {:>6} {:>6}  {}",
            s("gpu"),
            s("torch"),
            s("mode"),
            s("origin"),
            r["timed"].to_string(),
            r["failed"].to_string(),
            r["stale"].to_string(),
            s("per_level")
        );
    }
    Ok(crate::exit::OK)
}

fn sorted_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut v = read_dir_sorted(dir, "baseline store folder")?;
    v.retain(|p| p.is_dir());
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse() {
        let r = BaselineRequest::parse("eager,compile,max-autotune").unwrap();
        assert_eq!(r.modes, vec![Mode::Eager, Mode::Compile, Mode::MaxAutotune]);
        assert!(!r.live);
        let r = BaselineRequest::parse("live").unwrap();
        assert_eq!(
            (r.modes.as_slice(), r.live),
            (&[Mode::Eager, Mode::Compile][..], true)
        );
        let r = BaselineRequest::parse("live,max-autotune").unwrap();
        assert_eq!(
            (r.modes.as_slice(), r.live),
            (&[Mode::MaxAutotune][..], true)
        );
        assert!(BaselineRequest::parse("turbo").is_err());
        assert!(BaselineRequest::parse("").is_err());
    }

    #[test]
    fn stamps_are_utc_civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_779), (2026, 11, 22));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn out_of_memory_is_told_apart_from_a_modes_own_failure() {
        // The three ways the messages reach the store: torch's allocator in the candidate,
        // its older wording, and the harness allocating the reference's case.
        assert!(out_of_memory(
            "runtime_error (run): torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB"
        ));
        assert!(out_of_memory(
            "RuntimeError: CUDA out of memory. Tried to allocate 2 GiB"
        ));
        assert!(out_of_memory(
            "reference_error: keeping case random#1 of 25_Swish.py on GPU 0: DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")"
        ));
        assert!(!out_of_memory(
            "mismatch (random#0, elementwise): 6059/1048576 elements, max abs 1.088e-1"
        ));
        assert!(!out_of_memory(
            "compile_error (load): first call (compilation) failed"
        ));
        assert!(out_of_memory(
            "…8.00 MiB memory in use. Process 488 has 6.60 GiB memory in use. Process 521 has"
        ));
        let long = Outcome::RuntimeError {
            message: format!(
                "torch.OutOfMemoryError: CUDA out of memory. {}",
                "x".repeat(5000)
            ),
            phase: kbench_record::Phase::Run,
        };
        let kept = failure_message(&long);
        assert!(
            kept.chars().count() < 2100 && out_of_memory(&kept),
            "{kept}"
        );
    }
}
