//! Faults that cost one verdict, not the run: a missing or empty kernel is a recorded wrong
//! answer (`no_kernel`), a broken problem file costs its own problem (`problem_error`) and
//! never the level, and the command line's small faults are named once and plainly. Real
//! `kbench` processes on the CPU, over a KernelBench-layout folder made from real level-1
//! problems (shrunk to fit).

use crate::agents_common;
use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

use agents_common::{reply, run_agent, toml, FAST};
use common::{ensure_python, kbench, kernelbench_dir, key, records, shared, show, RunBuilder};
use kbench::llm::fake_server::FakeLlm;

/// `level1/` holding shrunk copies of KernelBench's level-1 problems `files` (same code,
/// `batch_size` and `dim` small enough for a CPU test); `None` (the test skips) without a
/// KernelBench checkout.
fn kernelbench_folder(root: &Path, files: &[&str]) -> Option<PathBuf> {
    let source = kernelbench_dir()?;
    let level = root.join("level1");
    std::fs::create_dir_all(&level).unwrap();
    for f in files {
        let src = std::fs::read_to_string(source.join("level1").join(f))
            .unwrap_or_else(|e| panic!("{f}: {e} (set KBENCH_KERNELBENCH_DIR)"));
        assert!(
            src.contains("batch_size = 4096\ndim = 393216\n"),
            "{f} changed upstream"
        );
        let small = src.replace(
            "batch_size = 4096\ndim = 393216\n",
            "batch_size = 8\ndim = 64\n",
        );
        std::fs::write(level.join(f), small).unwrap();
    }
    Some(root.to_path_buf())
}

