//! `kbench import` of published kernel sets (the fixtures in tests/fixtures/import, one per
//! format, each with a good kernel, a second kernel for one problem, a placeholder and
//! malformed entries), the rules for --out, and KernelBench's `eval_results.json` both ways: a
//! replay run of an imported set on CPU writes it, and importing it back gives the run's
//! verdicts and runtimes.

use crate::common;

use approx::relative_eq;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{ensure_python, kbench, records, repo_root, shared, show, RunBuilder};
use kbench_record::claims::{ClaimedKernel, ClaimsFile};
use kbench_record::eval_results::KbEvalResults;

fn fixtures() -> PathBuf {
    repo_root().join("tests/fixtures/import")
}

fn import(format: &str, src: &Path, out: &Path, extra: &[&str]) -> Output {
    kbench()
        .args(["import", format])
        .arg(src)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

fn claims(out: &Path) -> ClaimsFile {
    ClaimsFile::read(&out.join("claims.json")).unwrap()
}

fn kernel(c: &ClaimsFile, problem: u32, sample: u32) -> &ClaimedKernel {
    c.kernels
        .iter()
        .find(|k| (k.problem, k.sample) == (problem, sample))
        .unwrap_or_else(|| panic!("no entry for problem {problem} sample {sample}: {c:#?}"))
}

fn error_at<'a>(c: &'a ClaimsFile, at: &str) -> &'a str {
    &c.errors
        .iter()
        .find(|e| e.at == at)
        .unwrap_or_else(|| panic!("no error at {at}: {:#?}", c.errors))
        .message
}

/// The kernel files in `out` (the replay layout), sorted.
fn kernel_files(out: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with("_kernel.py"))
        .collect();
    v.sort();
    v
}

#[test]
fn jsonl_gives_samples_in_line_order_claims_and_errors_by_line() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("set");
    let o = import(
        "jsonl",
        &fixtures().join("set.jsonl"),
        &out,
        &["--tolerance", "1e-2,1e-2", "--model-mode", "eval"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("2 kernel(s), 2 no_kernel, 3 error(s)"),
        "{stdout}"
    );
    let c = claims(&out);
    assert_eq!(c.set.format, "jsonl");
    assert_eq!(c.set.name, "set");
    assert_eq!(c.set.model_mode.as_deref(), Some("eval"));
    assert_eq!(
        c.set.tolerance.map(|t| (t.atol, t.rtol)),
        Some((0.01, 0.01))
    );
    assert_eq!(
        kernel_files(&out),
        [
            "level_1_problem_1_sample_0_kernel.py",
            "level_1_problem_2_sample_0_kernel.py"
        ]
    );
    let k = kernel(&c, 1, 0);
    assert_eq!(k.name, "level_1_problem_1_sample_0_kernel");
    assert_eq!(k.label.as_deref(), Some("fixture-a"));
    assert_eq!(k.claimed_correct, Some(true));
    let mut by_field: Vec<(&str, &str, f64)> = k
        .claims
        .iter()
        .map(|c| (c.field.as_str(), c.baseline.as_str(), c.speedup))
        .collect();
    by_field.sort_by(|a, b| a.0.cmp(b.0));
    assert_eq!(
        by_field,
        [
            ("score_compile", "compile", 0.8),
            ("score_eager", "eager", 1.25)
        ]
    );
    // The set's reference, once per problem, as shipped.
    assert_eq!(k.reference.as_deref(), Some("refs/level_1_problem_1.py"));
    let shipped =
        std::fs::read_to_string(repo_root().join("suites/smoke/1_Elementwise_Multiply_Add.py"))
            .unwrap();
    assert_eq!(
        std::fs::read_to_string(out.join("refs/level_1_problem_1.py")).unwrap(),
        shipped
    );
    // The second line for problem 1 is sample 1: a placeholder, kept with its claims, no file.
    let stub = kernel(&c, 1, 1);
    assert_eq!(stub.kernel, None);
    assert!(
        stub.no_kernel.as_deref().unwrap().contains("placeholder"),
        "{stub:?}"
    );
    assert_eq!(stub.claimed_correct, Some(false));
    // CUDA-L1's `score_default` is a speedup over eager.
    let p2 = kernel(&c, 2, 0);
    assert_eq!(
        (
            p2.claims[0].field.as_str(),
            p2.claims[0].baseline.as_str(),
            p2.claimed_correct
        ),
        ("score_default", "eager", Some(true))
    );
    assert_eq!(
        kernel(&c, 4, 0).no_kernel.as_deref(),
        Some("empty kernel source")
    );
    assert_eq!(error_at(&c, "line 4"), "task_id is missing");
    assert!(error_at(&c, "line 6").contains("score_eager is \"fast\""));
    assert!(error_at(&c, "line 7").starts_with("not JSON"));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("line 4: task_id is missing"), "{stderr}");
}

