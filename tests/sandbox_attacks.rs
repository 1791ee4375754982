//! The sandbox end to end: the attacks of the exploit corpus (rows S1-S6 of
//! `adversarial/exploits/manifest.json`) are powerless inside the bubblewrap sandbox, and real
//! without it. Real worker, real torch on CPU, real processes, signals, files and sockets.
//!
//! The attack kernels and the honest controls (`1_honest`, `4_honest_library_matmul`) are
//! copied into a replay folder with a marker unique to the run (in the argv of every process
//! they leave behind, in the name of every file they write) and the port of a loopback
//! listener this test starts. One `kbench run` evaluates them in the sandbox (the default):
//! every verdict must be `ok` (each computes the right answer and spoils it only when its
//! attack worked), the signalled reference must time like the control's, the record log must
//! hold exactly one genuine line per kernel, the secret must appear in no file the kernels
//! could write to, the listener must get no connection, no file may be written outside and no
//! process of theirs may outlive the run. A second run of the same kernels with
//! `--no-sandbox`, on throwaway copies, shows each attack works there, so that the first run
//! cannot pass vacuously.

use crate::common;

use std::collections::BTreeMap;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};

use common::{alone, ensure_python, kbench, key, repo_root, show, RunBuilder};
use kbench_reports::Sample;
use serde_json::Value;

/// The run's secret, passed with --secret-from: no file a candidate writes to may hold it.
const SECRET: &str = "5ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2";

/// The attack kernels (corpus `cpu/level1/`), by row of the manifest.
const ATTACKS: &[(&str, &str)] = &[
    ("S1", "4_signal_reference"),
    ("S2", "1_forge_records"),
    ("S3", "1_read_run_folder"),
    ("S4", "1_setsid_child"),
    ("S5", "1_loopback_socket"),
    ("S6", "1_write_outside"),
];

/// Honest kernels of the same problems: what the attacks' verdicts and timings are held to.
const CONTROLS: &[&str] = &["1_honest", "4_honest_library_matmul"];

/// The corpus kernels' template lines (see their headers).
const MARK_LINE: &str = "MARK = \"kbench-attack-mark\"";
const PORT_LINE: &str = "PORT = 0  #";

/// One run's throwaway world: replay folder, problems, run folder, listener, marker. Dropping
/// it ends every process holding the marker and removes the files named by it outside the
/// temporary folder, whatever the test's outcome.
struct World {
    tmp: tempfile::TempDir,
    mark: String,
    listener: TcpListener,
}

impl World {
    fn new(label: &str) -> World {
        let tmp = tempfile::tempdir().unwrap();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let mark = format!("kbench-attack-{}-{nanos}-{label}", std::process::id());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let w = World {
            tmp,
            mark,
            listener,
        };
        let corpus = repo_root().join("adversarial/exploits");
        copy_dir(&corpus.join("problems"), &w.problems());
        std::fs::create_dir_all(w.replay()).unwrap();
        let port = w.listener.local_addr().unwrap().port();
        for name in ATTACKS
            .iter()
            .map(|(_, n)| *n)
            .chain(CONTROLS.iter().copied())
        {
            let file = format!("{name}.py");
            let text = std::fs::read_to_string(corpus.join("cpu/level1").join(&file)).unwrap();
            let is_attack = !CONTROLS.contains(&name);
            assert!(
                !is_attack || text.contains(MARK_LINE),
                "{file}: no `{MARK_LINE}` line to write the marker into"
            );
            let text = text
                .replace(MARK_LINE, &format!("MARK = \"{}\"", w.mark))
                .replace(PORT_LINE, &format!("PORT = {port}  #"));
            if name == "1_loopback_socket" {
                assert!(text.contains(&format!("PORT = {port}")), "{file}: no port");
            }
            std::fs::write(w.replay().join(file), text).unwrap();
        }
        w
    }

    fn replay(&self) -> PathBuf {
        self.tmp.path().join("replay")
    }
    fn problems(&self) -> PathBuf {
        self.tmp.path().join("problems")
    }
    fn out(&self) -> PathBuf {
        self.tmp.path().join("run")
    }
    fn secret(&self) -> PathBuf {
        self.tmp.path().join("secret")
    }

