//! Sharding over Slurm end to end on a real cluster (CPU only): baselines measured as a 2-shard
//! job array into one store, one shard killed and resubmitted.
//!
//! Needs a cluster: `tests/slurm/setup.sh` (as root) makes a single-node one. The tests run
//! when `KBENCH_SLURM_TESTS=1` (CI sets it, and then a missing cluster is a failure) or when
//! `sinfo` answers; otherwise they say loudly that they were skipped.

use crate::common;
use crate::common_slurm;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{ensure_python, kbench, key, records, shared, show};
use common_slurm::{
    complete_lines, job_ids, manifest, merge, shard_state, slurm_ready, status, task_logs,
    wait_done, Jobs,
};

/// `baselines measure` of four smoke problems in eager and compile, light for 2 cores: the
/// point is the plumbing, not the precision (the timing flags of tests/baselines.rs).
const MEASURE: &[&str] = &[
    "baselines",
    "measure",
    "--suite",
    "smoke",
    "--select",
    "1/1,1/2,1/4,1/9",
    "--modes",
    "eager,compile",
    "--device",
    "cpu",
    "--trials",
    "1",
    "--timed-calls",
    "20",
    "--rounds",
    "10",
    "--cpu-threads",
    "1",
    "--quiet",
];

/// The measuring run directories of every shard: `DIR/shards/i/shard-i-of-N/STAMP-PID/`,
/// oldest first within a shard.
fn measure_runs(dir: &Path, shard: u32) -> Vec<PathBuf> {
    let mut runs = Vec::new();
    let Ok(works) = std::fs::read_dir(dir.join("shards").join(shard.to_string())) else {
        return runs;
    };
    for work in works.flatten().filter(|e| e.path().is_dir()) {
        for run in std::fs::read_dir(work.path()).unwrap().flatten() {
            if run.path().join("records.jsonl").is_file() {
                runs.push(run.path());
            }
        }
    }
    runs.sort();
    runs
}

/// The store's `<slug>/torch-<v>/MODE.json`, or Null while it does not exist.
fn store_file(store: &Path, mode: &str) -> serde_json::Value {
    let Ok(slugs) = std::fs::read_dir(store) else {
        return serde_json::Value::Null;
    };
    for slug in slugs.flatten() {
        for torch in std::fs::read_dir(slug.path()).unwrap().flatten() {
            let p = torch.path().join(format!("{mode}.json"));
            if let Ok(text) = std::fs::read_to_string(&p) {
                return serde_json::from_str(&text).unwrap();
            }
        }
    }
    serde_json::Value::Null
}

