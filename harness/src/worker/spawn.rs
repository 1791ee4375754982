//! The one thread that starts every worker process.
//!
//! Every worker ends when kbench ends, however kbench ends (SIGKILL included), through the
//! kernel's parent-death signal: bwrap's `--die-with-parent` for a sandboxed worker, and the
//! worker's own `PR_SET_PDEATHSIG`, set at its start (`kbench_worker/startup.py`), for one
//! outside the sandbox (kbench has no `unsafe`, so no `pre_exec` to set it between fork and
//! exec). That signal fires when the *thread* that forked the child exits, not the process:
//! a worker started on a short-lived thread (workers started ahead, build jobs) would be
//! killed as soon as that thread ended. So every worker is forked by one thread that lives as
//! long as the harness.

use std::process::{Child, Command};
use std::sync::mpsc::{self, Sender};
use std::sync::{Mutex, OnceLock};

type Job = (Command, Sender<std::io::Result<Child>>);

/// Spawns `cmd` from the one thread that lives as long as the harness (see the module).
pub(crate) fn spawn_from_lasting_thread(cmd: Command) -> std::io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<Sender<Job>>> = OnceLock::new();
    let tx = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("kbench-worker-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("starting the worker spawner thread");
        Mutex::new(tx)
    });
    let gone = || std::io::Error::other("the worker spawner thread is gone");
    let (reply, answer) = mpsc::channel();
    tx.lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, reply))
        .map_err(|_| gone())?;
    answer.recv().map_err(|_| gone())?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found on an H100: a sandboxed worker started on a thread that then ends (workers
    /// started ahead) must outlive that thread.
    #[test]
    fn a_worker_started_on_a_short_lived_thread_outlives_it() {
        let Some(bwrap) = super::super::sandbox::find_bwrap(&[]) else {
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
