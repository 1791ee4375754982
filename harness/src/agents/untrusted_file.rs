//! Reading files on a candidate's or a published set's behalf: replay kernels, the kernel
//! `kbench check` is given, and every file an import reads. kbench reads them itself, outside
//! the sandbox, so a hostile folder could hand it a link to the run's `secret` (whose bytes
//! would then come back in a `NameError` in the record), to `/etc/shadow`, a FIFO that never
//! answers, or a file of gigabytes. Every such read goes through [`UntrustedDir`]:
//!
//! - the file must lie inside the folder the user named, after every link is followed: a
//!   link between the folder's own files is fine, one out of it is refused. Checked on the
//!   path before opening (so nothing outside is even opened) and again on the opened
//!   descriptor (`/proc/self/fd/N`), so a file swapped in between is caught too;
//! - paths kbench guards (the run's own folder, `--secret-from`) and any kbench run's
//!   `secret` are refused even inside the folder (`--out` may sit in `--replay-dir`);
//! - only regular files are read, opened non-blocking, so a FIFO never stalls kbench;
//! - at most a cap of bytes is read;
//! - what goes wrong is a [`Refusal`]: the caller makes it one entry's error or one kernel's
//!   verdict, never the run's, and it says what was refused and what to do without quoting
//!   anything read from outside.
//!
//! Hand-written on std rather than cap-std: cap-std resolves beneath a folder (openat2's
//! RESOLVE_BENEATH) but would bring rustix and cap-primitives for one call, and kbench still
//! needs the file type, size and run-secret checks and its own wording around it; the checks
//! below are the whole of it.

use std::fmt;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

/// The most a kernel file may hold. Published kernels are under 100 KiB; 8 MiB leaves room
/// for generated code and embedded PTX, while a hostile set cannot fill kbench's memory.
pub(crate) const KERNEL_CAP: u64 = 8 << 20;

/// The most a set's index may hold (`data.json`, `eval_results.json`, a JSON-lines file of
/// every kernel and reference): 256 MiB, over a hundred times the largest we know.
pub(crate) const INDEX_CAP: u64 = 256 << 20;

/// The file name of a kbench run's secret and of the settings beside it (`runlog`'s
/// `SECRET` and `MANIFEST`; a unit test checks they agree): such a file is never read on a
/// candidate's or a set's behalf, whichever run it belongs to.
const RUN_SECRET: &str = "secret";
const RUN_MANIFEST: &str = "run.json";

/// Why a file was not read. Its `Display` reads after the entry's name ("kernel file X ...")
/// and says what to do.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// The entry names a path with `..` or an absolute path (a set's own `file` field).
    LeavesFolder {
        folder: PathBuf,
    },
    /// After its links are followed, the file lies outside the folder.
    LinksOutside {
        folder: PathBuf,
        link: Option<PathBuf>,
    },
    /// A path kbench guards: the run's own folder, `--secret-from`, a run's secret.
    Guarded,
    /// A link (or a link on the way) that points to nothing.
    Dangling {
        link: Option<PathBuf>,
    },
    /// Not a regular file: a FIFO, socket, device or folder.
    NotRegular {
        kind: &'static str,
    },
    TooLarge {
        size: u64,
        cap: u64,
    },
    NotUtf8 {
        offset: usize,
    },
    Unreadable(std::io::Error),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let to = |link: &Option<PathBuf>| match link {
            Some(l) => format!(" (it points to {})", l.display()),
            None => String::new(),
        };
        match self {
            Refusal::LeavesFolder { folder } => write!(
                f,
                "names a path outside {} (`..` or an absolute path): kbench reads only files inside the folder; fix the entry",
                folder.display()
            ),
            Refusal::LinksOutside { folder, link } => write!(
                f,
                "is a link to a file outside {}{}: kbench reads only files inside the folder it was given; put the file itself there",
                folder.display(),
                to(link)
            ),
            Refusal::Guarded => f.write_str(
                "leads to kbench's own run files (a run folder, its secret or --secret-from): never read on a kernel's behalf; remove it",
            ),
            Refusal::Dangling { link } => write!(
                f,
                "is a link to nothing{}: put the file itself there or remove the link",
                to(link)
            ),
            Refusal::NotRegular { kind } => write!(
                f,
                "is a {kind}, not a regular file: kbench reads only regular files; remove it or put the file there"
            ),
            Refusal::TooLarge { size, cap } => write!(
                f,
                "holds {size} bytes, over kbench's cap of {cap} bytes for such a file: not read"
            ),
            Refusal::NotUtf8 { offset } => write!(
                f,
                "is not UTF-8 text (invalid byte at offset {offset}): save it as UTF-8"
            ),
            Refusal::Unreadable(e) => write!(f, "cannot be read ({e})"),
        }
    }
}

