//! The GPU benchmark scripts' own logic, run here with stand-ins for what needs a GPU: a
//! `kbench` that records the problems it is given and an `nvidia-smi` that lists two GPUs.
//! What is real: bash, run.sh's budget, resume and markers, cpu_speed.py, summarize.py.

use std::path::Path;
use std::process::Command;

use crate::common::{records, repo_root, show, write_executable};

/// A stand-in `kbench run`: one record per selected problem (`--select L/ID,...`) appended to
/// `--out`'s records.jsonl, FAKE_SLEEP seconds each, spread over `--gpus`.
const FAKE_KBENCH: &str = r#"#!/usr/bin/env bash
case $1 in --version) echo "kbench 0.0-stand-in"; exit 0 ;; gpus) echo "stand-in"; exit 0 ;; esac
out=; sel=; gpus=0
while [ $# -gt 0 ]; do
  case $1 in --out) out=$2; shift ;; --select) sel=$2; shift ;; --gpus) gpus=$2; shift ;; esac
  shift
done
mkdir -p "$out"; echo '{"agent":"reference"}' > "$out/run.json"
IFS=, read -ra P <<< "$sel"; IFS=, read -ra G <<< "$gpus"
i=0
for p in "${P[@]}"; do
  s=$(date +%s.%N); sleep "${FAKE_SLEEP:-0.01}"; e=$(date +%s.%N)
  printf '{"problem":{"level":%s,"id":%s,"name":"p"},"outcome":{"kind":"ok"},"wall_s":0.01,"started_unix_s":%s,"finished_unix_s":%s,"gpu":%s,"timing":{"speedup":1.0}}\n' \
    "${p%/*}" "${p#*/}" "$s" "$e" "${G[$(( i % ${#G[@]} ))]}" >> "$out/records.jsonl"
  i=$((i + 1))
