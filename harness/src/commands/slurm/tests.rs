//! Unit tests of the Slurm sharding: the sharded command taken apart, the array list, the
//! job script, shard states and record counts.

use std::path::{Path, PathBuf};

use super::script::{quote, render_script};
use super::status::{count_records, parse_states, stopped_why};
use super::submission::{flag_value, SbatchOptions, Sharded, Submission};
use super::submit::{array_spec, parse_gpus, shardable, without_flag};
use super::{EXIT_CODE, SUBMISSION_SCHEMA};
use crate::runlog::RECORDS;

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn array_specs_compress_runs() {
    assert_eq!(array_spec(&[0, 1, 2]), "0-2");
    assert_eq!(array_spec(&[1]), "1");
    assert_eq!(array_spec(&[0, 2, 3, 4, 7]), "0,2-4,7");
}

#[test]
fn out_is_taken_out_of_the_command() {
    assert_eq!(
        without_flag(&args(&["run", "--out", "x", "--suite", "smoke"]), "--out"),
        args(&["run", "--suite", "smoke"])
    );
    assert_eq!(
        without_flag(&args(&["run", "--out=x", "--quiet"]), "--out"),
        args(&["run", "--quiet"])
    );
    // Only that flag: `--output` or a value that merely starts alike stays.
    assert_eq!(
        without_flag(
            &args(&["x", "--work", "w", "--workers=2", "--work=v"]),
            "--work"
        ),
        args(&["x", "--workers=2"])
    );
    assert_eq!(
        flag_value(&args(&["x", "--store", "a", "--store=b"]), "--store").as_deref(),
        Some("b")
    );
    assert_eq!(flag_value(&args(&["x", "--store"]), "--store"), None);
}

#[test]
fn only_shardable_commands_without_shard_flags_are_accepted() {
    let ok = shardable(&args(&[
        "run", "--suite", "smoke", "--device", "cpu", "--out", "r",
    ]))
    .unwrap();
    assert!(ok.on_cpu);
    assert!(ok.out.is_absolute());
    assert_eq!(
        ok.argv,
        args(&["run", "--suite", "smoke", "--device", "cpu"])
    );
    assert_eq!(ok.problems, kbench_suites::smoke().len());
    for (bad, says) in [
        (vec!["list", "--suite", "smoke"], "cannot be sharded"),
        (vec!["run", "--out", "r", "--shard", "0/2"], "drop --shard"),
        (vec!["run", "--out", "r", "--resume"], "drop --resume"),
        (vec!["run", "--out", "r", "--gpus", "0"], "--gpus-per-task"),
        (vec!["run", "--bogus"], "not a kbench command line"),
        (
            vec!["baselines", "show", "--store", "s"],
            "`baselines show` cannot be sharded",
        ),
        (
            vec![
                "baselines",
                "measure",
                "--suite",
                "smoke",
                "--work",
                "w",
                "--shard",
                "0/2",
            ],
            "drop --shard",
        ),
        (
            vec!["baselines", "measure", "--work", "w", "--gpus", "0,1"],
            "--gpus-per-task",
        ),
        (
            vec!["baselines", "measure", "--work", "w", "--no-timing"],
            "drop --no-timing",
        ),
        (
            vec!["baselines", "measure", "--work", "w", "--modes", "turbo"],
            "--modes",
        ),
        // The shared directory of a measure submission is its --work: it must be given.
        (
            vec!["baselines", "measure", "--suite", "smoke", "--store", "s"],
            "give `baselines measure` a --work DIR",
        ),
    ] {
        let e = shardable(&args(&bad)).unwrap_err().to_string();
        assert!(e.contains(says), "{bad:?}: {e}");
    }
}