#[test]
fn claim_baselines_are_named_on_the_command_line_or_refused() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("set");
    let src = fixtures().join("set.jsonl");
    let o = import(
        "jsonl",
        &src,
        &out,
        &["--claim-baseline", "SCORE_DEFAULT=max-autotune"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let c = claims(&out);
    assert_eq!(kernel(&c, 2, 0).claims[0].baseline, "max-autotune");
    let eager: Vec<&str> = kernel(&c, 1, 0)
        .claims
        .iter()
        .map(|c| c.baseline.as_str())
        .collect();
    assert!(
        eager.contains(&"eager") && eager.contains(&"compile"),
        "{eager:?}"
    );
    // A field the set lacks, or a baseline kbench does not know: refused, nothing written.
    for (arg, says) in [
        ("speedup=eager", "score_compile, score_default, score_eager"),
        ("score_default=fast", "eager, compile, max-autotune"),
    ] {
        let fresh = t.path().join(format!("x-{}", arg.len()));
        let o = import("jsonl", &src, &fresh, &["--claim-baseline", arg]);
        assert_ne!(o.status.code(), Some(0), "{arg}: {}", show(&o));
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            stderr.contains(says) && stderr.contains("--claim-baseline"),
            "{stderr}"
        );
        assert!(!fresh.join("claims.json").exists(), "{arg}");
    }
}

