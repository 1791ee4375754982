//! Freezing a worker: every process it started stopped, and confirmed stopped, so that it
//! cannot run while the other side of a timing is measured or while the harness stages the
//! next call's inputs. A worker's cgroup (`super::cgroup`) freezes it whole; without one,
//! each process of the worker's tree gets SIGSTOP and its every thread is watched until it
//! has stopped. The signal way misses processes that left the tree (a double fork under
//! `--no-sandbox`, whose orphans go to the host's init); in the sandbox every process stays
//! below the sandbox's first process, so the tree is complete.

use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::cgroup::WorkerGroup;

/// How a worker is frozen.
#[derive(Debug)]
pub(crate) enum Freezer {
    /// Its cgroup: everything it started, whatever it did.
    Group(WorkerGroup),
    /// SIGSTOP/SIGCONT to every process below `root` (the worker's first process).
    Signals { root: i32 },
}

impl Freezer {
    /// The name records carry.
    pub(crate) fn method(&self) -> &'static str {
        match self {
            Freezer::Group(_) => "cgroup",
            Freezer::Signals { .. } => "signals",
        }
    }

    /// The worker's group, when it is frozen through one (its memory events are read there).
    pub(crate) fn group(&self) -> Option<&WorkerGroup> {
        match self {
            Freezer::Group(g) => Some(g),
            Freezer::Signals { .. } => None,
        }
    }

    /// Stops every process, waiting at most `limit` for the kernel to confirm it; returns
    /// how long that took.
    pub(crate) fn freeze(&self, limit: Duration) -> Result<Duration, String> {
        match self {
            Freezer::Group(g) => g.freeze(limit),
            Freezer::Signals { root } => freeze_tree(*root, limit),
        }
    }

    pub(crate) fn thaw(&self) -> Result<(), String> {
        match self {
            Freezer::Group(g) => g.thaw(),
            Freezer::Signals { root } => {
                thaw_tree(*root);
                Ok(())
            }
        }
    }

    /// A handle that freezes and thaws the same processes without owning their group (the
    /// group is removed when its worker ends; the handle's user lets go of it first).
    pub(crate) fn handle(&self) -> FreezeHandle {
        match self {
            Freezer::Group(g) => FreezeHandle::Group(g.dir().to_path_buf()),
            Freezer::Signals { root } => FreezeHandle::Tree(*root),
        }
    }
}

/// Freezes a worker's processes from elsewhere than the worker's owner ([`Freezer::handle`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FreezeHandle {
    /// The worker's cgroup folder.
    Group(std::path::PathBuf),
    /// The worker's first process.
    Tree(i32),
}

impl FreezeHandle {
    pub(crate) fn freeze(&self, limit: Duration) -> Result<Duration, String> {
        match self {
            FreezeHandle::Group(dir) => super::cgroup::freeze_group(dir, limit),
            FreezeHandle::Tree(root) => freeze_tree(*root, limit),
        }
    }

    /// The worker's processes: its group's, or its tree's.
    pub(crate) fn processes(&self) -> Vec<i32> {
        match self {
            FreezeHandle::Group(dir) => super::cgroup::group_processes(dir),
            FreezeHandle::Tree(root) => tree(*root),
        }
    }

    pub(crate) fn thaw(&self) -> Result<(), String> {
        match self {
            FreezeHandle::Group(dir) => super::cgroup::thaw_group(dir),
            FreezeHandle::Tree(root) => {
                thaw_tree(*root);
                Ok(())
            }
        }
    }
}

/// SIGCONT to every process of the tree below `root`.
fn thaw_tree(root: i32) {
    for pid in tree(root) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
    }
}

/// SIGSTOP to every process of the tree below `root` until a pass finds every thread of every
/// process stopped and no process it had not stopped (one may fork between a listing and its
/// signal: the next pass stops the child).
fn freeze_tree(root: i32, limit: Duration) -> Result<Duration, String> {
    let t = Instant::now();
    let mut stopped: Vec<i32> = Vec::new();
    loop {
        let pids = tree(root);
        if pids.is_empty() {
            return Ok(t.elapsed());
        }
        for &pid in &pids {
            if !stopped.contains(&pid) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
                stopped.push(pid);
            }
        }
        let complete = pids.iter().all(|&p| all_threads_stopped(p));
        if complete && tree(root).iter().all(|p| stopped.contains(p)) {
            return Ok(t.elapsed());
        }
        if t.elapsed() > limit {
            return Err(format!(
                "its processes were not all stopped within {:.0} ms",
                limit.as_secs_f64() * 1e3
            ));
        }
        std::thread::yield_now();
    }
}

/// `root` and every process below it (through `/proc/<pid>/task/<tid>/children`), root
/// first; empty when `root` is gone.
pub(crate) fn tree(root: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        if out.contains(&pid) {
            continue;
        }
        out.push(pid);
        for t in tasks.flatten() {
            let path = t.path().join("children");
            if let Ok(s) = std::fs::read_to_string(path) {
                todo.extend(s.split_whitespace().filter_map(|c| c.parse::<i32>().ok()));
            }
        }
    }
    out
}

/// Whether every thread of `pid` is stopped (`T`, or `t` under a tracer) or gone.
fn all_threads_stopped(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next().map(str::to_string))
            })
            .is_none_or(|st| matches!(st.as_str(), "T" | "t" | "Z" | "X"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn cpu_ticks(pid: i32) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let Some((_, rest)) = s.rsplit_once(')') else {
            return 0;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0)
    }

    #[test]
    fn signals_stop_a_whole_tree_of_busy_processes_and_threads() {
        // A shell running two busy children, one of them in its own session.
        let mut child = Command::new("/bin/sh")
            .args([
                "-c",
                "(while :; do :; done) & setsid sh -c 'while :; do :; done' & echo ready; wait",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let root = child.id() as i32;
        let f = Freezer::Signals { root };
        let pids = tree(root);
        assert!(pids.len() >= 3, "{pids:?}");
        f.freeze(Duration::from_secs(2)).unwrap();
        let before: u64 = pids.iter().map(|&p| cpu_ticks(p)).sum();
        std::thread::sleep(Duration::from_millis(300));
        let after: u64 = pids.iter().map(|&p| cpu_ticks(p)).sum();
        assert_eq!(before, after, "a stopped process ran");
        f.thaw().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let thawed: u64 = pids.iter().map(|&p| cpu_ticks(p)).sum();
        assert!(thawed > after);
        for p in pids {
            let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        }
        let _ = child.wait();
    }
}
