//! The interpreter probe ([`super::python::probe`]) remembered on disk between runs.
//!
//! The probe imports torch and starts CUDA: 5 s on the H100 host before a run can start its
//! first worker, paid again by every `kbench run` (the side-by-side benchmark's every-check
//! step spent a third of its first problem's 16 s there). Its answer only changes when the
//! interpreter, its packages, the environment that steers imports or the machine change,
//! so it is kept with a fingerprint of exactly those, and re-probed whenever the fingerprint
//! differs:
//!
//! - the interpreter's resolved path, size and modification time;
//! - the modification time of every folder the probe saw on `sys.path` and its prefixes
//!   (installing or removing a package adds or removes entries there);
//! - the variables that change what Python imports or what CUDA shows (`PYTHONPATH`,
//!   `CUDA_VISIBLE_DEVICES`, `PATH` for ninja, ...);
//! - the host name and the kernel's boot id (a new driver or GPU means a reboot).
//!
//! `KBENCH_PROBE_CACHE=0` turns it off. A file that cannot be read or parsed is probed
//! again and rewritten; a cache folder that cannot be written only costs the probe.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use anyhow::Result;
use kbench_suites::sha256_hex;
use serde::{Deserialize, Serialize};

use super::python::{probe, PythonChoice, PythonInfo};

/// Variables that change what the interpreter imports or which GPUs CUDA shows.
const ENV_KEYS: &[&str] = &[
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONUSERBASE",
    "PYTHONNOUSERSITE",
    "PYTHONSAFEPATH",
    "VIRTUAL_ENV",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "LD_LIBRARY_PATH",
    "PATH",
];

#[derive(Serialize, Deserialize)]
struct Entry {
    fingerprint: String,
    info: PythonInfo,
}

/// [`probe`], answered from `<cache>/python-probe/` when nothing it depends on changed.
pub(crate) fn probe_persisted(choice: &PythonChoice, cache: &Path) -> Result<PythonInfo> {
    if std::env::var("KBENCH_PROBE_CACHE").is_ok_and(|v| v == "0") {
        return probe(choice);
    }
    let file = entry_path(cache, &choice.python);
    if let Some(info) = read_valid(&file, &choice.python) {
        return Ok(info);
    }
    let info = probe(choice)?;
    let entry = Entry {
        fingerprint: fingerprint(&choice.python, &info.paths),
        info: info.clone(),
    };
    // Best effort: a cache that cannot be written costs the next run the probe, no more.
    let _ = write_atomically(&file, &entry);
    Ok(info)
}

fn entry_path(cache: &Path, python: &Path) -> PathBuf {
    let key = sha256_hex(python.as_os_str().as_encoded_bytes());
    cache
        .join("python-probe")
        .join(format!("{}.json", &key[..16]))
}

fn read_valid(file: &Path, python: &Path) -> Option<PythonInfo> {
    let entry: Entry = serde_json::from_slice(&std::fs::read(file).ok()?).ok()?;
    (entry.fingerprint == fingerprint(python, &entry.info.paths)).then_some(entry.info)
}

/// What the probe's answer depends on, hashed (see the module comment).
fn fingerprint(python: &Path, paths: &[String]) -> String {
    let mut all = Vec::new();
    let mut put = |label: &str, value: &str| {
        for part in [label, value] {
            all.extend_from_slice(part.as_bytes());
            all.push(0);
        }
    };
    let resolved = std::fs::canonicalize(python).unwrap_or_else(|_| python.to_path_buf());
    put("python", &python.display().to_string());
    put("resolved", &resolved.display().to_string());
    put("python-meta", &meta(&resolved));
    for p in paths {
        put("path", &format!("{p}={}", meta(Path::new(p))));
    }
    for key in ENV_KEYS {
        put(key, &std::env::var(key).unwrap_or_default());
    }
    put(
        "host",
        &std::fs::read_to_string("/etc/hostname").unwrap_or_default(),
    );
    put(
        "boot",
        &std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default(),
    );
    sha256_hex(&all)
}