done
"#;

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// `ORDER=abba scaling.sh half`: the half's 125 problems in two blocks, 2-GPU, 1-GPU,
/// 1-GPU, 2-GPU, each side one run folder resumed with the next block. A call whose budget
/// ends after the first quarter stops there with its marker; the next call does the other
/// three; each side then holds all 125 problems once, from two invocations, with the host's
/// speed sampled around each, and the summary says the runs interleave.
#[test]
fn the_interleaved_half_goes_on_where_a_cut_call_stopped_and_summarizes_both_sides() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("D");
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(d.join("kernelbench")).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    write_executable(&d.join("kbench"), FAKE_KBENCH);
    write_executable(
        &bin.join("nvidia-smi"),
        "#!/bin/sh\necho 'GPU 0: stand-in'\necho 'GPU 1: stand-in'\n",
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let bench = tmp.path().join("bench");
    let copy = tmp.path().join("copy");
    let call = |budget: &str, sleep: &str| {
        let out = Command::new("bash")
            .args(["tests/gpu/scaling.sh", "half"])
            .current_dir(repo_root())
            .env("PATH", &path)
            .env("D", &d)
            .env("OUT", tmp.path().join("out"))
            .env("BENCH_DIR", &bench)
            .env("COPY_DIR", &copy)
            .env("HALF", "b")
            .env("ORDER", "abba")
            .env("BUDGET_S", budget)
            .env("FAKE_SLEEP", sleep)
            .env("KBENCH_BWRAP", "/bin/true")
            .env("KBENCH_PYTHON", "python3")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", show(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // 75 s: the first quarter (63 problems, 0.25 s each, about 16 s) starts with about 65 s
    // left and ends with under 60, which is too little to start the next.
    let first = call("75", "0.25");
    assert!(
        first.contains("budget spent before ref1 on block 0"),
        "{first}"
    );
    assert!(bench.join("abba_ref2_0.done").exists());
    assert!(!bench.join("abba_ref1_0.done").exists());
    assert_eq!(records(&bench.join("ref_2gpu")).len(), 63);
    assert!(!bench.join("ref_1gpu").exists());

    let second = call("600", "0.01");
    for q in ["ref2_0", "ref1_0", "ref1_1", "ref2_1"] {
        assert!(
            bench.join(format!("abba_{q}.done")).exists(),
            "{q}: {second}"
        );
        assert!(
            copy.join(format!("abba_{q}.done")).exists(),
            "{q} copied back"
        );
    }
    for side in ["ref_1gpu", "ref_2gpu"] {
        let mut keys: Vec<(u64, u64)> = records(&bench.join(side))
            .iter()
            .map(|v| {
                let p = &v["problem"];
                (p["level"].as_u64().unwrap(), p["id"].as_u64().unwrap())
            })
            .collect();
        keys.sort();
        let n = keys.len();
        keys.dedup();
        assert_eq!((n, keys.len()), (125, 125), "{side}: every even id once");
        assert!(keys.iter().all(|(_, id)| id % 2 == 0), "{side}: half b");
        assert_eq!(
            lines(&bench.join(format!("{side}.invocations"))),
            2,
            "{side}"
        );
        // cpu_speed.py before and after each invocation.
        assert_eq!(lines(&bench.join(format!("{side}.cpu_speed"))), 4, "{side}");
    }
    let md = std::fs::read_to_string(copy.join("results.md")).unwrap();
    assert!(md.contains("## Scaling ref_1gpu → ref_2gpu"), "{md}");
    assert!(md.contains("interleave in time (ORDER=abba)"), "{md}");
    assert!(md.contains("Host single-core speed"), "{md}");
}

/// A stand-in `kbench run` for bench/build_ahead: three records a second apart and a build
/// journal in which two of three jobs overlap; with FAKE_CUT_LIGHT set, a run with the light
/// CUDA header ends as one that run.sh's `timeout` stopped (status 124); with FAKE_NVCC set,
/// it runs the stand-in `nvcc` beside it, whose `cicc` burns a second of CPU.
const FAKE_BUILD_RUN: &str = r#"#!/usr/bin/env bash
case $1 in --version) echo "kbench 0.0-stand-in"; exit 0 ;; setup) echo "stand-in setup"; exit 0 ;; esac
out=
while [ $# -gt 0 ]; do case $1 in --out) out=$2; shift ;; esac; shift; done
mkdir -p "$out/logs"; t=$(date +%s)
for i in 1 2 3; do
  kind=ok; [ "$i" = 3 ] && [ "${KBENCH_CUDA_HEADER:-}" = light ] && kind=mismatch
  printf '{"candidate":{"name":"k%s"},"outcome":{"kind":"%s"},"load_s":%s,"finished_unix_s":%s}\n' "$i" "$kind" "$i" "$((t + i))" >> "$out/records.jsonl"
done
printf '{"started_unix_s":%s,"ended_unix_s":%s,"complete":true}\n' "$t" "$((t + 2))" "$((t + 1))" "$((t + 3))" "$((t + 4))" "$((t + 5))" > "$out/logs/builds.jsonl"
[ -n "${FAKE_NVCC:-}" ] && "$(dirname "$0")/nvcc"
sleep 3
[ -n "${FAKE_CUT_LIGHT:-}" ] && [ "${KBENCH_CUDA_HEADER:-}" = light ] && exit 124
exit 3
"#;

/// bench/build_ahead/run.sh with a stand-in kbench: each step's cold and warm runs are
/// summarized (kernels, first verdict, builds at once, peak memory sampled), and the runs side
/// by side compared kernel by kernel (the stand-in judges one kernel otherwise with the light
/// CUDA header).
#[test]
fn the_build_ahead_bench_summarizes_cold_and_warm_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = build_ahead_bench(
        tmp.path(),
        &[("PCH", "both"), ("SETUP_PCH", "1"), ("CUDA_HEADER", "both")],
    );
    assert!(o.status.success(), "{}", show(&o));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let runs: Vec<&str> = summary
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run"].as_str().unwrap())
        .collect();
    // With PCH=both the cold run is repeated without the headers, side by side, and with
    // CUDA_HEADER=both with the light CUDA header; SETUP_PCH=1 times `kbench setup` before
    // the cold run with them.
    assert_eq!(
        runs,
        [
            "fixtures_cold",
            "fixtures_cold_nopch",
            "fixtures_cold_light",
            "fixtures_warm"
        ],
        "{summary}"
    );
    assert!(summary[0]["pch_setup_s"].is_number(), "{summary}");
    assert!(summary[1]["pch_setup_s"].is_null(), "{summary}");
    for r in summary.as_array().unwrap() {
        assert_eq!(r["kernels"], 3, "{r}");
        assert_eq!(r["rc"], 3, "{r}");
        assert_eq!(r["builds_ahead"], 3, "{r}");
        assert_eq!(r["builds_at_once"], 2, "{r}");
        let first = r["first_verdict_s"].as_f64().unwrap();
        assert!((0.0..3.0).contains(&first), "{r}");
        assert!(r["peak_host_mem_gib"].is_number(), "{r}");
    }
    let table = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(table.contains("| fixtures_cold | 3 | 3 |"), "{table}");
    assert!(
        table.contains("fixtures cold, precompiled headers against none:"),
        "{table}"
    );
    assert!(
        table.contains("verdicts of the 3 kernels both runs judged: all the same"),
        "{table}"
    );
    assert!(
        table.contains("verdicts of the 3 kernels both runs judged: 1 differ")
            && table.contains("- L?/? s? k3: mismatch against ok"),
        "{table}"
    );
}

