//! `kbench report`: snapshot tests of every export format and paper table over two fixture
//! runs (tests/fixtures/report_runs, written by make.py there), with run paths and measured
//! durations redacted, and end-to-end runs of the built binary.
//!
//! Snapshots live in tests/snapshots/report/ and are compared exactly; after an intended
//! change, regenerate them with `UPDATE_SNAPSHOTS=1 cargo test -p kbench --test e2e report::`
//! and review the diff.

use crate::common;

use std::path::{Path, PathBuf};

use common::{kbench, repo_root, show};
use kbench_reports::export::{render_csv, render_json, render_markdown, render_terminal};
use kbench_reports::papers::{render_paper_table, PaperTable};
use kbench_reports::task::Pick;
use kbench_reports::{build_report_picking, Report, SpeedupBasis};

fn fixture_runs() -> Vec<PathBuf> {
    let root = repo_root().join("tests/fixtures/report_runs");
    vec![root.join("kevin-style"), root.join("one-shot")]
}

/// The fixture report with paths and durations redacted: what the snapshots show.
fn redacted_report(basis: SpeedupBasis) -> Report {
    redacted_report_picking(basis, Pick::BestCorrect)
}

fn redacted_report_picking(basis: SpeedupBasis, pick: Pick) -> Report {
    let runs = kbench::commands::report::read_runs(&fixture_runs(), false).unwrap();
    let mut report = build_report_picking(&runs, basis, pick);
    for run in &mut report.runs {
        run.path = format!("[RUN_DIR]/{}", run.label);
        for s in &mut run.scopes {
            // The harness's measured evaluation time; agent costs are recorded data.
            s.cost.eval_min_per_task = None;
        }
    }
    report
}

fn check_snapshot(name: &str, actual: &str) {
    let path = repo_root().join("tests/snapshots/report").join(name);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "no snapshot {}: run with UPDATE_SNAPSHOTS=1 to create it",
            path.display()
        )
    });
    if expected != actual {
        let line = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
        panic!(
            "{name} differs from its snapshot at line {}:\n  snapshot: {:?}\n  actual:   {:?}\n\
             (UPDATE_SNAPSHOTS=1 rewrites the snapshots; review the diff)",
            line + 1,
            expected.lines().nth(line),
            actual.lines().nth(line)
        );
    }
}

#[test]
fn terminal_table_snapshot() {
    check_snapshot(
        "terminal.txt",
        &render_terminal(&redacted_report(SpeedupBasis::Median)),
    );
}

#[test]
fn csv_export_snapshot() {
    let csv = render_csv(&redacted_report(SpeedupBasis::Median));
    let header = csv.lines().next().unwrap();
    assert_eq!(header, "run,scope,baseline,metric,value,low,high,count,n");
    check_snapshot("report.csv", &csv);
}

#[test]
fn json_export_snapshot() {
    let json = render_json(&redacted_report(SpeedupBasis::Median));
    let back: Report = serde_json::from_str(&json).unwrap();
    assert_eq!(back.runs.len(), 2);
    check_snapshot("report.json", &json);
}

#[test]
fn markdown_export_snapshot() {
    check_snapshot(
        "report.md",
        &render_markdown(&redacted_report(SpeedupBasis::Median)),
    );
}

#[test]
fn paper_table_snapshots() {
    // The papers time with means (KernelBench, CudaForge, CUDA Agent's profiler average);
    // KernelBench's analysis reads each problem's first sample.
    for table in [
        PaperTable::CudaForge,
        PaperTable::CudaAgent,
        PaperTable::Kevin,
        PaperTable::KernelBench,
    ] {
        let pick = if table == PaperTable::KernelBench {
            Pick::FirstSample
        } else {
            Pick::BestCorrect
        };
        let report = redacted_report_picking(SpeedupBasis::Mean, pick);
        check_snapshot(
            &format!("table-{}.txt", table.name()),
            &render_paper_table(&report, table, false),
        );
    }
}

fn run_report(args: &[&str], dir: &Path) -> std::process::Output {
    kbench()
        .arg("report")
        .args(fixture_runs())
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

#[test]
fn report_writes_every_export_and_plot_from_the_run_dirs_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run_report(
        &[
            "--export-csv",
            "out/r.csv",
            "--export-json",
            "out/r.json",
            "--export-markdown",
            "out/r.md",
            "--plots",
            "plots",
        ],
        tmp.path(),
    );
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.starts_with("== kevin-style: agent kevin-style;"),
        "{stdout}"
    );
    assert!(stdout.contains("== one-shot: agent one-shot;"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("out/r.json")).unwrap())
            .unwrap();
    assert_eq!(json["report_version"], 1);
    assert_eq!(json["basis"], "median");
    assert!(std::fs::read_to_string(tmp.path().join("out/r.csv"))
        .unwrap()
        .starts_with("run,scope,baseline,metric"));
    assert!(std::fs::read_to_string(tmp.path().join("out/r.md"))
        .unwrap()
        .starts_with("# kbench report"));
    for name in [
        "fast_p-all-eager",
        "fast_p-L1-compile",
        "speedups-eager",
        "speedups-compile",
        "problems-kevin-style",
        "problems-one-shot",
        "families",
    ] {
        let png = std::fs::read(tmp.path().join(format!("plots/{name}.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{name}.png");
        assert!(png.len() > 5_000, "{name}.png is {} bytes", png.len());
        let svg = std::fs::read_to_string(tmp.path().join(format!("plots/{name}.svg"))).unwrap();
        assert!(svg.contains("<svg") && svg.contains("<text"), "{name}.svg");
    }
    // No eager-only run gets a compile curve it has no data for.
    assert!(!tmp
        .path()
        .join("plots/problems-one-shot-compile.png")
        .exists());
}

#[test]
fn table_presets_print_each_papers_shape_on_the_mean_basis() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run_report(&["--table", "cuda-agent"], tmp.path());
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let expected = render_paper_table(
        &redacted_report(SpeedupBasis::Mean),
        PaperTable::CudaAgent,
        false,
    );
    assert_eq!(text, expected);
    let out = run_report(&["--table", "cudaforge", "--basis", "median"], tmp.path());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("speedups on the median basis"), "{text}");
    // KernelBench's table reads each problem's first sample: kevin-style's L1/1 sample 0
    // is its slower first kernel (2.0 / 1.6 ms, 1.25x), not the 2.5x of a later turn.
    let out = run_report(&["--table", "kernelbench"], tmp.path());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("task = first sample only"), "{text}");
    let expected = render_paper_table(
        &redacted_report_picking(SpeedupBasis::Mean, Pick::FirstSample),
        PaperTable::KernelBench,
        false,
    );
    assert_eq!(text, expected);
}

