//! Control groups (cgroup v2) for workers: every process a worker starts, whatever it does
//! (`setsid`, double forks, a second CUDA process), lands in one group the harness owns. The
//! harness freezes a group while the other side of a timing is measured (a candidate cannot
//! run, or slow the reference, while the reference is timed) and kills a group whole.
//!
//! The groups live under one folder of this kbench process, `kbench-<pid>`, made inside the
//! process's own group (or at the hierarchy's root when the own group refuses children).
//! When a memory cap is wanted the folder goes to the nearest group up from there whose
//! children can have the memory controller (`memory.max`): a group with processes of its own
//! cannot hand controllers down (cgroup v2's "no internal processes" rule), the hierarchy's
//! root always can. Folders of kbench processes that no longer exist are removed when the next
//! one opens, and a watchdog process kills everything left in this process's folder as soon as
//! kbench ends, however it ends (see [`CgroupTree::open`]). Where no writable cgroup v2
//! hierarchy exists (a user without delegation), [`CgroupTree::open`] says why and workers
//! are frozen with signals instead (`super::freeze`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// kbench's folder in the cgroup v2 hierarchy for this process.
#[derive(Debug)]
pub(crate) struct CgroupTree {
    dir: PathBuf,
    next: AtomicU64,
    /// Whether the folder hands the memory controller to its groups (`memory.max` works).
    memory: bool,
    /// The cap on all groups together, once set ([`Self::cap_all`]).
    all_cap: std::sync::OnceLock<u64>,
    /// Why the folder has no memory controller (when one was wanted).
    no_memory_why: Option<String>,
    /// The watchdog that kills the folder when kbench ends, and the end of its stdin kbench
    /// holds (closed by the kernel when kbench exits, however it exits).
    watchdog: Option<(std::process::Child, std::process::ChildStdin)>,
}

impl CgroupTree {
    /// Finds the cgroup v2 hierarchy, removes the folders of dead kbench processes and makes
    /// this process's. With `want_memory` the folder is placed where its groups can have a
    /// memory cap, if there is such a place ([`Self::has_memory`] tells; [`Self::no_memory_why`]
    /// why not). `Err` says why groups cannot be used here.
    ///
    /// A watchdog, `sh` reading its stdin (whose writing end only this process holds), kills
    /// the folder's every process through `cgroup.kill` once that end closes: when kbench
    /// exits, is killed (SIGKILL included) or crashes. It catches what a worker started that
    /// the worker's own parent-death signal does not reach (its compilers, anything that left
    /// its process group), for workers outside the sandbox too; a shell because a process of
    /// kbench's own cannot outlive kbench, and no other tool does this one line.
    pub(crate) fn open(want_memory: bool) -> Result<Arc<CgroupTree>, String> {
        let mount = v2_mount().ok_or("no cgroup v2 hierarchy is mounted")?;
        let own = own_group().unwrap_or_default();
        let name = format!("kbench-{}", std::process::id());
        let own_dir = mount.join(own.trim_start_matches('/'));
        let mut no_memory_why = None;
        if want_memory {
            match place_with_memory(&mount, &own_dir, &name) {
                Ok(dir) => return Ok(Self::opened(dir, true, None)),
                Err(why) => no_memory_why = Some(why),
            }
        }
        let mut tried = Vec::new();
        for parent in [own_dir, mount.clone()] {
            remove_stale(&parent);
            let dir = parent.join(&name);
            match make_group_dir(&dir) {
                Ok(()) => return Ok(Self::opened(dir, false, no_memory_why)),
                Err(why) => tried.push(why),
            }
        }
        Err(format!(
            "no writable cgroup v2 folder ({})",
            tried.join("; ")
        ))
    }

    fn opened(dir: PathBuf, memory: bool, no_memory_why: Option<String>) -> Arc<CgroupTree> {
        let watchdog = start_watchdog(&dir);
        Arc::new(CgroupTree {
            dir,
            next: AtomicU64::new(0),
            memory,
            all_cap: std::sync::OnceLock::new(),
            no_memory_why,
            watchdog,
        })
    }

    /// Whether the groups can have a memory cap (`memory.max`).
    pub(crate) fn has_memory(&self) -> bool {
        self.memory
    }

    /// Why the groups cannot have a memory cap, when one was wanted.
    pub(crate) fn no_memory_why(&self) -> Option<&str> {
        self.no_memory_why.as_deref()
    }

    /// Caps the memory of all the groups together (the folder's `memory.max`; no swap), so
    /// that the workers cannot exhaust the host between them.
    pub(crate) fn cap_all(&self, bytes: u64) -> Result<(), String> {
        cap_memory(&self.dir, bytes)?;
        let _ = self.all_cap.set(bytes);
        Ok(())
    }

