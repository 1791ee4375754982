//! A precompiled `torch/extension.h` that candidates' C++ compilers find first: the folder,
//! what it is keyed by, and the trusted helper that makes it (`kbench_worker/pch.py` says how
//! GCC uses it and why it changes only a build's time).
//!
//! The folder lies in kbench's cache (`<cache>/pch/<key>`), which sandboxes hide; it is shown
//! to candidates and build jobs read-only and named on their `CPATH`, so a candidate can use
//! the headers but never write one that another candidate's build would read. Its key covers
//! the interpreter (its real path and version), its torch (version and the header's
//! modification time, so headers made for another torch are never in sight), the compiler
//! asked for (`CXX`) and the extension kind; GCC itself checks compiler version and flags,
//! and ignores a header not valid for a compilation. `kbench setup` makes the headers; a run
//! that builds extensions and finds them missing makes them in the background, its builds
//! using them once they are there.
//! `KBENCH_PCH=off` turns all of it off (no folder shown, none made).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use kbench_suites::sha256_hex;

use super::python::PythonInfo;

use super::light_headers::light_folder_name;
pub(crate) use super::light_headers::PCH_ENV;

/// What torch's extension builder compiles a C++ file for: a CUDA extension's (its include
/// folders name the CUDA toolkit's) or a C++ one's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Cpu,
    Cuda,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Cpu => "cpu",
            Kind::Cuda => "cuda",
        }
    }
}

/// The precompiled headers of one interpreter, torch and compiler, and the helper making
/// them in the background, if one runs (stopped, its compilers with it, when the last
/// holder drops this).
#[derive(Debug)]
pub(crate) struct Pch {
    dir: PathBuf,
    kind: Kind,
    python: PathBuf,
    worker_root: PathBuf,
    /// The helper, registered with the host's builds (paused with them while a
    /// candidate's claims are timed again).
    helper: Mutex<Option<(Child, super::host_builds::Registered)>>,
}

impl Pch {
    /// The headers for `info`'s torch in `cache`, or `None` when `KBENCH_PCH=off` or torch's
    /// `torch/extension.h` cannot be found among the interpreter's import folders.
    pub(crate) fn of(
        cache: &Path,
        info: &PythonInfo,
        python: &Path,
        worker_root: &Path,
        kind: Kind,
    ) -> Option<Arc<Pch>> {
        if std::env::var(PCH_ENV).is_ok_and(|v| v == "off") {
            return None;
        }
        let header = info
            .paths
            .iter()
            .map(|p| Path::new(p).join("torch/include/torch/extension.h"))
            .find(|h| h.is_file())?;
        let mtime = std::fs::metadata(&header)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        // The interpreter as the file it is: `venv/bin/python` and `venv/bin/python3` (a
        // `KBENCH_PYTHON=python3` found on PATH) are one interpreter with one torch.
        let executable = std::fs::canonicalize(&info.executable)
            .map_or_else(|_| info.executable.clone(), |p| p.display().to_string());
        let key = format!(
            "{executable}\0{}\0{}\0{}\0{mtime}\0{}\0{}",
            info.python,
            info.torch,
            header.display(),
            std::env::var("CXX").unwrap_or_default(),
            kind.as_str()
        );
        let dir = cache.join("pch").join(&sha256_hex(key.as_bytes())[..16]);
        Some(Arc::new(Pch {
            dir,
            kind,
            python: python.to_path_buf(),
            worker_root: worker_root.to_path_buf(),
            helper: Mutex::new(None),
        }))
    }

