//! Nothing lost, nothing leaked, nothing forged: a run's records against its signed plan, with
//! the real binary on copies of one small real run (CPU smoke suite: problem 1 with a correct
//! kernel, problem 2 with a wrong one, so the honest correctness is 50%).
//!
//! - a deleted record line is counted missing, never correct, in the terminal table and every
//!   export (Markdown, JSON, CSV, leaderboard page, paper table), which all state the count;
//! - a line changed after kbench wrote it is counted invalid and its evaluation missing; a
//!   duplicated line counts once; a line another run signed is invalid; a record the plan
//!   does not list is left out; a truncated last line is missing, not an error; a `run.json`
//!   edited to drop planned evaluations, or put back unsigned, is refused;
//! - a run folder without its secret is refused, then read with `--unverified` and marked
//!   UNVERIFIED everywhere;
//! - `run --out` and `merge --out` refuse another tool's folder and leave it untouched;
//! - `report X X` reads X once, saying so, whatever the spelling; a copy of X beside it is
//!   refused;
//! - a `--no-timing` run reports "not timed", never 0; a `--resume` settings mismatch names
//!   the settings in words; off a terminal, a long step prints a plain progress line.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use common::{ensure_python, kbench, repo_root, shared, show, RunBuilder};
use kbench::runlog::seed::RunSecret;
use kbench::runlog::{records_key, signed_line, RECORD_MAC};

const WRONG_ELU: &str = "import torch\nimport torch.nn as nn\n\n\
class ModelNew(nn.Module):\n    def __init__(self, alpha):\n        super().__init__()\n\n    \
def forward(self, x):\n        return torch.relu(x)\n";

/// The one real run every test here tampers copies of, made once per test binary.
fn base_run() -> &'static Path {
    static RUN: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &RUN.get_or_init(|| {
        let _guard = shared();
        ensure_python();
        let tmp = tempfile::Builder::new()
            .prefix("kbench-complete-records")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        let kernels = tmp.path().join("kernels");
        std::fs::create_dir(&kernels).unwrap();
        std::fs::copy(
            repo_root().join("tests/fixtures/replay_smoke/1_correct_torch.py"),
            kernels.join("1_correct_torch.py"),
        )
        .unwrap();
        std::fs::write(kernels.join("2_relu_for_elu.py"), WRONG_ELU).unwrap();
        let run = tmp.path().join("run");
        let out = kbench()
            .args(
                RunBuilder::new()
                    .suite("smoke")
                    .select("1,2")
                    .agent("replay")
                    .device("cpu")
                    .timed_calls(20)
                    .quiet()
                    .replay_dir(&kernels)
                    .out(&run)
                    .build(),
            )
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(3),
            "one kernel is wrong: {}",
            show(&out)
        );
        (tmp, run)
    })
    .1
}

/// A copy of the base run named `name` (its label in reports), in `dir`.
fn copy_of(dir: &Path, name: &str) -> PathBuf {
    let to = dir.join(name);
    std::fs::create_dir(&to).unwrap();
    for f in ["run.json", "records.jsonl", "secret"] {
        std::fs::copy(base_run().join(f), to.join(f)).unwrap();
    }
    to
}