    /// The cap on all groups together, when one was set.
    pub(crate) fn all_cap(&self) -> Option<u64> {
        self.all_cap.get().copied()
    }

    /// The folder's memory events (every group's together).
    pub(crate) fn memory_events(&self) -> MemoryEvents {
        MemoryEvents::read(&self.dir)
    }

    /// A new, empty group for one worker.
    pub(crate) fn group(&self) -> std::io::Result<WorkerGroup> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let dir = self.dir.join(format!("w{n}"));
        std::fs::create_dir(&dir)?;
        Ok(WorkerGroup { dir })
    }

    #[cfg(test)]
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for CgroupTree {
    fn drop(&mut self) {
        remove_tree(&self.dir);
        if let Some((mut child, stdin)) = self.watchdog.take() {
            drop(stdin);
            let _ = child.wait();
        }
    }
}

/// Makes a worker folder (or takes one left by an earlier run of this pid) and checks that it
/// can freeze; `Err` names the folder and why not.
fn make_group_dir(dir: &Path) -> Result<(), String> {
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    }
    if dir.join("cgroup.freeze").exists() {
        return Ok(());
    }
    let _ = std::fs::remove_dir(dir);
    Err(format!(
        "{}: no cgroup.freeze (a kernel before 5.2)",
        dir.display()
    ))
}

/// The nearest group from `own_dir` up to the hierarchy's root `mount` under which a folder
/// `name` can hand the memory controller to its children: the folder gets `memory` from its
/// parent (enabled there when the parent has it and no processes of its own), then enables it
/// for its own children. Nearest first, so that a folder inside a job's group (a Slurm step)
/// stays under the job's limits. Returns the folder, or why none works.
fn place_with_memory(mount: &Path, own_dir: &Path, name: &str) -> Result<PathBuf, String> {
    let mut tried = Vec::new();
    for parent in own_dir.ancestors().take_while(|p| p.starts_with(mount)) {
        remove_stale(parent);
        let dir = parent.join(name);
        if let Err(why) = make_group_dir(&dir) {
            tried.push(why);
            continue;
        }
        let has = |d: &Path| listed(&d.join("cgroup.controllers"), "memory");
        if !has(&dir) && has(parent) {
            // Fails (EBUSY) where the parent holds processes of its own: the next one up.
            let _ = std::fs::write(parent.join("cgroup.subtree_control"), "+memory");
        }
        let enabled = has(&dir)
            && std::fs::write(dir.join("cgroup.subtree_control"), "+memory").is_ok()
            && listed(&dir.join("cgroup.subtree_control"), "memory");
        if enabled {
            return Ok(dir);
        }
        let _ = std::fs::remove_dir(&dir);
        tried.push(format!(
            "{}: no memory controller for its children",
            parent.display()
        ));
    }
    Err(format!(
        "no cgroup v2 folder can have the memory controller ({})",
        tried.join("; ")
    ))
}

/// Whether the space-separated list in `file` (`cgroup.controllers`) holds `word`.
fn listed(file: &Path, word: &str) -> bool {
    std::fs::read_to_string(file).is_ok_and(|t| t.split_whitespace().any(|w| w == word))
}

/// `memory.max` of the group `dir`, with no swap (where the host has swap, a group over its
/// cap would otherwise be swapped out for minutes instead of stopped) and, for a worker's
/// group, the whole group killed together when its cap is met (`memory.oom.group`).
fn cap_memory(dir: &Path, bytes: u64) -> Result<(), String> {
    let write = |file: &str, value: &str| {
        std::fs::write(dir.join(file), value)
            .map_err(|e| format!("writing {}: {e}", dir.join(file).display()))
    };
    write("memory.max", &bytes.to_string())?;
    if dir.join("memory.swap.max").exists() {
        write("memory.swap.max", "0")?;
    }
    Ok(())
}

/// Counts from a group's `memory.events` (its own and its descendants').
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MemoryEvents {
    /// Times the group's usage met its own `memory.max` and reclaim could not help.
    pub(crate) oom: u64,
    /// Processes of the group killed by an out-of-memory killer (its own cap's, or an
    /// ancestor's).
    pub(crate) oom_kill: u64,
}

impl MemoryEvents {
    fn read(dir: &Path) -> MemoryEvents {
        Self::parse(&std::fs::read_to_string(dir.join("memory.events")).unwrap_or_default())
    }

