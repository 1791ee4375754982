//! `kbench import` reads a published set as untrusted: a `file` with `..`, a link out of the
//! set's folder, a FIFO, an oversized or non-UTF-8 file or line is one entry's named error in
//! every format; a line with two fields that differ only in case is refused; importing again
//! removes only what the earlier import wrote; and the command it suggests for the set's own
//! problems runs on the one-level folder it wrote.

use crate::common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{kbench, repo_root, show};
use kbench_record::claims::{ClaimedKernel, ClaimsFile};

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

fn error_at<'a>(c: &'a ClaimsFile, at: &str) -> &'a str {
    &c.errors
        .iter()
        .find(|e| e.at == at)
        .unwrap_or_else(|| panic!("no error at {at}: {:#?}", c.errors))
        .message
}

fn kernel(c: &ClaimsFile, problem: u32, sample: u32) -> &ClaimedKernel {
    c.kernels
        .iter()
        .find(|k| (k.problem, k.sample) == (problem, sample))
        .unwrap_or_else(|| panic!("no entry for problem {problem} sample {sample}: {c:#?}"))
}

/// Copies a fixture folder (files only, any depth).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_tree(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

/// Every file under `dir`, as bytes.
fn all_bytes(dir: &Path, out: &mut Vec<u8>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            all_bytes(&p, out);
        } else {
            out.extend(std::fs::read(&p).unwrap());
        }
    }
}

const OUTSIDE: &str = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b, c):\n        return a + b + c  # PRIVATE-OUTSIDE-THE-SET\n";

#[test]
fn leaderboard_refuses_traversal_links_and_fifos_per_entry() {
    let t = tempfile::tempdir().unwrap();
    let site = t.path().join("site");
    copy_tree(&fixtures().join("leaderboard"), &site);
    std::fs::write(t.path().join("outside.py"), OUTSIDE).unwrap();
    let assets = site.join("docs/assets");
    symlink(
        t.path().join("outside.py"),
        assets.join("solutions/link_out.py"),
    )
    .unwrap();
    symlink("aa11.py", assets.join("solutions/link_in.py")).unwrap();
    nix::unistd::mkfifo(
        &assets.join("solutions/fifo.py"),
        nix::sys::stat::Mode::S_IRWXU,
    )
    .unwrap();
    // The set's reference of problem 2 links out too.
    std::fs::remove_file(assets.join("problems/l1_p2.py")).unwrap();
    symlink(
        t.path().join("outside.py"),
        assets.join("problems/l1_p2.py"),
    )
    .unwrap();
    let data_path = assets.join("data.json");
    let mut data: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&data_path).unwrap()).unwrap();
    let list = data["Level 1: 1_Elementwise_Multiply_Add"]
        .as_array_mut()
        .unwrap();
    for file in [
        "../../../outside",
        "link_out",
        "link_in",
        "fifo",
        "/etc/passwd",
    ] {
        list.push(serde_json::json!({"display_name": file, "torch_speedup": 9.0, "file": file}));
    }
    std::fs::write(&data_path, data.to_string()).unwrap();
    let out = t.path().join("out");
    let o = import("leaderboard", &site, &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let c = claims(&out);
    let at = |i: usize| format!("key \"Level 1: 1_Elementwise_Multiply_Add\" [{i}]");
    assert!(error_at(&c, &at(2)).contains(
        "kernel file solutions/../../../outside.py not imported: it names a path outside"
    ));
    assert!(error_at(&c, &at(3)).contains("link to a file outside"));
    assert!(error_at(&c, &at(5)).contains("is a FIFO"));
    let e = error_at(&c, &at(6));
    assert!(
        e.contains("/etc/passwd.py not imported: it names a path outside"),
        "{e}"
    );
    // Refused entries stay, as no_kernel entries with their claims; the link inside the set
    // is read.
    for s in [2, 3, 5, 6] {
        let k = kernel(&c, 1, s);
        assert!(k.kernel.is_none() && k.no_kernel.as_deref().unwrap().contains("not imported"));
        assert_eq!(k.claims[0].speedup, 9.0);
    }
    assert!(kernel(&c, 1, 4).kernel.is_some());
    assert!(error_at(&c, "key \"Level 1: 2_ELU\"")
        .contains("problem file problems/l1_p2.py not read: it is a link to a file outside"));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains(&at(3)), "{stderr}");
    let mut written = Vec::new();
    all_bytes(&out, &mut written);
    let needle = b"PRIVATE-OUTSIDE-THE-SET";
    assert!(!written.windows(needle.len()).any(|w| w == needle));
}

