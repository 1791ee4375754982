//! One writer per run folder: an exclusive OS lock on the folder's `lock` file, held for as
//! long as the run's [`super::RunDir`] lives, with the holder's pid (and host) written into
//! the file so that a refused run can say who holds it.
//!
//! The lock is `flock(2)` through the standard library's `File::try_lock` (stable since Rust
//! 1.89; the same call the `fs4` and `fd-lock` crates make, so no crate is needed). The
//! kernel drops it when the holder exits, however it exits, so a killed run never leaves a
//! stale lock; the file is opened close-on-exec, so worker processes do not inherit it.
//! Readers (`report`, `merge`'s inputs) do not lock.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};

pub(crate) const LOCK: &str = "lock";

/// The held lock of a run folder; dropping it lets the next writer in.
#[derive(Debug)]
pub(crate) struct WriterLock {
    _file: std::fs::File,
}

impl WriterLock {
    /// Takes the lock of `dir` (which must exist), or says which process holds it.
    pub(crate) fn acquire(dir: &Path) -> Result<WriterLock> {
        let path = dir.join(LOCK);
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening the run folder's lock {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => bail!(
                "{} is being written by another kbench ({}): one run writes a run folder at a time; wait for it to end (or stop it), then --resume, or choose another --out",
                dir.display(),
                holder(&mut file)
            ),
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()))
            }
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let who = format!("{} {}\n", std::process::id(), host.trim());
        file.set_len(0)
            .and_then(|_| file.write_all(who.as_bytes()))
            .and_then(|_| file.sync_data())
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(WriterLock { _file: file })
    }
}

/// "pid N on host H", from the lock file of a holder (which writes it just after locking).
fn holder(file: &mut std::fs::File) -> String {
    for _ in 0..20 {
        let mut text = String::new();
        let read = file
            .seek(SeekFrom::Start(0))
            .and_then(|_| file.read_to_string(&mut text));
        let mut parts = text.split_whitespace();
        if let (Ok(_), Some(pid)) = (read, parts.next()) {
            return match parts.next() {
                Some(host) => format!("pid {pid} on host {host}"),
                None => format!("pid {pid}"),
            };
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    "pid unknown: it has not written its pid yet".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_and_freed_on_drop() {
        let d = tempfile::tempdir().unwrap();
        let held = WriterLock::acquire(d.path()).unwrap();
        let e = WriterLock::acquire(d.path()).unwrap_err().to_string();
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        assert!(e.contains("another kbench"), "{e}");
        drop(held);
        let again = WriterLock::acquire(d.path()).unwrap();
        drop(again);
    }
}