#[test]
fn report_names_a_missing_run_and_exits_1() {
    let out = kbench()
        .args(["report", "/nonexistent/kbench-run"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("/nonexistent/kbench-run has no records.jsonl"),
        "{err}"
    );
}

#[test]
fn report_reads_a_resumed_log_once_per_key_and_skips_a_partial_last_line() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("resumed");
    std::fs::create_dir(&run).unwrap();
    let src = std::fs::read_to_string(fixture_runs()[1].join("records.jsonl")).unwrap();
    let first = src.lines().next().unwrap();
    // The first record twice (a resume that re-evaluated it) and a torn last line.
    let text = format!("{src}{first}\n{}", &first[..first.len() / 2]);
    std::fs::write(run.join("records.jsonl"), text).unwrap();
    let runs = kbench::commands::report::read_runs(&[run], true).unwrap();
    assert_eq!(runs[0].records.len(), 4);
    assert_eq!(runs[0].label, "resumed");
    assert_eq!(runs[0].agent.as_deref(), Some("one-shot"));
}

/// `--claims`: a claims file against the one-shot run; the terminal table, the three files
/// of `--claims-out`, and the leaderboard's claims section.
#[test]
fn claims_report_prints_and_exports_every_row_with_its_reason() {
    use kbench_record::claims::{
        Claim, ClaimSet, ClaimedKernel, ClaimsFile, CLAIMS_SCHEMA_VERSION,
    };
    let tmp = tempfile::tempdir().unwrap();
    let kernel = |level: u8, problem: u32, speedup: f64| ClaimedKernel {
        level,
        problem,
        sample: 0,
        name: format!("level_{level}_problem_{problem}_sample_0_kernel"),
        kernel: None,
        label: Some("m".into()),
        claims: vec![Claim {
            speedup,
            baseline: "eager".into(),
            field: "score".into(),
        }],
        claimed_correct: Some(true),
        reference: None,
        no_kernel: None,
    };
    let claims = ClaimsFile {
        schema_version: CLAIMS_SCHEMA_VERSION,
        set: ClaimSet {
            name: "published".into(),
            format: "jsonl".into(),
            source: "x.jsonl".into(),
            tolerance: None,
            model_mode: None,
        },
        // 1/1 is correct at 0.8x (claimed 5x), 1/19 at 2x (claimed 2x), 2/40 timed out,
        // 3/35 crashed; 1/1's second sample has no record; 1/2 is outside the run.
        kernels: vec![
            kernel(1, 1, 5.0),
            kernel(1, 19, 2.0),
            kernel(2, 40, 3.0),
            kernel(3, 35, 1.1),
            ClaimedKernel {
                sample: 1,
                ..kernel(1, 1, 1.5)
            },
            kernel(1, 2, 1.5),
        ],
        errors: vec![],
    };
    let path = tmp.path().join("claims.json");
    std::fs::write(&path, serde_json::to_string(&claims).unwrap()).unwrap();
    let run = repo_root().join("tests/fixtures/report_runs/one-shot");
    let out = kbench()
        .arg("report")
        .arg(&run)
        .args(["--claims", "claims.json", "--claims-out", "out"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("claims of published (jsonl) against run one-shot: 5 kernels, 4 evaluated"),
        "{stdout}"
    );
    assert!(
        stdout.contains("slower than claimed: claimed 5.00x"),
        "{stdout}"
    );
    assert!(
        stdout.contains("not evaluated: no record in the run"),
        "{stdout}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("out/claims.json")).unwrap())
            .unwrap();
    assert_eq!(json["rows"].as_array().unwrap().len(), 5);
    assert_eq!(
        json["rows"][1]["reason"],
        serde_json::Value::Null,
        "1/19 agrees"
    );
    assert_eq!(
        json["rows"][2]["reason"]["category"],
        "fails-kernelbench-check"
    );
    let csv = std::fs::read_to_string(tmp.path().join("out/claims.csv")).unwrap();
    assert_eq!(csv.lines().count(), 6, "{csv}");
    assert!(std::fs::read_to_string(tmp.path().join("out/claims.md"))
        .unwrap()
        .starts_with("# Claims: published"));
    let page = tmp.path().join("lb.html");
    let out = kbench()
        .arg("leaderboard")
        .arg(&run)
        .args(["--claims", "claims.json", "--out"])
        .arg(&page)
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("<h2>Claims: published</h2>"));
    assert_eq!(html.matches("class=\"disagrees\"").count(), 4);
    // A file that is not a claims file is named, with what to do.
    std::fs::write(tmp.path().join("bad.json"), "{}").unwrap();
    let out = kbench()
        .arg("report")
        .arg(&run)
        .args(["--claims", "bad.json"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.json is not a kbench claims file") && err.contains("kbench import"),
        "{err}"
    );
}