    /// The folder compilers are pointed at (`CPATH`).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Makes the folder (empty until the headers are made), so that a sandbox can show it
    /// from the start and builds see the headers as soon as they are renamed into place:
    /// once per run, where the run sets its workers' sandbox up (`exec::engine`).
    pub(crate) fn make_dir(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)
    }

    /// The helper's `signature.json`, where it has written one.
    fn signature(&self) -> Option<serde_json::Value> {
        let text = std::fs::read_to_string(self.dir.join("signature.json")).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Why no header can be made here, where the helper said so (`none` in its signature).
    pub(crate) fn none_made(&self) -> Option<String> {
        self.signature()?["none"].as_str().map(str::to_string)
    }

    /// Whether the helper has nothing left to make: every header its `signature.json` lists
    /// (`variants`) is there, each renamed into place only once complete, or it said that
    /// none can be made here (`none`).
    pub(crate) fn complete(&self) -> bool {
        self.complete_for(super::light_headers::light_headers().is_ok_and(|h| h.cxx))
    }

    /// [`Self::complete`], with the light C++ header's folder (`light_cxx`) or without.
    fn complete_for(&self, light_cxx: bool) -> bool {
        let Some(sig) = self.signature() else {
            return false;
        };
        if sig.get("none").is_some() {
            // Nothing can be made here (not GCC, no CUDA toolkit): said once.
            return true;
        }
        // The header beside them, which a second `#include <torch/extension.h>` opens
        // (`pch.py`, FORWARDER), and every variant.
        let all_made = |folder: &Path| {
            let gch = folder.join("torch/extension.h.gch");
            folder.join("torch/extension.h").is_file()
                && sig["variants"].as_array().is_some_and(|v| {
                    !v.is_empty()
                        && v.iter().all(|n| {
                            n.as_str()
                                .is_some_and(|n| gch.join(format!("{n}.gch")).is_file())
                        })
                })
        };
        // With the light C++ header chosen, its folder too (`kbench_worker/cxx_header.py`):
        // a helper that ran without the choice did not make it.
        all_made(&self.dir) && (!light_cxx || all_made(&self.dir.join(light_folder_name())))
    }

    /// The helper's command: kbench's own code, outside any sandbox, at the builds' niceness.
    fn command(&self, jobs: usize) -> Command {
        let mut c = Command::new(&self.python);
        c.args(super::python::worker_args(&self.worker_root))
            .arg("pch")
            .arg(&self.dir)
            .arg(self.kind.as_str())
            .env("KBENCH_PCH_JOBS", jobs.to_string())
            .env("KBENCH_NICE", super::BUILD_NICENESS.to_string())
            .stdin(Stdio::null())
            // Its own process group: stopping it stops the compilers it started.
            .process_group(0);
        c
    }

    /// Makes the missing headers now, `jobs` compilers at once (`kbench setup`); returns
    /// the helper's output when it fails.
    pub(crate) fn make_now(&self, jobs: usize) -> Result<(), String> {
        self.make_dir()
            .map_err(|e| format!("creating {}: {e}", self.dir.display()))?;
        let out = self
            .command(jobs)
            // After a run's helper that makes them now, not instead of it.
            .env("KBENCH_PCH_WAIT", "1")
            .output()
            .map_err(|e| format!("{}: {e}", self.python.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Starts the helper in the background unless the headers are there or it runs
    /// already; its output goes to `log`. A failure to start costs only the time saved.
    pub(crate) fn start(&self, log: &Path) {
        let mut helper = self.helper.lock().unwrap_or_else(|e| e.into_inner());
        if helper.is_some() || self.complete() {
            return;
        }
        let Ok(out) = std::fs::File::create(log) else {
            return;
        };
        let Ok(err) = out.try_clone() else { return };
        let mut c = self.command(1);
        c.stdout(out).stderr(err);
        *helper = c.spawn().ok().map(|child| {
            let handle = super::freeze::FreezeHandle::Tree(child.id() as i32);
            (child, super::host_builds::register(handle))
        });
    }
}

impl Drop for Pch {
    fn drop(&mut self) {
        let helper = self.helper.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some((mut child, registered)) = helper.take() {
            drop(registered);
            if let Ok(pid) = i32::try_from(child.id()) {
                // The group the helper leads: it and its compilers. A finished helper's
                // group is gone, which is fine.
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(dir: &Path, torch: &str) -> PythonInfo {
        let header = dir.join("site/torch/include/torch/extension.h");
        std::fs::create_dir_all(header.parent().unwrap()).unwrap();
        std::fs::write(&header, "#pragma once\n").unwrap();
        serde_json::from_value(serde_json::json!({
            "executable": "/env/bin/python3", "python": "3.11.7", "torch": torch,
            "torch_cuda": null, "cuda_available": false, "device_count": 0, "ninja": null,
            "paths": [dir.join("nowhere"), dir.join("site")],
        }))
        .unwrap()
    }

    fn of(cache: &Path, info: &PythonInfo, kind: Kind) -> Arc<Pch> {
        Pch::of(cache, info, Path::new("python3"), Path::new("/w"), kind).unwrap()
    }

    #[test]
    fn headers_of_another_torch_or_kind_are_kept_in_another_folder() {
        let d = tempfile::tempdir().unwrap();
        let cache = d.path().join("cache");
        let a = info(d.path(), "2.11.0+cu130");
        let here = of(&cache, &a, Kind::Cpu);
        assert!(here.dir().starts_with(cache.join("pch")));
        assert_eq!(here.dir(), of(&cache, &a, Kind::Cpu).dir());
        assert_ne!(here.dir(), of(&cache, &a, Kind::Cuda).dir());
        assert_ne!(
            here.dir(),
            of(&cache, &info(d.path(), "2.12.0"), Kind::Cpu).dir()
        );
        // The same torch reinstalled: its header written anew.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let again = info(d.path(), "2.11.0+cu130");
        assert_ne!(here.dir(), of(&cache, &again, Kind::Cpu).dir());
        // One interpreter under two names (a venv's `python` and `python3`): one folder.
        let real = d.path().join("python3.11");
        std::fs::write(&real, "").unwrap();
        std::os::unix::fs::symlink(&real, d.path().join("python3")).unwrap();
        let base = info(d.path(), "2.11.0+cu130");
        let named = |name: &str| {
            let mut i = base.clone();
            i.executable = d.path().join(name).display().to_string();
            of(&cache, &i, Kind::Cpu).dir().to_path_buf()
        };
        assert_eq!(named("python3"), named("python3.11"));
        // No torch/extension.h among the import folders: no headers to make.
        let mut none = again.clone();
        none.paths.truncate(1);
        assert!(Pch::of(&cache, &none, Path::new("p"), Path::new("/w"), Kind::Cpu).is_none());
    }

    #[test]
    fn complete_only_once_every_header_the_signature_lists_is_in_place() {
        let d = tempfile::tempdir().unwrap();
        let pch = of(
            &d.path().join("cache"),
            &info(d.path(), "2.11.0"),
            Kind::Cpu,
        );
        assert!(!pch.complete(), "nothing made yet");
        pch.make_dir().unwrap();
        let sig = pch.dir().join("signature.json");
        std::fs::write(&sig, r#"{"variants": ["plain", "O3"]}"#).unwrap();
        let gch = pch.dir().join("torch/extension.h.gch");
        std::fs::create_dir_all(&gch).unwrap();
        std::fs::write(gch.join("plain.gch"), "h").unwrap();
        // A partial file of a stopped helper lies beside the folder, never in it.
        std::fs::write(pch.dir().join("O3.123.partial"), "h").unwrap();
        assert!(!pch.complete_for(false), "O3 is missing");
        std::fs::write(gch.join("O3.gch"), "h").unwrap();
        assert!(
            !pch.complete_for(false),
            "no torch/extension.h beside the headers"
        );
        std::fs::write(pch.dir().join("torch/extension.h"), "#pragma once\n").unwrap();
        assert!(pch.complete_for(false));
        assert_eq!(pch.none_made(), None);
        // With the light C++ header chosen, its folder is waited for as well.
        let light = pch.dir().join(light_folder_name());
        std::fs::create_dir_all(light.join("torch/extension.h.gch")).unwrap();
        std::fs::write(light.join("torch/extension.h.gch/plain.gch"), "h").unwrap();
        std::fs::write(light.join("torch/extension.h.gch/O3.gch"), "h").unwrap();
        assert!(!pch.complete_for(true), "no light torch/extension.h");
        std::fs::write(light.join("torch/extension.h"), "#pragma once\n").unwrap();
        assert!(pch.complete_for(true));
        std::fs::remove_file(light.join("torch/extension.h.gch/O3.gch")).unwrap();
        assert!(!pch.complete_for(true), "the light O3 is missing");
        assert!(pch.complete_for(false));
        std::fs::write(
            &sig,
            r#"{"variants": [], "none": "the C++ compiler is not GCC (clang++)"}"#,
        )
        .unwrap();
        assert!(
            pch.complete_for(true),
            "nothing can be made: nothing to wait for"
        );
        assert_eq!(
            pch.none_made().as_deref(),
            Some("the C++ compiler is not GCC (clang++)")
        );
        std::fs::write(&sig, r#"{"variants": []}"#).unwrap();
        assert!(!pch.complete_for(false), "an empty list is no signature");
    }
}
