//! Helpers shared by the end-to-end tests: the built binary, the Python environment, the
//! locks by which tests share the machine, and [`RunBuilder`], the arguments of a `kbench run`.

#![allow(dead_code)]

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub fn kbench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kbench"))
}

/// The repository root (tests/ lives there).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// KernelBench problems: `KBENCH_KERNELBENCH_DIR` (a KernelBench checkout), the only place
/// tests look, so the repository stands alone. `None` (with the reason printed) when unset:
/// the caller skips.
pub fn kernelbench_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("KBENCH_KERNELBENCH_DIR").filter(|d| !d.is_empty());
    if dir.is_none() {
        eprintln!("skipped: KBENCH_KERNELBENCH_DIR is not set (a KernelBench checkout's folder with level1/..)");
    }
    dir.map(PathBuf::from)
}

static MACHINE: RwLock<()> = RwLock::new(());

/// Taken by a test that runs kbench's workers: it may share the machine with other such
/// tests (libtest runs as many tests at once as there are cores; CI runs 3 on its 2). What
/// they share does not decide their verdicts: timing assertions compare kernels 40x apart or
/// bound what a kernel claims by the wall clock, and every run has its own folders and secret.
pub fn shared() -> RwLockReadGuard<'static, ()> {
    MACHINE.read().unwrap_or_else(|e| e.into_inner())
}

/// Taken by a test that must have the machine to itself: the uncontained attacks (signals
/// and /proc scans that a neighbour's workers could disturb, or be disturbed by).
pub fn alone() -> RwLockWriteGuard<'static, ()> {
    MACHINE.write().unwrap_or_else(|e| e.into_inner())
}

/// Taken (after [`shared`]) by the tests that submit to the one Slurm cluster (2 CPUs): one
/// submission at a time, so their jobs never queue behind each other's.
pub fn slurm_cluster() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `kbench setup` once per test binary (idempotent: a no-op when the environment is
/// ready; on a fresh machine it installs torch, which takes minutes).
pub fn ensure_python() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let out = kbench()
            .args(["setup", "--quiet"])
            .output()
            .expect("running kbench setup");
        assert!(
            out.status.success(),
            "kbench setup failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// Processes whose command line (its arguments joined by spaces) names `needle`, from /proc:
/// what a test expects gone once kbench has ended.
pub fn processes_naming(needle: &str) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(argv) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let argv = String::from_utf8_lossy(&argv).replace('\0', " ");
        if argv.contains(needle) {
            found.push((pid, argv));
        }
    }
    found
}

pub fn show(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Writes `text` to `path` as a file anyone may run (a stand-in for a tool: kbench, nvcc, uv).
pub fn write_executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Parses a run log into JSON values.
pub fn records(out_dir: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(out_dir.join("records.jsonl")).unwrap_or_default();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("record is JSON"))
        .collect()
}

/// A run's records by candidate name.
pub fn by_candidate(out_dir: &Path) -> std::collections::BTreeMap<String, serde_json::Value> {
    records(out_dir)
        .into_iter()
        .map(|r| (r["candidate"]["name"].as_str().unwrap().to_string(), r))
        .collect()
}

/// The families of one record with a failed case, and those not applicable.
pub fn families(r: &serde_json::Value) -> (Vec<String>, Vec<String>) {
    let (mut failed, mut na) = (Vec::new(), Vec::new());
    for c in r["cases"].as_array().unwrap() {
        let f = c["case"]["family"].as_str().unwrap().to_string();
        if c.get("not_applicable").is_some_and(|v| !v.is_null()) {
            na.push(f);
        } else if !c["passed"].as_bool().unwrap() {
            failed.push(f);
        }
    }
    (failed, na)
}

/// The resume key of a record (`problem key::agent::name::sample`), read back through the
/// record type so that every record in a run log is also checked to deserialise.
pub fn key(r: &serde_json::Value) -> String {
    serde_json::from_value::<kbench_record::EvalRecord>(r.clone())
        .expect("record reads back as an EvalRecord")
        .key()
}

/// The arguments of one `kbench run`, each option in the order it is given, so a test's
/// command line reads as the one it runs:
/// `kbench().args(RunBuilder::new().suite("smoke").device("cpu").out(&dir).build())`.
#[derive(Debug, Clone)]
pub struct RunBuilder {
    args: Vec<OsString>,
}

impl Default for RunBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl RunBuilder {
    /// `kbench run` with no option yet.
    pub fn new() -> RunBuilder {
        RunBuilder {
            args: vec!["run".into()],
        }
    }