fn lines(run: &Path) -> Vec<String> {
    std::fs::read_to_string(run.join("records.jsonl"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn write_lines(run: &Path, lines: &[String]) {
    std::fs::write(run.join("records.jsonl"), lines.join("\n") + "\n").unwrap();
}

/// The index of the line of smoke problem `id`.
fn line_of(lines: &[String], id: u32) -> usize {
    let want = format!("\"level\":1,\"id\":{id},");
    lines.iter().position(|l| l.contains(&want)).unwrap()
}

fn report(dir: &Path, args: &[&str]) -> Output {
    kbench()
        .arg("report")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The terminal table's overall correctness cell of the one run reported.
fn overall_correct(stdout: &str) -> String {
    let row = stdout
        .lines()
        .find(|l| l.starts_with("all ") && l.contains('['))
        .unwrap_or_else(|| panic!("no overall row:\n{stdout}"));
    row.split_whitespace().nth(4).unwrap().to_string()
}

#[test]
fn a_deleted_record_line_is_counted_missing_in_the_terminal_and_every_export() {
    let tmp = tempfile::tempdir().unwrap();
    let run = copy_of(tmp.path(), "deleted");
    // The wrong kernel's line deleted: before, the report showed 100% correct.
    let mut l = lines(&run);
    l.remove(line_of(&l, 2));
    write_lines(&run, &l);
    let out = report(
        tmp.path(),
        &[
            "deleted",
            "--export-json",
            "r.json",
            "--export-csv",
            "r.csv",
            "--export-markdown",
            "r.md",
            "--plots",
            "plots",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = text(&out);
    assert!(
        stdout.contains("INCOMPLETE records: 2 planned, 1 recorded, 1 missing, 0 invalid"),
        "{stdout}"
    );
    assert_eq!(overall_correct(&stdout), "50.0%", "{stdout}");
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("1 planned evaluation(s) have no valid record"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("r.json")).unwrap()).unwrap();
    let r = &json["runs"][0];
    assert_eq!(r["records_check"]["missing"], 1, "{r}");
    assert_eq!(r["records_check"]["invalid"], 0);
    let all = r["scopes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["scope"] == "all")
        .unwrap();
    assert_eq!(all["correct"]["value"], 0.5);
    assert_eq!(all["tasks"], 2);
    let csv = std::fs::read_to_string(tmp.path().join("r.csv")).unwrap();
    for row in [
        "deleted,all,,records_missing,1,",
        "deleted,all,,records_invalid,0,",
        "deleted,all,,correct,0.5,",
    ] {
        assert!(csv.contains(row), "{row} not in:\n{csv}");
    }
    let md = std::fs::read_to_string(tmp.path().join("r.md")).unwrap();
    assert!(
        md.contains("1 missing, 0 invalid") && md.contains("| 50.0% ["),
        "{md}"
    );
    let problems = md.split("### Problems").nth(1).unwrap();
    assert!(problems.contains("| missing |"), "{problems}");
    let out = kbench()
        .args(["leaderboard", "deleted", "--out", "board.html"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let page = std::fs::read_to_string(tmp.path().join("board.html")).unwrap();
    assert!(page.contains("missing records") && page.contains("1 missing, 0 invalid"));
    assert!(page.contains(">50.0%<"), "the correct rate on the page");
    let out = report(tmp.path(), &["deleted", "--table", "kernelbench"]);
    let table = text(&out);
    assert!(
        table.contains("deleted: INCOMPLETE records: 2 planned, 1 recorded, 1 missing"),
        "{table}"
    );
    assert!(table.contains("50.0%"), "{table}");
}

#[test]
fn every_attack_on_the_log_changes_the_numbers_honestly_or_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let secret = RunSecret::load(&base_run().join("secret")).unwrap();
    let key = records_key(&secret, Some(RECORD_MAC)).unwrap();
    let base = lines(base_run());
    let record =
        |i: usize| -> kbench_record::EvalRecord { serde_json::from_str(&base[i]).unwrap() };
    let line = |key: &RunSecret, r: &kbench_record::EvalRecord| {
        let mut l = String::from_utf8(signed_line(key, r).unwrap()).unwrap();
        l.pop();
        l
    };
    let wrong = line_of(&base, 2);
    // Each attack: the lines it leaves, and what the report must then say.
    let flipped = base[wrong].replace("\"kind\":\"mismatch\"", "\"kind\":\"ok\"");
    assert_ne!(flipped, base[wrong]);
    let mut flip = base.clone();
    flip[wrong] = flipped;
    let mut dup = base.clone();
    dup.push(base[line_of(&base, 1)].clone());
    // The wrong kernel's line replaced by the same record, correct, signed with another
    // run's secret.
    let mut ok = record(wrong);
    ok.outcome = kbench_record::Outcome::Ok;
    let mut other = base.clone();
    other[wrong] = line(&RunSecret::from_bytes([7; 32]).subkey("records"), &ok);
    // A correct record this run never planned, signed with its own key (another shard's).
    let mut unplanned = base.clone();
    let mut extra = record(line_of(&base, 1));
    extra.problem.id = 9;
    unplanned.push(line(&key, &extra));
    let mut junk = base.clone();
    junk.extend((0..300).map(|i| format!("junk line {i}")));
    for (name, l, says, correct) in [
        (
            "flipped",
            flip,
            "2 planned, 1 recorded, 1 missing, 1 invalid",
            "50.0%",
        ),
        (
            "duplicated",
            dup,
            "2 planned, 2 recorded, 0 missing, 0 invalid, 1 duplicate(s) counted once",
            "50.0%",
        ),
        (
            "other-run",
            other,
            "2 planned, 1 recorded, 1 missing, 1 invalid",
            "50.0%",
        ),
        (
            "unplanned",
            unplanned,
            "2 planned, 2 recorded, 0 missing, 0 invalid, 1 unplanned record(s) left out",
            "50.0%",
        ),
        (
            "junk",
            junk,
            "2 planned, 2 recorded, 0 missing, 300 invalid",
            "50.0%",
        ),
    ] {
        let run = copy_of(tmp.path(), name);
        write_lines(&run, &l);
        let out = report(tmp.path(), &[name]);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", show(&out));
        let stdout = text(&out);
        assert!(
            stdout.contains(says),
            "{name}: {says:?} not said:\n{stdout}"
        );
        assert_eq!(overall_correct(&stdout), correct, "{name}: {stdout}");
        // A screenful of warnings, never a line per bad line.
        let warned = String::from_utf8_lossy(&out.stderr).lines().count();
        assert!(warned <= 16, "{name}: {warned} lines of warnings");
    }
    // A run killed mid-write: its last evaluation is missing, and that is no error.
    let run = copy_of(tmp.path(), "truncated");
    let l = base.clone();
    let last = l.last().unwrap();
    let text_now = l[..l.len() - 1].join("\n") + "\n" + &last[..last.len() / 2];
    std::fs::write(run.join("records.jsonl"), text_now).unwrap();
    let out = report(tmp.path(), &["truncated"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        text(&out).contains("1 missing, 0 invalid, 1 truncated last line (a run killed mid-write)"),
        "{}",
        show(&out)
    );
    // run.json edited to drop the wrong kernel's evaluation: refused.
    let run = copy_of(tmp.path(), "plan-edited");
    let manifest = std::fs::read_to_string(run.join("run.json")).unwrap();
    let mut m: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    m["planned"]["problems"]
        .as_array_mut()
        .unwrap()
        .retain(|p| p["id"] != 2);
    // Its signature kept in front, as it was.
    let mac = m.as_object_mut().unwrap().remove("mac").unwrap();
    let body = serde_json::to_string_pretty(&m).unwrap();
    let edited = format!("{{\"mac\":{mac},{}", &body[1..]);
    std::fs::write(run.join("run.json"), &edited).unwrap();
    let mut l = lines(&run);
    l.remove(line_of(&l, 2));
    write_lines(&run, &l);
    let out = report(tmp.path(), &["plan-edited"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("run.json does not verify"),
        "{}",
        show(&out)
    );
    // ... and put back unsigned, as an older kbench wrote it, with the plan gone: refused.
    m.as_object_mut().unwrap().remove("planned");
    std::fs::write(
        run.join("run.json"),
        serde_json::to_string_pretty(&m).unwrap(),
    )
    .unwrap();
    let out = report(tmp.path(), &["plan-edited"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("carries no signature"),
        "{}",
        show(&out)
    );
    // --resume refuses an edited run.json as well, before it reads any setting of it.
    let out = kbench()
        .args(
            RunBuilder::new()
                .suite("smoke")
                .select("1,2")
                .agent("replay")
                .device("cpu")
                .timed_calls(20)
                .quiet()
                .resume()
                .replay_dir(base_run().parent().unwrap().join("kernels"))
                .out(&run)
                .build(),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot resume") && err.contains("carries no signature"),
        "{err}"
    );
}

#[test]
fn a_run_without_its_secret_is_refused_then_marked_unverified_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let run = copy_of(tmp.path(), "copied");
    std::fs::remove_file(run.join("secret")).unwrap();
    let out = report(tmp.path(), &["copied"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("copied has no secret") && err.contains("--unverified"),
        "{err}"
    );
    let out = kbench()
        .args(["leaderboard", "copied", "--out", "board.html"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let out = kbench()
        .args(["merge", "copied", "--out", "merged"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(!tmp.path().join("merged/run.json").exists());

    let out = report(
        tmp.path(),
        &[
            "copied",
            "--unverified",
            "--export-json",
            "r.json",
            "--export-csv",
            "r.csv",
            "--export-markdown",
            "r.md",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = text(&out);
    assert!(
        stdout.starts_with("UNVERIFIED: 1 of 1 run(s) could not be verified"),
        "{stdout}"
    );
    assert!(stdout.contains("== copied (UNVERIFIED):"), "{stdout}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("r.json")).unwrap()).unwrap();
    assert_eq!(json["unverified"], serde_json::json!(["copied"]));
    assert_eq!(
        json["runs"][0]["records_check"]["verification"],
        "unverified"
    );
    let csv = std::fs::read_to_string(tmp.path().join("r.csv")).unwrap();
    assert!(
        csv.lines()
            .skip(1)
            .all(|l| l.starts_with("copied (UNVERIFIED),")),
        "{csv}"
    );
    assert!(
        csv.contains("copied (UNVERIFIED),all,,verified,0,"),
        "{csv}"
    );
    let md = std::fs::read_to_string(tmp.path().join("r.md")).unwrap();
    assert!(
        md.contains("> **UNVERIFIED: 1 of 1 run(s)") && md.contains("## copied (UNVERIFIED)"),
        "{md}"
    );
    let out = report(
        tmp.path(),
        &["copied", "--unverified", "--table", "cudaforge"],
    );
    assert!(text(&out).starts_with("UNVERIFIED:"), "{}", show(&out));
    let out = kbench()
        .args([
            "leaderboard",
            "copied",
            "--unverified",
            "--out",
            "board.html",
        ])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let page = std::fs::read_to_string(tmp.path().join("board.html")).unwrap();
    assert!(
        page.contains("<p class=\"unverified\">UNVERIFIED: 1 of 1 run(s)"),
        "banner"
    );
    // merge --unverified: a merged run without a secret, so its reports are unverified too.
    let out = kbench()
        .args(["merge", "copied", "--unverified", "--out", "merged"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(!tmp.path().join("merged/secret").exists());
    assert_eq!(report(tmp.path(), &["merged"]).status.code(), Some(1));
}

#[test]
fn out_of_run_and_merge_refuses_another_tools_folder_and_leaves_it_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    // A KernelBench runs/<name>/ folder: its kernels and its own eval_results.json.
    let kb = tmp.path().join("kb_run");
    std::fs::create_dir(&kb).unwrap();
    std::fs::copy(
        repo_root().join("tests/fixtures/replay_smoke/1_correct_torch.py"),
        kb.join("level_1_problem_1_sample_0_kernel.py"),
    )
    .unwrap();
    std::fs::write(kb.join("eval_results.json"), "{\"1\": []}\n").unwrap();
    let snapshot = |d: &Path| {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().to_string(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = snapshot(&kb);
    let out = kbench()
        .args(
            RunBuilder::new()
                .suite("smoke")
                .select("1")
                .agent("replay")
                .device("cpu")
                .quiet()
                .replay_dir(&kb)
                .out(&kb)
                .build(),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "--out {} is not empty and is not a kbench run folder",
            kb.display()
        )) && err.contains("eval_results.json")
            && err.contains("choose a new or empty folder"),
        "{err}"
    );
    assert_eq!(snapshot(&kb), before, "the folder was changed");
    let out = kbench()
        .arg("merge")
        .arg(base_run())
        .arg("--out")
        .arg(&kb)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert_eq!(snapshot(&kb), before, "the folder was changed by merge");
    // A folder holding another tool's run.json is no kbench run either.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("run.json"), "{\"epochs\": 3}").unwrap();
    let out = kbench()
        .args(
            RunBuilder::new()
                .suite("smoke")
                .select("1")
                .agent("reference")
                .device("cpu")
                .quiet()
                .resume()
                .out(&other)
                .build(),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not a kbench run's"),
        "{}",
        show(&out)
    );
    assert_eq!(std::fs::read_dir(&other).unwrap().count(), 1);
}

/// The same run folder given twice, by any spelling, is read once with a note; two folders
/// holding one run (a copy) are refused.
#[test]
fn one_run_folder_given_twice_counts_once_and_a_copy_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let run = copy_of(tmp.path(), "once");
    let copy = copy_of(tmp.path(), "copy");
    std::fs::create_dir(tmp.path().join("sub")).unwrap();
    std::os::unix::fs::symlink(&run, tmp.path().join("link")).unwrap();
    let alone = kbench().arg("report").arg(&run).output().unwrap();
    assert_eq!(alone.status.code(), Some(0), "{}", show(&alone));
    let spellings = [
        run.clone(),
        run.join("records.jsonl"),
        tmp.path().join("link"),
        tmp.path().join("sub/../once"),
    ];
    for again in spellings {
        let args = [run.clone(), again.clone()];
        let out = kbench()
            .arg("report")
            .args(&args)
            .arg("--export-json")
            .arg(tmp.path().join("twice.json"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!(
                "kbench: note: {} and {} are the same run folder",
                run.display(),
                again.display()
            )) && err.contains("counted once"),
            "{args:?}: {err}"
        );
        // Exactly the report of the run given once: one run, not `once` and `once#2`.
        assert_eq!(text(&out), text(&alone), "{args:?}");
        let json = |f: &str| {
            let v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(tmp.path().join(f)).unwrap())
                    .unwrap();
            v["runs"].as_array().unwrap().len()
        };
        assert_eq!(json("twice.json"), 1, "{args:?}");
        let out = kbench()
            .arg("leaderboard")
            .args(&args)
            .arg("--out")
            .arg(tmp.path().join("b.html"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", show(&out));
    }
    let args = [run.clone(), copy.clone()];
    let out = kbench().arg("report").args(&args).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("each run is reported once"), "{err}");
    let out = kbench()
        .arg("leaderboard")
        .args(&args)
        .arg("--out")
        .arg(tmp.path().join("c.html"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
}

/// A `--no-timing` run whose second kernel hangs past its timeout, off a terminal with a
/// progress line a second: the heartbeat speaks while the kernel hangs, the report says not
/// timed, and `--resume` with timing names the mismatch in words.
#[test]
fn an_untimed_run_reports_not_timed_and_a_long_step_off_a_terminal_is_not_silent() {
    let _guard = shared();
    ensure_python();
    let tmp = tempfile::tempdir().unwrap();
    let kernels = tmp.path().join("kernels");
    std::fs::create_dir(&kernels).unwrap();
    for f in ["1_correct_torch.py", "1_hangs.py"] {
        std::fs::copy(
            repo_root().join("tests/fixtures/replay_smoke").join(f),
            kernels.join(f),
        )
        .unwrap();
    }
    let run = tmp.path().join("untimed");
    let out = kbench()
        .args(
            RunBuilder::new()
                .suite("smoke")
                .select("1")
                .agent("replay")
                .device("cpu")
                .no_timing()
                .args(["--timeout-run", "3"])
                .families("random")
                .replay_dir(&kernels)
                .out(&run)
                .build(),
        )
        .env("KBENCH_PROGRESS_EVERY_S", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.lines().any(|l| l.starts_with("kbench: ")
            && l.contains("/2 evaluated after ")
            && l.contains("running smoke/L1/1")),
        "no progress line while the kernel hung:\n{err}"
    );
    let stdout = text(&out);
    assert!(stdout.contains("fast_1            not timed"), "{stdout}");
    let out = report(tmp.path(), &["untimed", "--export-csv", "r.csv"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = text(&out);
    assert!(
        stdout.contains("NOT TIMED") && stdout.contains("not timed  not timed"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("0.000x") && !stdout.contains(" 0.0% "),
        "{stdout}"
    );
    let csv = std::fs::read_to_string(tmp.path().join("r.csv")).unwrap();
    assert!(
        csv.contains("untimed,all,,timed,0,") && !csv.contains(",eager,fast_0,"),
        "{csv}"
    );
    let out = report(tmp.path(), &["untimed", "--table", "cudaforge"]);
    assert!(text(&out).contains("not timed"), "{}", show(&out));
    let out = kbench()
        .args(
            RunBuilder::new()
                .suite("smoke")
                .select("1")
                .agent("replay")
                .device("cpu")
                .families("random")
                .timed_calls(100)
                .resume()
                .replay_dir(&kernels)
                .out(&run)
                .build(),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("timed calls: recorded none (--no-timing), now 100"),
        "{err}"
    );
    assert!(!err.contains("Some(") && !err.contains("None"), "{err}");
}
