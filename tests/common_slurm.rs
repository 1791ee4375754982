//! Helpers shared by the Slurm tests (tests/slurm_run.rs, tests/slurm_measure.rs): whether
//! a cluster answers, submitting and following a sharded run through the kbench binary, and
//! reading what the shards wrote. A test file imports both (`use crate::common_slurm;`).

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common::{kbench, key, records, show, RunBuilder};

/// Whether to run; panics when `KBENCH_SLURM_TESTS=1` but there is no working cluster.
pub fn slurm_ready() -> bool {
    let required = std::env::var("KBENCH_SLURM_TESTS").is_ok_and(|v| v == "1");
    let sinfo = Command::new("sinfo").args(["-h", "-o", "%P %t"]).output();
    let works = sinfo.as_ref().is_ok_and(|o| o.status.success());
    if !works {
        let why = match &sinfo {
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Err(e) => e.to_string(),
        };
        assert!(
            !required,
            "KBENCH_SLURM_TESTS=1 but Slurm does not answer (sinfo: {why}); run tests/slurm/setup.sh as root first"
        );
        eprintln!(
            "SKIPPED the Slurm tests: no cluster (sinfo: {why}). Run tests/slurm/setup.sh as root and set KBENCH_SLURM_TESTS=1."
        );
        return false;
    }
    true
}

/// The smoke suite's evaluation, made light for 2 cores: correctness only, one thread (the
/// caller adds `--out`).
pub fn smoke_run() -> RunBuilder {
    RunBuilder::new()
        .suite("smoke")
        .agent("reference")
        .device("cpu")
        .no_timing()
        .args(["--cpu-threads", "1"])
        .quiet()
}

/// Cancels the submission's jobs when a test ends, so a failed test leaves no tasks behind.
pub struct Jobs(pub PathBuf);

impl Drop for Jobs {
    fn drop(&mut self) {
        for id in job_ids(&self.0) {
            let _ = Command::new("scancel").arg(id).status();
        }
    }
}

pub fn job_ids(dir: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(dir.join("slurm/submission.json")) else {
        return Vec::new();
    };
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_str().unwrap().to_string())
        .collect()
}

pub fn submit(dir: &Path, shards: u32) -> Output {
    let out = kbench()
        .args([
            "slurm",
            "submit",
            "--shards",
            &shards.to_string(),
            "--time",
            "15",
        ])
        .arg("--")
        .args(smoke_run().out(dir).build())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    out
}

pub fn status(dir: &Path) -> (Option<i32>, serde_json::Value, Output) {
    let out = kbench()
        .args(["slurm", "status", "--json"])
        .arg(dir)
        .output()
        .unwrap();
    let json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("status --json is not JSON ({e}): {}", show(&out)));
    (out.status.code(), json, out)
}

/// Everything Slurm wrote for the tasks, for failure messages.
pub fn task_logs(dir: &Path) -> String {
    let mut s = String::new();
    if let Ok(entries) = std::fs::read_dir(dir.join("slurm/logs")) {
        for e in entries.flatten() {
            s += &format!(
                "--- {}\n{}\n",
                e.path().display(),
                std::fs::read_to_string(e.path()).unwrap_or_default()
            );
        }
    }
    s
}

/// Polls `kbench slurm status` until every shard is done; fails on a stopped shard.
pub fn wait_done(dir: &Path, limit: Duration) {
    let start = Instant::now();
    loop {
        let (code, json, out) = status(dir);
        match code {
            Some(0) => return,
            Some(4) => {}
            _ => panic!(
                "a shard stopped unexpectedly: {}\n{}\n{}",
                show(&out),
                json,
                task_logs(dir)
            ),
        }
        assert!(
            start.elapsed() < limit,
            "shards not done after {limit:?}: {json}\n{}",
            task_logs(dir)
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

pub fn shard_state(json: &serde_json::Value, shard: usize) -> String {
    json["shards"][shard]["state"].as_str().unwrap().to_string()
}

/// key → (outcome kind, per-case verdicts): what must equal between two runs of one plan.
pub fn verdicts(dir: &Path) -> BTreeMap<String, (String, Vec<(String, bool)>)> {
    let mut m = BTreeMap::new();
    for r in records(dir) {
        let cases = r["cases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["case"].to_string(), c["passed"].as_bool().unwrap()))
            .collect();
        let prev = m.insert(key(&r), (r["outcome"]["kind"].to_string(), cases));
        assert!(
            prev.is_none(),
            "{} recorded twice in {}",
            key(&r),
            dir.display()
        );
    }
    m
}

pub fn manifest(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap()
}

pub fn merge(args: &[&Path]) -> Output {
    kbench().arg("merge").args(args).output().unwrap()
}

pub fn smoke_keys() -> BTreeSet<String> {
    let out = kbench()
        .args(["list", "--suite", "smoke"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            format!("smoke/L{}/{}::reference::reference::0", f[0], f[1])
        })
        .collect()
}

/// Complete lines of a run log, as bytes.
pub fn complete_lines(path: &Path) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap_or_default();
    match bytes.iter().rposition(|&b| b == b'\n') {
        Some(end) => bytes[..=end].to_vec(),
        None => Vec::new(),
    }
}
