//! The precompiled `torch/extension.h` candidates' C++ builds use: `kbench setup` makes it,
//! a sandboxed candidate's g++ uses it (its log says so, `-H`) and cannot change it, the
//! verdict is the one a build without it gives (`KBENCH_PCH=off`), and a run that finds it
//! missing starts the helper that makes it and stops it, compilers and all, when it ends.
//! Real worker, real torch, real g++, sandboxed. Fixtures: `tests/fixtures/precompiled_header`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Instant;

use common::{by_candidate, kbench, repo_root, show, RunBuilder};

/// `fixture` copied into a replay folder under `dir` with a line naming `run`, so that its
/// source (and so its content-addressed build folder) is new: the run builds cold.
fn fresh_fixture(dir: &Path, fixture: &str, run: &str) -> PathBuf {
    let replay = dir.join(format!("{run}-kernels"));
    std::fs::create_dir_all(&replay).unwrap();
    let src = repo_root()
        .join("tests/fixtures/precompiled_header")
        .join(fixture);
    let body = std::fs::read_to_string(src).unwrap();
    let nonce = format!("# precompiled_header test run {run} {:?}\n", Instant::now());
    std::fs::write(replay.join(fixture), body + &nonce).unwrap();
    replay
}

/// A run of one fixture on smoke problem 1, in place (no build jobs): its output.
fn run(dir: &Path, fixture: &str, name: &str, env: &[(&str, &Path)], off: bool) -> Output {
    let replay = fresh_fixture(dir, fixture, name);
    let mut c = kbench();
    c.args(
        RunBuilder::new()
            .suite("smoke")
            .select("1")
            .agent("replay")
            .build(),
    )
    .args(["--device", "cpu", "--families", "random", "--no-timing"])
    .args(["--build-jobs", "0", "--quiet", "--replay-dir"])
    .arg(&replay)
    .arg("--out")
    .arg(dir.join(name));
    for (k, v) in env {
        c.env(k, v);
    }
    if off {
        c.env("KBENCH_PCH", "off");
    } else {
        c.env_remove("KBENCH_PCH");
    }
    c.output().expect("running kbench")
}

/// The log of the run's one candidate.
fn candidate_log(out: &Path) -> String {
    let logs = out.join("logs");
    let log = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("__replay__"))
        .unwrap_or_else(|| panic!("no candidate log in {}", logs.display()));
    std::fs::read_to_string(log).unwrap()
}

/// What the fixture printed of g++ -H's list for its probe built with `flags`.
fn listed(log: &str, flags: &str) -> Vec<String> {
    let prefix = format!("kbench fixture: g++ -H {flags}: ");
    log.lines()
        .filter_map(|l| l.strip_prefix(&prefix).map(str::to_string))
        .collect()
}