#[test]
fn kernelbench_runs_read_eval_results_and_baseline_times() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("kb");
    let baseline = fixtures().join("baseline_time_torch.json");
    let o = import(
        "kernelbench-runs",
        &fixtures().join("kernelbench_runs"),
        &out,
        &["--baseline-json", baseline.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let c = claims(&out);
    assert_eq!(c.set.format, "kernelbench-runs");
    assert_eq!(
        kernel_files(&out),
        [
            "level_1_problem_1_sample_0_kernel.py",
            "level_1_problem_1_sample_1_kernel.py"
        ]
    );
    // Correct, 2.0 ms against the baseline's 3.0 ms.
    let k = kernel(&c, 1, 0);
    assert_eq!(k.claimed_correct, Some(true));
    assert_eq!(k.claims.len(), 1);
    assert_eq!(
        (k.claims[0].speedup, k.claims[0].baseline.as_str()),
        (1.5, "eager")
    );
    // Incorrect: no speedup claimed.
    let k = kernel(&c, 1, 1);
    assert_eq!((k.claimed_correct, k.claims.len()), (Some(false), 0));
    // A placeholder file, and a result whose kernel file is missing (an object, as older
    // KernelBench wrote it).
    assert!(kernel(&c, 2, 0)
        .no_kernel
        .as_deref()
        .unwrap()
        .contains("placeholder"));
    let k = kernel(&c, 3, 0);
    assert!(k
        .no_kernel
        .as_deref()
        .unwrap()
        .contains("level_1_problem_3_sample_0_kernel.py"));
    assert_eq!(k.claimed_correct, Some(true));
    assert!(
        error_at(&c, "eval_results.json key \"4\" [0]").contains("not a KernelBench eval result")
    );
    assert_eq!(
        error_at(&c, "eval_results.json key \"x\""),
        "not a problem id"
    );
    assert!(error_at(&c, "level 1 problem 3").contains("no time"));
    assert_eq!(c.errors.len(), 3, "{:#?}", c.errors);
}

#[test]
fn leaderboard_reads_the_site_layout_from_the_repository_root() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("lb");
    let o = import("leaderboard", &fixtures().join("leaderboard"), &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let c = claims(&out);
    assert_eq!(c.set.name, "leaderboard");
    let k = kernel(&c, 1, 0);
    assert_eq!(k.label.as_deref(), Some("model-a"));
    assert_eq!(k.claimed_correct, Some(true));
    assert_eq!(
        (
            k.claims[0].speedup,
            k.claims[0].baseline.as_str(),
            k.claims[0].field.as_str()
        ),
        (1.5, "eager", "torch_speedup")
    );
    assert_eq!(k.reference.as_deref(), Some("refs/level_1_problem_1.py"));
    assert!(kernel(&c, 1, 1)
        .no_kernel
        .as_deref()
        .unwrap()
        .contains("placeholder"));
    // Sample = index in the list, even past an entry without a file.
    assert_eq!(
        kernel(&c, 2, 0).kernel.as_deref(),
        Some("level_1_problem_2_sample_0_kernel.py")
    );
    assert!(kernel(&c, 2, 1)
        .no_kernel
        .as_deref()
        .unwrap()
        .contains("solutions/dd44.py"));
    assert!(error_at(&c, "key \"Level 1: 2_ELU\" [2]").contains("torch_speedup"));
    assert!(error_at(&c, "key \"Level one: 4_Softmax\"").contains("Level L: ID_Name"));
    assert_eq!(c.kernels.len(), 4);
    assert!(String::from_utf8_lossy(&o.stdout).contains("list no entries"));
    // The references again in KernelBench's layout, named from the data's keys, so the
    // kernels can run on the problems they were written for.
    assert_eq!(
        std::fs::read_to_string(out.join("problems/level1/1_Elementwise_Multiply_Add.py")).unwrap(),
        std::fs::read_to_string(out.join("refs/level_1_problem_1.py")).unwrap()
    );
    assert!(String::from_utf8_lossy(&o.stdout)
        .contains(&format!("--kernelbench {}", out.join("problems").display())));
}

#[test]
fn out_must_be_new_empty_or_an_earlier_import() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("o");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    let o = import("jsonl", &fixtures().join("set.jsonl"), &out, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("not an earlier `kbench import`") && err.contains("--force"),
        "{err}"
    );
    // --force imports into it, leaving other files alone.
    let o = import("jsonl", &fixtures().join("set.jsonl"), &out, &["--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(out.join("notes.txt").exists());
    // An earlier import is replaced without --force: its kernels go.
    let o = import(
        "kernelbench-runs",
        &fixtures().join("kernelbench_runs"),
        &out,
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("replaced 2 kernel file(s)"));
    assert_eq!(claims(&out).set.format, "kernelbench-runs");
    assert!(!out.join("refs").exists());
    assert_eq!(kernel_files(&out).len(), 2);
}

#[test]
fn nothing_imported_or_an_unreadable_source_fails_naming_it() {
    let t = tempfile::tempdir().unwrap();
    let bad = t.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"level_id\": 1}\n[1, 2]\n").unwrap();
    let o = import("jsonl", &bad, &t.path().join("a"), &[]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("nothing could be imported from") && err.contains("bad.jsonl"),
        "{err}"
    );
    assert_eq!(claims(&t.path().join("a")).errors.len(), 2);
    let missing = t.path().join("nowhere");
    let o = import("kernelbench-runs", &missing, &t.path().join("b"), &[]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("nowhere"));
    let o = import("leaderboard", t.path(), &t.path().join("c"), &[]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no data.json"));
}

#[test]
fn two_references_for_one_problem_are_kept_per_sample() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("two.jsonl");
    let kernel = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n";
    let line = |r: &str| {
        serde_json::json!({"level_id": 2, "task_id": 7, "ref_code": r, "custom_code": kernel})
            .to_string()
    };
    std::fs::write(&src, format!("{}\n{}\n", line("ref A"), line("ref B"))).unwrap();
    let out = t.path().join("o");
    let o = import("jsonl", &src, &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("2 different reference codes"));
    let c = claims(&out);
    for (s, text) in [(0, "ref A"), (1, "ref B")] {
        let rel = kernel_ref(&c, s);
        assert_eq!(rel, format!("refs/level_2_problem_7_sample_{s}.py"));
        assert_eq!(std::fs::read_to_string(out.join(rel)).unwrap(), text);
    }
}

fn kernel_ref(c: &ClaimsFile, sample: u32) -> String {
    kernel(c, 7, sample).reference.clone().unwrap()
}

/// The whole way: an imported set replayed on CPU (real worker, real torch), KernelBench's
/// eval_results.json written by the run, and read back by the kernelbench-runs importer.
#[test]
fn imported_set_replays_and_its_eval_results_import_back() {
    let _guard = shared();
    ensure_python();
    let t = tempfile::tempdir().unwrap();
    let set = t.path().join("set");
    let o = import("jsonl", &fixtures().join("set.jsonl"), &set, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let run = t.path().join("run");
    let o = kbench()
        .args(
            RunBuilder::new()
                .suite("smoke")
                .select("1/1-4")
                .agent("replay")
                .build(),
        )
        .args([
            "--device",
            "cpu",
            "--families",
            "random",
            "--timed-calls",
            "5",
        ])
        .args(["--rounds", "1", "--quiet", "--replay-dir"])
        .arg(&set)
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    // Problems 3 and 4 have no kernel file: failed kernels, exit 3.
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let recs = records(&run);
    let kind = |id: u64| {
        let r: Vec<_> = recs.iter().filter(|r| r["problem"]["id"] == id).collect();
        assert_eq!(r.len(), 1, "problem {id}: {r:?}");
        r[0]["outcome"]["kind"].as_str().unwrap().to_string()
    };
    assert_eq!(
        [kind(1), kind(2), kind(3), kind(4)],
        ["ok", "ok", "no_kernel", "no_kernel"]
    );
    // One level: the file at the top too, as KernelBench's runs/<name>/ has it.
    let top = std::fs::read(run.join("eval_results.json")).unwrap();
    assert_eq!(
        top,
        std::fs::read(run.join("kernelbench/level_1/eval_results.json")).unwrap()
    );
    let kb: KbEvalResults = serde_json::from_slice(&top).unwrap();
    assert_eq!(kb.keys().copied().collect::<Vec<_>>(), [1, 2, 3, 4]);
    for id in [1, 2] {
        let e = &kb[&id][0];
        assert!(e.compiled && e.correctness && e.runtime > 0.0, "{e:?}");
        // Five timed calls a timing; claims the harness's clock did not support are timed
        // again (three timings at most, pooled), which a loaded 2-core host can cause.
        let trials = e.runtime_stats["num_trials"].as_u64();
        assert!(matches!(trials, Some(5 | 10 | 15)), "{e:?}");
        assert_eq!(e.runtime_stats["mean"], e.runtime);
    }
    for id in [3, 4] {
        let e = &kb[&id][0];
        assert!(!e.compiled && !e.correctness && e.runtime == -1.0, "{e:?}");
        assert_eq!(e.metadata["kbench_outcome"], "no_kernel");
    }

    // Back: KernelBench's runs folder = the replayed kernels + the run's eval_results.json;
    // baseline means of 1 ms make each claimed speedup 1 / runtime.
    let runs = t.path().join("runs_back");
    std::fs::create_dir(&runs).unwrap();
    for f in kernel_files(&set) {
        std::fs::copy(set.join(&f), runs.join(&f)).unwrap();
    }
    std::fs::write(runs.join("eval_results.json"), &top).unwrap();
    let baseline = t.path().join("baseline_time_torch.json");
    let means: serde_json::Map<String, serde_json::Value> = (1..=4)
        .map(|id| (format!("{id}_X.py"), serde_json::json!({"mean": 1.0})))
        .collect();
    std::fs::write(&baseline, serde_json::json!({"level1": means}).to_string()).unwrap();
    let back = t.path().join("back");
    let o = import(
        "kernelbench-runs",
        &runs,
        &back,
        &["--baseline-json", baseline.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let c = claims(&back);
    assert!(c.errors.is_empty(), "{:#?}", c.errors);
    for (id, samples) in &kb {
        for e in samples {
            let k = kernel(&c, *id, e.sample_id);
            assert_eq!(k.claimed_correct, Some(e.correctness), "problem {id}");
            let speedup = k.claims.first().map(|c| c.speedup);
            match e.correctness.then(|| 1.0 / e.runtime) {
                Some(x) => assert!(
                    speedup.is_some_and(|s| relative_eq!(s, x, max_relative = 1e-9)),
                    "problem {id}: {speedup:?} != {x}"
                ),
                None => assert_eq!(speedup, None, "problem {id}"),
            }
        }
    }
}

/// A published kernel that times two paths at its first call and keeps the faster, claiming
/// far more than it runs at: imported from a JSON-lines set, replayed, and the claims report
/// names why its claim fails (`slower, path chosen at run time`, with the line that times),
/// in the terminal table and in the exported rows.
#[test]
fn a_kernel_choosing_its_path_at_its_first_call_is_named_in_the_claims_report() {
    let _guard = shared();
    ensure_python();
    let t = tempfile::tempdir().unwrap();
    let root = repo_root();
    let line = serde_json::json!({
        "level_id": 1,
        "task_id": 4,
        "ref_code": std::fs::read_to_string(root.join("suites/smoke/4_Softmax.py")).unwrap(),
        "custom_code": std::fs::read_to_string(
            root.join("tests/fixtures/claims/4_chooses_its_path.py")
        ).unwrap(),
        "score_eager": 6.0,
        "correct": true,
    });
    let src = t.path().join("set.jsonl");
    std::fs::write(&src, format!("{line}\n")).unwrap();
    let set = t.path().join("set");
    let o = import("jsonl", &src, &set, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let run = t.path().join("run");
    let o = kbench()
        .args(
            RunBuilder::new()
                .suite("smoke")
                .select("1/4")
                .agent("replay")
                .build(),
        )
        .args([
            "--device",
            "cpu",
            "--families",
            "random",
            "--timed-calls",
            "5",
        ])
        .args(["--rounds", "1", "--quiet", "--replay-dir"])
        .arg(&set)
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let recs = records(&run);
    assert_eq!(recs[0]["outcome"]["kind"], "ok", "{}", recs[0]);
    let o = kbench()
        .arg("report")
        .arg(&run)
        .arg("--claims")
        .arg(set.join("claims.json"))
        .arg("--claims-out")
        .arg(t.path().join("out"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("slower, path chosen at run time: claimed 6.00x"),
        "{stdout}"
    );
    assert!(stdout.contains("perf_counter"), "{stdout}");
    let rows: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(t.path().join("out/claims.json")).unwrap())
            .unwrap();
    let text = rows.to_string();
    assert!(text.contains("slower, path chosen at run time"), "{text}");
}
