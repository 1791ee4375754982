//! Bounded workers, end to end: real `kbench run`s on the CPU with real processes, signals,
//! memory limits and files.
//!
//! - Every worker ends when kbench ends, SIGKILL included, sandboxed or not: a reference busy
//!   building its model, a candidate busy at its import and the child it started are all gone
//!   once kbench is killed (each worker's environment names kbench's pid, which is how the
//!   test finds them in /proc).
//! - A memory cap bounds every worker: a problem whose `get_inputs()` asks for 10 GiB is a
//!   `reference_error` that names the cap and `--memory-cap`, a candidate that allocates 12 GiB
//!   gets `memory_cap`, the next problem is evaluated, and the run's processes stay far below
//!   what was asked for.
//! - As root, sandboxed candidates run as an unprivileged uid: a 0600 file of root's in a
//!   folder the sandbox shows, and `/etc/shadow`, are unreadable to them, while an honest
//!   candidate still imports torch, builds a `load_inline` extension (a cold build, as that
//!   uid) and is correct.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{ensure_python, kbench, records, shared, show, RunBuilder};
use serde_json::Value;

/// Writes `files` (name, source) into `dir`.
fn write_all(dir: &Path, files: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

/// A KernelBench-layout problem: `Model` computes `forward_expr` of `x`; `init` and `inputs`
/// are Python run in `__init__` and `get_inputs` before they return.
fn problem(forward_expr: &str, init: &str, inputs: &str) -> String {
    format!(
        "import time\nimport torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    \
         def __init__(self):\n        super().__init__()\n        {init}\n\n    \
         def forward(self, x):\n        return {forward_expr}\n\n\n\
         def get_inputs():\n    {inputs}\n    return [torch.randn(16, 32)]\n\n\n\
         def get_init_inputs():\n    return []\n"
    )
}

/// A candidate computing `forward_expr`, after `module` at its import and `call` in forward.
fn kernel(forward_expr: &str, module: &str, call: &str) -> String {
    format!(
        "import subprocess\nimport sys\nimport time\nimport torch\nimport torch.nn as nn\n\n{module}\n\n\n\
         class ModelNew(nn.Module):\n    def forward(self, x):\n        {call}\n        \
         return {forward_expr}\n"
    )
}

/// `kbench run --agent replay` over `kb`'s level 1, quick settings, plus `extra`.
fn replay_run(kb: &Path, replay: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut cmd = kbench();
    cmd.args(
        RunBuilder::new()
            .agent("replay")
            .replay_dir(replay)
            .kernelbench(kb)
            .build(),
    )
    .args([
        "--levels",
        "1",
        "--device",
        "cpu",
        "--families",
        "random",
        // Timing is not what these tests are about (and on a loaded host's two cores an
        // honest kernel's claims are now and then not supported by the harness's clock).
        "--no-timing",
        "--quiet",
        "--out",
    ])
    .arg(out)
    .args(extra);
    cmd
}

/// Processes whose environment holds `KBENCH_HARNESS_PID=<harness>` (every worker of that
/// kbench and what its workers started), with their argv.
fn workers_of(harness: u32) -> Vec<(u32, String)> {
    let marker = format!("KBENCH_HARNESS_PID={harness}");
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(environ) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if environ.split(|b| *b == 0).any(|v| v == marker.as_bytes()) {
            let argv = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            found.push((pid, String::from_utf8_lossy(&argv).replace('\0', " ")));
        }
    }
    found
}

/// Whether process `pid` is gone (or a zombie, already dead).
fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
        })
        .unwrap_or(true)
}

