//! Files kbench reads for candidates, end to end on the CPU: a replay folder whose kernel
//! files link to the run's own secret and to a root-only file leaks neither into any file of
//! the run or any output stream; a kernel file that is not UTF-8, a FIFO, a dangling link or
//! oversized costs that kernel one verdict beside a good one, and a FIFO or dangling link
//! named like no kernel is said, never opened; `kbench check` names the user's own files.

use crate::common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{ensure_python, kbench, records, repo_root, shared, show, RunBuilder};

fn good_kernel() -> PathBuf {
    repo_root().join("tests/fixtures/replay_smoke/1_correct_torch.py")
}

/// A replay run of smoke problem 1 on the CPU, quickly.
fn replay_command(set: &Path, out: &Path) -> Command {
    let mut c = kbench();
    c.args(
        RunBuilder::new()
            .suite("smoke")
            .select("1/1")
            .agent("replay")
            .build(),
    )
    .args(["--device", "cpu", "--families", "random"])
    .args(["--timed-calls", "5", "--rounds", "1", "--replay-dir"])
    .arg(set)
    .arg("--out")
    .arg(out);
    c
}

fn replay(set: &Path, out: &Path) -> Output {
    replay_command(set, out).output().unwrap()
}

/// Every record's (candidate name, outcome kind, message), sorted by name.
fn verdicts(run: &Path) -> Vec<(String, String, String)> {
    let mut v: Vec<_> = records(run)
        .iter()
        .map(|r| {
            (
                r["candidate"]["name"].as_str().unwrap().to_string(),
                r["outcome"]["kind"].as_str().unwrap().to_string(),
                r["outcome"]["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Every file under `dir`, at any depth.
fn every_file(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            every_file(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn replay_links_to_the_run_secret_or_a_root_only_file_leak_nothing() {
    let _guard = shared();
    ensure_python();
    let t = tempfile::tempdir().unwrap();
    let set = t.path().join("set");
    std::fs::create_dir(&set).unwrap();
    // The run folder inside the replay folder, as a careless user might put it: a relative
    // link then stays inside the replay folder and must still be refused.
    let run = set.join("run");
    std::fs::copy(good_kernel(), set.join("1_good.py")).unwrap();
    let first = replay(&set, &run);
    assert_eq!(first.status.code(), Some(0), "{}", show(&first));
    // The links come now, when the run's secret exists, and are read by the resumed run.
    symlink("run/secret", set.join("1_secret_relative.py")).unwrap();
    symlink(run.join("secret"), set.join("1_secret_absolute.py")).unwrap();
    symlink("/etc/shadow", set.join("1_shadow.py")).unwrap();
    let mut resume = replay_command(&set, &run);
    let o = resume.arg("--resume").output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let v = verdicts(&run);
    let names: Vec<(&str, &str)> = v.iter().map(|(n, k, _)| (n.as_str(), k.as_str())).collect();
    assert_eq!(
        names,
        [
            ("1_good", "ok"),
            ("1_secret_absolute", "compile_error"),
            ("1_secret_relative", "compile_error"),
            ("1_shadow", "compile_error"),
        ],
        "{}",
        show(&o)
    );
    for (name, _, message) in &v[1..] {
        let file = set.join(format!("{name}.py"));
        assert!(
            message.starts_with(&format!("kernel file {} not run: it ", file.display())),
            "{message}"
        );
    }
    assert!(v[1].2.contains("kbench's own run files"), "{}", v[1].2);
    assert!(v[2].2.contains("kbench's own run files"), "{}", v[2].2);
    assert!(v[3].2.contains("link to a file outside"), "{}", v[3].2);

    // The secret's bytes, as hex (either case) and raw, in no file of the run but the
    // secret itself, and on neither output stream.
    let hex = std::fs::read_to_string(run.join("secret")).unwrap();
    let hex = hex.trim();
    assert_eq!(hex.len(), 64, "{hex}");
    let raw: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let shadow_line = std::fs::read_to_string("/etc/shadow")
        .ok()
        .and_then(|s| s.lines().next().map(str::to_string))
        .filter(|l| l.len() > 8);
    let mut needles: Vec<Vec<u8>> = vec![
        hex.as_bytes().to_vec(),
        hex.to_ascii_uppercase().into_bytes(),
        raw,
    ];
    needles.extend(shadow_line.map(String::into_bytes));
    let mut files = Vec::new();
    every_file(&run, &mut files);
    assert!(files.iter().any(|f| f.ends_with("records.jsonl")));
    assert!(files.iter().any(|f| f.ends_with("eval_results.json")));
    files.retain(|f| *f != run.join("secret"));
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        for n in &needles {
            assert!(!contains(&bytes, n), "{} holds a secret", f.display());
        }
    }
    for (stream, bytes) in [
        ("stdout", &first.stdout),
        ("stderr", &first.stderr),
        ("stdout", &o.stdout),
        ("stderr", &o.stderr),
    ] {
        for n in &needles {
            assert!(
                !contains(bytes, n),
                "{stream} holds a secret:\n{}",
                show(&o)
            );
        }
    }
    // The refused files were copied nowhere.
    let kept: Vec<String> = std::fs::read_dir(run.join("kernels"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        kept.iter()
            .all(|k| !k.contains("secret") && !k.contains("shadow")),
        "{kept:?}"
    );
}

#[test]
fn a_kernel_file_not_utf8_or_not_a_file_costs_its_own_verdict() {
    let _guard = shared();
    ensure_python();
    let t = tempfile::tempdir().unwrap();
    let set = t.path().join("set");
    std::fs::create_dir(&set).unwrap();
    std::fs::copy(good_kernel(), set.join("1_good.py")).unwrap();
    let mut latin1 = std::fs::read(good_kernel()).unwrap();
    latin1.extend_from_slice(b"# caf\xe9\n");
    std::fs::write(set.join("1_latin1.py"), &latin1).unwrap();
    nix::unistd::mkfifo(&set.join("1_fifo.py"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    symlink("nowhere.py", set.join("1_dangling.py")).unwrap();
    let mut big = std::fs::read(good_kernel()).unwrap();
    big.resize(9 << 20, b'#');
    std::fs::write(set.join("1_big.py"), &big).unwrap();
    // Named like no kernel: each is said on stderr, and the FIFO is never opened.
    nix::unistd::mkfifo(&set.join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    symlink("gone", set.join("level2")).unwrap();
    let run = t.path().join("run");
    let o = replay(&set, &run);
    // Every kernel has its verdict; some failed: exit 3, not a harness failure.
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    for (entry, why) in [("pipe", "is a FIFO"), ("level2", "is a link to nothing")] {
        let said = format!(
            "kbench: replay folder entry {} {why}",
            set.join(entry).display()
        );
        assert!(err.contains(&said), "{said} not said:\n{err}");
    }
    let v = verdicts(&run);
    let got: Vec<(&str, &str)> = v.iter().map(|(n, k, _)| (n.as_str(), k.as_str())).collect();
    assert_eq!(
        got,
        [
            ("1_big", "compile_error"),
            ("1_dangling", "compile_error"),
            ("1_fifo", "compile_error"),
            ("1_good", "ok"),
            ("1_latin1", "compile_error"),
        ],
        "{}",
        show(&o)
    );
    let message = |name: &str| &v.iter().find(|x| x.0 == name).unwrap().2;
    assert!(message("1_big").contains("over kbench's cap"));
    assert!(message("1_dangling").contains("link to nothing (it points to nowhere.py)"));
    assert!(message("1_fifo").contains("is a FIFO, not a regular file"));
    let m = message("1_latin1");
    assert!(
        m.contains("1_latin1.py")
            && m.contains("is not UTF-8 text (invalid byte at offset")
            && m.contains("save it as UTF-8"),
        "{m}"
    );
    // Never counted correct or compiled where KernelBench's layout is read.
    let kb: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("eval_results.json")).unwrap()).unwrap();
    let samples = kb["1"].as_array().unwrap();
    assert_eq!(samples.len(), 5);
    let correct = samples.iter().filter(|s| s["correctness"] == true).count();
    assert_eq!(correct, 1, "{kb}");
}

#[test]
fn check_wants_a_problem_id_and_names_the_users_own_kernel_file() {
    let _guard = shared();
    ensure_python();
    let t = tempfile::tempdir().unwrap();
    let problem = repo_root().join("suites/smoke/1_Elementwise_Multiply_Add.py");
    let unnamed = t.path().join("mul_add.py");
    std::fs::copy(&problem, &unnamed).unwrap();
    let kernel = t.path().join("my_kernel.py");
    std::fs::write(
        &kernel,
        "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b, c):\n        raise RuntimeError('raised in ' + __file__)\n",
    )
    .unwrap();
    let check = |problem: &Path, out: &Path| {
        kbench()
            .args([
                "check",
                "--device",
                "cpu",
                "--no-timing",
                "--families",
                "random",
            ])
            .arg("--problem")
            .arg(problem)
            .arg("--kernel")
            .arg(&kernel)
            .arg("--out")
            .arg(out)
            .output()
            .unwrap()
    };
    // No id in the problem file's name: refused before anything runs, saying what to do.
    let o = check(&unnamed, &t.path().join("run0"));
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("mul_add.py") && err.contains("<id>_<Name>.py") && err.contains("rename"),
        "{err}"
    );
    assert!(!t.path().join("run0").exists());
    let named = t.path().join("1_Mul_Add.py");
    std::fs::copy(&problem, &named).unwrap();
    let run = t.path().join("run");
    let o = check(&named, &run);
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.starts_with("file/L0/1 Mul_Add · my_kernel "),
        "{stdout}"
    );
    // The kernel's own path where the run's copy of it raised, not the run's copy.
    assert!(
        stdout.contains(&format!("raised in {}", kernel.display())) && !stdout.contains("kernels/"),
        "{stdout}"
    );
    let r = &records(&run)[0];
    assert_eq!(r["candidate"]["name"], "my_kernel");
    assert_eq!(
        r["candidate"]["source_path"].as_str(),
        Some(kernel.to_str().unwrap())
    );
}