#[test]
fn a_candidates_build_uses_the_precompiled_header_cannot_change_it_and_gets_the_same_verdict() {
    common::ensure_python();
    let _g = common::shared();
    let dir = tempfile::tempdir().unwrap();

    let o = run(dir.path(), "1_lists_its_headers.py", "with", &[], false);
    assert!(o.status.success(), "{}", show(&o));
    let with = by_candidate(&dir.path().join("with"));
    let record = &with["1_lists_its_headers"];
    assert_eq!(record["outcome"]["kind"], "ok", "{record}");
    let log = candidate_log(&dir.path().join("with"));
    // `kbench setup` (ensure_python) made the headers; the candidate's CPATH names them.
    let cpath = log
        .lines()
        .find_map(|l| l.strip_prefix("kbench fixture: CPATH="))
        .unwrap_or_else(|| panic!("the fixture did not say its CPATH:\n{log}"))
        .to_string();
    assert!(
        !cpath.is_empty(),
        "no CPATH in the candidate's sandbox:\n{log}"
    );
    let gch = Path::new(&cpath).join("torch/extension.h.gch");
    // Each probe includes the header a second time and stops at its `#error`: the precompiled
    // header for its flags was used (without -O: plain; -O2: the one made with -O3), and the
    // second include compiled (no "No such file" from the folder of the headers).
    for (flags, variant) in [("plain", "plain.gch"), ("-O2", "O3.gch")] {
        let lines = listed(&log, flags);
        let used = format!("! {}", gch.join(variant).display());
        assert!(
            lines.contains(&used)
                && lines
                    .iter()
                    .any(|l| l.contains("#error kbench fixture: stop"))
                && !lines.iter().any(|l| l.contains("fatal error")),
            "{flags}: g++ did not use {used} and reach the probe's #error: {lines:?}\n{log}"
        );
    }
    // Read-only in the sandbox: nothing written, nothing moved.
    for what in [gch.join("evil.gch"), Path::new(&cpath).join("evil")] {
        assert!(
            log.contains(&format!("cannot write {}", what.display())) && !what.exists(),
            "{}: {log}",
            what.display()
        );
    }
    for name in ["O3.gch", "plain.gch"] {
        assert!(log.contains(&format!("cannot move {name}")), "{log}");
        assert!(
            gch.join(name).is_file(),
            "{name} is gone from {}",
            gch.display()
        );
    }
    assert!(!log.contains("kbench fixture: wrote") && !log.contains("kbench fixture: moved"));

    // Without it: no CPATH, g++ parses torch's header (no `.gch` at all), the same verdict.
    let o = run(dir.path(), "1_lists_its_headers.py", "without", &[], true);
    assert!(o.status.success(), "{}", show(&o));
    let without = by_candidate(&dir.path().join("without"));
    assert_eq!(
        without["1_lists_its_headers"]["outcome"], record["outcome"],
        "{}",
        without["1_lists_its_headers"]
    );
    let log = candidate_log(&dir.path().join("without"));
    assert!(log.contains("kbench fixture: CPATH=\n"), "{log}");
    for flags in ["plain", "-O2"] {
        let lines = listed(&log, flags);
        assert!(
            lines.iter().any(|l| l.ends_with("torch/extension.h"))
                && lines
                    .iter()
                    .any(|l| l.contains("#error kbench fixture: stop"))
                && !lines
                    .iter()
                    .any(|l| l.contains(".gch") || l.contains("fatal error")),
            "{flags}: g++ -H without the headers: {lines:?}\n{log}"
        );
    }
}

/// The interpreter kbench runs its workers with: `KBENCH_PYTHON`, else the environment
/// `kbench setup` made.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("KBENCH_PYTHON").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    std::path::absolute(kbench::worker::python::cache_dir().join("venv/bin/python3")).unwrap()
}

#[test]
fn a_run_that_finds_no_precompiled_header_starts_its_maker_and_stops_it_at_its_end() {
    use std::os::unix::fs::PermissionsExt;
    common::ensure_python();
    let _g = common::shared();
    let dir = tempfile::tempdir().unwrap();
    // A cache of its own, without headers; the interpreter of the shared one; and a C++
    // compiler that never finishes a header (it says it started, then waits), so the run
    // surely ends while the helper works. Anything else it passes to g++.
    let cache = dir.path().join("cache");
    let python = python();
    let started = dir.path().join("header-started");
    let cxx = dir.path().join("endless-c++");
    std::fs::write(
        &cxx,
        format!(
            "#!/bin/sh\ncase \" $* \" in *\" -x c++-header \"*) touch '{}'; while :; do sleep 1; done ;; esac\nexec c++ \"$@\"\n",
            started.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&cxx, std::fs::Permissions::from_mode(0o755)).unwrap();
    let env: [(&str, &Path); 3] = [
        ("KBENCH_CACHE_DIR", &cache),
        ("KBENCH_PYTHON", &python),
        ("CXX", &cxx),
    ];
    let o = run(dir.path(), "1_names_the_builder.py", "cold", &env, false);
    assert!(o.status.success(), "{}", show(&o));
    let out = dir.path().join("cold");
    assert_eq!(
        by_candidate(&out)["1_names_the_builder"]["outcome"]["kind"],
        "ok"
    );
    // The helper ran, outside the sandbox, writing to the run's log, and got as far as the
    // compiler.
    let log = out.join("logs/pch.log");
    assert!(
        log.is_file(),
        "no {}: the helper never started",
        log.display()
    );
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        started.exists(),
        "the helper never reached the compiler: {}",
        said()
    );
    // kbench has exited: neither the helper nor the compiler it started is left running.
    let pch = cache.join("pch");
    let leftovers = common::processes_naming(&pch.display().to_string());
    assert!(
        leftovers.is_empty(),
        "left running after kbench exited: {leftovers:?}\nhelper log: {}",
        said()
    );
    let gch: Vec<_> = std::fs::read_dir(&pch)
        .unwrap()
        .flatten()
        .flat_map(|f| {
            std::fs::read_dir(f.path().join("torch/extension.h.gch"))
                .into_iter()
                .flatten()
        })
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(
        gch.is_empty(),
        "headers in sight that no compiler finished: {gch:?}"
    );
}