    fn parse(text: &str) -> MemoryEvents {
        let count = |key: &str| {
            text.lines()
                .find_map(|l| {
                    let mut w = l.split_whitespace();
                    (w.next() == Some(key)).then(|| w.next()?.parse().ok())?
                })
                .unwrap_or(0)
        };
        MemoryEvents {
            oom: count("oom"),
            oom_kill: count("oom_kill"),
        }
    }
}

/// Starts the watchdog of [`CgroupTree::open`] for the folder `dir`: in a process group of its
/// own and deaf to the terminal's and the job's signals, so that it outlives kbench to do its
/// one job. `None` when no shell can be started (the parent-death signals still apply).
fn start_watchdog(dir: &Path) -> Option<(std::process::Child, std::process::ChildStdin)> {
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new("/bin/sh")
        .args([
            "-c",
            "trap '' INT TERM HUP QUIT; read _ignored; echo 1 > \"$0/cgroup.kill\" 2>/dev/null",
        ])
        .arg(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .ok()?;
    let stdin = child.stdin.take()?;
    Some((child, stdin))
}

/// One worker's group. Dropping it kills whatever is left in it and removes the folder.
#[derive(Debug)]
pub(crate) struct WorkerGroup {
    dir: PathBuf,
}

impl WorkerGroup {
    /// The words that start a command inside this group: a shell that writes its own pid
    /// into the group, then becomes the command (`exec`), so the command and everything it
    /// starts are in the group from their first instruction. A shell is used because moving
    /// a child between its fork and its exec needs `pre_exec`, which is `unsafe`. Should the
    /// write fail the command still starts, outside the group: [`Self::holds`] tells.
    pub(crate) fn enter_args(&self) -> [OsString; 4] {
        [
            "/bin/sh".into(),
            "-c".into(),
            "echo $$ > \"$0\" 2>/dev/null; exec \"$@\"".into(),
            self.dir.join("cgroup.procs").into(),
        ]
    }

    /// Caps the group's memory (`memory.max`, no swap), and has the kernel kill the whole
    /// group when the cap is met (`memory.oom.group`), not one of its processes. Needs a
    /// tree with the memory controller ([`CgroupTree::has_memory`]).
    pub(crate) fn cap_memory(&self, bytes: u64) -> Result<(), String> {
        cap_memory(&self.dir, bytes)?;
        std::fs::write(self.dir.join("memory.oom.group"), "1").map_err(|e| {
            format!(
                "writing {}: {e}",
                self.dir.join("memory.oom.group").display()
            )
        })
    }

    /// The group's memory events.
    pub(crate) fn memory_events(&self) -> MemoryEvents {
        MemoryEvents::read(&self.dir)
    }

    /// Whether process `pid` is in this group.
    pub(crate) fn holds(&self, pid: u32) -> bool {
        i32::try_from(pid).is_ok_and(|pid| group_processes(&self.dir).contains(&pid))
    }

    /// Freezes every process of the group and waits until the kernel reports them all
    /// frozen (a task inside a long system call freezes when it returns), at most `limit`.
    /// Returns how long the confirmation took.
    pub(crate) fn freeze(&self, limit: Duration) -> Result<Duration, String> {
        freeze_group(&self.dir, limit)
    }

    /// Lets the group's processes run again.
    pub(crate) fn thaw(&self) -> Result<(), String> {
        thaw_group(&self.dir)
    }

    /// The group's folder.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Kills every process in the group (`cgroup.kill`, Linux 5.14; on older kernels each
    /// listed process gets SIGKILL).
    pub(crate) fn kill(&self) {
        if std::fs::write(self.dir.join("cgroup.kill"), "1").is_err() {
            for pid in group_processes(&self.dir) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        // A frozen group's processes die only once thawed.
        let _ = self.thaw();
    }
}

/// Freezes every process of the group in `dir` and waits until the kernel reports them all
/// frozen (a task inside a long system call freezes when it returns), at most `limit`.
/// Returns how long the confirmation took.
pub(crate) fn freeze_group(dir: &Path, limit: Duration) -> Result<Duration, String> {
    let t = Instant::now();
    std::fs::write(dir.join("cgroup.freeze"), "1")
        .map_err(|e| format!("writing {}: {e}", dir.join("cgroup.freeze").display()))?;
    let events = dir.join("cgroup.events");
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

/// The processes of the group in `dir` (`cgroup.procs`); none when it cannot be read.
pub(crate) fn group_processes(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// Lets the processes of the group in `dir` run again.
pub(crate) fn thaw_group(dir: &Path) -> Result<(), String> {
    std::fs::write(dir.join("cgroup.freeze"), "0")
        .map_err(|e| format!("writing {}: {e}", dir.join("cgroup.freeze").display()))
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
    /// Held by every test that opens the tree: all of them share this process's one folder,
    /// and the watchdog test kills the whole folder, the other tests' processes included.
    fn one_tree_at_a_time() -> std::sync::MutexGuard<'static, ()> {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        LOCK.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn tree() -> Option<Arc<CgroupTree>> {
        match CgroupTree::open(false) {
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

    /// Starts `/bin/sh -c script` inside `group`; the script's first line of output is a
    /// pid it started, returned with the shell.
    fn start_in(group: &WorkerGroup, script: &str) -> (std::process::Child, u32) {
        let mut cmd = Command::new(&group.enter_args()[0]);
        cmd.args(&group.enter_args()[1..])
            .args(["/bin/sh", "-c", script]);
        let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        (child, line.trim().parse().unwrap())
    }

    /// Whether `pid` is gone (or a zombie) within `tries` waits of 10 ms.
    fn gone_within(pid: u32, tries: u32) -> bool {
        (0..tries).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            !Path::new(&format!("/proc/{pid}")).exists() || state(pid).contains('Z')
        })
    }

    #[test]
    fn a_group_freezes_what_its_process_started_and_kills_it_all() {
        let _one = one_tree_at_a_time();
        let Some(tree) = tree() else { return };
        let group = tree.group().unwrap();
        // A shell that starts a busy loop in a new session (out of its process group) and
        // prints its pid.
        let (mut child, busy) = start_in(
            &group,
            "setsid sh -c 'while :; do :; done' & echo $!; while :; do :; done",
        );
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
        assert!(
            gone_within(busy, 100),
            "the setsid child outlived its group: {}",
            state(busy)
        );
    }

    #[test]
    fn folders_of_dead_kbench_processes_are_removed() {
        let _one = one_tree_at_a_time();
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
    fn memory_events_are_read_by_key() {
        let e = MemoryEvents::parse("low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 1\n");
        assert_eq!(
            e,
            MemoryEvents {
                oom: 2,
                oom_kill: 1
            }
        );
        assert_eq!(MemoryEvents::parse(""), MemoryEvents::default());
    }

    /// The watchdog kills the folder's processes once the end of its pipe that kbench holds
    /// closes (here: dropped; when kbench dies the kernel closes it).
    #[test]
    fn the_watchdog_kills_the_folder_when_its_pipe_closes() {
        let _one = one_tree_at_a_time();
        let Some(tree) = tree() else { return };
        let group = tree.group().unwrap();
        let (mut child, sleeper) = start_in(&group, "setsid sleep 60 & echo $!; wait");
        assert!(group.holds(sleeper));
        let mut tree = Arc::into_inner(tree).unwrap();
        let (mut watchdog, stdin) = tree.watchdog.take().expect("a watchdog");
        drop(stdin);
        watchdog.wait().unwrap();
        let _ = child.wait();
        assert!(
            gone_within(sleeper, 200),
            "the setsid child outlived the watchdog: {}",
            state(sleeper)
        );
        drop(group);
        drop(tree);
    }

    /// Where the host's cgroup v2 hierarchy has the memory controller (a pure v2 host as
    /// root: the GPU machine), a worker's group past its cap is killed whole and its events
    /// say so; elsewhere the test says why it cannot run.
    #[test]
    fn a_group_past_its_memory_cap_is_killed_and_counted() {
        let _one = one_tree_at_a_time();
        let tree = match CgroupTree::open(true) {
            Ok(t) if t.has_memory() => t,
            Ok(t) => {
                eprintln!(
                    "no memory controller here, skipped: {:?}",
                    t.no_memory_why()
                );
                return;
            }
            Err(why) => {
                eprintln!("no cgroup v2 here, skipped: {why}");
                return;
            }
        };
        let group = tree.group().unwrap();
        group.cap_memory(64 << 20).unwrap();
        let mut cmd = Command::new(&group.enter_args()[0]);
        // 256 MiB of touched memory: past a 64 MiB cap.
        cmd.args(&group.enter_args()[1..]).args([
            "python3",
            "-c",
            "b = bytearray(256 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1",
        ]);
        let status = cmd.status().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "{status:?}");
        let events = group.memory_events();
        assert!(events.oom_kill >= 1 && events.oom >= 1, "{events:?}");
    }

    #[test]
    fn mountinfo_escapes_are_read() {
        assert_eq!(unescape("/sys/fs/cgroup"), "/sys/fs/cgroup");
        assert_eq!(unescape("/a\\040b"), "/a b");
    }
}