    /// `--agent replay` of the fixture set `tests/fixtures/SET`: its `kernels/` replayed on
    /// its own `problems/`.
    pub fn replay_fixture_set(set: &str) -> RunBuilder {
        let fixtures = repo_root().join("tests/fixtures").join(set);
        RunBuilder::new()
            .agent("replay")
            .replay_dir(fixtures.join("kernels"))
            .kernelbench(fixtures.join("problems"))
    }

    /// [`RunBuilder::replay_fixture_set`] run on the CPU (level 1) into `out`, under the
    /// fixed run secret `secret` (written beside `out`), so that its stress cases and timed
    /// inputs are the same in every run.
    pub fn fixture_run(set: &str, out: &Path, secret: &str) -> RunBuilder {
        let file = out.with_extension("secret");
        std::fs::write(&file, secret).unwrap();
        RunBuilder::replay_fixture_set(set)
            .levels("1")
            .device("cpu")
            .out(out)
            .secret_from(&file)
    }

    /// [`RunBuilder::fixture_run`] without timing: the cases' verdicts only.
    pub fn fixture_check(set: &str, out: &Path, secret: &str) -> RunBuilder {
        RunBuilder::fixture_run(set, out, secret).no_timing()
    }

    fn opt(mut self, name: &str, value: impl AsRef<OsStr>) -> RunBuilder {
        self.args.push(name.into());
        self.args.push(value.as_ref().into());
        self
    }

    /// `--agent NAME` (reference, replay, coder-judge, kevin, cuda-agent, command).
    pub fn agent(self, name: &str) -> RunBuilder {
        self.opt("--agent", name)
    }

    /// `--replay-dir DIR`: the kernels `--agent replay` evaluates.
    pub fn replay_dir(self, dir: impl AsRef<OsStr>) -> RunBuilder {
        self.opt("--replay-dir", dir)
    }

    /// `--suite NAME` (a built-in suite: smoke).
    pub fn suite(self, name: &str) -> RunBuilder {
        self.opt("--suite", name)
    }

    /// `--kernelbench DIR`: a folder holding level1/ level2/ level3/.
    pub fn kernelbench(self, dir: impl AsRef<OsStr>) -> RunBuilder {
        self.opt("--kernelbench", dir)
    }

    /// `--levels LIST`, e.g. `1` or `1,2`.
    pub fn levels(self, list: &str) -> RunBuilder {
        self.opt("--levels", list)
    }

    /// `--problem FILE`: a single problem file.
    pub fn problem(self, file: impl AsRef<OsStr>) -> RunBuilder {
        self.opt("--problem", file)
    }

    /// `--select SPEC`, e.g. `1/1,1/2`.
    pub fn select(self, spec: &str) -> RunBuilder {
        self.opt("--select", spec)
    }

    /// `--device DEVICE` (cpu, cuda, cuda:N, auto).
    pub fn device(self, device: &str) -> RunBuilder {
        self.opt("--device", device)
    }

    /// `--families LIST` (all, random, or a comma-separated list of case families).
    pub fn families(self, list: &str) -> RunBuilder {
        self.opt("--families", list)
    }

    /// `--timed-calls N`.
    pub fn timed_calls(self, n: impl std::fmt::Display) -> RunBuilder {
        self.opt("--timed-calls", n.to_string())
    }

    /// `--warmup N`.
    pub fn warmup(self, n: impl std::fmt::Display) -> RunBuilder {
        self.opt("--warmup", n.to_string())
    }

    /// `--no-timing`: correctness only.
    pub fn no_timing(self) -> RunBuilder {
        self.arg("--no-timing")
    }

    /// `--out DIR`: the run directory.
    pub fn out(self, dir: impl AsRef<OsStr>) -> RunBuilder {
        self.opt("--out", dir)
    }

    /// `--secret-from FILE`: the run's secret seed, so its cases are the same every time.
    pub fn secret_from(self, file: impl AsRef<OsStr>) -> RunBuilder {
        self.opt("--secret-from", file)
    }

    /// `--python PATH`.
    pub fn python(self, path: impl AsRef<OsStr>) -> RunBuilder {
        self.opt("--python", path)
    }

    /// `--resume`.
    pub fn resume(self) -> RunBuilder {
        self.arg("--resume")
    }

    /// `--quiet`.
    pub fn quiet(self) -> RunBuilder {
        self.arg("--quiet")
    }

    /// Any other argument, as given.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> RunBuilder {
        self.args.push(arg.as_ref().into());
        self
    }

    /// Any other arguments, as given.
    pub fn args<S: AsRef<OsStr>>(mut self, args: impl IntoIterator<Item = S>) -> RunBuilder {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// The argument vector, `run` first.
    pub fn build(self) -> Vec<OsString> {
        self.args
    }
}