#[test]
fn baselines_measured_as_a_job_array_fill_one_store_once() {
    if !slurm_ready() {
        return;
    }
    let _guard = shared();
    let _cluster = common::slurm_cluster();
    ensure_python();
    let t0 = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("measure");
    let store = tmp.path().join("store");
    let _jobs = Jobs(dir.clone());
    let out = kbench()
        .args(["slurm", "submit", "--shards", "2", "--time", "15", "--"])
        .args(MEASURE)
        .arg("--work")
        .arg(&dir)
        .arg("--store")
        .arg(&store)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!(
            "commit their baselines into the store {}",
            store.display()
        )),
        "{}",
        show(&out)
    );
    let job = job_ids(&dir)[0].clone();
    let script = std::fs::read_to_string(dir.join("slurm/job.sbatch")).unwrap();
    assert!(
        script.contains(&format!(
            "--store {} --work \"$dir\" --shard \"$shard/2\"",
            store.display()
        )),
        "{script}"
    );
    assert!(!dir.join("secret").exists(), "a measurement has no secret");

    // Once shard 1 has measured its first problem, well before its second: kill it.
    let recorded = |i: u32| -> usize {
        measure_runs(&dir, i)
            .iter()
            .map(|r| {
                complete_lines(&r.join("records.jsonl"))
                    .iter()
                    .filter(|&&b| b == b'\n')
                    .count()
            })
            .sum()
    };
    let start = Instant::now();
    while recorded(1) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "shard 1 measured nothing in 180 s\n{}",
            task_logs(&dir)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let killed = Command::new("scancel")
        .arg(format!("{job}_1"))
        .output()
        .unwrap();
    assert!(killed.status.success(), "{}", show(&killed));
    let start = Instant::now();
    let json = loop {
        let (_, json, _) = status(&dir);
        if shard_state(&json, 1) == "stopped" && shard_state(&json, 0) != "active" {
            break json;
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "shard 1 not stopped or shard 0 not ended: {json}\n{}",
            task_logs(&dir)
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(shard_state(&json, 0), "done", "{json}\n{}", task_logs(&dir));
    assert_eq!(json["command"], "baselines measure", "{json}");
    assert_eq!(json["store"], store.display().to_string(), "{json}");
    let code = std::fs::read_to_string(dir.join("shards/1/exit_code")).unwrap_or_default();
    assert!(
        code.trim() != "0",
        "shard 1 finished before it was killed; the test proves nothing: {json}"
    );
    // The store lacks some of shard 1's work: it is still to be measured.
    let missing_before = {
        let compile = store_file(&store, "compile");
        let n = compile["level1"].as_object().map_or(0, |m| m.len());
        4 - n
    };
    assert!(missing_before > 0, "nothing left to measure after the kill");
    let first_runs = measure_runs(&dir, 1);
    eprintln!(
        "killed {job}_1 after {} record(s), {missing_before} problem(s) left: {}",
        recorded(1),
        json["shards"]
    );

    let out = kbench()
        .args(["slurm", "resubmit"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let jobs = job_ids(&dir);
    assert_eq!(jobs.len(), 2, "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains(&format!("resubmitted shard(s) 1 as job {}", jobs[1])),
        "{}",
        show(&out)
    );
    wait_done(&dir, Duration::from_secs(240));

    // Every measuring run of every shard, and what it recorded: each problem's compile
    // candidate once over all of them (eager is the reference side of the same records).
    let mut run_ids = BTreeMap::new();
    let mut measured = BTreeMap::new();
    for i in 0..2 {
        for run in measure_runs(&dir, i) {
            let id = manifest(&run)["run_id"].as_str().unwrap().to_string();
            run_ids.insert(id.clone(), (i, run.clone()));
            for r in records(&run) {
                let k = key(&r);
                let file = r["problem"]["file"].as_str().unwrap().to_string();
                assert_eq!(r["candidate"]["name"], "compile", "{k}");
                assert_eq!(r["outcome"]["kind"], "ok", "{k}: {r}");
                let prev = measured.insert(file, (i, id.clone()));
                assert!(prev.is_none(), "{k} measured twice ({prev:?})");
            }
        }
    }
    // The killed shard resumed: its first run's records were kept, and a second run measured
    // only the rest.
    assert_eq!(first_runs.len(), 1, "{first_runs:?}");
    let after = measure_runs(&dir, 1);
    assert_eq!(after.len(), 2, "{after:?}");
    assert_eq!(after[0], first_runs[0]);
    assert!(!records(&after[0]).is_empty() && !records(&after[1]).is_empty());
    assert_eq!(measured.len(), 4, "{measured:?}");
    // What the killed run recorded but had not committed to the store yet was folded in by
    // the resubmitted shard.
    let resumed =
        std::fs::read_to_string(dir.join(format!("slurm/logs/{}_1.out", jobs[1]))).unwrap();
    assert!(resumed.contains("kbench shard 1/2"), "{resumed}");
    if missing_before == 2 {
        assert!(
            resumed.contains("recovered 2 entr"),
            "no record folded from the killed run: {resumed}"
        );
    }

    // The one store holds each problem once per mode, with the time its shard measured.
    for mode in ["eager", "compile"] {
        let f = store_file(&store, mode);
        let entries = f["level1"]
            .as_object()
            .unwrap_or_else(|| panic!("{mode}: {f}"));
        assert_eq!(
            entries.keys().cloned().collect::<BTreeSet<_>>(),
            measured.keys().cloned().collect::<BTreeSet<_>>(),
            "{mode}"
        );
        let failed = f["errors"].as_object().map_or(0, |m| {
            m.values()
                .filter_map(|l| l.as_object())
                .map(|l| l.len())
                .sum()
        });
        assert_eq!(failed, 0, "{mode}: {f}");
        for (file, e) in entries {
            assert!(e["median"].as_f64().unwrap() > 0.0, "{mode} {file}: {e}");
            let id = e["run_id"].as_str().unwrap();
            assert_eq!(id, measured[file].1, "{mode} {file}: from another run");
            assert!(
                run_ids.contains_key(id),
                "{mode} {file}: run {id} is no shard's"
            );
        }
    }

    // status counts every run's records; `show` lists the store; merge has nothing to do.
    let (code, json, out) = status(&dir);
    assert_eq!(code, Some(0), "{}", show(&out));
    let total: u64 = (0..2)
        .map(|i| json["shards"][i]["records"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 4, "{json}");
    let out = kbench()
        .args(["slurm", "status"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!(
            "kbench baselines show --store {}",
            store.display()
        )),
        "{}",
        show(&out)
    );
    let out = kbench()
        .args(["baselines", "show", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let listing = String::from_utf8_lossy(&out.stdout);
    for mode in ["eager", "compile"] {
        assert!(
            listing
                .lines()
                .any(|l| l.contains(&format!(" {mode} ")) && l.contains("L1:4")),
            "{mode} not listed with 4 problems:\n{listing}"
        );
    }
    let before = std::fs::read(store_file_path(&store, "compile")).unwrap();
    let out = merge(&[&dir]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("nothing to merge") && said.contains(&store.display().to_string()),
        "{}",
        show(&out)
    );
    assert!(!dir.join("records.jsonl").exists() && !dir.join("run.json").exists());
    assert_eq!(
        std::fs::read(store_file_path(&store, "compile")).unwrap(),
        before
    );
    eprintln!("measured over Slurm in {:?}", t0.elapsed());
}

fn store_file_path(store: &Path, mode: &str) -> PathBuf {
    let slug = std::fs::read_dir(store).unwrap().flatten().next().unwrap();
    let torch = std::fs::read_dir(slug.path())
        .unwrap()
        .flatten()
        .next()
        .unwrap();
    torch.path().join(format!("{mode}.json"))
}
