//! Stored times as rough costs: eager times for evaluating a problem (the order in which
//! several GPUs take problems, longest first) and compile times for measuring a baseline
//! mode (the order `baselines measure` takes problems in, cheapest first). Only orders
//! depend on them, never a result, so an entry from another GPU or torch version, or a
//! stale one, still serves.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::store::BaselineFile;
use crate::Mode;

/// The store kbench reads when none is named: the checkout's `baselines/data` when run from
/// the repository, else `<cache>/baselines`.
pub fn default_root(cache: &Path) -> PathBuf {
    let here = PathBuf::from("baselines/data");
    if here.is_dir() {
        std::path::absolute(&here).unwrap_or(here)
    } else {
        cache.join("baselines")
    }
}

/// Every readable `<gpu>/torch-*/<mode>.json` under a store's root; unreadable folders and
/// files are skipped (the callers estimate).
fn mode_files(root: &Path, mode: Mode) -> Vec<BaselineFile> {
    let dirs = |p: &Path| {
        std::fs::read_dir(p)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect::<Vec<_>>()
    };
    let file = format!("{}.json", mode.as_str());
    dirs(root)
        .iter()
        .flat_map(|gpu| dirs(gpu))
        .filter_map(|torch| BaselineFile::load(&torch.join(&file)).ok())
        .collect()
}

/// Keeps the larger of two estimates.
fn keep_max<K: std::hash::Hash + Eq>(map: &mut HashMap<K, f64>, key: K, v: f64) {
    if v.is_finite() && v > 0.0 {
        let slot = map.entry(key).or_insert(v);
        *slot = f64::max(*slot, v);
    }
}

/// Eager medians (ms) by level and problem file, from every `<gpu>/torch-*/eager.json`
/// under a store's root: where several GPUs have one, the slowest.
#[derive(Debug, Default, Clone)]
pub struct EagerTimes(HashMap<(u8, String), f64>);

impl EagerTimes {
    /// Reads what the store has; unreadable folders and files are skipped (an estimate).
    pub fn load(root: &Path) -> Self {
        let mut times = HashMap::new();
        for file in mode_files(root, Mode::Eager) {
            for (level, entries) in file.levels {
                for (name, e) in entries {
                    keep_max(&mut times, (level, name), e.center_ms());
                }
            }
        }
        EagerTimes(times)
    }

    pub fn get(&self, level: u8, file: &str) -> Option<f64> {
        self.0.get(&(level, file.to_string())).copied()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Compile seconds (load and first call) by mode, level and problem file, from every
/// `<gpu>/torch-*/<mode>.json` under a store's root, timed entries and recorded failures
/// alike (a compile that timed out before costs at least its limit): where several GPUs or
/// torch versions have one, the longest.
#[derive(Debug, Default, Clone)]
pub struct CompileTimes {
    times: HashMap<(Mode, u8, String), f64>,
    /// Per mode, the median of its compile time over the default mode's, over the problems
    /// that have both (the upper one of an even count).
    ratio_to_compile: HashMap<Mode, f64>,
}

impl CompileTimes {
    pub fn load(root: &Path) -> Self {
        let mut times = HashMap::new();
        for mode in Mode::ALL.into_iter().filter(|m| *m != Mode::Eager) {
            for file in mode_files(root, mode) {
                let timed = file.levels.into_iter().flat_map(|(level, entries)| {
                    entries
                        .into_iter()
                        .map(move |(name, e)| (level, name, e.compile_s))
                });
                let failed = file.errors.into_iter().flat_map(|(level, entries)| {
                    entries
                        .into_iter()
                        .map(move |(name, e)| (level, name, e.compile_s))
                });
                for (level, name, s) in timed.chain(failed) {
                    if let Some(s) = s {
                        keep_max(&mut times, (mode, level, name), s);
                    }
                }
            }
        }
        let mut ratios: HashMap<Mode, Vec<f64>> = HashMap::new();
        for ((mode, level, file), s) in &times {
            if let Some(c) = times.get(&(Mode::Compile, *level, file.clone())) {
                ratios.entry(*mode).or_default().push(s / c);
            }
        }
        let ratio_to_compile = ratios
            .into_iter()
            .map(|(mode, mut v)| {
                v.sort_by(f64::total_cmp);
                (mode, v[v.len() / 2])
            })
            .collect();
        CompileTimes {
            times,
            ratio_to_compile,
        }
    }

    pub fn get(&self, mode: Mode, level: u8, file: &str) -> Option<f64> {
        self.times.get(&(mode, level, file.to_string())).copied()
    }

    /// Expected compile seconds of `mode` for a problem: its own stored time, else the
    /// default mode's scaled by the median ratio of the two over the problems that have both
    /// (an autotuning mode's compile is mostly its autotuning, minutes on level 3 where the
    /// default mode takes seconds), else `None`.
    pub fn estimate(&self, mode: Mode, level: u8, file: &str) -> Option<f64> {
        if let Some(s) = self.get(mode, level, file) {
            return Some(s);
        }
        if mode == Mode::Compile || mode == Mode::Eager {
            return None;
        }
        let compile = self.get(Mode::Compile, level, file)?;
        let ratio = self.ratio_to_compile.get(&mode).copied().unwrap_or(1.0);
        Some(compile * ratio)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BaselineEnv, Entry, ErrorEntry, Mode, Origin, Store};

    fn file_with(entries: &[(u8, &str, f64)]) -> BaselineFile {
        let mut f = BaselineFile::new(Mode::Eager, Origin::Measured, BaselineEnv::default());
        for &(level, name, ms) in entries {
            f.put(level, name, Entry::from_samples(vec![ms], "G", "cuda:0"));
        }
        f
    }

    #[test]
    fn slowest_gpu_wins_and_unreadable_files_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let a = store.path("GPU A", "2.11.0", Mode::Eager);
        let b = store.path("GPU B", "2.11.0", Mode::Eager);
        let broken = store.path("GPU C", "2.11.0", Mode::Eager);
        for p in [&a, &b, &broken] {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        }
        file_with(&[(1, "1_A.py", 2.0), (3, "4_B.py", 40.0)])
            .save(&a)
            .unwrap();
        file_with(&[(1, "1_A.py", 3.0)]).save(&b).unwrap();
        std::fs::write(&broken, "{not json").unwrap();
        let t = EagerTimes::load(dir.path());
        assert_eq!(t.len(), 2);
        assert_eq!(t.get(1, "1_A.py"), Some(3.0));
        assert_eq!(t.get(3, "4_B.py"), Some(40.0));
        assert_eq!(t.get(2, "1_A.py"), None);
        assert!(EagerTimes::load(&dir.path().join("none")).is_empty());
    }

    #[test]
    fn the_committed_store_has_level_three() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
        let t = EagerTimes::load(&root);
        assert!(t.len() >= 200, "{} eager times", t.len());
        let gru = t.get(3, "40_GRUHidden.py").expect("L3/40 stored");
        let relu = t.get(1, "19_ReLU.py").expect("L1/19 stored");
        assert!(gru > 10.0 * relu, "GRU {gru} ms, ReLU {relu} ms");
    }

