//! The run folder against a candidate that reaches it, and a run stopped by a signal, with the
//! real binary, real Python workers and real signals (CPU smoke suite):
//!
//! - record lines are signed: a line rewritten, a forged line appended and a truncated line
//!   are each named and skipped by `kbench report`, `kbench merge` and `--resume`, which
//!   evaluates the skipped kernel again;
//! - one writer per `--out`: a second `kbench run` on a live folder is refused, naming the
//!   holder's pid, with and without `--resume`;
//! - SIGTERM and SIGHUP stop a run like SIGINT: the interrupted exit code, no process of the
//!   run left, and `--resume` completes it with nothing lost and nothing twice.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{ensure_python, kbench, shared, show, RunBuilder};
use kbench::runlog::{LineFault, RecordLog};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Timed calls per kernel: a resumed run must ask what it recorded.
const CALLS: &str = "50";

/// `kbench run` of smoke problems `select` on the CPU into `out`.
fn smoke(out: &Path, select: &str) -> Command {
    let mut c = kbench();
    c.args(
        RunBuilder::new()
            .suite("smoke")
            .agent("reference")
            .device("cpu")
            .quiet()
            .select(select)
            .timed_calls(CALLS)
            .out(out)
            .build(),
    );
    c
}

/// Starts `c` in a process group of its own (as a shell starts a job), so that what is left
/// of it afterwards can be found by its group.
fn spawn(mut c: Command) -> Child {
    use std::os::unix::process::CommandExt;
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap()
}