impl Refusal {
    /// Nothing at that path at all (not even a link): a file the set lacks, which its caller
    /// may treat as an absent entry rather than a refused one.
    pub(crate) fn is_missing(&self) -> bool {
        matches!(self, Refusal::Unreadable(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

/// A folder whose files are read on someone else's behalf. See the module's doc.
#[derive(Debug, Clone)]
pub(crate) struct UntrustedDir {
    /// The folder as the user named it, for messages.
    shown: PathBuf,
    /// Its real path: every file read must lie under it.
    root: PathBuf,
    /// Real paths never read, even inside `root`.
    guarded: Vec<PathBuf>,
}

impl UntrustedDir {
    /// The folder `dir` (which must exist), guarding `guarded` (paths that need not exist).
    pub(crate) fn new(dir: &Path, guarded: &[PathBuf]) -> std::io::Result<Self> {
        let root = std::fs::canonicalize(dir)?;
        let guarded = guarded.iter().filter_map(|p| real_or_planned(p)).collect();
        Ok(Self {
            shown: dir.to_path_buf(),
            root,
            guarded,
        })
    }

    /// The folder as the user named it.
    pub(crate) fn path(&self) -> &Path {
        &self.shown
    }

    /// Whether `rel` (a folder, say) lies inside the folder once its links are followed,
    /// and is not guarded.
    pub(crate) fn holds(&self, rel: &Path) -> bool {
        std::fs::canonicalize(self.root.join(rel))
            .is_ok_and(|real| self.check_real(&real, &None).is_ok())
    }

    /// Reads `rel` (a path inside the folder), at most `cap` bytes.
    pub(crate) fn read(&self, rel: &Path, cap: u64) -> Result<Vec<u8>, Refusal> {
        if rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(Refusal::LeavesFolder {
                folder: self.shown.clone(),
            });
        }
        let path = self.root.join(rel);
        // The entry's own link text, for messages: written by the folder's owner, so it
        // tells nothing about this machine that the folder did not already say.
        let link = std::fs::read_link(&path).ok();
        let real = match std::fs::canonicalize(&path) {
            Ok(p) => p,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(match std::fs::symlink_metadata(&path) {
                    Ok(_) => Refusal::Dangling { link },
                    Err(_) => Refusal::Unreadable(e),
                })
            }
            Err(e) => return Err(Refusal::Unreadable(e)),
        };
        self.check_real(&real, &link)?;
        // Checked before opening, so that nothing but a regular file is opened (opening a
        // device can have effects of its own).
        let meta = std::fs::metadata(&real).map_err(Refusal::Unreadable)?;
        regular(&meta.file_type())?;
        // Non-blocking: a FIFO swapped in after the check above still cannot stall the open.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags((nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_NOCTTY).bits())
            .open(&real)
            .map_err(Refusal::Unreadable)?;
        // What was opened, by its descriptor: the same checks again, against a swap.
        let meta = file.metadata().map_err(Refusal::Unreadable)?;
        regular(&meta.file_type())?;
        let opened = opened_path(&file).map_err(Refusal::Unreadable)?;
        self.check_real(&opened, &link)?;
        if meta.len() > cap {
            return Err(Refusal::TooLarge {
                size: meta.len(),
                cap,
            });
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.take(cap + 1)
            .read_to_end(&mut bytes)
            .map_err(Refusal::Unreadable)?;
        if bytes.len() as u64 > cap {
            return Err(Refusal::TooLarge {
                size: bytes.len() as u64,
                cap,
            });
        }
        Ok(bytes)
    }

    /// [`read`](Self::read), as UTF-8 text.
    pub(crate) fn read_text(&self, rel: &Path, cap: u64) -> Result<String, Refusal> {
        utf8(self.read(rel, cap)?)
    }

    /// Whether a real path may be read: inside the folder, not guarded, not a run's secret.
    fn check_real(&self, real: &Path, link: &Option<PathBuf>) -> Result<(), Refusal> {
        if !real.starts_with(&self.root) {
            return Err(Refusal::LinksOutside {
                folder: self.shown.clone(),
                link: link.clone(),
            });
        }
        if self.guarded.iter().any(|g| real.starts_with(g)) || is_run_secret(real) {
            return Err(Refusal::Guarded);
        }
        Ok(())
    }
}

/// Reads a file the user named on the command line (a JSON-lines set, `--baseline-json`):
/// its links are the user's to follow, but it must still be a regular file that is not a
/// run's secret, and at most `cap` bytes.
pub(crate) fn read_named(path: &Path, cap: u64) -> Result<Vec<u8>, Refusal> {
    let real = std::fs::canonicalize(path).map_err(|e| match std::fs::symlink_metadata(path) {
        Ok(_) if e.kind() == std::io::ErrorKind::NotFound => Refusal::Dangling {
            link: std::fs::read_link(path).ok(),
        },
        _ => Refusal::Unreadable(e),
    })?;
    let parent = real.parent().unwrap_or(Path::new("/"));
    let name = real.file_name().map(PathBuf::from).unwrap_or_default();
    UntrustedDir::new(parent, &[])
        .map_err(Refusal::Unreadable)?
        .read(&name, cap)
}

/// Why the entry at `path` is neither a regular file nor a folder once its links are followed
/// (a link to nothing or in a loop, a FIFO, a socket, a device), found without opening it, so
/// a FIFO cannot stall the caller; `None` for a file or a folder. For entries no reader asks
/// for, so that each is named rather than skipped unseen.
pub(crate) fn odd_entry(path: &Path) -> Option<Refusal> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() || m.is_dir() => None,
        Ok(m) => regular(&m.file_type()).err(),
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                && std::fs::symlink_metadata(path).is_ok() =>
        {
            Some(Refusal::Dangling {
                link: std::fs::read_link(path).ok(),
            })
        }
        Err(e) => Some(Refusal::Unreadable(e)),
    }
}

/// [`read_named`], as UTF-8 text.
pub(crate) fn read_named_text(path: &Path, cap: u64) -> Result<String, Refusal> {
    utf8(read_named(path, cap)?)
}

fn utf8(bytes: Vec<u8>) -> Result<String, Refusal> {
    String::from_utf8(bytes).map_err(|e| Refusal::NotUtf8 {
        offset: e.utf8_error().valid_up_to(),
    })
}

fn regular(t: &std::fs::FileType) -> Result<(), Refusal> {
    let kind = if t.is_file() {
        return Ok(());
    } else if t.is_dir() {
        "folder"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() || t.is_block_device() {
        "device"
    } else {
        "special file"
    };
    Err(Refusal::NotRegular { kind })
}

/// The real path of an open file, from `/proc/self/fd` (kbench runs on Linux only: its
/// sandbox is bubblewrap).
fn opened_path(file: &std::fs::File) -> std::io::Result<PathBuf> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// The real path of `p`, or for a path that does not exist yet (the folder of a new run)
/// the real path of its nearest existing folder with the rest appended.
fn real_or_planned(p: &Path) -> Option<PathBuf> {
    let p = std::path::absolute(p).ok()?;
    let mut rest = Vec::new();
    let mut at = p.as_path();
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            return Some(rest.iter().rev().fold(real, |acc, c| acc.join(c)));
        }
        rest.push(at.file_name()?.to_os_string());
        at = at.parent()?;
    }
}

