//! A number is only worth something if another person gets it again.
//!
//! - `kbench setup` builds its environment from the embedded lock, into a fresh cache
//!   directory, and the torch it installs is the pinned one; a second setup is a no-op.
//! - The repository stands alone: a clone of HEAD with nothing beside it passes a fast
//!   subset of the tests, the KernelBench ones reported as skipped.
//!
//! Both run in CI (`.ci/run`). They download (torch, the first time; uv's cache in
//! `~/.cache/uv` makes later runs fast) and rebuild the workspace's own crates: set
//! `KBENCH_SKIP_ENV_TESTS=1` to skip them locally.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::{kbench, repo_root, shared, show};

fn skipped() -> bool {
    let skip = std::env::var_os("KBENCH_SKIP_ENV_TESTS").is_some_and(|v| v == "1");
    if skip {
        eprintln!("skipped: KBENCH_SKIP_ENV_TESTS=1");
    }
    skip
}

/// The torch version `harness/python/requirements.lock` pins.
fn pinned_torch() -> String {
    let lock = std::fs::read_to_string(repo_root().join("harness/python/requirements.lock"))
        .expect("reading harness/python/requirements.lock");
    lock.lines()
        .find_map(|l| l.strip_prefix("torch=="))
        .and_then(|r| r.split([' ', ';', '\\']).next())
        .expect("the lock pins torch")
        .to_string()
}

#[test]
fn setup_installs_exactly_the_locked_torch_and_a_second_setup_is_a_no_op() {
    if skipped() {
        return;
    }
    let _guard = shared();
    let cache = tempfile::tempdir().unwrap();
    let setup = || {
        let t = Instant::now();
        let out = kbench()
            .args(["setup", "--quiet"])
            .env("KBENCH_CACHE_DIR", cache.path())
            .env_remove("KBENCH_PYTHON")
            // The environment is what this tests; the precompiled header setup also makes
            // (100 s of both CI cores here) is made by the tests' own setup and checked by
            // tests/precompiled_header.rs.
            .env("KBENCH_PCH", "off")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", show(&out));
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            t.elapsed(),
        )
    };
    let (first, took) = setup();
    eprintln!("kbench setup from the lock into a fresh cache: {took:.1?}");
    let venv = cache.path().join("venv");
    let python = venv.join("bin/python");
    let out = Command::new(&python)
        .args([
            "-c",
            "import torch, numpy, safetensors; print(torch.__version__)",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let torch = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let pinned = pinned_torch();
    assert_eq!(torch.split('+').next(), Some(pinned.as_str()), "{torch}");
    assert!(
        first.contains(&format!("torch {torch} (from kbench's lock)")),
        "{first}"
    );
    // The environment records what it was built from: the lock's sha256.
    let lock = std::fs::read(repo_root().join("harness/python/requirements.lock")).unwrap();
    let stamp: serde_json::Value =
        serde_json::from_slice(&std::fs::read(venv.join("kbench-env.json")).unwrap()).unwrap();
    assert_eq!(stamp["mode"], "locked");
    assert_eq!(stamp["sha256"], kbench_suites::sha256_hex(&lock));

    // Unchanged lock: nothing is installed again (the log of the last install is untouched).
    let log = cache.path().join("setup.log");
    let before = std::fs::metadata(&log).unwrap().modified().unwrap();
    let (second, _) = setup();
    assert_eq!(second, first);
    assert_eq!(std::fs::metadata(&log).unwrap().modified().unwrap(), before);

    // A stamp for anything else (here: an older lock) is rebuilt from the lock.
    std::fs::write(
        venv.join("kbench-env.json"),
        r#"{"mode":"locked","sha256":"0000"}"#,
    )
    .unwrap();
    let (third, _) = setup();
    assert_eq!(third, first);
    assert_ne!(std::fs::metadata(&log).unwrap().modified().unwrap(), before);
    let stamp: serde_json::Value =
        serde_json::from_slice(&std::fs::read(venv.join("kbench-env.json")).unwrap()).unwrap();
    assert_eq!(stamp["sha256"], kbench_suites::sha256_hex(&lock));
}

/// The target folder this test binary was built into (`<target>/debug/deps/<test>`).
fn outer_target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => PathBuf::from(d),
        None => std::env::current_exe()
            .unwrap()
            .ancestors()
            .nth(3)
            .unwrap()
            .to_path_buf(),
    }
}