/// `kbench run` over `kb`'s level 1 with the quick settings of these tests.
fn run(kb: &Path, out: &Path, extra: &[&str]) -> Output {
    kbench()
        .args(RunBuilder::new().kernelbench(kb).build())
        .args([
            "--levels",
            "1",
            "--device",
            "cpu",
            "--families",
            "random",
            "--timed-calls",
            "5",
            "--rounds",
            "1",
            "--out",
        ])
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

/// Outcome kind and message by problem id.
fn outcomes(out: &Path) -> Vec<(u64, String, String)> {
    let mut v: Vec<(u64, String, String)> = records(out)
        .iter()
        .map(|r| {
            key(r); // every record reads back as an EvalRecord
            (
                r["problem"]["id"].as_u64().unwrap(),
                r["outcome"]["kind"].as_str().unwrap().to_string(),
                r["outcome"]["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn replay_missing_and_empty_kernels_are_recorded_as_no_kernel_and_count_as_wrong() {
    let _guard = shared();
    ensure_python();
    let dir = tempfile::tempdir().unwrap();
    let Some(kb) = kernelbench_folder(
        &dir.path().join("kb"),
        &["19_ReLU.py", "20_LeakyReLU.py", "21_Sigmoid.py"],
    ) else {
        return;
    };
    let replay = dir.path().join("replay/level1");
    std::fs::create_dir_all(&replay).unwrap();
    let relu = std::fs::read_to_string(kb.join("level1/19_ReLU.py")).unwrap();
    std::fs::write(replay.join("19_relu.py"), relu.replace("Model", "ModelNew")).unwrap();
    // A placeholder: whitespace only. 21 has no file at all.
    std::fs::write(replay.join("20_placeholder.py"), "  \n\t\n").unwrap();
    let out = dir.path().join("run");
    let replay_args = ["--agent", "replay", "--replay-dir"];
    let replay_dir = dir.path().join("replay");
    let mut args: Vec<&str> = replay_args.to_vec();
    args.push(replay_dir.to_str().unwrap());
    let o = run(&kb, &out, &args);
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));

    let got = outcomes(&out);
    assert_eq!(
        got.iter()
            .map(|(id, k, _)| (*id, k.as_str()))
            .collect::<Vec<_>>(),
        [(19, "ok"), (20, "no_kernel"), (21, "no_kernel")],
        "{}",
        show(&o)
    );
    assert!(
        got[1].2.contains("20_placeholder.py") && got[1].2.contains("empty"),
        "{}",
        got[1].2
    );
    assert!(
        got[2].2.contains(replay_dir.to_str().unwrap())
            && got[2].2.contains("kernelbench/L1/21")
            && got[2].2.contains("level_1_problem_21_sample_<S>_kernel.py"),
        "{}",
        got[2].2
    );
    let recs = records(&out);
    let placeholder = recs.iter().find(|r| r["problem"]["id"] == 20).unwrap();
    assert_eq!(placeholder["candidate"]["name"], "20_placeholder");
    let missing = recs.iter().find(|r| r["problem"]["id"] == 21).unwrap();
    assert_eq!(missing["candidate"]["name"], "no_kernel");
    // No worker ran for them, not even their problems' reference workers.
    for sub in ["logs", "kernels"] {
        for e in std::fs::read_dir(out.join(sub)).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            assert!(name.starts_with("kernelbench_L1_19__"), "{sub}/{name}");
        }
    }

    // The summary names them and counts them wrong.
    let summary = String::from_utf8_lossy(&o.stdout);
    assert!(summary.contains("correct           1 (33.3%)"), "{summary}");
    assert!(summary.contains("no kernel         2 (66.7%)"), "{summary}");
    assert!(summary.contains("no_kernel                 2"), "{summary}");

    // So does `kbench report`: 3 tasks, one correct.
    let json = dir.path().join("report.json");
    let r = kbench()
        .arg("report")
        .arg(&out)
        .arg("--export-json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", show(&r));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let all = report["runs"][0]["scopes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["scope"] == "all")
        .unwrap()
        .clone();
    assert_eq!(all["tasks"], 3, "{all}");
    assert_eq!(
        (
            all["correct"]["count"].as_u64(),
            all["correct"]["n"].as_u64()
        ),
        (Some(1), Some(3))
    );
    assert_eq!(all["compiled"]["count"], 1, "{all}");

    // --resume finds every problem recorded, no_kernel ones included.
    let mut resume_args = args.clone();
    resume_args.push("--resume");
    let o = run(&kb, &out, &resume_args);
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    assert!(
        stderr(&o).contains("3 kernel(s) already recorded, 0 to go"),
        "{}",
        show(&o)
    );
    assert_eq!(records(&out).len(), 3);
}

#[test]
fn a_level_with_a_broken_file_and_an_init_py_runs_its_other_problems() {
    let _guard = shared();
    ensure_python();
    let dir = tempfile::tempdir().unwrap();
    let Some(kb) = kernelbench_folder(&dir.path().join("kb"), &["19_ReLU.py", "20_LeakyReLU.py"])
    else {
        return;
    };
    let broken = kb.join("level1/7_Broken.py");
    std::fs::write(&broken, "import torch\ndef get_inputs():\n    return []\n").unwrap();
    std::fs::write(kb.join("level1/8_Latin1.py"), b"# caf\xe9\n").unwrap();
    std::fs::write(kb.join("level1/__init__.py"), "").unwrap();
    std::fs::write(kb.join("level1/helpers.py"), "this is not python (").unwrap();

    // `list` shows every problem, the broken ones marked; non-problems are not listed.
    let o = kbench()
        .args(["list", "--levels", "1", "--kernelbench"])
        .arg(&kb)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[0].starts_with("1\t7\tBroken\t[problem_error: problem file ")
            && lines[0].contains("7_Broken.py")
            && lines[0].contains("`class Model`"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("1\t8\tLatin1\t[problem_error: ") && lines[1].contains("not UTF-8"),
        "{text}"
    );
    assert_eq!(&lines[2..], ["1\t19\tReLU", "1\t20\tLeakyReLU"]);

    // `run` evaluates the good problems and gives each broken one a record.
    let out = dir.path().join("run");
    let o = run(&kb, &out, &["--quiet"]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let got = outcomes(&out);
    assert_eq!(
        got.iter()
            .map(|(id, k, _)| (*id, k.as_str()))
            .collect::<Vec<_>>(),
        [
            (7, "problem_error"),
            (8, "problem_error"),
            (19, "ok"),
            (20, "ok")
        ],
        "{}",
        show(&o)
    );
    assert!(
        got[0].2.contains(broken.to_str().unwrap()) && got[0].2.contains("`class Model`"),
        "{}",
        got[0].2
    );
    let summary = String::from_utf8_lossy(&o.stdout);
    assert!(summary.contains("not judged        2 (50.0%)"), "{summary}");
    assert!(summary.contains("of 2 judged; 2 not judged"), "{summary}");

    // Only selected problems matter: a broken file outside --select costs nothing...
    let out = dir.path().join("selected");
    let o = run(&kb, &out, &["--quiet", "--select", "19-20"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(outcomes(&out).len(), 2);
    // ... and a --select naming a broken problem gets its record (no worker needed).
    let out = dir.path().join("broken_only");
    let o = run(&kb, &out, &["--quiet", "--select", "7"]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let got = outcomes(&out);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].0, got[0].1.as_str()), (7, "problem_error"));
}

/// A problem whose forward returns no tensor is told so plainly, and a `reference_error` is
/// counted on its own summary line, not among kernels that failed to compile.
#[test]
fn a_problem_returning_no_tensor_is_a_clear_reference_error_on_its_own_line() {
    let _guard = shared();
    ensure_python();
    let dir = tempfile::tempdir().unwrap();
    let level = dir.path().join("kb/level1");
    std::fs::create_dir_all(&level).unwrap();
    let problem = |ret: &str| {
        format!(
            "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return {ret}\n\n\
             def get_inputs():\n    return [torch.rand(4)]\n\ndef get_init_inputs():\n    return []\n"
        )
    };
    std::fs::write(level.join("1_Nothing.py"), problem("()")).unwrap();
    std::fs::write(
        level.join("2_Numpy.py"),
        problem("x.double().numpy().sum()"),
    )
    .unwrap();
    let out = dir.path().join("run");
    let o = run(&dir.path().join("kb"), &out, &["--quiet"]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let got = outcomes(&out);
    assert_eq!(got.len(), 2);
    for (_, kind, _) in &got {
        assert_eq!(kind, "reference_error", "{got:?}");
    }
    assert!(
        got[0]
            .2
            .contains("forward returned no tensor, only an empty tuple"),
        "{}",
        got[0].2
    );
    assert!(
        got[1]
            .2
            .contains("forward returned no tensor, only a numpy float64 (numpy.float64)")
            && got[1].2.contains("must return a torch.Tensor"),
        "{}",
        got[1].2
    );
    let summary = String::from_utf8_lossy(&o.stdout);
    assert!(summary.contains("not judged       2 (100.0%)"), "{summary}");
    assert!(summary.contains("of 0 judged; 2 not judged"), "{summary}");
}

/// An agent task that ends without any kernel is a recorded wrong answer too: no worker is
/// started for it, and a resumed run finds it recorded.
#[test]
fn an_agent_task_without_a_kernel_gets_a_no_kernel_record() {
    let _guard = shared();
    ensure_python();
    // No model call at all: the run's time budget is spent before the first.
    let server = FakeLlm::start(
        &serde_json::json!({"models": {"m": [reply(FAST, "")]}}),
        0,
        None,
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = toml(tmp.path(), &server.base_url(), &["m"]);
    let out = tmp.path().join("run");
    let o = run_agent(
        &out,
        &cfg,
        "kevin",
        &["--model", "m", "--trajectories", "1", "--max-minutes", "0"],
    );
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let got = outcomes(&out);
    assert_eq!(got.len(), 1, "{}", show(&o));
    assert_eq!(got[0].1, "no_kernel");
    assert!(
        got[0]
            .2
            .contains("agent kevin gave no kernel for smoke/L1/1"),
        "{}",
        got[0].2
    );
    // Resumed, the task again ends without a kernel: its record is found, not written twice.
    let o = run_agent(
        &out,
        &cfg,
        "kevin",
        &[
            "--model",
            "m",
            "--trajectories",
            "1",
            "--max-minutes",
            "0",
            "--resume",
        ],
    );
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    assert_eq!(records(&out).len(), 1);

    // A program whose only submission is whitespace (refused as a round) ends with none.
    let out = tmp.path().join("blank");
    let o = run_agent(
        &out,
        &cfg,
        "command",
        &[
            "--command",
            r#"read task; printf '%s\n' '{"type": "submit", "source": "  \n\t\n"}'; read done"#,
        ],
    );
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let got = outcomes(&out);
    assert_eq!(got.len(), 1, "{}", show(&o));
    assert_eq!(got[0].1, "no_kernel");
    assert!(
        got[0]
            .2
            .contains("agent command gave no kernel for smoke/L1/1"),
        "{}",
        got[0].2
    );
    // No worker ran for it.
    assert_eq!(std::fs::read_dir(out.join("logs")).unwrap().count(), 0);

    // A broken problem file of an agent run: one problem_error record, the other tasks run.
    let Some(kb) = kernelbench_folder(&tmp.path().join("kb"), &["19_ReLU.py"]) else {
        return;
    };
    std::fs::write(
        kb.join("level1/7_Broken.py"),
        "def get_inputs():\n    return []\n",
    )
    .unwrap();
    let out = tmp.path().join("agent-kb");
    let o = kbench()
        .args(
            RunBuilder::new()
                .levels("1")
                .device("cpu")
                .agent("kevin")
                .args(["--model", "m"])
                .build(),
        )
        .args(["--trajectories", "1", "--max-minutes", "0", "--llm-config"])
        .arg(&cfg)
        .arg("--kernelbench")
        .arg(&kb)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let got = outcomes(&out);
    assert_eq!(
        got.iter()
            .map(|(id, k, _)| (*id, k.as_str()))
            .collect::<Vec<_>>(),
        [(7, "problem_error"), (19, "no_kernel")],
        "{}",
        show(&o)
    );
    assert!(got[0].2.contains("7_Broken.py"), "{}", got[0].2);
}

/// The command line's faults: named once, with what to do.
#[test]
fn small_command_line_faults_are_named_once() {
    let dir = tempfile::tempdir().unwrap();
    let once = |o: &Output, needle: &str| {
        let err = stderr(o);
        assert_eq!(o.status.code(), Some(1), "{}", show(o));
        assert_eq!(err.matches("kbench: error").count(), 1, "{err}");
        assert_eq!(err.matches(needle).count(), 1, "said twice or never: {err}");
    };

    // An empty --select element is a typo, not nothing.
    for spec in ["1,,2", "1,"] {
        let o = kbench()
            .args(["list", "--suite", "smoke", "--select", spec])
            .output()
            .unwrap();
        once(&o, "is empty");
        assert!(
            stderr(&o).contains(&format!("--select {spec}: element 2 is empty")),
            "{}",
            show(&o)
        );
    }

    // An --out that is a file: which path, and what to do; the file is left alone.
    let file = dir.path().join("results.txt");
    std::fs::write(&file, "keep me").unwrap();
    let o = kbench()
        .args(
            RunBuilder::new()
                .suite("smoke")
                .device("cpu")
                .out(&file)
                .build(),
        )
        .output()
        .unwrap();
    once(&o, "is a file");
    let err = stderr(&o);
    assert!(
        err.contains(file.to_str().unwrap()) && err.contains("choose another --out"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");

    // A problem file that is not UTF-8, and one that does not exist: said once each.
    let latin1 = dir.path().join("3_Latin1.py");
    std::fs::write(&latin1, b"x = 1\n# caf\xe9\n").unwrap();
    let kernel = dir.path().join("k.py");
    std::fs::write(&kernel, "class ModelNew: pass\n").unwrap();
    for cmd in ["list", "run", "check"] {
        let mut c = kbench();
        c.arg(cmd).arg("--problem").arg(&latin1);
        if cmd == "check" {
            c.arg("--kernel").arg(&kernel);
        }
        if cmd == "run" {
            c.arg("--out").arg(dir.path().join("never"));
        }
        let o = c.output().unwrap();
        once(&o, "not UTF-8");
        assert!(stderr(&o).contains("save it as UTF-8"), "{}", show(&o));
    }
    let o = kbench()
        .args(["check", "--kernel"])
        .arg(&kernel)
        .arg("--problem")
        .arg(dir.path().join("absent.py"))
        .output()
        .unwrap();
    once(&o, "No such file");
    assert!(stderr(&o).contains("absent.py"), "{}", show(&o));
    assert!(!dir.path().join("never").exists());
}
