//! The store files a baseline measurement updates: loading them for one GPU and torch
//! version, planning what they still lack, folding eval records into them under a lock on
//! the store, and the environment (GPU, driver, torch) they are stamped with.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kbench_baselines::{
    BaselineEnv, BaselineFile, Entry, ErrorEntry, Lookup, Mode, Origin, Store, TimingSettings,
    AGENT,
};
use kbench_record::{Device, EvalRecord, Outcome, TimingStats};
use kbench_suites::Problem;

use crate::config::RunConfig;

/// The name of the device a run on `device` reports in its records (`env.device_name`):
/// the CUDA device name, or the CPU model name as the worker reads it.
pub(crate) fn device_name(device: Device) -> Result<String> {
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
pub(crate) fn environment(
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
        hostname: Some(crate::eval::record::hostname()),
        kbench: Some(env!("CARGO_PKG_VERSION").into()),
        python: Some(info.python.clone()),
    })
}

pub(super) fn settings(config: &RunConfig) -> Option<TimingSettings> {
    config.timing.as_ref().map(|t| TimingSettings {
        timed_calls: t.timed_calls,
        warmup: t.warmup,
        // Every timed call is its own round.
        rounds: t.timed_calls,
        l2_flush: t.l2_flush,
        precision: config.precision.as_str().into(),
        profile: config.profile.as_str().into(),
    })
}

/// The store files of one GPU and torch version, loaded (or new) and ready to update.
pub(crate) struct StoreFiles {
    pub(crate) store: Store,
    pub(crate) env: BaselineEnv,
    pub(crate) files: BTreeMap<Mode, BaselineFile>,
}