#[test]
fn kernelbench_runs_refuses_links_fifos_and_bad_bytes_per_entry() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("runs");
    copy_tree(&fixtures().join("kernelbench_runs"), &src);
    std::fs::write(t.path().join("outside.py"), OUTSIDE).unwrap();
    symlink(
        t.path().join("outside.py"),
        src.join("level_1_problem_5_sample_0_kernel.py"),
    )
    .unwrap();
    nix::unistd::mkfifo(
        &src.join("level_1_problem_6_sample_0_kernel.py"),
        nix::sys::stat::Mode::S_IRWXU,
    )
    .unwrap();
    std::fs::write(
        src.join("level_1_problem_7_sample_0_kernel.py"),
        b"x = '\xff'\n",
    )
    .unwrap();
    // eval_results.json, a link out of the folder: named, not read.
    let results = src.join("eval_results.json");
    std::fs::rename(&results, t.path().join("eval_results.json")).unwrap();
    symlink(t.path().join("eval_results.json"), &results).unwrap();
    let out = t.path().join("out");
    let o = import("kernelbench-runs", &src, &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let c = claims(&out);
    assert!(error_at(&c, "level_1_problem_5_sample_0_kernel.py").contains("link to a file outside"));
    assert!(error_at(&c, "level_1_problem_6_sample_0_kernel.py").contains("is a FIFO"));
    assert!(error_at(&c, "level_1_problem_7_sample_0_kernel.py")
        .contains("not UTF-8 text (invalid byte at offset 5)"));
    assert!(error_at(&c, "eval_results.json").contains("not read: it is a link to a file outside"));
    for p in [5, 6, 7] {
        assert!(kernel(&c, p, 0)
            .no_kernel
            .as_deref()
            .unwrap()
            .contains("not imported"));
    }
    // The good kernel files still come in.
    assert!(kernel(&c, 1, 0).kernel.is_some());
    let mut written = Vec::new();
    all_bytes(&out, &mut written);
    let needle = b"PRIVATE-OUTSIDE-THE-SET";
    assert!(!written.windows(needle.len()).any(|w| w == needle));
}

#[test]
fn jsonl_a_line_not_utf8_or_with_case_twin_fields_costs_that_line_only() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("set.jsonl");
    let good = std::fs::read(fixtures().join("set.jsonl")).unwrap();
    let first = good.split(|b| *b == b'\n').next().unwrap().to_vec();
    let kernel = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n";
    let twins = serde_json::json!({
        "level_id": 1, "task_id": 3, "custom_code": kernel, "Custom_Code": kernel
    });
    let mut bytes = first.clone();
    bytes.extend_from_slice(
        b"\n{\"level_id\": 1, \"task_id\": 2, \"custom_code\": \"x = '\xff'\"}\n",
    );
    bytes.extend_from_slice(twins.to_string().as_bytes());
    bytes.extend_from_slice(b"\r\n");
    std::fs::write(&src, bytes).unwrap();
    let out = t.path().join("out");
    let o = import("jsonl", &src, &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let c = claims(&out);
    assert_eq!(c.kernels.len(), 1, "{c:#?}");
    assert!(kernel_of(&c).kernel.is_some());
    let e = error_at(&c, "line 2");
    assert!(
        e.contains("not UTF-8 text (invalid byte at column 52)")
            && e.contains("save the file as UTF-8"),
        "{e}"
    );
    let e = error_at(&c, "line 3");
    assert!(
        e.contains("\"Custom_Code\"") && e.contains("differ only in case"),
        "{e}"
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("line 2: not UTF-8"), "{stderr}");
}