fn wait_until(what: &str, child: &mut Child, limit: Duration, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{what}: the run ended first ({status})");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The good lines' keys and the bad lines of a run folder's log, as kbench verifies them.
fn verified(dir: &Path) -> (Vec<String>, Vec<(usize, LineFault)>) {
    let log = RecordLog::of_run(dir).unwrap();
    assert_eq!(log.unverified, 0, "{:?}", log.warnings());
    let keys = log.lines.iter().map(|l| l.record.key()).collect();
    (keys, log.bad)
}

fn problem_ids(keys: &[String]) -> Vec<u32> {
    // Keys read `smoke/L<level>/<id>::agent::name::sample`.
    let mut ids: Vec<u32> = keys
        .iter()
        .map(|k| {
            let problem = k.split("::").next().unwrap();
            problem.rsplit('/').next().unwrap().parse().unwrap()
        })
        .collect();
    ids.sort();
    ids
}

fn assert_unique(keys: &[String]) {
    let unique: BTreeSet<&String> = keys.iter().collect();
    assert_eq!(
        unique.len(),
        keys.len(),
        "a kernel recorded twice: {keys:?}"
    );
}

/// Line 1 rewritten (its speedup set to 1000), a forged line appended (line 2 with a made-up
/// MAC and speedup 1000), and a truncated line (half of line 3, no newline).
fn tamper(records: &Path) {
    let text = std::fs::read_to_string(records).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    let with_speedup = |l: &str| {
        let at = l.find("\"speedup\":").expect("a timed record") + 10;
        let end = at + l[at..].find([',', '}']).unwrap();
        format!("{}1000.0{}", &l[..at], &l[end..])
    };
    let rewritten = with_speedup(lines[0]);
    let forged = {
        let l = with_speedup(lines[1]);
        let mac_at = "{\"mac\":\"".len();
        format!("{}{}{}", &l[..mac_at], "0".repeat(64), &l[mac_at + 64..])
    };
    let torn = &lines[2][..lines[2].len() / 2];
    let text = format!("{rewritten}\n{}\n{}\n{forged}\n{torn}", lines[1], lines[2]);
    std::fs::write(records, text).unwrap();
}

fn says_bad_lines(stderr: &str, file: &str) {
    for (line, why) in [(1, "bad MAC"), (4, "bad MAC"), (5, "truncated")] {
        let want = format!("{file} line {line}: {why}");
        assert!(stderr.contains(&want), "{want:?} not said:\n{stderr}");
    }
}

#[test]
fn rewritten_forged_and_truncated_lines_are_named_and_skipped_by_report_merge_and_resume() {
    let _guard = shared();
    ensure_python();
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let out = smoke(&run, "1,2,3").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let (keys, bad) = verified(&run);
    assert_eq!(problem_ids(&keys), vec![1, 2, 3]);
    assert!(bad.is_empty(), "a fresh run's records verify: {bad:?}");

    let records = run.join("records.jsonl");
    tamper(&records);
    let file = records.display().to_string();

    // report: names each bad line, prints the rest, exits 0; the forged 1000x is not read.
    let out = kbench().arg("report").arg(&run).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    says_bad_lines(&String::from_utf8_lossy(&out.stderr), &file);
    assert!(stdout.contains("2 records"), "{stdout}");
    assert!(
        !stdout.contains("1000"),
        "a forged speedup was read:\n{stdout}"
    );
    // leaderboard reads the same way.
    let out = kbench()
        .arg("leaderboard")
        .arg(&run)
        .arg("--out")
        .arg(tmp.path().join("board.html"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    says_bad_lines(&String::from_utf8_lossy(&out.stderr), &file);

    // merge: the good lines, copied as written; the bad ones named and left out.
    let merged = tmp.path().join("merged");
    let out = kbench()
        .arg("merge")
        .arg(&run)
        .arg("--out")
        .arg(&merged)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    says_bad_lines(&String::from_utf8_lossy(&out.stderr), &file);
    let (keys, bad) = verified(&merged);
    assert_eq!(problem_ids(&keys), vec![2, 3]);
    assert!(bad.is_empty(), "{bad:?}");

    // --resume: names the lines, cuts the truncated one off, evaluates problem 1 again (its
    // line failed), and records problems 2 and 3 once.
    let before = std::fs::read(&records).unwrap();
    let out = smoke(&run, "1,2,3").arg("--resume").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    says_bad_lines(&String::from_utf8_lossy(&out.stderr), &file);
    let (keys, bad) = verified(&run);
    assert_eq!(problem_ids(&keys), vec![1, 2, 3]);
    assert_unique(&keys);
    let faults: Vec<(usize, LineFault)> = bad;
    assert_eq!(
        faults,
        vec![(1, LineFault::BadMac), (4, LineFault::BadMac)],
        "the truncated line is cut off; the others stay, skipped"
    );
    let after = std::fs::read(&records).unwrap();
    let whole = before.iter().rposition(|&b| b == b'\n').unwrap() + 1;
    assert!(
        after.starts_with(&before[..whole]),
        "complete lines were changed by --resume"
    );
    let out = kbench().arg("report").arg(&run).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("3 records"));
}

#[test]
fn a_second_run_on_a_live_out_is_refused_naming_the_holders_pid() {
    let _guard = shared();
    ensure_python();
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    // Four problems: the run is still going while the others try.
    let mut holder = spawn(smoke(&run, "1,2,3,4"));
    wait_until("run.json", &mut holder, Duration::from_secs(120), || {
        run.join("run.json").exists()
    });
    let pid = format!("pid {}", holder.id());
    for resume in [false, true] {
        let mut c = smoke(&run, "1,2,3,4");
        if resume {
            c.arg("--resume");
        }
        let out = c.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(1),
            "resume {resume}: {}",
            show(&out)
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("is being written by another kbench") && err.contains(&pid),
            "resume {resume}: the holder ({pid}) is not named:\n{err}"
        );
    }
    assert!(
        holder.try_wait().unwrap().is_none(),
        "the holder was disturbed"
    );
    kill(Pid::from_raw(holder.id() as i32), Signal::SIGTERM).unwrap();
    let out = holder.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", show(&out));
    // The holder gone, its lock went with it: the folder resumes.
    let out = smoke(&run, "1").arg("--resume").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
}

/// A process as `/proc/PID/stat` tells it.
#[derive(Debug, Clone, PartialEq)]
struct Proc {
    pid: i32,
    ppid: i32,
    pgid: i32,
    state: char,
    start: u64,
}

fn stat(pid: i32) -> Option<Proc> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name (which may hold spaces and parentheses): state, ppid, pgrp, ...
    let f: Vec<&str> = s[s.rfind(')')? + 2..].split(' ').collect();
    Some(Proc {
        pid,
        ppid: f[1].parse().ok()?,
        pgid: f[2].parse().ok()?,
        state: f[0].chars().next()?,
        start: f[19].parse().ok()?,
    })
}

fn all_procs() -> Vec<Proc> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(stat)
        .collect()
}