#[test]
fn baselines_measure_shards_with_its_work_as_the_directory_and_one_absolute_store() {
    let m = shardable(&args(&[
        "baselines",
        "measure",
        "--suite",
        "smoke",
        "--select",
        "1/1,1/2,1/4",
        "--work",
        "w",
        "--store",
        "rel/store",
        "--modes",
        "eager,compile",
        "--device",
        "cpu",
    ]))
    .unwrap();
    assert_eq!(m.kind, Sharded::Measure);
    assert!(m.on_cpu);
    assert_eq!(m.problems, 3);
    assert_eq!(m.out, std::path::absolute("w").unwrap());
    let store = std::path::absolute("rel/store").unwrap();
    assert_eq!(
        m.argv,
        args(&[
            "baselines",
            "measure",
            "--suite",
            "smoke",
            "--select",
            "1/1,1/2,1/4",
            "--modes",
            "eager,compile",
            "--device",
            "cpu",
            "--store",
            &store.display().to_string(),
        ])
    );
    assert_eq!(Sharded::of(&m.argv), Sharded::Measure);
    assert_eq!(
        flag_value(&m.argv, "--store"),
        Some(store.display().to_string())
    );
    // `--work=DIR`, `--store=DIR` and no --store: the store a local measure would use.
    let m = shardable(&args(&[
        "baselines",
        "measure",
        "--suite=smoke",
        "--work=/shared/w",
    ]))
    .unwrap();
    assert_eq!(m.out, PathBuf::from("/shared/w"));
    assert!(!m.on_cpu);
    let default = crate::commands::baselines::default_store(&crate::worker::python::cache_dir());
    assert!(default.is_absolute(), "{}", default.display());
    assert_eq!(
        m.argv,
        args(&[
            "baselines",
            "measure",
            "--suite=smoke",
            "--store",
            &default.display().to_string(),
        ])
    );
    let m = shardable(&args(&[
        "baselines",
        "measure",
        "--suite",
        "smoke",
        "--work",
        "/w",
        "--store=/s",
    ]))
    .unwrap();
    assert_eq!(flag_value(&m.argv, "--store").as_deref(), Some("/s"));
    assert_eq!(
        m.argv.iter().filter(|a| a.starts_with("--store")).count(),
        1
    );
}

#[test]
fn a_measure_shard_is_done_only_when_measure_exited_0() {
    assert!(Sharded::Run.finished(0) && Sharded::Run.finished(3));
    assert!(Sharded::Measure.finished(0));
    for code in [1, 3, 130] {
        assert!(!Sharded::Measure.finished(code), "{code}");
    }
    assert!(!Sharded::Run.finished(130));
    assert!(stopped_why(Sharded::Measure, true, Some(3), None)
        .contains("without a time or a recorded failure"));
    assert!(stopped_why(Sharded::Run, true, Some(1), Some("FAILED")).contains("FAILED"));
}

#[test]
fn measure_records_are_counted_over_every_run_of_the_shard() {
    let tmp = tempfile::tempdir().unwrap();
    let shard = tmp.path();
    let runs = shard.join("shard-1-of-2");
    for (run, lines) in [
        ("20260101T000000-1", "{}\n{}\n"),
        ("20260101T000100-2", "{}\n"),
    ] {
        std::fs::create_dir_all(runs.join(run)).unwrap();
        std::fs::write(runs.join(run).join(RECORDS), lines).unwrap();
    }
    std::fs::write(shard.join(EXIT_CODE), "0").unwrap();
    assert_eq!(count_records(Sharded::Measure, shard), 3);
    assert_eq!(count_records(Sharded::Run, shard), 0);
}

#[test]
fn gpus_per_task_takes_a_count_or_type_and_count() {
    assert_eq!(parse_gpus("2").unwrap(), Some("2".into()));
    assert_eq!(parse_gpus("a100:4").unwrap(), Some("a100:4".into()));
    assert_eq!(parse_gpus("0").unwrap(), None);
    assert!(parse_gpus("two").is_err());
}

#[test]
fn quoting_survives_spaces_and_quotes() {
    assert_eq!(quote("plain/path-1"), "plain/path-1");
    assert_eq!(quote("a b"), "'a b'");
    assert_eq!(quote("it's"), r"'it'\''s'");
    assert_eq!(quote(""), "''");
}