fn kernel_of(c: &ClaimsFile) -> &ClaimedKernel {
    kernel(c, 1, 0)
}

#[test]
fn reimport_removes_only_what_the_earlier_import_wrote() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("set");
    let site = fixtures().join("leaderboard");
    let o = import("leaderboard", &site, &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    // The user's own things beside and inside what the import wrote.
    let run = out.join("problems/run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("records.jsonl"), "mine\n").unwrap();
    std::fs::write(out.join("problems/level1/notes.txt"), "mine\n").unwrap();
    std::fs::write(out.join("notes.txt"), "mine\n").unwrap();
    let o = import("leaderboard", &site, &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("replaced 2 kernel file(s)"));
    for f in [
        "problems/run/records.jsonl",
        "problems/level1/notes.txt",
        "notes.txt",
    ] {
        assert_eq!(
            std::fs::read_to_string(out.join(f)).unwrap(),
            "mine\n",
            "{f}"
        );
    }
    assert!(out
        .join("problems/level1/1_Elementwise_Multiply_Add.py")
        .is_file());
    // An imported file the user changed is theirs now: the import would replace it, so it
    // refuses before removing anything, --force or not.
    let edited = out.join("refs/level_1_problem_1.py");
    std::fs::write(&edited, "# my edits\n").unwrap();
    for extra in [&[][..], &["--force"][..]] {
        let o = import("leaderboard", &site, &out, extra);
        assert_eq!(o.status.code(), Some(1), "{}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("refs/level_1_problem_1.py") && err.contains("move it away"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&edited).unwrap(), "# my edits\n");
        assert!(out.join("level_1_problem_1_sample_0_kernel.py").is_file());
    }
    // Another format into the same folder, once the user's edit is moved away: the earlier
    // import's files go, the user's stay.
    std::fs::rename(&edited, t.path().join("kept.py")).unwrap();
    let o = import("jsonl", &fixtures().join("set.jsonl"), &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(!out.join("level_1_problem_2_sample_1_kernel.py").exists());
    for f in [
        "problems/run/records.jsonl",
        "problems/level1/notes.txt",
        "notes.txt",
    ] {
        assert!(out.join(f).is_file(), "{f}");
    }
    // An import from before the manifest: what its claims file names, and the copies of its
    // references in problems/, are its own; the user's files still stay.
    std::fs::remove_file(out.join("import_manifest.json")).unwrap();
    let o = import("leaderboard", &site, &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("replaced 2 kernel file(s)"));
    for f in [
        "problems/run/records.jsonl",
        "problems/level1/notes.txt",
        "notes.txt",
    ] {
        assert!(out.join(f).is_file(), "{f}");
    }
}

#[test]
fn the_suggested_command_runs_on_the_one_level_problems_folder_it_wrote() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("set");
    let o = import("leaderboard", &fixtures().join("leaderboard"), &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let problems = out.join("problems");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains(&format!("--kernelbench {} --levels 1 ", problems.display())),
        "{stdout}"
    );
    // Without --levels: every level folder there is.
    let o = kbench()
        .arg("list")
        .arg("--kernelbench")
        .arg(&problems)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let listed = String::from_utf8_lossy(&o.stdout);
    assert!(
        listed.contains("Elementwise_Multiply_Add") && listed.contains("ELU"),
        "{listed}"
    );
    // A level asked for and missing: the error names --levels.
    let o = kbench()
        .arg("list")
        .arg("--kernelbench")
        .arg(&problems)
        .args(["--levels", "1,2"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("level 2 folder not found") && err.contains("--levels"),
        "{err}"
    );
}
