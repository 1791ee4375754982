//! Measuring baselines through the engine: the passes of one measurement (a compile mode's
//! record carries eager's time too; modes that ran out of GPU memory beside loads sent ahead
//! are measured again with the GPU to themselves), and resolving the baselines of
//! `kbench run --baselines` (explicit files, the store, or measured now).

use crate::judge::faults::out_of_memory;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Result};
use kbench_baselines::{
    BaselineFile, BaselineRequest, BaselineTable, Mode, Origin, Store, UsedFile,
};
use kbench_record::Device;

use super::store::{environment, settings, store_root, StoreFiles};
use crate::agents::read_dir_sorted;
use crate::config::{AgentConfig, RunConfig};

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
pub(crate) struct Measured {
    /// Entries folded from earlier, interrupted measurements.
    pub(crate) recovered: usize,
    /// Baseline candidates evaluated now.
    pub(crate) evaluated: usize,
    pub(crate) interrupted: bool,
    /// Problems not started in the last pass because `--stop-starting-after` came first.
    pub(crate) not_started: usize,
    /// Modes measured in the last pass with the GPU to themselves, after running out of GPU
    /// memory beside loads sent ahead.
    pub(crate) retried_alone: usize,
    /// Problem key → modes still without a time or a recorded failure.
    pub(crate) still_missing: BTreeMap<String, Vec<Mode>>,
}

/// Measures the `modes` of every problem of `base` that `files` lacks, through the engine,
/// in run directories under `work`; folds the results into `files` and saves them.
pub(crate) fn measure(
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
        let log = crate::runlog::RecordLog::of_run(&dir)?;
        for w in log.warnings() {
            eprintln!("kbench: warning: {w}");
        }
        out.recovered += files.commit(&log.records(), None)?;
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
            // Nothing taken ahead: the GPU holds this problem's workers only. (Until
            // 2026-11-28 this was 1, which still loaded one problem ahead beside it.)
            config.lookahead = Some(0);
        }
        config.agent = AgentConfig::Baselines {
            plan,
            store: files.store.root.clone(),
        };
        // A baseline mode's load is torch.compile's compile (PyTorch's code, not a
        // candidate's): its own, longer limit.
        config.timeouts.load = config.timeouts.compile;
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
        if result.not_started > 0 {
            // One deadline for the whole command: no later pass may begin.
            out.not_started = result.not_started;
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

/// Resolves the baselines of `kbench run`: explicit files are checked against this GPU and
/// torch (refused on a mismatch unless forced); the store's files are used where they have
/// a time and the missing ones are measured first (or, `live`, everything is measured now
/// into the run directory).
pub(crate) fn prepare_for_run(
    config: &RunConfig,
    req: &BaselineRequest,
    stop: Arc<AtomicBool>,
) -> Result<Option<BaselineTable>> {
    let info = crate::worker::probe_cache::probe_persisted(&config.python, &config.cache)?;
    let env = environment(config, &info)?;
    let mut table = BaselineTable::default();
    let mut explicit: BTreeSet<Mode> = BTreeSet::new();
    let mut forced_torches: Vec<String> = Vec::new();
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
        forced_torches.push(f.meta.environment.torch.clone());
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
            let work = super::store::default_work(&config.cache, &root, &env);
            (root, work, "measured")
        };
        if !req.live && !config.quiet {
            let others = super::store::stored_torches(&store_root, &env.gpu);
            if let Some(note) = super::store::other_torch_note(&others, &env.torch, false) {
                eprintln!("{note}");
            }
        }
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
            if m.not_started > 0 {
                bail!(
                    "--stop-starting-after came while measuring the baselines this run needs ({} problem(s) not started); rerun to continue (what was measured is kept)",
                    m.not_started
                );
            }
        }
        // The store's eager times, against which each record's own reference tells how far
        // the store's machine and moment are from the run's (`eager_drift`); a live run's
        // times are this run's.
        if !req.live {
            let anchor = match files.files.get(&Mode::Eager) {
                Some(f) => Some(f.clone()),
                None => files.store.load(&env.gpu, &env.torch, Mode::Eager)?,
            };
            table.anchor = anchor.map(|file| UsedFile {
                mode: Mode::Eager,
                path: files.path(Mode::Eager),
                origin: origin.into(),
                file,
            });
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
    if let Some(note) = super::store::other_torch_note(&forced_torches, &env.torch, true) {
        eprintln!("{note}");
    }
    table.used.sort_by_key(|u| u.mode);
    Ok(Some(table))
}

#[cfg(test)]
mod tests {
    use super::super::store::failure_message;
    use super::*;
    use kbench_record::Outcome;

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