/// Where the clone builds: a folder of its own inside the outer target folder. Not the
/// target folder itself: cargo names a workspace crate's artifacts by its path relative to
/// the workspace, so the clone's build rewrote this build's `libkbench_record-<hash>.rlib` in
/// place, and the doc tests that `cargo test --workspace` runs last then failed with "can't
/// find crate" (a CI rehearsal). It persists between local runs.
fn clone_target_dir() -> PathBuf {
    outer_target_dir().join("standalone-clone")
}

/// Copies the outer build's third-party artifacts (`debug/deps`, `debug/build` and their
/// fingerprints, the workspace's own crates and tests left out) into the clone's fresh
/// target folder, so that its build compiles only the workspace's crates: the dependencies
/// from scratch were most of this test's 5-8 minutes on two cores. Copies, not hard links:
/// cargo rewrites a fingerprint file in place, and a link would let the clone's build write
/// into the outer one's. Third-party crates come from the same lock and the same registry
/// sources, so whatever is not fresh for the clone cargo simply builds again.
fn seed_clone_target(clone_target: &Path) {
    let from = outer_target_dir().join("debug");
    let to = clone_target.join("debug");
    if to.exists() || !from.join("deps").is_dir() {
        return;
    }
    let ours = |name: &str| {
        let bare = name.strip_prefix("lib").unwrap_or(name);
        bare.starts_with("kbench")
            || [
                "e2e-",
                "properties-",
                "published-",
                "kernelbench-",
                "kernelbench_json-",
            ]
            .iter()
            .any(|t| bare.starts_with(t))
    };
    let t = Instant::now();
    for sub in ["deps", "build", ".fingerprint"] {
        for entry in walkdir::WalkDir::new(from.join(sub)).min_depth(1) {
            let entry = entry.unwrap();
            let rel = entry.path().strip_prefix(&from).unwrap();
            let top = rel
                .components()
                .nth(1)
                .map(|c| c.as_os_str().to_string_lossy());
            if top.as_deref().is_some_and(ours) {
                continue;
            }
            let dest = to.join(rel);
            if entry.file_type().is_file() {
                std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
                std::fs::copy(entry.path(), &dest).unwrap();
                // Cargo orders artifacts by their times: a copy must keep the original's.
                let modified = entry.metadata().unwrap().modified().unwrap();
                let copy = std::fs::File::options().write(true).open(&dest).unwrap();
                copy.set_modified(modified).unwrap();
            }
        }
    }
    eprintln!(
        "seeded the clone's target folder from {}: {:.1?}",
        from.display(),
        t.elapsed()
    );
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", show(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn a_clone_of_head_with_nothing_beside_it_passes_its_tests() {
    if skipped() {
        return;
    }
    let outer = tempfile::tempdir().unwrap();
    let clone = outer.path().join("kbench");
    let head = git(&repo_root(), &["rev-parse", "HEAD"]);
    let out = Command::new("git")
        .args(["clone", "--quiet", "--no-checkout"])
        .arg(repo_root())
        .arg(&clone)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    git(&clone, &["checkout", "--quiet", &head]);
    assert!(!outer.path().join("shared").exists());

    // The clone builds into a target folder of its own (see clone_target_dir), seeded with
    // the outer build's dependencies: the same profile and, through --workspace, the same
    // features, so that they are fresh for it.
    let target = clone_target_dir();
    seed_clone_target(&target);
    let t = Instant::now();
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    // The workspace's own crates without debug info (they only have to build and pass); a
    // per-package setting, so the dependencies' artifacts stay the seeded ones.
    for member in [
        "kbench",
        "kbench-record",
        "kbench-suites",
        "kbench-baselines",
        "kbench-reports",
        "kbench-adversarial",
    ] {
        cargo.args(["--config", &format!("profile.dev.package.{member}.debug=0")]);
    }
    let out = cargo
        .args([
            "test",
            "--locked",
            "--workspace",
            "--test",
            "e2e",
            "--",
            "--nocapture",
            "cli::",
            "layers::",
        ])
        .current_dir(&clone)
        .env("CARGO_TARGET_DIR", &target)
        .env("CARGO_INCREMENTAL", "0")
        .env_remove("KBENCH_KERNELBENCH_DIR")
        .output()
        .unwrap();
    eprintln!("cargo test in the clone: {:.1?}", t.elapsed());
    let text = show(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("test result: ok"), "{text}");
    assert!(
        text.contains("skipped: KBENCH_KERNELBENCH_DIR is not set"),
        "{text}"
    );
}
