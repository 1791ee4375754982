//! Control groups (cgroup v2) for workers: every process a worker starts, whatever it does
//! (`setsid`, double forks, a second CUDA process), lands in one group the harness owns. The
//! harness freezes a group while the other side of a timing is measured (a candidate cannot
//! run, or slow the reference, while the reference is timed) and kills a group whole.
//!
//! The groups live under one folder of this kbench process, `kbench-<pid>`, made beside the
//! process's own group (or at the hierarchy's root when the own group refuses children).
//! Folders of kbench processes that no longer exist are removed when the next one opens.
//! Where no writable cgroup v2 hierarchy exists (a user without delegation), [`CgroupTree::open`]
//! says why and workers are frozen with signals instead (`super::freeze`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// kbench's folder in the cgroup v2 hierarchy for this process.
#[derive(Debug)]
pub struct CgroupTree {
    dir: PathBuf,
    next: AtomicU64,
}

impl CgroupTree {
    /// Finds the cgroup v2 hierarchy, removes the folders of dead kbench processes and makes
    /// this process's. `Err` says why groups cannot be used here.
    pub fn open() -> Result<Arc<CgroupTree>, String> {
        let mount = v2_mount().ok_or("no cgroup v2 hierarchy is mounted")?;
        let own = own_group().unwrap_or_default();
        let name = format!("kbench-{}", std::process::id());
        let mut tried = Vec::new();
        let own_dir = mount.join(own.trim_start_matches('/'));
        for parent in [own_dir, mount.clone()] {
            remove_stale(&parent);
            let dir = parent.join(&name);
            match std::fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    tried.push(format!("{}: {e}", dir.display()));
                    continue;
                }
            }
            if dir.join("cgroup.freeze").exists() {
                return Ok(Arc::new(CgroupTree {
                    dir,
                    next: AtomicU64::new(0),
                }));
            }
            let _ = std::fs::remove_dir(&dir);
            tried.push(format!(
                "{}: no cgroup.freeze (a kernel before 5.2)",
                dir.display()
            ));
        }
        Err(format!(
            "no writable cgroup v2 folder ({})",
            tried.join("; ")
        ))
    }

    /// A new, empty group for one worker.
    pub fn group(&self) -> std::io::Result<WorkerGroup> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let dir = self.dir.join(format!("w{n}"));
        std::fs::create_dir(&dir)?;
        Ok(WorkerGroup { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for CgroupTree {
    fn drop(&mut self) {
        remove_tree(&self.dir);
    }
}

/// One worker's group. Dropping it kills whatever is left in it and removes the folder.
#[derive(Debug)]
pub struct WorkerGroup {
    dir: PathBuf,
}

impl WorkerGroup {
    /// The words that start a command inside this group: a shell that writes its own pid
    /// into the group, then becomes the command (`exec`), so the command and everything it
    /// starts are in the group from their first instruction. A shell is used because moving
    /// a child between its fork and its exec needs `pre_exec`, which is `unsafe`. Should the
    /// write fail the command still starts, outside the group: [`Self::holds`] tells.
    pub fn enter_args(&self) -> [OsString; 4] {
        [
            "/bin/sh".into(),
            "-c".into(),
            "echo $$ > \"$0\" 2>/dev/null; exec \"$@\"".into(),
            self.dir.join("cgroup.procs").into(),
        ]
    }

    /// Whether process `pid` is in this group.
    pub fn holds(&self, pid: u32) -> bool {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .map(|s| s.lines().any(|l| l.trim() == pid.to_string()))
            .unwrap_or(false)
    }

    /// Freezes every process of the group and waits until the kernel reports them all
    /// frozen (a task inside a long system call freezes when it returns), at most `limit`.
    /// Returns how long the confirmation took.
    pub fn freeze(&self, limit: Duration) -> Result<Duration, String> {
        let t = Instant::now();
        std::fs::write(self.dir.join("cgroup.freeze"), "1")
            .map_err(|e| format!("writing {}: {e}", self.dir.join("cgroup.freeze").display()))?;
        let events = self.dir.join("cgroup.events");
        let mut spins = 0u32;
        loop {
            let text = std::fs::read_to_string(&events)
                .map_err(|e| format!("reading {}: {e}", events.display()))?;
            if event_is(&text, "frozen", "1") || event_is(&text, "populated", "0") {
                return Ok(t.elapsed());
            }
            if t.elapsed() > limit {
                return Err(format!(
                    "its processes were not all frozen within {:.0} ms",
                    limit.as_secs_f64() * 1e3
                ));
            }
            spins += 1;
            if spins > 64 {
                std::thread::sleep(Duration::from_micros(50));
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Lets the group's processes run again.
    pub fn thaw(&self) -> Result<(), String> {
        std::fs::write(self.dir.join("cgroup.freeze"), "0")
            .map_err(|e| format!("writing {}: {e}", self.dir.join("cgroup.freeze").display()))
    }

    /// Kills every process in the group (`cgroup.kill`, Linux 5.14; on older kernels each
    /// listed process gets SIGKILL).
    pub fn kill(&self) {
        if std::fs::write(self.dir.join("cgroup.kill"), "1").is_err() {
            if let Ok(s) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
                for pid in s.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
        // A frozen group's processes die only once thawed.
        let _ = self.thaw();
    }

    /// Whether any process is left in the group.
    pub fn populated(&self) -> bool {
        std::fs::read_to_string(self.dir.join("cgroup.events"))
            .map(|t| event_is(&t, "populated", "1"))
            .unwrap_or(false)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for WorkerGroup {
    fn drop(&mut self) {
        self.kill();
        // The killed processes leave the group as they are reaped: a few tries.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Whether `key value` is a line of a `cgroup.events` text.
fn event_is(text: &str, key: &str, value: &str) -> bool {
    text.lines().any(|l| {
        let mut w = l.split_whitespace();
        w.next() == Some(key) && w.next() == Some(value)
    })
}

/// The mount point of the cgroup v2 hierarchy (`/sys/fs/cgroup`, or
/// `/sys/fs/cgroup/unified` on hosts that still mount the v1 controllers).
fn v2_mount() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        if !right.starts_with("cgroup2 ") {
            return None;
        }
        let fields: Vec<&str> = left.split_whitespace().collect();
        // Only a mount of the hierarchy's root folder (field 4 is "/").
        if fields.get(3) != Some(&"/") {
            return None;
        }
        Some(PathBuf::from(unescape(fields.get(4)?)))
    })
}

/// mountinfo escapes spaces and a few other bytes as `\ooo`.
fn unescape(s: &str) -> String {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let octal = (b[i] == b'\\')
            .then(|| b.get(i + 1..i + 4))
            .flatten()
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        match octal {
            Some(v) => {
                out.push(v);
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// This process's group in the v2 hierarchy (the `0::/path` line of /proc/self/cgroup).
fn own_group() -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::").map(|p| p.trim().to_string()))
}

/// Removes the folders of kbench processes that no longer exist under `parent`.
fn remove_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(pid) = name
            .strip_prefix("kbench-")
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            remove_tree(&e.path());
        }
    }
}

/// Kills what is left in a kbench folder and removes it, deepest groups first.
fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let group = WorkerGroup { dir: e.path() };
                drop(group);
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// Groups need a writable cgroup v2 hierarchy (root, or delegation); without one the
    /// test says so and checks the error names why.
    fn tree() -> Option<Arc<CgroupTree>> {
        match CgroupTree::open() {
            Ok(t) => Some(t),
            Err(why) => {
                assert!(!why.is_empty());
                eprintln!("no cgroup v2 here, skipped: {why}");
                None
            }
        }
    }

    fn state(pid: u32) -> String {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with("State:"))
            .unwrap_or_default()
            .to_string()
    }

    #[test]
    fn a_group_freezes_what_its_process_started_and_kills_it_all() {
        let Some(tree) = tree() else { return };
        let group = tree.group().unwrap();
        // A shell that starts a busy loop in a new session (out of its process group) and
        // prints its pid.
        let mut cmd = Command::new(&group.enter_args()[0]);
        cmd.args(&group.enter_args()[1..]).args([
            "/bin/sh",
            "-c",
            "setsid sh -c 'while :; do :; done' & echo $!; while :; do :; done",
        ]);
        let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let busy: u32 = line.trim().parse().unwrap();
        assert!(group.holds(child.id()), "the shell moved itself in");
        assert!(group.holds(busy), "its child started in the group");
        let took = group.freeze(Duration::from_secs(2)).unwrap();
        assert!(took < Duration::from_secs(2));
        // Frozen: no CPU time accrues.
        let ticks = |pid: u32| -> u64 {
            let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            let f: Vec<&str> = s.rsplit_once(')').unwrap().1.split_whitespace().collect();
            f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
        };
        let before = ticks(busy);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(ticks(busy), before, "a frozen process ran: {}", state(busy));
        group.thaw().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(ticks(busy) > before, "a thawed process did not run");
        drop(group);
        let _ = child.wait();
        let gone = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            !Path::new(&format!("/proc/{busy}")).exists() || state(busy).contains("Z")
        });
        assert!(gone, "the setsid child outlived its group: {}", state(busy));
    }

    #[test]
    fn folders_of_dead_kbench_processes_are_removed() {
        let Some(tree) = tree() else { return };
        let parent = tree.dir().parent().unwrap().to_path_buf();
        // A pid that cannot exist (above the kernel's pid_max).
        let stale = parent.join("kbench-4194305");
        std::fs::create_dir(&stale).unwrap();
        std::fs::create_dir(stale.join("w0")).unwrap();
        remove_stale(&parent);
        assert!(!stale.exists());
    }

    #[test]
    fn mountinfo_escapes_are_read() {
        assert_eq!(unescape("/sys/fs/cgroup"), "/sys/fs/cgroup");
        assert_eq!(unescape("/a\\040b"), "/a b");
    }
}