/// `size:mtime_ns` of a file or folder, or `-` when it cannot be read.
fn meta(p: &Path) -> String {
    std::fs::metadata(p)
        .ok()
        .and_then(|m| {
            let t = m.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
            Some(format!("{}:{}", m.len(), t.as_nanos()))
        })
        .unwrap_or_else(|| "-".into())
}

fn write_atomically(file: &Path, entry: &Entry) -> Result<()> {
    let dir = file.parent().expect("an entry path has a folder");
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    serde_json::to_writer(&mut tmp, entry)?;
    tmp.persist(file)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::python::PythonSource;

    /// A stand-in interpreter: a script that answers the probe and counts its runs.
    fn fake_python(dir: &Path, site: &Path) -> PathBuf {
        let py = dir.join("python3");
        let count = dir.join("runs");
        let line = format!(
            r#"{{"executable": "{py}", "python": "3.12.0", "torch": "2.11.0", "torch_cuda": null, "cuda_available": false, "device_count": 0, "ninja": null, "paths": ["{site}"]}}"#,
            py = py.display(),
            site = site.display()
        );
        std::fs::write(
            &py,
            format!(
                "#!/bin/sh\necho run >> '{}'\necho '{line}'\n",
                count.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
        py
    }

    /// A temporary folder with a site-packages folder, a cache and the stand-in interpreter.
    fn setting() -> (tempfile::TempDir, PathBuf, PathBuf, PythonChoice) {
        let tmp = tempfile::tempdir().unwrap();
        let site = tmp.path().join("site-packages");
        std::fs::create_dir(&site).unwrap();
        let choice = PythonChoice {
            python: fake_python(tmp.path(), &site),
            source: PythonSource::Flag,
        };
        let cache = tmp.path().join("cache");
        (tmp, site, cache, choice)
    }

    fn runs(dir: &Path) -> usize {
        std::fs::read_to_string(dir.join("runs"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    #[test]
    fn a_second_run_reuses_the_probe_until_a_package_folder_changes() {
        let (tmp, site, cache, choice) = setting();
        let first = probe_persisted(&choice, &cache).unwrap();
        assert_eq!(first.torch, "2.11.0");
        assert_eq!(runs(tmp.path()), 1);
        let again = probe_persisted(&choice, &cache).unwrap();
        assert_eq!(again.torch, first.torch);
        assert_eq!(runs(tmp.path()), 1, "answered from the cache");

        // A package installed: its folder appears in site-packages, whose mtime moves.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::create_dir(site.join("newpkg")).unwrap();
        probe_persisted(&choice, &cache).unwrap();
        assert_eq!(runs(tmp.path()), 2, "probed again after the change");
        probe_persisted(&choice, &cache).unwrap();
        assert_eq!(runs(tmp.path()), 2);

        // A damaged entry is probed again and rewritten.
        let file = entry_path(&cache, &choice.python);
        std::fs::write(&file, b"{not json").unwrap();
        probe_persisted(&choice, &cache).unwrap();
        assert_eq!(runs(tmp.path()), 3);
        probe_persisted(&choice, &cache).unwrap();
        assert_eq!(runs(tmp.path()), 3);
    }

    #[test]
    fn a_forged_entry_for_other_packages_is_not_believed() {
        let (tmp, site, cache, choice) = setting();
        let mut info = probe_persisted(&choice, &cache).unwrap();
        // Same fingerprint text cannot be produced for a different set of paths.
        info.paths = vec![tmp.path().display().to_string()];
        info.torch = "9.9.9".into();
        let forged = Entry {
            fingerprint: fingerprint(&choice.python, &[site.display().to_string()]),
            info,
        };
        write_atomically(&entry_path(&cache, &choice.python), &forged).unwrap();
        let got = probe_persisted(&choice, &cache).unwrap();
        assert_eq!(got.torch, "2.11.0");
        assert_eq!(runs(tmp.path()), 2);
    }
}
