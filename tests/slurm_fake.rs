//! `kbench slurm submit`, `status` and `resubmit` and `kbench merge` against a stand-in Slurm
//! (no cluster needed): what kbench asks of Slurm, and what it does with the answers, for
//! `kbench run` and `kbench baselines measure`.

use crate::common;
use crate::common_slurm;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{kbench, show, RunBuilder};
use common_slurm::shard_state;

/// A stand-in `sbatch`, `squeue` and `sacct` on PATH (no cluster needed): what kbench asks of
/// Slurm, and what it does with the answers.
struct FakeSlurm {
    _dir: tempfile::TempDir,
    bin: PathBuf,
    calls: PathBuf,
    queue: PathBuf,
}

impl FakeSlurm {
    fn new() -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let calls = dir.path().join("sbatch-calls");
        let queue = dir.path().join("queue");
        std::fs::write(&queue, "").unwrap();
        for (name, body) in [
            // Job ids 4242, 4243, ...: one per call.
            (
                "sbatch",
                format!(
                    "echo \"$@\" >> {c}\necho $((4241 + $(wc -l < {c})))\n",
                    c = calls.display()
                ),
            ),
            ("squeue", format!("cat {}\n", queue.display())),
            (
                "sacct",
                "echo 'Slurm accounting storage is disabled' >&2; exit 1\n".into(),
            ),
        ] {
            let p = bin.join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        FakeSlurm {
            _dir: dir,
            bin,
            calls,
            queue,
        }
    }