/// A stand-in `nvcc` and its `cicc`: scripts run by /bin/bash directly, so each process is
/// named after its script as the real tools are; `cicc` burns one second of its own CPU time
/// (read from /proc, no fork), for at most 20 s.
const FAKE_NVCC_TREE: &str = "#!/bin/bash\n\"$(dirname \"$0\")/cicc\"\n";
const FAKE_CICC: &str = r#"#!/bin/bash
hz=$(getconf CLK_TCK); end=$((SECONDS + 20))
while (( SECONDS < end )); do
  read -r -a f < /proc/$$/stat
  (( f[13] + f[14] >= hz )) && break
  for i in {1..2000}; do :; done
done
"#;

/// bench/build_ahead/run.sh (STEPS=fixtures) with the stand-in kbench and `envs`; its output
/// goes to `tmp`/out.
fn build_ahead_bench(tmp: &Path, envs: &[(&str, &str)]) -> std::process::Output {
    let d = tmp.join("D");
    std::fs::create_dir_all(&d).unwrap();
    write_executable(&d.join("kbench"), FAKE_BUILD_RUN);
    write_executable(&d.join("nvcc"), FAKE_NVCC_TREE);
    write_executable(&d.join("cicc"), FAKE_CICC);
    Command::new("bash")
        .arg("bench/build_ahead/run.sh")
        .current_dir(repo_root())
        .env("D", &d)
        .env("OUT", tmp.join("out"))
        .env("W", tmp.join("w"))
        .env("STEPS", "fixtures")
        .env("KBENCH_BWRAP", "/bin/true")
        .envs(envs.iter().copied())
        .output()
        .unwrap()
}

/// The host's CPU, sampled beside a run (host_cpu.py): the summary gives the host's busy share
/// between the first and the last verdict, and the run's CPU seconds by stage over its build
/// jobs, with the stand-in nvcc's `cicc` (a real process burning a second) counted as nvcc's
/// device compiler, found by its name and its parent's.
#[test]
fn the_build_ahead_bench_says_where_the_hosts_cpu_went() {
    let tmp = tempfile::tempdir().unwrap();
    let o = build_ahead_bench(tmp.path(), &[("WARM", "0"), ("FAKE_NVCC", "1")]);
    assert!(o.status.success(), "{}", show(&o));
    let out = tmp.path().join("out");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let run = &summary[0];
    assert_eq!(run["run"], "fixtures_cold", "{summary}");
    let cicc = run["cpu_s_by_stage"]["nvcc: cicc (device code)"]
        .as_f64()
        .unwrap_or(0.0);
    assert!((0.6..3.0).contains(&cicc), "{summary}");
    let busy = run["host_cpu_busy_after_first"].as_f64().unwrap();
    assert!(busy > 0.0 && busy <= 1.0, "{summary}");
    // The stages are a part of the host's busy CPU seconds while the sampler ran, which hold
    // cicc's second.
    let host_busy = run["host_busy_cpu_s"].as_f64().unwrap();
    assert!(host_busy >= cicc, "{summary}");
    // Three complete build jobs in the stand-in's journal: the stages but `other`, over three.
    let stages = run["cpu_s_by_stage"].as_object().unwrap();
    let counted: f64 = stages
        .iter()
        .filter(|(k, _)| k.as_str() != "other")
        .map(|(_, v)| v.as_f64().unwrap())
        .sum();
    let per_build = run["cpu_s_a_build"].as_f64().unwrap();
    assert!((per_build - counted / 3.0).abs() < 1e-6, "{summary}");
    let table = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(table.contains("| host CPU busy after first |"), "{table}");
    assert!(
        table.contains("fixtures_cold: CPU seconds a build (")
            && table.contains("nvcc: cicc (device code)"),
        "{table}"
    );
    // The stand-in's records carry no phases: no wait for builds, inside them or before.
    assert!(
        table.contains("fixtures_cold: the device waited for builds 0 s inside the records"),
        "{table}"
    );
    assert_eq!(run["build_wait_before_records_s"], 0.0, "{summary}");
}

