//! The binary's command line: listing suites and rejecting bad input with clear errors. These
//! need no Python.

use crate::common;

use common::{kbench, kernelbench_dir, show, RunBuilder};

#[test]
fn lists_all_250_kernelbench_problems_with_level_id_and_name() {
    let Some(kb) = kernelbench_dir() else {
        return;
    };
    let out = kbench()
        .args(["list", "--kernelbench"])
        .arg(&kb)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    // Every level is there: nothing to say about --levels.
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("--levels"),
        "{}",
        show(&out)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 250);
    for level in ["1", "2", "3"] {
        let n = rows.iter().filter(|r| r[0] == level).count();
        assert_eq!(n, if level == "3" { 50 } else { 100 }, "level {level}");
    }
    for expected in [
        ["1", "1", "Square_matrix_multiplication_"],
        ["1", "19", "ReLU"],
        ["2", "40", "Matmul_Scaling_ResidualAdd"],
        ["3", "35", "LSTM"],
    ] {
        assert!(
            rows.iter().any(|r| r[..] == expected[..]),
            "missing {expected:?}"
        );
    }
    // --levels narrows, --select picks.
    let out = kbench()
        .args([
            "list",
            "--levels",
            "3",
            "--select",
            "3/1-3",
            "--kernelbench",
        ])
        .arg(&kb)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 3);
}