    fn kbench(&self) -> Command {
        let mut c = kbench();
        let path = std::env::var("PATH").unwrap_or_default();
        c.env("PATH", format!("{}:{path}", self.bin.display()));
        c
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(&self.calls)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

#[test]
fn submit_status_resubmit_and_merge_against_a_fake_slurm() {
    let fake = FakeSlurm::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let submit = |extra: &[&str]| {
        fake.kbench()
            .args(["slurm", "submit", "--shards", "3", "--partition", "gpu"])
            .args([
                "--account",
                "lab",
                "--time",
                "4:00:00",
                "--gpus-per-task",
                "a100:2",
            ])
            .args(["--sbatch=--qos=high"])
            .args(extra)
            .args(["--", "run", "--suite", "smoke", "--device", "cpu", "--out"])
            .arg(&dir)
            .output()
            .unwrap()
    };
    let out = submit(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("submitted job 4242"));
    let script = dir.join("slurm/job.sbatch");
    assert_eq!(
        fake.calls(),
        vec![format!("--parsable --array=0-2 {}", script.display())]
    );
    let text = std::fs::read_to_string(&script).unwrap();
    for line in [
        "#SBATCH --partition=gpu",
        "#SBATCH --account=lab",
        "#SBATCH --time=4:00:00",
        "#SBATCH --gres=gpu:a100:2",
        "#SBATCH --qos=high",
        "--suite smoke --device cpu --out \"$dir\" --shard \"$shard/3\" --secret-from",
    ] {
        assert!(text.contains(line), "{line:?} missing from\n{text}");
    }
    let secret = std::fs::read_to_string(dir.join("secret")).unwrap();
    assert_eq!(secret.trim().len(), 64);

    // A second submission into the same directory would mix two runs' shards.
    let out = submit(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already holds a submission"));
    assert_eq!(fake.calls().len(), 1);

    // Shard 0 finished, shard 1 finished with failing kernels, shard 2 is running.
    for (i, code) in [(0, "0"), (1, "3")] {
        let s = dir.join("shards").join(i.to_string());
        std::fs::create_dir_all(&s).unwrap();
        std::fs::write(s.join("exit_code"), code).unwrap();
    }
    std::fs::write(
        &fake.queue,
        "4242_0|COMPLETED\n4242_1|COMPLETED\n4242_2|RUNNING\n",
    )
    .unwrap();
    let status = |fake: &FakeSlurm| {
        let out = fake
            .kbench()
            .args(["slurm", "status", "--json"])
            .arg(&dir)
            .output()
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code(), json)
    };
    let (code, json) = status(&fake);
    assert_eq!(code, Some(4), "{json}");
    let states: Vec<&str> = (0..3)
        .map(|i| json["shards"][i]["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["done", "done", "active"], "{json}");
    assert_eq!(json["shards"][2]["slurm_state"], "RUNNING");

    // Nothing to resubmit while it runs; once it was pre-empted, only it goes back.
    let out = fake
        .kbench()
        .args(["slurm", "resubmit"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing to resubmit"));
    assert_eq!(fake.calls().len(), 1);
    std::fs::write(&fake.queue, "4242_2|PREEMPTED\n").unwrap();
    let (code, json) = status(&fake);
    assert_eq!(code, Some(5), "{json}");
    assert_eq!(json["shards"][2]["state"], "stopped");
    assert!(
        json["shards"][2]["why"]
            .as_str()
            .unwrap()
            .contains("PREEMPTED"),
        "{json}"
    );
    // Merging now would lose shard 2's work: refused, with what to do.
    let out = kbench().arg("merge").arg(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("shard 2") && err.contains("resubmit"), "{err}");

    let out = fake
        .kbench()
        .args(["slurm", "resubmit"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("resubmitted shard(s) 2 as job 4243"),
        "{}",
        show(&out)
    );
    assert_eq!(
        fake.calls()[1],
        format!("--parsable --array=2 {}", script.display())
    );
    std::fs::write(&fake.queue, "4243_2|PENDING\n").unwrap();
    let (code, json) = status(&fake);
    assert_eq!(code, Some(4), "{json}");
    assert_eq!(json["shards"][2]["job"], "4243_2");

    // --dry-run writes everything but submits nothing; resubmit then submits every shard.
    let dry = tmp.path().join("dry");
    let out = fake
        .kbench()
        .args(["slurm", "submit", "--shards", "2", "--dry-run", "--"])
        .args(
            RunBuilder::new()
                .suite("smoke")
                .device("cpu")
                .out(&dry)
                .build(),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(fake.calls().len(), 2);
    assert!(!std::fs::read_to_string(dry.join("slurm/job.sbatch"))
        .unwrap()
        .contains("--gres"));
    let out = fake
        .kbench()
        .args(["slurm", "resubmit"])
        .arg(&dry)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(fake.calls()[2].starts_with("--parsable --array=0-1 "));

    // More shards than problems is refused; so is a command that cannot be sharded.
    let out = fake
        .kbench()
        .args(["slurm", "submit", "--shards", "99", "--"])
        .args(
            RunBuilder::new()
                .suite("smoke")
                .out(tmp.path().join("many"))
                .build(),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at most"));
    let out = fake
        .kbench()
        .args([
            "slurm", "submit", "--shards", "2", "--", "list", "--suite", "smoke",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be sharded"));
    // An extra sbatch line must be one option: nothing else gets into the script.
    for bad in ["qos=high", "--qos=high\nrm -rf /"] {
        let out = fake
            .kbench()
            .args(["slurm", "submit", "--shards", "2", "--sbatch", bad, "--"])
            .args(
                RunBuilder::new()
                    .suite("smoke")
                    .out(tmp.path().join("bad"))
                    .build(),
            )
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", show(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("--sbatch"));
        assert!(!tmp.path().join("bad").exists());
    }
    assert_eq!(fake.calls().len(), 3);

    // `baselines measure`: its --work is the directory; a shard is done only on exit 0 (its 3
    // means "still unmeasured"), and merge has nothing to do but say where the store is.
    let work = tmp.path().join("measure");
    let store = tmp.path().join("store");
    let measure = |extra: &[&str]| {
        fake.kbench()
            .args(["slurm", "submit", "--shards", "2", "--dry-run", "--"])
            .args([
                "baselines",
                "measure",
                "--suite",
                "smoke",
                "--device",
                "cpu",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    for (extra, says) in [
        (vec!["--store", "s"], "--work DIR"),
        (vec!["--work", "w", "--shard", "0/2"], "drop --shard"),
    ] {
        let out = measure(&extra);
        assert_eq!(out.status.code(), Some(1), "{}", show(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{}",
            show(&out)
        );
    }
    let out = measure(&[
        "--work",
        work.to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let out = fake
        .kbench()
        .args(["slurm", "resubmit"])
        .arg(&work)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(fake.calls().len(), 4);
    std::fs::write(&fake.queue, "").unwrap();
    for (i, code) in [(0, "0"), (1, "3")] {
        let s = work.join("shards").join(i.to_string());
        std::fs::create_dir_all(&s).unwrap();
        std::fs::write(s.join("exit_code"), code).unwrap();
    }
    let status = |dir: &Path| {
        let out = fake
            .kbench()
            .args(["slurm", "status", "--json"])
            .arg(dir)
            .output()
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code(), json)
    };
    let (code, json) = status(&work);
    assert_eq!(code, Some(5), "{json}");
    assert_eq!(json["store"], store.display().to_string());
    assert_eq!(shard_state(&json, 0), "done");
    assert_eq!(shard_state(&json, 1), "stopped");
    assert!(
        json["shards"][1]["why"]
            .as_str()
            .unwrap()
            .contains("without a time"),
        "{json}"
    );
    let out = kbench().arg("merge").arg(&work).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("shard(s) 1") && err.contains(&store.display().to_string()),
        "{err}"
    );
    std::fs::write(work.join("shards/1/exit_code"), "0").unwrap();
    assert_eq!(status(&work).0, Some(0));
    let out = kbench().arg("merge").arg(&work).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!(
            "nothing to merge: {} is a `kbench baselines measure` submission",
            work.display()
        )),
        "{}",
        show(&out)
    );
    // Merged with a run, or into --out: refused, naming the store.
    let out = kbench()
        .arg("merge")
        .arg(&work)
        .arg("--out")
        .arg(tmp.path().join("m"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&store.display().to_string()));
    assert!(!tmp.path().join("m").exists());
    assert_eq!(fake.calls().len(), 4);
}