    #[test]
    fn compile_times_come_from_timed_and_failed_entries_and_fill_in_from_the_default_mode() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let save = |gpu: &str, mode: Mode, timed: &[(&str, f64)], failed: &[(&str, f64)]| {
            let mut f = BaselineFile::new(mode, Origin::Measured, BaselineEnv::default());
            for &(name, s) in timed {
                let mut e = Entry::from_samples(vec![1.0], "G", "cuda:0");
                e.compile_s = Some(s);
                f.put(3, name, e);
            }
            for &(name, s) in failed {
                let e = ErrorEntry {
                    outcome: "timeout".into(),
                    message: format!("compile ran past {s} s"),
                    compile_s: Some(s),
                    problem_sha256: None,
                    measured_unix_s: None,
                    run_id: None,
                    profile: None,
                    gpu_alone: true,
                    gpu_uuid: None,
                };
                f.errors.entry(3).or_default().insert(name.into(), e);
            }
            let path = store.path(gpu, "2.11.0", mode);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            f.save(&path).unwrap();
        };
        save(
            "A",
            Mode::Compile,
            &[("a.py", 20.0), ("b.py", 30.0), ("c.py", 10.0)],
            &[],
        );
        save(
            "A",
            Mode::MaxAutotune,
            &[("a.py", 200.0)],
            &[("d.py", 450.0)],
        );
        save(
            "B",
            Mode::MaxAutotune,
            &[("a.py", 150.0), ("c.py", 40.0)],
            &[],
        );
        let t = CompileTimes::load(dir.path());
        // The longest of two GPUs; a recorded timeout counts its limit.
        assert_eq!(t.get(Mode::MaxAutotune, 3, "a.py"), Some(200.0));
        assert_eq!(t.estimate(Mode::MaxAutotune, 3, "d.py"), Some(450.0));
        // b.py has only the default mode: 30 s times the median of 200/20 and 40/10.
        let b = t.estimate(Mode::MaxAutotune, 3, "b.py").unwrap();
        assert!((b - 300.0).abs() < 1e-9, "{b}");
        assert_eq!(t.estimate(Mode::Compile, 3, "b.py"), Some(30.0));
        assert_eq!(t.estimate(Mode::MaxAutotune, 3, "e.py"), None);
        assert_eq!(t.estimate(Mode::Compile, 1, "a.py"), None);
    }
}