/// A folder of one level: `--levels` left out takes it and says which level it took; a
/// level asked for that the folder lacks is an error naming `--levels` and the folder.
#[test]
fn a_one_level_folder_takes_its_level_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let level = dir.path().join("level2");
    std::fs::create_dir(&level).unwrap();
    for f in ["1_Elementwise_Multiply_Add.py", "2_ELU.py"] {
        std::fs::copy(
            common::repo_root().join("suites/smoke").join(f),
            level.join(f),
        )
        .unwrap();
    }
    let list = |levels: &[&str]| {
        kbench()
            .args(["list", "--kernelbench"])
            .arg(dir.path())
            .args(levels)
            .output()
            .unwrap()
    };
    let out = list(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "kbench: note: --levels left out: taking level 2 of {}, the level folder it has (it has no level1/ or level3/)",
            dir.path().display()
        )),
        "{err}"
    );
    let out = list(&["--levels", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(out.stderr.is_empty(), "{}", show(&out));
    let out = list(&["--levels", "1,2"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--levels") && err.contains(&dir.path().join("level1").display().to_string()),
        "{err}"
    );
}

/// Off a terminal `kbench setup` hides its spinner; while a step takes long (here a stand-in
/// uv that sleeps, then fails, in a fresh cache) it says every so often that it still works,
/// naming its log, and then the step that failed.
#[test]
fn setup_off_a_terminal_is_not_silent_during_a_long_step() {
    let dir = tempfile::tempdir().unwrap();
    let uv = dir.path().join("uv");
    common::write_executable(
        &uv,
        "#!/bin/sh\n[ \"$1\" = --version ] && { echo 'uv 0.0.0'; exit 0; }\nsleep 4\necho 'error: no network here' >&2\nexit 2\n",
    );
    let cache = dir.path().join("cache");
    let out = kbench()
        .arg("setup")
        .env("KBENCH_CACHE_DIR", &cache)
        .env("KBENCH_UV", &uv)
        .env("KBENCH_PROGRESS_EVERY_S", "1")
        .env_remove("KBENCH_PYTHON")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    let said = "kbench: setup: still setting up the Python environment after 00:00:0";
    let log = cache.join("setup.log");
    assert!(
        err.lines()
            .any(|l| l.starts_with(said) && l.contains(&log.display().to_string())),
        "{err}"
    );
    assert!(
        err.contains("creating the virtual environment") && err.contains("no network here"),
        "{err}"
    );
}

#[test]
fn lists_the_smoke_suite() {
    let out = kbench()
        .args(["list", "--suite", "smoke"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert!(String::from_utf8(out.stdout).unwrap().lines().count() >= 10);
}

#[test]
fn bad_input_gets_a_clear_error_naming_the_thing() {
    let dir = tempfile::tempdir().unwrap();
    // A problem file without class Model.
    let bad = dir.path().join("7_Broken.py");
    std::fs::write(&bad, "import torch\ndef get_inputs():\n    return []\n").unwrap();
    let out = kbench()
        .args(["list", "--problem"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("7_Broken.py") && err.contains("Model"),
        "{err}"
    );

    // A KernelBench folder that is not one.
    let out = kbench()
        .args(["list", "--kernelbench"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&dir.path().display().to_string()));

    // Replay without a folder.
    let out = kbench()
        .args(
            RunBuilder::new()
                .suite("smoke")
                .agent("replay")
                .device("cpu")
                .out(dir.path().join("run"))
                .build(),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--replay-dir"));

    // An interpreter that cannot import torch is named, with the fix.
    let out = kbench()
        .args(
            RunBuilder::new()
                .suite("smoke")
                .device("cpu")
                .python("/bin/false")
                .out(dir.path().join("run2"))
                .build(),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/bin/false") && err.contains("pip install"),
        "{err}"
    );

    // A bad environment variable is one error at the start, naming the variable and its
    // value, before any problem runs: KBENCH_KEEP_CACHED_BYTES (every worker would refuse
    // it), and KBENCH_CUDA_HEADER that is neither choice (a typo must not build the other way).
    let refused_at_start = |var: &str, value: &str, out_name: &str, says: &str| {
        let out = kbench()
            .env(var, value)
            .args(
                RunBuilder::new()
                    .suite("smoke")
                    .device("cpu")
                    .out(dir.path().join(out_name))
                    .build(),
            )
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("{var}=\"{value}\"")) && err.contains(says),
            "{err}"
        );
        assert!(!dir.path().join(out_name).join("records.jsonl").exists());
    };
    refused_at_start(
        "KBENCH_KEEP_CACHED_BYTES",
        "8GiB",
        "run3",
        "whole number of bytes",
    );
    refused_at_start("KBENCH_CUDA_HEADER", "lite", "run4", "light");

    // Usage errors are clap's exit code 2.
    let out = kbench()
        .args(RunBuilder::new().arg("--bogus").build())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // A lookahead out of range names the option and the range, before anything is measured.
    let out = kbench()
        .args([
            "baselines",
            "measure",
            "--suite",
            "smoke",
            "--lookahead",
            "65",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--lookahead") && err.contains("0..=64"),
        "{err}"
    );
}

#[test]
fn cuda_without_a_gpu_says_why() {
    if kbench::gpu::inventory().count() > 0 {
        return; // a GPU machine: covered by the GPU runs
    }
    let dir = tempfile::tempdir().unwrap();
    let out = kbench()
        .args(
            RunBuilder::new()
                .suite("smoke")
                .device("cuda")
                .out(dir.path().join("run"))
                .build(),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--device cpu"));
}

#[test]
fn gpus_lists_devices_or_says_plainly_why_there_are_none() {
    let out = kbench().arg("gpus").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    if kbench::gpu::inventory().count() == 0 {
        assert!(text.starts_with("no GPU: "), "{text}");
        assert!(text.contains("--device cpu"), "{text}");
        let out = kbench().args(["gpus", "--json"]).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["gpus"], serde_json::json!([]));
    } else {
        assert!(text.contains("SMs") && text.contains("peak BW"), "{text}");
    }
}

/// The throughput benchmark's summarizer (run on the GPU machine, Python's standard library
/// only) checks its own figures on synthetic runs: phases, pauses, agreement, scaling.
#[test]
fn throughput_summarizer_passes_its_self_test() {
    passes_its_self_test("bench/throughput/summarize.py");
}

/// The worker-trace comparison (bench/throughput/worker_trace.py: which worker command's
/// seconds differ between two runs) checks its sums and ratios on synthetic logs.
#[test]
fn worker_trace_comparison_passes_its_self_test() {
    passes_its_self_test("bench/throughput/worker_trace.py");
}

/// The round-position analysis (bench/throughput/round_positions.py: timed calls by their
/// place in a round, the paired speedup without a round's first calls) checks its figures on
/// synthetic records.
#[test]
fn round_position_analysis_passes_its_self_test() {
    passes_its_self_test("bench/throughput/round_positions.py");
}

/// The round warm-up benchmark's tables (bench/round_warmup, run on the GPU machine) check
/// their first-call-over-second figures on synthetic rounds.
#[test]
fn round_warmup_analysis_passes_its_self_test() {
    passes_its_self_test("bench/round_warmup/analyze.py");
}

/// The CPU self-speedup benchmark's analysis (bench/self_speedup): its sign test.
#[test]
fn self_speedup_analysis_passes_its_self_test() {
    passes_its_self_test("bench/self_speedup/analyze.py");
}

/// The nvcc header probe's summary (bench/build_ahead/cuda_header_probe.py): its ratios, and
/// none where a compile took less than the 10 ms its times are kept to (a stand-in nvcc once
/// made it divide by zero).
#[test]
fn cuda_header_probe_summary_passes_its_self_test() {
    passes_its_self_test("bench/build_ahead/cuda_header_probe.py");
}

/// The build-ahead benchmark's summary counts the loads that compiled again after a build,
/// and ninja's reasons across build folders, from the workers' logs in a run's `logs.tgz`;
/// and takes the host's CPU busy share over the verdicts' window only.
#[test]
fn build_ahead_summary_passes_its_self_test() {
    passes_its_self_test("bench/build_ahead/summarize.py");
}

/// The build-ahead benchmark's CPU sampler names a process's stage from its name and its
/// ancestors' (a compiler under nvcc is nvcc's) and a Python process's from its environment
/// (build jobs see no GPU).
#[test]
fn host_cpu_sampler_passes_its_self_test() {
    passes_its_self_test("bench/build_ahead/host_cpu.py");
}

/// Runs a benchmark script (Python's standard library only) with `--self-test`: it exits 0
/// and says `self-test: ok`.
fn passes_its_self_test(script: &str) {
    let out = std::process::Command::new("python3")
        .arg(common::repo_root().join(script))
        .arg("--self-test")
        .output()
        .expect("python3 on PATH (kbench setup needs it too)");
    assert!(out.status.success(), "{script}: {}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("self-test: ok"),
        "{script}: {}",
        show(&out)
    );
}

/// The side-by-side benchmark (KernelBench's eval against kbench; its GPU part runs
/// on the GPU machine) checks, with Python's standard library alone, its summary's seconds
/// and ratios on a fixture, its selection syntax and `run.sh --dry-run`'s commands.
#[test]
fn side_by_side_summarizer_passes_its_tests() {
    let out = std::process::Command::new("python3")
        .arg(common::repo_root().join("bench/side_by_side/test_side_by_side.py"))
        .output()
        .expect("python3 on PATH (kbench setup needs it too)");
    assert!(out.status.success(), "{}", show(&out));
    // unittest reports on stderr: "Ran N tests ... OK".
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Ran ") && err.trim_end().ends_with("OK"),
        "{err}"
    );
}

/// The serve benchmark (bench/serve, run on the GPU machine against `kbench serve`) checks,
/// with Python's standard library alone, that every candidate it makes from KernelBench
/// compiles, that its Triton kernels' problems are where it expects them, and its parsers.
#[test]
fn serve_bench_passes_its_self_test() {
    passes_its_self_test("bench/serve/serve_bench.py");
}

/// The serve benchmark's HTTP side and run.sh against a stand-in service on loopback: 429s
/// waited out, long polls, the cache step, the token, the start and the SIGTERM.
#[test]
fn serve_bench_runs_against_a_stand_in_service() {
    let out = std::process::Command::new("python3")
        .arg(common::repo_root().join("bench/serve/test_serve_bench.py"))
        .output()
        .expect("python3 on PATH (kbench setup needs it too)");
    assert!(out.status.success(), "{}", show(&out));
    // unittest reports on stderr: "Ran N tests ... OK".
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Ran ") && err.trim_end().ends_with("OK"),
        "{err}"
    );
}

/// With `--kernelbench`, `kbench baselines show` counts every problem of the set as
/// measured, failed (by outcome), stale or a gap, per GPU, mode and level, and `--gaps`
/// names the gaps; JSON carries the same counts.
#[test]
fn baselines_show_counts_every_problem_as_measured_failed_stale_or_a_gap() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = tmp.path().join("kb");
    for (level, n) in [(1u32, 4u32), (2, 2), (3, 1)] {
        let d = kb.join(format!("level{level}"));
        std::fs::create_dir_all(&d).unwrap();
        for id in 1..=n {
            let source = format!(
                "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x + {id}\n\n\
                 def get_inputs():\n    return [torch.rand(4)]\n\ndef get_init_inputs():\n    return []\n"
            );
            std::fs::write(d.join(format!("{id}_P{id}.py")), source).unwrap();
        }
    }
    let store = tmp.path().join("store");
    let dir = store.join("nvidia-h100/torch-2.11.0");
    std::fs::create_dir_all(&dir).unwrap();
    let time = |sha: Option<&str>| {
        let mut e = serde_json::json!({"mean": 1.0, "std": 0.0, "min": 1.0, "max": 1.0,
            "num_trials": 100, "hardware": "NVIDIA H100", "device": "cuda:0"});
        if let Some(sha) = sha {
            e["problem_sha256"] = sha.into();
        }
        e
    };
    let file = serde_json::json!({
        "kbench": {"format": "kbench-baseline-1", "mode": "compile", "origin": "measured",
            "environment": {"gpu": "NVIDIA H100", "gpu_slug": "nvidia-h100", "torch": "2.11.0"},
            "updated_unix_s": 0.0},
        // L1/2 was timed on another source (stale); L1/4 is a gap.
        "level1": {"1_P1.py": time(None), "2_P2.py": time(Some("another source"))},
        "level2": {"1_P1.py": time(None), "2_P2.py": time(None)},
        "errors": {
            "level1": {"3_P3.py": {"outcome": "timeout", "message": "over the 600 s load timeout"}},
            "level3": {"1_P1.py": {"outcome": "out_of_memory", "message": "CUDA out of memory"}}
        }
    });
    std::fs::write(dir.join("compile.json"), file.to_string()).unwrap();

    let out = kbench()
        .args(["baselines", "show", "--gaps", "--store"])
        .arg(&store)
        .arg("--kernelbench")
        .arg(&kb)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let row = |level: &str| {
        text.lines()
            .find(|l| l.contains(" compile ") && l.split_whitespace().any(|w| w == level))
            .unwrap_or_else(|| panic!("no compile {level} row:\n{text}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    // gpu (2 words), torch, mode, level, problems, measured, failed, stale, gaps, failures..
    assert_eq!(row("L1")[4..10], ["L1", "4", "1", "1", "1", "1"], "{text}");
    assert_eq!(row("L1")[10..], ["timeout", "1"], "{text}");
    assert_eq!(row("L2")[4..10], ["L2", "2", "2", "0", "0", "0"], "{text}");
    assert_eq!(
        row("L3")[4..],
        ["L3", "1", "0", "1", "0", "0", "out_of_memory", "1"],
        "{text}"
    );
    assert!(text.contains("1 gap(s) and 1 stale entr(ies)"), "{text}");
    assert!(
        text.contains("gaps of NVIDIA H100 compile L1 (1): level1/4_P4.py"),
        "{text}"
    );

    // Without the set, gaps are unknown and said to be.
    let out = kbench()
        .args(["baselines", "show", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("give --kernelbench DIR"), "{text}");
    assert!(!text.contains("gap(s)"), "{text}");
    // --gaps needs the set.
    let out = kbench()
        .args(["baselines", "show", "--gaps", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));

    let out = kbench()
        .args(["baselines", "show", "--json", "--store"])
        .arg(&store)
        .arg("--kernelbench")
        .arg(&kb)
        .output()
        .unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let l1 = &rows[0]["coverage"][0];
    assert_eq!(
        (
            &l1["problems"],
            &l1["measured"],
            &l1["stale"],
            &l1["failed"]["timeout"]
        ),
        (&4.into(), &1.into(), &1.into(), &1.into())
    );
    assert_eq!(l1["gaps"], serde_json::json!(["level1/4_P4.py"]));
}