/// A run that run.sh's time limit stopped: its seconds a kernel over the window are marked
/// as cut (an upper bound), and it is not compared with the run beside it on fewer kernels
/// than a pace can be read from; the pace between its first and last verdicts is given.
#[test]
fn the_build_ahead_bench_does_not_compare_a_run_cut_by_its_time_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let o = build_ahead_bench(
        tmp.path(),
        &[
            ("CUDA_HEADER", "both"),
            ("WARM", "0"),
            ("FAKE_CUT_LIGHT", "1"),
        ],
    );
    assert!(o.status.success(), "{}", show(&o));
    let out = tmp.path().join("out");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let runs = summary.as_array().unwrap();
    assert_eq!(runs.len(), 2, "{summary}");
    assert_eq!(
        (runs[0]["run"].as_str(), runs[0]["cut"].as_bool()),
        (Some("fixtures_cold"), Some(false)),
        "{summary}"
    );
    assert_eq!(
        (runs[1]["run"].as_str(), runs[1]["cut"].as_bool()),
        (Some("fixtures_cold_light"), Some(true)),
        "{summary}"
    );
    // Three records a second apart: a second a kernel between the first and the last.
    let pace = runs[1]["s_per_kernel_after_first"].as_f64().unwrap();
    assert!((0.9..1.1).contains(&pace), "{summary}");
    let table = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        table.contains("| fixtures_cold_light | 124 | 3 |") && table.contains(" (cut) |"),
        "{table}"
    );
    assert!(
        table.contains("fixtures cold, the light CUDA header against torch's: not compared: fixtures_cold_light was cut by its time limit after 3 kernel(s)"),
        "{table}"
    );
    assert!(!table.contains("x the time"), "{table}");
}

/// A stand-in nvcc for cuda_header_probe.py: writes its `-o` file, and fails where it is given
/// the light header's folder (`-I`) and the source needs Python.h (`PyObject`), as the real
/// one does on a source that needs more than `torch/types.h`.
const FAKE_NVCC: &str = r#"#!/usr/bin/env bash
src=; out=; light=0; prev=
for a in "$@"; do
  case $prev in -c) src=$a ;; -o) out=$a ;; -I) light=1 ;; esac
  prev=$a
done
if [ "$light" = 1 ] && grep -q PyObject "$src"; then echo "error: identifier PyObject is undefined" >&2; exit 2; fi
head -1 "$src" > /dev/null && touch "$out"
"#;

/// bench/build_ahead/cuda_header_probe.py with a stand-in nvcc: each file's CUDA source is
/// found without running it, compiled both ways, and the source the light header does not
/// serve is counted; `--light-only` compiles the full way only for that one.
#[test]
fn the_cuda_header_probe_compiles_each_source_both_ways_and_counts_what_light_does_not_serve() {
    crate::common::ensure_python();
    let python =
        kbench::worker::python::PythonChoice::resolve(None, &kbench::worker::python::cache_dir())
            .python;
    let tmp = tempfile::tempdir().unwrap();
    let sources = tmp.path().join("sources");
    std::fs::create_dir_all(&sources).unwrap();
    let kernel = |body: &str| {
        format!("import os\nos.environ['RAN'] = '1'\nSRC = r\"\"\"\n__global__ void k() {{}}\n{body}\n\"\"\"\nraise SystemExit('candidate code must not run')\n")
    };
    std::fs::write(sources.join("a_light.py"), kernel("int x;")).unwrap();
    std::fs::write(sources.join("b_full.py"), kernel("PyObject* p;")).unwrap();
    std::fs::write(sources.join("c_no_cuda.py"), "X = 'no kernel here'\n").unwrap();
    let nvcc = tmp.path().join("nvcc");
    write_executable(&nvcc, FAKE_NVCC);
    for (light_only, out) in [(false, "both"), (true, "light")] {
        let out = tmp.path().join(out);
        let mut c = Command::new(&python);
        c.arg("bench/build_ahead/cuda_header_probe.py")
            .arg("--sources")
            .arg(&sources)
            .arg("--out")
            .arg(&out)
            .arg("--nvcc")
            .arg(&nvcc)
            .current_dir(repo_root())
            // torch's include folders for a CUDA extension are under CUDA_HOME.
            .env("CUDA_HOME", tmp.path());
        if light_only {
            c.arg("--light-only");
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", show(&o));
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap())
                .unwrap();
        let rows = r["results"].as_array().unwrap();
        let names: Vec<&str> = rows.iter().map(|x| x["source"].as_str().unwrap()).collect();
        assert_eq!(names, ["a_light", "b_full"], "{r}");
        assert_eq!(rows[0]["light_rc"], 0, "{r}");
        assert_eq!(rows[1]["light_rc"], 2, "{r}");
        assert_eq!(rows[1]["full_rc"], 0, "{r}");
        assert_eq!(rows[0]["full_rc"].is_null(), light_only, "{r}");
        let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
        assert!(
            summary.contains("the light header does not serve (full builds, light fails): 1")
                && summary.contains("light builds, full fails: 0")
                && summary.contains("not checked for 1 compiled the light way alone") == light_only,
            "{summary}"
        );
    }
}
