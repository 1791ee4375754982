//! How long a timed window's threads waited for a CPU: the harness's own thread that drives
//! the window and the worker's thread that runs the call, each runnable but not running. The
//! kernel counts it per thread (`/proc/<pid>/task/<tid>/schedstat`, its second field, in
//! nanoseconds; kept where the kernel has scheduler statistics, as distributions' kernels do).
//!
//! Evidence, not a verdict. On an H100 host whose cores were busy with builds, an honest
//! kernel's windows held a 1-3 ms stall in most pairs and it was failed as
//! `time-claim-unsupported`; the record's waits tell whether such stalls are waits for a core,
//! and whose. They never excuse an excess: a candidate can make its own thread wait while its
//! GPU works (a rival thread on its core), which lengthens no window, so an excess "explained"
//! by its waits would let any forged clock escape its flag.
//!
//! The worker names its thread in `time_opened` as its own pid namespace numbers it; the
//! harness finds that thread among the worker's own processes only (its cgroup, or its
//! process tree), so a candidate that names another thread can point only at one of its own.

use std::path::{Path, PathBuf};

use super::exchange::Side;
use crate::worker::freeze::FreezeHandle;

/// Where each side's timing thread's statistics are read, once found.
#[derive(Default)]
pub(crate) struct HostWait {
    threads: [Option<PathBuf>; 2],
}

/// Both threads' waits so far, nanoseconds, where readable.
#[derive(Clone, Copy)]
pub(crate) struct Waited {
    harness: Option<u64>,
    worker: Option<u64>,
}

fn slot(side: Side) -> usize {
    match side {
        Side::Reference => 0,
        Side::Candidate => 1,
    }
}

impl HostWait {
    /// Finds `side`'s thread `tid` (as its worker's namespace numbers it) among the
    /// processes `handle` freezes; unknown when it is not there.
    pub(crate) fn find(&mut self, side: Side, handle: &FreezeHandle, tid: Option<u64>) {
        self.threads[slot(side)] = tid.and_then(|t| host_thread(handle, t));
    }

    /// The waits so far of the harness's calling thread and `side`'s timing thread.
    pub(crate) fn read(&self, side: Side) -> Waited {
        Waited {
            harness: own_run_delay_ns(),
            worker: self.threads[slot(side)].as_deref().and_then(run_delay_ns),
        }
    }

    /// Milliseconds the harness's calling thread waited since `before`; NaN when unread.
    pub(crate) fn harness_since(before: Waited) -> f64 {
        ms_between(before.harness, own_run_delay_ns())
    }

    /// Milliseconds `side`'s timing thread waited since `before`; NaN when unread.
    pub(crate) fn worker_since(&self, side: Side, before: Waited) -> f64 {
        let now = self.threads[slot(side)].as_deref().and_then(run_delay_ns);
        ms_between(before.worker, now)
    }
}

fn ms_between(before: Option<u64>, now: Option<u64>) -> f64 {
    match (before, now) {
        (Some(a), Some(b)) => b.saturating_sub(a) as f64 / 1e6,
        _ => f64::NAN,
    }
}

/// The calling thread's run delay ([`run_delay_ns`]).
fn own_run_delay_ns() -> Option<u64> {
    run_delay_ns(Path::new("/proc/thread-self/schedstat"))
}

/// The second field of a `schedstat` file: time spent runnable on a run queue, nanoseconds.
fn run_delay_ns(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

/// The `schedstat` of the thread whose innermost pid namespace numbers it `tid`, among the
/// processes of `handle`.
fn host_thread(handle: &FreezeHandle, tid: u64) -> Option<PathBuf> {
    handle.processes().into_iter().find_map(|pid| {
        let task = PathBuf::from(format!("/proc/{pid}/task"));
        std::fs::read_dir(&task).ok()?.flatten().find_map(|t| {
            let status = std::fs::read_to_string(t.path().join("status")).ok()?;
            (innermost_pid(&status)? == tid).then(|| t.path().join("schedstat"))
        })
    })
}

/// The last number of a `status` file's `NSpid:` line: the id in the task's own namespace.
fn innermost_pid(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespaced_thread_is_read_by_its_innermost_id() {
        assert_eq!(
            innermost_pid("Name:\tpython3\nNSpid:\t81234\t7\nPPid:\t1\n"),
            Some(7)
        );
        assert_eq!(innermost_pid("NSpid:\t4242\n"), Some(4242));
        assert_eq!(innermost_pid("Name:\tsh\n"), None);
    }

    /// A real child's thread, found by its id and read; a busy rival on the same one core
    /// makes it wait, and the wait shows.
    #[test]
    fn a_thread_made_to_wait_for_its_core_shows_the_wait() {
        use std::process::{Command, Stdio};
        // Two busy shells on core 0 of this process's cores: each waits while the other runs.
        let cores = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
        let core = (0..nix::sched::CpuSet::count())
            .find(|i| cores.is_set(*i).unwrap_or(false))
            .unwrap();
        let spawn = || {
            Command::new("taskset")
                .args(["-c", &core.to_string(), "sh", "-c", "while :; do :; done"])
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        };
        let (mut a, mut b) = (spawn(), spawn());
        let pid = a.id();
        // taskset execs the shell: the child's pid is the shell's, its only thread.
        let mut waits = HostWait::default();
        waits.find(
            Side::Candidate,
            &FreezeHandle::Tree(pid as i32),
            Some(u64::from(pid)),
        );
        assert!(
            waits.threads[1].is_some(),
            "the child's thread was not found"
        );
        let before = waits.read(Side::Candidate);
        std::thread::sleep(std::time::Duration::from_millis(300));
        let waited = waits.worker_since(Side::Candidate, before);
        // This thread slept: it waited for no CPU, or hardly.
        assert!(HostWait::harness_since(before) < 30.0);
        // About half of 300 ms (the rival's share), less any other load's; far above zero.
        assert!(waited > 30.0, "{waited} ms");
        // A thread not among the worker's processes is not found.
        waits.find(
            Side::Reference,
            &FreezeHandle::Tree(pid as i32),
            Some(u64::from(b.id())),
        );
        assert!(waits.threads[0].is_none());
        assert!(waits
            .worker_since(Side::Reference, waits.read(Side::Reference))
            .is_nan());
        for c in [&mut a, &mut b] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