/// `root` and every process below it.
fn tree(root: i32) -> Vec<Proc> {
    let procs = all_procs();
    let mut out: Vec<Proc> = procs.iter().filter(|p| p.pid == root).cloned().collect();
    let mut i = 0;
    while i < out.len() {
        let parent = out[i].pid;
        out.extend(procs.iter().filter(|p| p.ppid == parent).cloned());
        i += 1;
    }
    out
}

fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// Stops a run with `sig` while a kernel is in flight, then checks what is left and resumes.
fn stopped_mid_run_resumes(sig: Signal) {
    let _guard = shared();
    ensure_python();
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let records = run.join("records.jsonl");
    let mut child = spawn(smoke(&run, "1,2,3"));
    let root = child.id() as i32;
    wait_until(
        "a first record",
        &mut child,
        Duration::from_secs(300),
        || std::fs::read_to_string(&records).is_ok_and(|t| t.lines().count() >= 1),
    );
    // Wait for the next kernel's workers (reference and candidate), then note every process
    // of the run.
    let mut seen: Vec<Proc> = Vec::new();
    wait_until(
        "workers of the next kernel",
        &mut child,
        Duration::from_secs(60),
        || {
            for p in tree(root) {
                if !seen.iter().any(|s| s.pid == p.pid && s.start == p.start) {
                    seen.push(p);
                }
            }
            tree(root).iter().filter(|p| p.pid != root).count() >= 2
        },
    );
    std::thread::sleep(Duration::from_millis(500));
    for p in tree(root) {
        if !seen.iter().any(|s| s.pid == p.pid && s.start == p.start) {
            seen.push(p);
        }
    }
    let n_before = std::fs::read_to_string(&records).unwrap().lines().count();
    kill(Pid::from_raw(root), sig).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{sig}: not the interrupted exit code\n{}",
        show(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--resume"),
        "{}",
        show(&out)
    );

    // Nothing of the run is left: none of the processes seen, nothing in their process
    // groups or kbench's, no process naming the run folder.
    let groups: BTreeSet<i32> = seen.iter().map(|p| p.pgid).chain([root]).collect();
    let run_path = run.display().to_string();
    let t0 = Instant::now();
    let left = loop {
        let left: Vec<(Proc, String)> = all_procs()
            .into_iter()
            .filter(|p| p.state != 'Z')
            .filter(|p| {
                seen.iter().any(|s| s.pid == p.pid && s.start == p.start)
                    || groups.contains(&p.pgid)
                    || cmdline(p.pid).contains(&run_path)
            })
            .map(|p| {
                let c = cmdline(p.pid);
                (p, c)
            })
            .collect();
        // SIGKILLed processes may take a moment to be gone.
        if left.is_empty() || t0.elapsed() > Duration::from_secs(2) {
            break left;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(seen.len() >= 3, "expected kbench and two workers: {seen:?}");
    assert!(left.is_empty(), "{sig}: left running: {left:?}");

    // What was recorded is kept; --resume completes the run, each kernel once.
    let before = std::fs::read(&records).unwrap();
    let (keys, bad) = verified(&run);
    assert!(bad.is_empty(), "{bad:?}");
    assert!(keys.len() >= n_before && keys.len() < 3, "{keys:?}");
    let out = smoke(&run, "1,2,3").arg("--resume").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let after = std::fs::read(&records).unwrap();
    assert!(after.starts_with(&before), "records were lost or changed");
    let (keys, bad) = verified(&run);
    assert!(bad.is_empty(), "{bad:?}");
    assert_unique(&keys);
    assert_eq!(problem_ids(&keys), vec![1, 2, 3]);
}

#[test]
fn sigterm_mid_run_stops_it_leaving_nothing_and_resume_completes_it() {
    stopped_mid_run_resumes(Signal::SIGTERM);
}

#[test]
fn sighup_mid_run_stops_it_leaving_nothing_and_resume_completes_it() {
    // kbench keeps a SIGHUP that was ignored when it started ignored (`nohup kbench ...`), and
    // the run it spawns inherits this process's dispositions: under `nohup cargo test` the
    // run would finish and exit 0, which says nothing about kbench.
    if sighup_ignored_here() {
        println!("skipped: SIGHUP is ignored in this process (nohup?), so in the run too");
        return;
    }
    stopped_mid_run_resumes(Signal::SIGHUP);
}

/// Whether this process ignores SIGHUP (bit 0 of `SigIgn` in /proc/self/status).
fn sighup_ignored_here() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|mask| mask & 1 != 0)
}