/// Waits up to `limit` for `ready` to hold of the workers of `child`.
fn wait_for(
    child: &mut Child,
    limit: Duration,
    ready: impl Fn(&[(u32, String)]) -> bool,
) -> Vec<(u32, String)> {
    let until = Instant::now() + limit;
    loop {
        let seen = workers_of(child.id());
        if ready(&seen) {
            return seen;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("kbench ended before its workers were all busy ({status}): {seen:?}");
        }
        assert!(
            Instant::now() < until,
            "the workers were not all busy within {limit:?}: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// SIGKILL to kbench while the next problem's reference, started ahead, builds its model, and
/// the first problem's candidate sleeps at its import beside the child it started: nothing of
/// theirs is left.
fn no_worker_outlives_a_killed_kbench(extra: &[&str]) {
    let _guard = shared();
    ensure_python();
    let dir = tempfile::tempdir().unwrap();
    let kb = dir.path().join("kb");
    write_all(
        &kb.join("level1"),
        &[
            ("1_Plain.py", &problem("x + 1", "", "")),
            ("2_SlowInit.py", &problem("x + 1", "time.sleep(600)", "")),
        ],
    );
    let replay = dir.path().join("replay");
    let module = "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)  # child of the candidate'])\ntime.sleep(600)";
    write_all(
        &replay,
        &[
            ("1_sleeps.py", &kernel("x + 1", module, "")),
            ("2_plain.py", &kernel("x + 1", "", "")),
        ],
    );
    let mut child = replay_run(&kb, &replay, &dir.path().join("run"), extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let harness = child.id();
    let busy = wait_for(&mut child, Duration::from_secs(120), |seen| {
        let count = |needle: &str| seen.iter().filter(|(_, a)| a.ends_with(needle)).count();
        let child = seen
            .iter()
            .any(|(_, a)| a.contains("child of the candidate"));
        count(" reference ") >= 2 && count(" candidate ") >= 1 && child
    });
    // The candidate is asleep at its import (after torch's), the second reference (its load
    // sent ahead once it said hello) in its model's construction.
    std::thread::sleep(Duration::from_secs(2));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(harness as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    let mut left = workers_of(harness);
    while !left.is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
        left = workers_of(harness);
        left.retain(|(pid, _)| !gone(*pid));
    }
    // Ended by hand whatever outlived kbench, so that a failure leaves nothing behind.
    for (pid, _) in &left {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(
        left.is_empty(),
        "left running after kbench was killed ({extra:?}): {left:?}\nbusy before: {busy:?}"
    );
    // kbench's cgroup watchdog (where it has a cgroup folder) ends too, once it has killed
    // the folder.
    let folder = format!("kbench-{harness}");
    let watchdogs = || -> Vec<String> {
        common::processes_naming(&folder)
            .into_iter()
            .map(|(_, a)| a)
            .filter(|a| a.contains("cgroup.kill"))
            .collect()
    };
    let until = Instant::now() + Duration::from_secs(10);
    while !watchdogs().is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(watchdogs().is_empty(), "{:?}", watchdogs());
}

#[test]
fn no_sandboxed_worker_outlives_a_killed_kbench() {
    no_worker_outlives_a_killed_kbench(&[]);
}

#[test]
fn no_uncontained_worker_outlives_a_killed_kbench() {
    no_worker_outlives_a_killed_kbench(&["--no-sandbox"]);
}

/// The resident memory of kbench and its workers, bytes, sampled every 50 ms until `done`;
/// past `kill_at` the run is killed (so that a cap that does not hold cannot take the host
/// with it). Returns the peak.
fn watch_memory(harness: u32, done: Arc<AtomicBool>, kill_at: u64) -> std::thread::JoinHandle<u64> {
    let peak = Arc::new(AtomicU64::new(0));
    std::thread::spawn(move || {
        let rss = |pid: u32| -> u64 {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .map_or(0, |kb| kb * 1024)
        };
        while !done.load(Ordering::SeqCst) {
            let total: u64 = rss(harness)
                + workers_of(harness)
                    .iter()
                    .map(|(p, _)| rss(*p))
                    .sum::<u64>();
            peak.fetch_max(total, Ordering::SeqCst);
            if total > kill_at {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(harness as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        peak.load(Ordering::SeqCst)
    })
}

/// `--memory-cap 2GiB`: the reference of a problem whose inputs are 10 GiB is a clear
/// `reference_error`, a candidate that allocates 12 GiB gets `memory_cap`, the next problem is
/// evaluated and is correct, and the run never holds more than a few GiB.
#[test]
fn workers_past_their_memory_cap_cost_their_own_verdict_and_the_run_goes_on() {
    let _guard = shared();
    ensure_python();
    const GIB: u64 = 1 << 30;
    let dir = tempfile::tempdir().unwrap();
    let kb = dir.path().join("kb");
    write_all(
        &kb.join("level1"),
        &[
            (
                "1_HugeInputs.py",
                &problem(
                    "x * 2",
                    "",
                    "return [torch.ones(10 * (1 << 30) // 4)]  # 10 GiB",
                ),
            ),
            ("2_Hog.py", &problem("torch.relu(x)", "", "")),
            ("3_Honest.py", &problem("x - 1", "", "")),
        ],
    );
    let replay = dir.path().join("replay");
    write_all(
        &replay,
        &[
            ("1_doubles.py", &kernel("x * 2", "", "")),
            (
                "2_hog.py",
                &kernel(
                    "torch.relu(x) + hog[:1] * 0",
                    "",
                    "hog = torch.ones(12 * (1 << 30) // 4)  # 12 GiB",
                ),
            ),
            ("3_honest.py", &kernel("x - 1", "", "")),
        ],
    );
    let out = dir.path().join("run");
    let child = replay_run(&kb, &replay, &out, &["--memory-cap", "2GiB"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let watcher = watch_memory(child.id(), Arc::clone(&done), 8 * GIB);
    let o = child.wait_with_output().unwrap();
    done.store(true, Ordering::SeqCst);
    let peak = watcher.join().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let by_problem = |id: u64| -> Value {
        records(&out)
            .into_iter()
            .find(|r| r["problem"]["id"] == id)
            .unwrap_or_else(|| panic!("no record of problem {id}: {}", show(&o)))
    };
    let reference = by_problem(1);
    let outcome = &reference["outcome"];
    assert_eq!(outcome["kind"], "reference_error", "{outcome}");
    let message = outcome["message"].as_str().unwrap();
    let shown = serde_json::from_value::<kbench_record::Outcome>(outcome.clone())
        .unwrap()
        .to_string();
    for text in [message, shown.as_str()] {
        assert!(
            text.contains("1_HugeInputs.py")
                && text.contains("memory cap of 2.0 GiB")
                && text.contains("--memory-cap"),
            "{text}"
        );
    }
    let hog = by_problem(2);
    assert_eq!(hog["outcome"]["kind"], "memory_cap", "{}", hog["outcome"]);
    assert_eq!(hog["outcome"]["limit_bytes"], 2 * GIB);
    let summary = String::from_utf8_lossy(&o.stdout);
    assert!(summary.contains("memory_cap"), "{summary}");
    assert_eq!(
        by_problem(3)["outcome"]["kind"],
        "ok",
        "{}",
        by_problem(3)["outcome"]
    );
    let bounds = &by_problem(3)["env"]["bounds"];
    assert_eq!(bounds["memory_cap_bytes"], 2 * GIB, "{bounds}");
    // The cap held: kbench and all its workers together stayed far below the 10 and 12 GiB
    // asked for (each worker: torch, at most its 2 GiB).
    assert!(
        peak < 5 * GIB,
        "kbench and its workers held {:.1} GiB at their peak",
        peak as f64 / GIB as f64
    );
    eprintln!(
        "peak resident memory of kbench and its workers: {:.2} GiB ({})",
        peak as f64 / GIB as f64,
        bounds["memory_cap_by"]
    );
}

/// As root, a sandboxed candidate runs as an unprivileged uid: a 0600 file of root's in
/// `/etc` (a folder the sandbox shows) and `/etc/shadow` are unreadable to it, and what it
/// saw is in its log; an honest candidate still builds its `load_inline` extension cold, as
/// that uid, and is correct. The Python is named `python3` and found on PATH.
#[test]
fn sandboxed_candidates_cannot_read_files_only_root_may_read() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!(
            "skipped: kbench runs as an ordinary user here, and candidates run as that user \
             (only root can change uid)"
        );
        return;
    }
    let _guard = shared();
    ensure_python();
    let dir = tempfile::tempdir().unwrap();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let mark = format!("kbench-root-only-{}-{nanos}", std::process::id());
    let secret = RemovedOnDrop(PathBuf::from("/etc").join(&mark));
    std::fs::write(&secret.0, &mark).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&secret.0, std::fs::Permissions::from_mode(0o600)).unwrap();
    let peek = format!(
        "import os\nimport sys\n\n\ndef _peek(path):\n    try:\n        with open(path, 'rb') as f:\n            \
         return 'READ %r' % f.read(64)\n    except OSError as e:\n        return 'refused (%s)' % e.strerror\n\n\n\
         print('peek: uid %d' % os.getuid(), file=sys.stderr)\n\
         for p in ['/etc/shadow', {secret:?}]:\n    print('peek: %s %s' % (p, _peek(p)), file=sys.stderr)\n",
        secret = secret.0.display().to_string()
    );
    let replay = dir.path().join("replay");
    let fixtures = common::repo_root().join("tests/fixtures/replay_smoke");
    let torch = std::fs::read_to_string(fixtures.join("1_correct_torch.py")).unwrap();
    // A source of its own: a build folder no earlier run made, so it is built now, as the uid.
    let cpp = std::fs::read_to_string(fixtures.join("1_correct_cpp.py"))
        .unwrap()
        .replace("kbench_fixture_multiply_add_correct", "kbench_uid_build")
        + &format!("# {mark}\n");
    write_all(
        &replay,
        &[
            ("1_peeks.py", &format!("{peek}\n{torch}")),
            ("1_builds.py", &cpp),
        ],
    );
    let out = dir.path().join("run");
    // As on the GPU machine: `KBENCH_PYTHON=python3`, a venv's interpreter found on PATH
    // (the check that the uid can read torch once ran the system's Python instead).
    let cache = std::env::var_os("KBENCH_CACHE_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/kbench"));
    let venv_bin = std::path::absolute(cache.join("venv/bin")).unwrap();
    assert!(
        venv_bin.join("python3").exists(),
        "no {}",
        venv_bin.display()
    );
    let path = format!(
        "{}:{}",
        venv_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = kbench()
        .env("KBENCH_PYTHON", "python3")
        .env("PATH", path)
        .args(
            RunBuilder::new()
                .suite("smoke")
                .select("1")
                .agent("replay")
                .build(),
        )
        .args(["--device", "cpu", "--no-timing", "--families", "random"])
        .args(["--build-jobs", "0", "--replay-dir"])
        .arg(&replay)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("sandboxed candidates run as uid 65534"),
        "{}",
        show(&o)
    );
    let recs = records(&out);
    let by_name = |n: &str| -> &Value {
        recs.iter()
            .find(|r| r["candidate"]["name"] == n)
            .unwrap_or_else(|| panic!("no record of {n}: {}", show(&o)))
    };
    for name in ["1_peeks", "1_builds"] {
        let r = by_name(name);
        assert_eq!(
            r["outcome"]["kind"], "ok",
            "{name}: {}\n{}",
            r["outcome"], r["log_tail"]
        );
        assert_eq!(r["env"]["bounds"]["candidate_uid"], 65534, "{}", r["env"]);
    }
    let log = by_name("1_peeks")["log_tail"].as_str().unwrap().to_string();
    assert!(log.contains("peek: uid 65534"), "{log}");
    assert!(log.contains("peek: /etc/shadow refused"), "{log}");
    assert!(
        log.contains(&format!("peek: {} refused", secret.0.display())),
        "{log}"
    );
    assert!(!log.contains("READ"), "{log}");
}

/// A file removed when the test ends, however it ends.
struct RemovedOnDrop(PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
