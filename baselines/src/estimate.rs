//! Stored eager times as a rough cost of evaluating a problem. Only the order in which
//! several GPUs take problems depends on it (longest first), never a result, so an entry
//! from another GPU or torch version, or a stale one, still serves.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::store::BaselineFile;

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

/// Eager medians (ms) by level and problem file, from every `<gpu>/torch-*/eager.json`
/// under a store's root: where several GPUs have one, the slowest.
#[derive(Debug, Default, Clone)]
pub struct EagerTimes(HashMap<(u8, String), f64>);

impl EagerTimes {
    /// Reads what the store has; unreadable folders and files are skipped (an estimate).
    pub fn load(root: &Path) -> Self {
        let mut times = HashMap::new();
        let dirs = |p: &Path| {
            std::fs::read_dir(p)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect::<Vec<_>>()
        };
        for gpu in dirs(root) {
            for torch in dirs(&gpu) {
                let Ok(file) = BaselineFile::load(&torch.join("eager.json")) else {
                    continue;
                };
                for (level, entries) in file.levels {
                    for (name, e) in entries {
                        let ms = e.center_ms();
                        if ms.is_finite() && ms > 0.0 {
                            let slot = times.entry((level, name)).or_insert(ms);
                            *slot = f64::max(*slot, ms);
                        }
                    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BaselineEnv, Entry, Mode, Origin, Store};

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
}