/// A kbench run's secret: a file named `secret` beside a `run.json`.
fn is_run_secret(real: &Path) -> bool {
    real.file_name().is_some_and(|n| n == RUN_SECRET)
        && real.parent().is_some_and(|d| d.join(RUN_MANIFEST).exists())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn folder() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("set");
        std::fs::create_dir(&d).unwrap();
        (t, d)
    }

    fn refused(d: &UntrustedDir, rel: &str) -> String {
        d.read(Path::new(rel), KERNEL_CAP).unwrap_err().to_string()
    }

    #[test]
    fn run_file_names_agree_with_the_run_log() {
        assert_eq!(RUN_SECRET, crate::runlog::SECRET);
        assert_eq!(RUN_MANIFEST, crate::runlog::MANIFEST);
    }

    #[test]
    fn a_link_inside_the_folder_is_read() {
        let (_t, d) = folder();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/a.py"), "x = 1\n").unwrap();
        symlink("sub/a.py", d.join("b.py")).unwrap();
        let u = UntrustedDir::new(&d, &[]).unwrap();
        assert_eq!(u.read_text(Path::new("b.py"), 100).unwrap(), "x = 1\n");
        assert_eq!(u.read_text(Path::new("sub/a.py"), 100).unwrap(), "x = 1\n");
    }

    #[test]
    fn a_link_out_of_the_folder_is_refused_without_reading_it() {
        let (t, d) = folder();
        std::fs::write(t.path().join("outside"), "private\n").unwrap();
        symlink(t.path().join("outside"), d.join("abs.py")).unwrap();
        symlink("../outside", d.join("rel.py")).unwrap();
        symlink(t.path(), d.join("up")).unwrap();
        let u = UntrustedDir::new(&d, &[]).unwrap();
        for rel in ["abs.py", "rel.py", "up/outside"] {
            let e = refused(&u, rel);
            assert!(
                e.contains("link to a file outside") && !e.contains("private"),
                "{e}"
            );
        }
        assert!(refused(&u, "rel.py").contains("it points to ../outside"));
    }

    #[test]
    fn dot_dot_and_absolute_paths_are_refused() {
        let (t, d) = folder();
        std::fs::write(t.path().join("x.py"), "x").unwrap();
        let u = UntrustedDir::new(&d, &[]).unwrap();
        for rel in ["../x.py", "sub/../../x.py"] {
            assert!(refused(&u, rel).contains("outside"), "{rel}");
        }
        let abs = t.path().join("x.py");
        assert!(refused(&u, abs.to_str().unwrap()).contains("`..` or an absolute path"));
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let (_t, d) = folder();
        nix::unistd::mkfifo(&d.join("f.py"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let u = UntrustedDir::new(&d, &[]).unwrap();
        // Nobody ever writes to it: a blocking open would hang this test.
        assert!(refused(&u, "f.py").contains("is a FIFO, not a regular file"));
        std::fs::create_dir(d.join("dir.py")).unwrap();
        assert!(refused(&u, "dir.py").contains("is a folder"));
    }

    #[test]
    fn a_dangling_link_is_named_as_such() {
        let (_t, d) = folder();
        symlink("gone.py", d.join("a.py")).unwrap();
        let u = UntrustedDir::new(&d, &[]).unwrap();
        let e = refused(&u, "a.py");
        assert!(e.contains("link to nothing (it points to gone.py)"), "{e}");
        assert!(refused(&u, "never.py").contains("cannot be read"));
    }

    #[test]
    fn an_oversized_file_is_refused_and_text_must_be_utf8() {
        let (_t, d) = folder();
        std::fs::write(d.join("big.py"), vec![b'#'; 101]).unwrap();
        std::fs::write(d.join("bad.py"), b"ok\xff\xfe").unwrap();
        let u = UntrustedDir::new(&d, &[]).unwrap();
        let e = u.read(Path::new("big.py"), 100).unwrap_err().to_string();
        assert!(e.contains("101 bytes, over kbench's cap of 100"), "{e}");
        assert_eq!(u.read(Path::new("big.py"), 101).unwrap().len(), 101);
        let e = u
            .read_text(Path::new("bad.py"), 100)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not UTF-8 text (invalid byte at offset 2)"),
            "{e}"
        );
    }

    #[test]
    fn guarded_paths_and_run_secrets_are_refused_inside_the_folder() {
        let (_t, d) = folder();
        // A run folder inside the replay folder (`--out` under `--replay-dir`).
        let run = d.join("run");
        std::fs::create_dir(&run).unwrap();
        std::fs::write(run.join("secret"), "00ff").unwrap();
        std::fs::write(run.join("run.json"), "{}").unwrap();
        symlink("run/secret", d.join("1_k.py")).unwrap();
        symlink("run/run.json", d.join("2_k.py")).unwrap();
        let guarded = UntrustedDir::new(&d, std::slice::from_ref(&run)).unwrap();
        // A run folder not made yet is guarded all the same.
        let later = UntrustedDir::new(&d, &[d.join("later/run")]).unwrap();
        std::fs::create_dir_all(d.join("later/run")).unwrap();
        std::fs::write(d.join("later/run/records.jsonl"), "").unwrap();
        assert!(refused(&later, "later/run/records.jsonl").contains("kbench's own run files"));
        for rel in ["1_k.py", "2_k.py"] {
            assert!(refused(&guarded, rel).contains("kbench's own run files"));
        }
        // Any run's secret, guarded or not.
        let open = UntrustedDir::new(&d, &[]).unwrap();
        assert!(refused(&open, "1_k.py").contains("kbench's own run files"));
        assert_eq!(open.read_text(Path::new("2_k.py"), 10).unwrap(), "{}");
    }

    #[test]
    fn a_named_file_may_be_a_link_but_not_a_fifo() {
        let (t, d) = folder();
        std::fs::write(t.path().join("set.jsonl"), "{}\n").unwrap();
        symlink(t.path().join("set.jsonl"), d.join("link.jsonl")).unwrap();
        assert_eq!(read_named_text(&d.join("link.jsonl"), 10).unwrap(), "{}\n");
        nix::unistd::mkfifo(&d.join("f"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(read_named(&d.join("f"), 10)
            .unwrap_err()
            .to_string()
            .contains("FIFO"));
    }
}