    /// `kbench run` over the replay folder, problems 1 and 4, timed.
    fn run(&self, extra: &[&str]) -> std::process::Output {
        std::fs::write(self.secret(), SECRET).unwrap();
        let args = RunBuilder::new()
            .agent("replay")
            .device("cpu")
            .levels("1")
            .select("1,4")
            .families("signed")
            .timed_calls(100)
            .args(["--rounds", "10"])
            .replay_dir(self.replay())
            .kernelbench(self.problems())
            .out(self.out())
            .secret_from(self.secret())
            .args(extra)
            .build();
        kbench().args(&args).output().expect("running kbench")
    }

    /// Processes whose argv holds the marker: what the kernels left running.
    fn marked_processes(&self) -> Vec<(i32, String)> {
        common::processes_naming(&self.mark)
    }

    /// Files named by the marker where S6 writes: the host's /tmp, the home folder, the run
    /// folder, the problems' folder, kbench's cache of problem files, its bytecode cache and
    /// its precompiled headers.
    fn written_outside(&self) -> Vec<PathBuf> {
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap();
        let mut places = vec![
            PathBuf::from("/tmp").join(&self.mark),
            home.join(&self.mark),
        ];
        let cache = std::env::var_os("KBENCH_CACHE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".cache/kbench"));
        for dir in [
            self.out(),
            self.problems(),
            cache.join("problems"),
            cache.join("pycache"),
            cache.join("pch"),
        ] {
            places.extend(files_under(&dir));
        }
        places.retain(|p| p.exists() && p.to_string_lossy().contains(&self.mark));
        places
    }

    /// What reached the listener: one entry (the bytes sent) per connection.
    fn connections(&self) -> Vec<String> {
        let mut got = Vec::new();
        while let Ok((mut s, _)) = self.listener.accept() {
            s.set_nonblocking(false).unwrap();
            s.set_read_timeout(Some(std::time::Duration::from_secs(2)))
                .unwrap();
            let mut text = String::new();
            let _ = s.read_to_string(&mut text);
            got.push(text);
        }
        got
    }

    /// What a kernel printed (its worker's log in the run folder).
    fn log_of(&self, name: &str) -> String {
        let needle = format!("__{name}__");
        files_under(&self.out().join("logs"))
            .into_iter()
            .filter(|p| p.to_string_lossy().contains(&needle))
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .collect()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for (pid, _) in self.marked_processes() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        for p in self.written_outside() {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The run's records by kernel name; lines that are not records (forged, torn) are left out,
/// a later line for a name wins.
fn records_by_name(out: &Path) -> BTreeMap<String, Value> {
    let text = std::fs::read_to_string(out.join("records.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|r| Some((r["candidate"]["name"].as_str()?.to_string(), r)))
        .collect()
}

fn speedup(r: &Value) -> f64 {
    r["timing"]["speedup"].as_f64().unwrap_or(f64::NAN)
}

/// The speedup of the timing rounds' medians (NaN when the record has none).
fn speedup_of_medians(r: &Value) -> f64 {
    r["timing"]["speedup_of_medians"]
        .as_f64()
        .unwrap_or(f64::NAN)
}

/// Mean of the records' `phases.worker_wait_s`: the wait for a candidate's worker to start,
/// where the sandbox's cost lands.
fn mean_worker_wait(records: &BTreeMap<String, Value>) -> f64 {
    let waits: Vec<f64> = records
        .values()
        .filter_map(|r| r["phases"]["worker_wait_s"].as_f64())
        .collect();
    waits.iter().sum::<f64>() / waits.len().max(1) as f64
}

#[test]
fn the_manifest_lists_the_attacks_as_powerless() {
    let text = std::fs::read_to_string(repo_root().join("adversarial/exploits/manifest.json"))
        .expect("reading the exploit manifest");
    let v: Value = serde_json::from_str(&text).unwrap();
    for (row, name) in ATTACKS {
        let file = format!("cpu/level1/{name}.py");
        let e = v["exploits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["file"] == file.as_str())
            .unwrap_or_else(|| panic!("{file} is not in the manifest"));
        assert_eq!(e["row"], *row, "{file}");
        assert_eq!(e["expect"], "none", "{file}: powerless in the sandbox");
        assert!(e["why"].as_str().is_some_and(|w| w.contains("sandbox")));
    }
}

#[test]
fn attacks_are_powerless_in_the_sandbox_and_real_without_it() {
    ensure_python();
    let _guard = alone();

    // --- In the sandbox (the default).
    let w = World::new("sandboxed");
    let run = w.run(&[]);
    let stdout = String::from_utf8_lossy(&run.stdout).to_string();
    assert_eq!(run.status.code(), Some(0), "{}", show(&run));
    assert!(!stdout.contains("NOT CONTAINED"), "{stdout}");
    let text = std::fs::read_to_string(w.out().join("records.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let kernels = ATTACKS.len() + CONTROLS.len();
    assert_eq!(lines.len(), kernels, "one line per kernel:\n{text}");
    for line in &lines {
        let r: Value = serde_json::from_str(line).expect("every line is a record");
        key(&r); // and reads back as an EvalRecord
        assert!(r.get("forged").is_none(), "forged line: {line}");
        assert_eq!(r["env"]["containment"], "bubblewrap", "{line}");
    }
    let report = kbench().arg("report").arg(w.out()).output().unwrap();
    assert!(report.status.success(), "{}", show(&report));
    let by_name = records_by_name(&w.out());
    let mut table = String::new();
    for name in ATTACKS
        .iter()
        .map(|(_, n)| *n)
        .chain(CONTROLS.iter().copied())
    {
        let r = &by_name[name];
        table.push_str(&format!(
            "{name:26} {:8} speedup {:6.3} of medians {:6.3} worker_wait_s {:.3}\n",
            r["outcome"]["kind"].as_str().unwrap(),
            speedup(r),
            speedup_of_medians(r),
            r["phases"]["worker_wait_s"].as_f64().unwrap_or(f64::NAN)
        ));
    }
    eprintln!("sandboxed:\n{table}");
    for name in ATTACKS
        .iter()
        .map(|(_, n)| *n)
        .chain(CONTROLS.iter().copied())
    {
        let r = &by_name[name];
        // Correct (nothing it saw leaked into its output) and timed.
        assert_eq!(
            r["outcome"]["kind"], "ok",
            "{name}: {}\n{table}",
            r["outcome"]
        );
        assert!(speedup(r).is_finite(), "{name} was not timed\n{table}");
    }
    // S1: the reference it tried to stop times as it does beside the honest control.
    let (s1, control) = (
        speedup(&by_name["4_signal_reference"]),
        speedup(&by_name["4_honest_library_matmul"]),
    );
    assert!(
        s1 < 1.3 * control,
        "S1 speedup {s1} against the control's {control}\n{table}"
    );
    // The others run beside a tiny elementwise reference (timings noisy at ~10 us): each
    // within a factor of 2 of the median of problem 1's kernels (its control and the five
    // attacks), which a stopped or starved reference would leave. The median, not the control
    // alone: on 2 busy cores one kernel's speedup is now and then 2x off (once the control's
    // own, 2.08 against the attacks' 1.0), and one outlier cannot move a median of six; the
    // speedup of the round medians, for the same reason.
    let of_medians = |name: &str| speedup_of_medians(&by_name[name]);
    let level1: Vec<f64> = ATTACKS[1..]
        .iter()
        .map(|(_, n)| of_medians(n))
        .chain([of_medians("1_honest")])
        .collect();
    let mid = Sample::new(level1.clone())
        .unwrap_or_else(|e| panic!("problem 1's speedups of medians {level1:?}: {e}\n{table}"))
        .median();
    for (_, name) in &ATTACKS[1..] {
        let s = of_medians(name);
        assert!(
            s < 2.0 * mid && s > mid / 2.0,
            "{name}: speedup of medians {s} against problem 1's median {mid}\n{table}"
        );
    }
    // Each attack did run, inside: its own log says what it tried. S2 writes into the empty
    // folder the sandbox shows at the run folder's path, or, as the unprivileged uid a
    // candidate becomes when kbench runs as root, is refused there (the folder is root's).
    for (name, said) in [
        (
            "4_signal_reference",
            &["attack S1: no reference worker in sight"][..],
        ),
        (
            "1_forge_records",
            &[
                "attack S2: wrote",
                "records.jsonl: [Errno 13] Permission denied",
            ],
        ),
        ("1_read_run_folder", &["attack S3: 0 item(s) read"]),
        ("1_setsid_child", &["attack S4: left a setsid child"]),
        ("1_loopback_socket", &["attack S5: sent: False"]),
        ("1_write_outside", &["attack S6: wrote /tmp/"]),
    ] {
        let log = w.log_of(name);
        assert!(
            said.iter().any(|s| log.contains(s)),
            "{name}'s log lacks any of {said:?}:\n{log}"
        );
    }
    // The secret is in no file the kernels could have written to (records, logs, kernels).
    for p in files_under(&w.out()) {
        if p.file_name() != Some("secret".as_ref()) {
            let bytes = std::fs::read(&p).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(SECRET),
                "the secret is in {}",
                p.display()
            );
        }
    }
    assert_eq!(w.connections(), Vec::<String>::new(), "S5 reached the host");
    assert_eq!(
        w.written_outside(),
        Vec::<PathBuf>::new(),
        "S6 wrote outside"
    );
    let alive = w.marked_processes();
    assert!(alive.is_empty(), "left running after the run: {alive:?}");
    let wait_sandboxed = mean_worker_wait(&by_name);

    // --- Without the sandbox, on throwaway copies: each attack works.
    let open = World::new("uncontained");
    let run = open.run(&["--no-sandbox"]);
    let stdout = String::from_utf8_lossy(&run.stdout).to_string();
    assert_eq!(run.status.code(), Some(3), "{}", show(&run));
    assert!(stdout.contains("NOT CONTAINED"), "{stdout}");
    let by_name = records_by_name(&open.out());
    let mut table = String::new();
    for (name, r) in &by_name {
        table.push_str(&format!(
            "{name:26} {:8} speedup {:6.3} containment {}\n",
            r["outcome"]["kind"].as_str().unwrap_or("?"),
            speedup(r),
            r["env"]["containment"]
        ));
    }
    eprintln!("--no-sandbox:\n{table}");
    for r in by_name.values() {
        assert_eq!(r["env"]["containment"], "none", "{table}");
    }
    // S1: the helper found the reference worker and held it stopped. What that does to the
    // speedup depends on the host's load (an idle host: 3-13x; a busy one, where the
    // continued reference waits for a core past the next SIGSTOP: little), so it is shown,
    // not asserted.
    let log = open.log_of("4_signal_reference");
    assert!(
        log.contains("attack S1: the reference worker is held (state T)"),
        "S1 uncontained did not hold the reference:\n{log}"
    );
    eprintln!(
        "S1 uncontained: speedup {:.3} against the control's {:.3}",
        speedup(&by_name["4_signal_reference"]),
        speedup(&by_name["4_honest_library_matmul"])
    );
    // S2: forged lines in the record log.
    let text = std::fs::read_to_string(open.out().join("records.jsonl")).unwrap();
    assert!(
        text.contains(&format!("\"forged\": \"{}\"", open.mark)),
        "S2 uncontained forged nothing:\n{text}"
    );
    // S3: read the secret; its log (in the run folder) holds it and its verdict shows it.
    assert_eq!(by_name["1_read_run_folder"]["outcome"]["kind"], "mismatch");
    assert!(open.log_of("1_read_run_folder").contains(SECRET), "{table}");
    // S4: its children outlive the run (the World's drop ends them), unless its worker ran in
    // a cgroup of its own (a host with a writable cgroup v2 hierarchy: its timing was frozen
    // through it), which is killed whole when the worker ends, whatever left its process
    // group.
    let alive = open.marked_processes();
    let in_cgroup =
        by_name["1_setsid_child"]["timing"]["harness_clock"]["freeze"].as_str() == Some("cgroup");
    for kind in ["-setsid", "-doublefork"] {
        let left = alive.iter().any(|(_, argv)| argv.contains(kind));
        assert_eq!(
            left, !in_cgroup,
            "{kind} child alive after the uncontained run (its worker in a cgroup: {in_cgroup}): {alive:?}"
        );
    }
    // S5: the listener heard from it.
    let heard = open.connections();
    assert!(
        heard.iter().any(|t| t.contains(&open.mark)),
        "S5 uncontained: {heard:?}"
    );
    assert_eq!(by_name["1_loopback_socket"]["outcome"]["kind"], "mismatch");
    // S6: files outside, in /tmp, the run folder and beside the problems.
    let written = open.written_outside();
    for place in [
        PathBuf::from("/tmp"),
        open.out(),
        open.problems().join("level1"),
    ] {
        assert!(
            written.iter().any(|p| p.parent() == Some(place.as_path())),
            "S6 uncontained wrote nothing in {}: {written:?}",
            place.display()
        );
    }
    let wait_open = mean_worker_wait(&by_name);
    eprintln!(
        "worker_wait_s, mean per kernel: sandboxed {wait_sandboxed:.3} s, --no-sandbox {wait_open:.3} s"
    );
}