#[test]
fn the_script_runs_each_shard_resuming_with_the_shared_secret() {
    let dir = Path::new("/shared/runs/x y");
    let sub = Submission {
        schema_version: SUBMISSION_SCHEMA,
        kbench_version: "0.1.0".into(),
        shards: 3,
        command: args(&["run", "--suite", "smoke", "--device", "cpu"]),
        kbench: "/opt/kbench".into(),
        workdir: "/home/u".into(),
        env: vec![("KBENCH_CACHE_DIR".into(), "/shared/kbench cache".into())],
        sbatch: SbatchOptions {
            job_name: "kbench".into(),
            partition: Some("gpu".into()),
            account: Some("lab".into()),
            time: Some("4:00:00".into()),
            gpus_per_task: Some("a100:2".into()),
            cpus_per_task: Some(8),
            extra: vec!["--qos=high".into()],
        },
        jobs: vec![],
    };
    let s = render_script(dir, &sub);
    for line in [
        "#SBATCH --partition=gpu\n",
        "#SBATCH --account=lab\n",
        "#SBATCH --time=4:00:00\n",
        "#SBATCH --gres=gpu:a100:2\n",
        "#SBATCH --cpus-per-task=8\n",
        "#SBATCH --qos=high\n",
        "#SBATCH --requeue\n",
        "#SBATCH --open-mode=append\n",
        "#SBATCH --chdir=/home/u\n",
        "#SBATCH --output=/shared/runs/x y/slurm/logs/%A_%a.out\n",
        "dir='/shared/runs/x y/shards'/\"$shard\"\n",
        "export KBENCH_CACHE_DIR='/shared/kbench cache'\n",
        "/opt/kbench run --suite smoke --device cpu --out \"$dir\" --shard \"$shard/3\" \
         --secret-from '/shared/runs/x y/secret' --resume\n",
    ] {
        assert!(s.contains(line), "missing {line:?} in\n{s}");
    }
    // All #SBATCH lines come before the first command, or sbatch ignores them.
    let first_cmd = s.find("set -u").unwrap();
    assert!(s.rfind("#SBATCH").unwrap() < first_cmd);
}

#[test]
fn the_script_runs_each_measure_shard_in_its_own_work_dir_with_the_shared_store() {
    let dir = Path::new("/shared/bl");
    let sub = Submission {
        schema_version: SUBMISSION_SCHEMA,
        kbench_version: "0.1.0".into(),
        shards: 4,
        command: args(&[
            "baselines",
            "measure",
            "--kernelbench",
            "KB",
            "--store",
            "/shared/my store",
        ]),
        kbench: "/opt/kbench".into(),
        workdir: "/home/u".into(),
        env: vec![],
        sbatch: SbatchOptions {
            job_name: "kbench".into(),
            partition: None,
            account: None,
            time: None,
            gpus_per_task: Some("1".into()),
            cpus_per_task: None,
            extra: vec![],
        },
        jobs: vec![],
    };
    assert_eq!(sub.sharded(), Sharded::Measure);
    assert_eq!(sub.store(), Some(PathBuf::from("/shared/my store")));
    let s = render_script(dir, &sub);
    for line in [
        "#SBATCH --gres=gpu:1\n",
        "dir=/shared/bl/shards/\"$shard\"\n",
        "/opt/kbench baselines measure --kernelbench KB --store '/shared/my store' \
         --work \"$dir\" --shard \"$shard/4\"\n",
        "echo \"$rc\" > \"$dir/exit_code\"\nexit \"$rc\"\n",
        "kbench baselines show --store '/shared/my store'",
    ] {
        assert!(s.contains(line), "missing {line:?} in\n{s}");
    }
    // No run flags, and measure's 3 (problems still unmeasured) is not turned into success.
    for absent in ["--secret-from", "--resume", " --out ", "-eq 3"] {
        assert!(!s.contains(absent), "{absent:?} in\n{s}");
    }
    // A run submission has no store.
    let run = Submission {
        command: args(&["run", "--suite", "smoke", "--store", "x"]),
        ..sub
    };
    assert_eq!(run.sharded(), Sharded::Run);
    assert_eq!(run.store(), None);
}

#[test]
fn states_parse_from_squeue_and_sacct_lines() {
    let m = parse_states("12_0|RUNNING\n12_1|CANCELLED by 0\n\n13_2|PENDING\n");
    assert_eq!(m["12_0"], "RUNNING");
    assert_eq!(m["12_1"], "CANCELLED");
    assert_eq!(m["13_2"], "PENDING");
}