impl StoreFiles {
    /// Loads the files of `modes` (a missing file is a new, empty one).
    pub(crate) fn open(store: Store, env: BaselineEnv, modes: &[Mode]) -> Result<Self> {
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

    pub(crate) fn path(&self, m: Mode) -> PathBuf {
        self.store.path(&self.env.gpu, &self.env.torch, m)
    }

    /// Problem key → modes of `want` that have neither a usable time nor a recorded
    /// failure (with `retry_failed`, failures are measured again).
    pub(crate) fn missing(
        &self,
        problems: &[Problem],
        want: &[Mode],
        retry_failed: bool,
    ) -> BTreeMap<String, Vec<Mode>> {
        self.missing_or(problems, want, |_| retry_failed)
    }

    /// As [`missing`](Self::missing), measuring again the failures `retry` picks.
    pub(crate) fn missing_or(
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
    pub(crate) fn fold(&mut self, records: &[EvalRecord], timing: Option<TimingSettings>) -> usize {
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
                e.gpu_uuid = r.env.gpu_uuid.clone();
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
                    let gpu_alone = r
                        .notes
                        .iter()
                        .any(|n| n == crate::eval::start::GPU_ALONE_NOTE);
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
                        gpu_uuid: r.env.gpu_uuid.clone(),
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
                                gpu_uuid: r.env.gpu_uuid.clone(),
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
    pub(crate) fn commit(
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

    pub(crate) fn save(&self) -> Result<()> {
        for (m, f) in &self.files {
            if f.is_empty() && f.error_count() == 0 {
                continue;
            }
            f.save(&self.path(*m))?;
        }
        Ok(())
    }
}

pub(super) fn failure_message(o: &Outcome) -> String {
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

/// The default store: `baselines/data` under the working directory when it exists (the
/// repository's committed data), else `baselines` in kbench's cache.
pub(crate) fn default_store(cache: &Path) -> PathBuf {
    kbench_baselines::default_root(cache)
}

pub(super) fn store_root(given: Option<&PathBuf>, cache: &Path) -> PathBuf {
    given
        .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
        .unwrap_or_else(|| default_store(cache))
}

/// Where measurements into the store at `root` keep their run logs by default: in kbench's
/// cache, per store, GPU and torch. An interrupted measurement's records there are folded
/// into the next measurement's store, so the folder must belong to one store: a shared one
/// once put another store's times (a test's temporary store, say) into this one.
pub(super) fn default_work(
    cache: &Path,
    root: &Path,
    env: &kbench_baselines::BaselineEnv,
) -> PathBuf {
    // The absolute path as given (store_root makes it absolute), not canonicalized: a
    // store that does not exist yet would otherwise change key once it is made.
    let key = kbench_suites::sha256_hex(root.to_string_lossy().as_bytes());
    cache
        .join("baseline-runs")
        .join(&key[..16])
        .join(&env.gpu_slug)
        .join(format!("torch-{}", env.torch))
}

/// The one line that says stored baselines were measured with another torch than `torch`
/// (the one in use), or `None` when none was. `used`: the run compares against them anyway
/// (`--force-baselines`); else they are left out and this torch's times are measured.
pub(crate) fn other_torch_note(others: &[String], torch: &str, used: bool) -> Option<String> {
    let mut others: Vec<&str> = others
        .iter()
        .map(String::as_str)
        .filter(|t| *t != torch)
        .collect();
    others.sort_unstable();
    others.dedup();
    if others.is_empty() {
        return None;
    }
    let what = if used {
        "speedups against them compare two torches; measure with this one: `kbench baselines measure`, or --baselines live"
    } else {
        "they are not used here (times of this torch are measured instead)"
    };
    Some(format!(
        "kbench: stored baselines were measured with torch {}; this run uses {torch}: {what}. `kbench setup` installs the torch they were measured with (locked: {})",
        others.join(", "),
        crate::worker::setup::locked_torch()
    ))
}

/// The torch versions the store holds files for on `gpu` (`<root>/<gpu-slug>/torch-*/`).
pub(crate) fn stored_torches(root: &Path, gpu: &str) -> Vec<String> {
    let dir = root.join(kbench_baselines::gpu_slug(gpu));
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_dir(e.path()).is_ok_and(|mut f| {
                f.any(|x| x.is_ok_and(|x| x.path().extension().is_some_and(|e| e == "json")))
            })
        })
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("torch-"))
                .map(str::to_string)
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folded_entries_name_the_gpu_that_timed_them() {
        let dir = tempfile::tempdir().unwrap();
        let env = BaselineEnv {
            gpu: "NVIDIA H100 80GB HBM3".into(),
            gpu_slug: "nvidia-h100-80gb-hbm3".into(),
            torch: "2.11.0+cu130".into(),
            ..Default::default()
        };
        let mut files =
            StoreFiles::open(Store::new(dir.path()), env, &[Mode::Eager, Mode::Compile]).unwrap();
        let all = crate::test_support::one_shot_records();
        let as_baseline = |i: usize, gpu: Option<&str>| {
            let mut r = all[i].clone();
            r.candidate.agent = AGENT.into();
            r.candidate.name = "compile".into();
            r.env.gpu_uuid = gpu.map(str::to_string);
            r
        };
        // 0 and 1 were timed (ok); 2 timed out: a failure of the mode.
        let records = [
            as_baseline(0, Some("GPU-aaaaaaaa-0000-0000-0000-000000000000")),
            as_baseline(1, None),
            as_baseline(2, Some("GPU-bbbbbbbb-0000-0000-0000-000000000000")),
        ];
        assert!(files.fold(&records, None) > 0);
        let compile = &files.files[&Mode::Compile];
        let eager = &files.files[&Mode::Eager];
        let (p0, p1, p2) = (
            &records[0].problem,
            &records[1].problem,
            &records[2].problem,
        );
        let entry = |f: &BaselineFile, p: &kbench_record::ProblemRef| {
            f.levels[&p.level][&p.file].gpu_uuid.clone()
        };
        assert_eq!(
            entry(compile, p0).as_deref(),
            Some("GPU-aaaaaaaa-0000-0000-0000-000000000000")
        );
        // The eager time is the same record's reference side, on the same GPU.
        assert_eq!(entry(eager, p0), entry(compile, p0));
        // A record from before kbench named the GPU gives an entry that does not say.
        assert_eq!(entry(compile, p1), None);
        assert_eq!(
            compile.errors[&p2.level][&p2.file].gpu_uuid.as_deref(),
            Some("GPU-bbbbbbbb-0000-0000-0000-000000000000")
        );
    }

    #[test]
    fn another_torch_in_the_store_is_named_once() {
        let dir = tempfile::tempdir().unwrap();
        let gpu = "NVIDIA H100 80GB HBM3";
        for (torch, file) in [
            ("2.11.0+cu130", "eager.json"),
            ("2.11.0+cu130", "compile.json"),
            ("2.15.0", "eager.json"),
            ("2.9.0", ".lock"),
        ] {
            let d = dir
                .path()
                .join("nvidia-h100-80gb-hbm3")
                .join(format!("torch-{torch}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join(file), "{}").unwrap();
        }
        let stored = stored_torches(dir.path(), gpu);
        // A folder without a baseline file is no baseline.
        assert_eq!(stored, ["2.11.0+cu130", "2.15.0"]);
        assert_eq!(other_torch_note(&stored[..1], "2.11.0+cu130", true), None);
        let note = other_torch_note(&stored, "2.15.0", true).unwrap();
        assert!(
            note.starts_with("kbench: stored baselines were measured with torch 2.11.0+cu130; this run uses 2.15.0: speedups against them compare two torches"),
            "{note}"
        );
        assert!(note.contains("`kbench baselines measure`"), "{note}");
        let note = other_torch_note(&stored, "2.15.0", false).unwrap();
        assert!(note.contains("not used here"), "{note}");
        assert!(stored_torches(dir.path(), "NVIDIA H200").is_empty());
    }
}
