//! The start gate: workers still starting are paused (SIGSTOP) while a kernel is timed on
//! their device, one gate per device.

use std::sync::{Arc, Mutex};

/// Keeps the host quiet while kernels are timed: workers still starting (Python importing
/// torch: seconds of CPU, disk and page faults) are stopped with SIGSTOP for the length of
/// each timing phase and continued after it. Launch-bound kernels are timed as much by the
/// CPU that launches them as by the GPU, so a neighbour's start-up skews their times.
///
/// On a GPU only the part of a start that touches the device is paused: a worker imports
/// torch unpaused (CPU work on cores other than the one kept free for timing) and joins the
/// gate when it says it has imported (`{"type": "imported"}`, before its CUDA context is
/// made). Paused for its whole start, the next problem's reference was still importing when
/// the problem before it finished: 7-8 s of waiting on three of eight level-1 problems on an
/// H100, where its start takes about 5 s. A load sent ahead on a GPU likewise builds its model
/// on the host unpaused and joins the gate for its device work only
/// ([`Worker::request_gated`](super::Worker::request_gated)).
#[derive(Debug, Default)]
pub(crate) struct StartGate {
    state: Mutex<GateState>,
    /// Starting workers join the gate once they have imported torch (a GPU's gate), not
    /// from their spawn (the CPU's: there every start competes with the timed code).
    pub(super) after_imports: bool,
}

#[derive(Debug, Default)]
struct GateState {
    starting: std::collections::HashSet<i32>,
    timing: usize,
}

impl StartGate {
    /// The gate of `device`: a GPU's lets workers import unpaused.
    pub(crate) fn for_device(device: kbench_record::Device) -> StartGate {
        StartGate {
            after_imports: matches!(device, kbench_record::Device::Cuda(_)),
            ..StartGate::default()
        }
    }

    fn signal(pgid: i32, sig: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), sig);
    }

    /// Treats the process group `pgid` like a starting worker until the guard is dropped:
    /// paused (SIGSTOP) whenever a kernel is being timed.
    pub(crate) fn hold(&self, pgid: i32) -> GateHold<'_> {
        self.register(pgid);
        GateHold { gate: self, pgid }
    }

    pub(super) fn register(&self, pgid: i32) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.starting.insert(pgid);
        if st.timing > 0 {
            Self::signal(pgid, nix::sys::signal::Signal::SIGSTOP);
        }
    }

    pub(super) fn unregister(&self, pgid: i32) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.starting.remove(&pgid) && st.timing > 0 {
            Self::signal(pgid, nix::sys::signal::Signal::SIGCONT);
        }
    }

    /// A timing phase begins; starting workers are paused until every phase has ended.
    pub(crate) fn begin_timing(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.timing += 1;
        if st.timing == 1 {
            for pgid in &st.starting {
                Self::signal(*pgid, nix::sys::signal::Signal::SIGSTOP);
            }
        }
    }

    pub(crate) fn end_timing(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.timing = st.timing.saturating_sub(1);
        if st.timing == 0 {
            for pgid in &st.starting {
                Self::signal(*pgid, nix::sys::signal::Signal::SIGCONT);
            }
        }
    }
}

/// One [`StartGate`] per device. Timing on a GPU pauses only the workers starting for that
/// GPU: its timing processes run pinned to a core kept free for them, and on a host with
/// several GPUs one gate for all would keep workers paused whenever any GPU is timing
/// (most of the time with 2 GPUs, nearly always with 8), so each GPU would wait for its
/// next workers and the run would not scale. On the CPU every executor shares the one gate
/// of `Device::Cpu`: CPU timing is disturbed by anything that runs.
#[derive(Debug, Default)]
pub(crate) struct Gates(Mutex<std::collections::HashMap<kbench_record::Device, Arc<StartGate>>>);

impl Gates {
    pub(crate) fn of(&self, device: kbench_record::Device) -> Arc<StartGate> {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(
            m.entry(device)
                .or_insert_with(|| Arc::new(StartGate::for_device(device))),
        )
    }
}

/// See [`StartGate::hold`].
pub(crate) struct GateHold<'a> {
    gate: &'a StartGate,
    pgid: i32,
}

impl Drop for GateHold<'_> {
    fn drop(&mut self) {
        self.gate.unregister(self.pgid);
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;
    use std::process::Command;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::worker::{Role, Worker, WorkerFault, WorkerSpec};

    /// The process state letter of `pid` from /proc (`T` when stopped).
    fn proc_state(pid: u32) -> char {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let after = stat.rsplit_once(')').unwrap().1;
        after.trim_start().chars().next().unwrap()
    }

    fn wait_state(pid: u32, want: char) -> char {
        let mut st = proc_state(pid);
        for _ in 0..200 {
            if st == want {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
            st = proc_state(pid);
        }
        st
    }

    /// A process leading its own group, doing nothing for 30 s.
    fn sleeping_group() -> std::process::Child {
        Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap()
    }

    #[test]
    fn start_gate_pauses_starting_processes_only_while_timing() {
        let mut child = sleeping_group();
        let pid = child.id();
        let gate = StartGate::default();
        gate.register(pid as i32);
        assert_ne!(wait_state(pid, 'T'), 'T', "not stopped before any timing");
        gate.begin_timing();
        gate.begin_timing(); // a second GPU's timing overlaps
        assert_eq!(wait_state(pid, 'T'), 'T');
        gate.end_timing();
        assert_eq!(
            wait_state(pid, 'T'),
            'T',
            "still stopped: one timing phase is left"
        );
        gate.end_timing();
        assert_eq!(wait_state(pid, 'S'), 'S');
        // A process registered during timing is stopped at once, and continued when it
        // leaves the gate (its start finished) even while timing goes on.
        gate.begin_timing();
        gate.unregister(pid as i32);
        gate.register(pid as i32);
        assert_eq!(wait_state(pid, 'T'), 'T');
        gate.unregister(pid as i32);
        assert_eq!(wait_state(pid, 'S'), 'S');
        gate.end_timing();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// What the stand-in workers begin with: a frame writer and reader, and `d`, their folder.
    const FAKE_PRELUDE: &str = r#"#!/usr/bin/env python3
import json, os, struct, sys, time
d = os.path.dirname(os.path.abspath(__file__))
def frame(h):
    b = json.dumps(h).encode()
    sys.stdout.buffer.write(b"KBF1" + struct.pack("<IQ", len(b), 0) + b)
    sys.stdout.buffer.flush()
def read():
    n, p = struct.unpack("<IQ", sys.stdin.buffer.read(16)[4:])
    h = json.loads(sys.stdin.buffer.read(n)); sys.stdin.buffer.read(p)
    return h
"#;

    /// A stand-in worker: writes its pid, "imports" for a second, says `imported`, sets up
    /// "CUDA" for three seconds, then says hello (after [`FAKE_PRELUDE`]).
    const FAKE_WORKER: &str = r#"open(os.path.join(d, "pid"), "w").write(str(os.getpid()))
time.sleep(1.0)
open(os.path.join(d, "imported"), "w").close()
frame({"type": "imported"})
time.sleep(3.0)
frame({"type": "hello", "magic": "kbench-worker", "protocol": 2})
time.sleep(30)
"#;

    /// A worker spec whose "python" is the stand-in script `fake`, written into `dir`, under
    /// `gate`.
    fn fake_spec(dir: &std::path::Path, fake: &str, gate: &Arc<StartGate>) -> WorkerSpec {
        use std::os::unix::fs::PermissionsExt;
        let python = dir.join("python");
        std::fs::write(&python, format!("{FAKE_PRELUDE}{fake}")).unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        WorkerSpec {
            python,
            script: dir.into(),
            role: Role::Reference,
            cwd: dir.into(),
            env: vec![("PATH".into(), std::env::var("PATH").unwrap_or_default())],
            log_path: None,
            max_payload: 1 << 20,
            interrupt: None,
            gate: Some(Arc::clone(gate)),
            sandbox: None,
            cgroups: None,
            memory: None,
        }
    }

    /// Starts [`FAKE_WORKER`] under `gate` while a kernel is timed; returns what its start
    /// looked like: whether it finished "importing" while timing went on, and whether it was
    /// paused before its hello. The timing ends after that and the start must succeed.
    fn start_while_timing(gate: StartGate) -> (bool, bool) {
        let dir = tempfile::tempdir().unwrap();
        let gate = Arc::new(gate);
        gate.begin_timing();
        let spec = fake_spec(dir.path(), FAKE_WORKER, &gate);
        let starting = std::thread::spawn(move || Worker::start(&spec, Duration::from_secs(60)));
        let pid_file = dir.path().join("pid");
        let imported_file = dir.path().join("imported");
        let waited = Instant::now();
        while !imported_file.exists() && waited.elapsed() < Duration::from_secs(8) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let imported = imported_file.exists();
        // Paused at its spawn, the stand-in never wrote its pid: the gate knows it.
        let registered = gate.state.lock().unwrap().starting.iter().next().copied();
        let pid: u32 = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|p| p.parse().ok())
            .or(registered.map(|p| p as u32))
            .expect("the stand-in never started");
        let paused = wait_state(pid, 'T') == 'T';
        gate.end_timing();
        let worker = starting.join().unwrap().expect("the start failed");
        let hello = kbench_record::protocol::Frame::new(worker.hello().clone());
        assert_eq!(hello.kind(), "hello");
        (imported, paused)
    }

    #[test]
    fn a_gpus_gate_lets_workers_import_and_pauses_their_cuda_set_up() {
        let (imported, paused) =
            start_while_timing(StartGate::for_device(kbench_record::Device::Cuda(0)));
        assert!(imported, "the import phase was paused by a GPU's timing");
        assert!(paused, "the start was not paused after its imports");
    }

    #[test]
    fn the_cpus_gate_pauses_the_whole_start() {
        let (imported, paused) =
            start_while_timing(StartGate::for_device(kbench_record::Device::Cpu));
        assert!(!imported, "the CPU's timing let a start import");
        assert!(paused);
    }

    #[test]
    fn timing_on_one_gpu_leaves_workers_starting_for_another_running() {
        use kbench_record::Device;
        let mut child = sleeping_group();
        let pid = child.id();
        let gates = Gates::default();
        assert!(Arc::ptr_eq(
            &gates.of(Device::Cuda(1)),
            &gates.of(Device::Cuda(1))
        ));
        let starting_for_1 = gates.of(Device::Cuda(1));
        starting_for_1.register(pid as i32);
        gates.of(Device::Cuda(0)).begin_timing();
        std::thread::sleep(Duration::from_millis(200));
        assert_ne!(
            proc_state(pid),
            'T',
            "GPU 0's timing stopped a start for GPU 1"
        );
        gates.of(Device::Cuda(1)).begin_timing();
        assert_eq!(wait_state(pid, 'T'), 'T', "GPU 1's own timing stops it");
        gates.of(Device::Cuda(1)).end_timing();
        assert_eq!(wait_state(pid, 'S'), 'S');
        gates.of(Device::Cuda(0)).end_timing();
        starting_for_1.unregister(pid as i32);
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// A load for the stand-in workers below (which read only its id and gate flag).
    fn fake_load() -> kbench_record::protocol::Command {
        kbench_record::protocol::Command::Load(kbench_record::protocol::Load {
            problem_path: "problem.py".into(),
            candidate_path: None,
            device: "cuda:0".into(),
            precision: "fp32".into(),
            model_mode: "train".into(),
            weight_seed: 42,
            want_f64: None,
            cpu_threads: None,
            build_dir: None,
            warm_up: None,
            gate_device_work: false,
        })
    }

    /// A stand-in worker for a load sent ahead: hello, then for its one command (with
    /// `gate_device_work`) "builds the model" (writes `built`), says `device_work`, waits for
    /// `proceed`, "moves it" (writes `moved`) and answers `loaded` (after [`FAKE_PRELUDE`]).
    const FAKE_LOADER: &str = r#"open(os.path.join(d, "pid"), "w").write(str(os.getpid()))
frame({"type": "hello", "magic": "kbench-worker", "protocol": 2})
load = read()
assert load["gate_device_work"] is True, load
time.sleep(0.5)
open(os.path.join(d, "built"), "w").close()
frame({"type": "device_work", "id": load["id"]})
go = read()
assert go == {"cmd": "proceed", "id": load["id"]}, go
open(os.path.join(d, "moved"), "w").close()
frame({"type": "loaded", "id": load["id"]})
time.sleep(30)
"#;

    #[test]
    fn a_load_sent_ahead_builds_on_the_host_while_timing_and_waits_for_it_to_move() {
        let dir = tempfile::tempdir().unwrap();
        let gate = Arc::new(StartGate::for_device(kbench_record::Device::Cuda(0)));
        let spec = fake_spec(dir.path(), FAKE_LOADER, &gate);
        let mut worker = Worker::start(&spec, Duration::from_secs(60)).unwrap();
        let pid: u32 = std::fs::read_to_string(dir.path().join("pid"))
            .unwrap()
            .parse()
            .unwrap();
        gate.begin_timing();
        let loading = {
            let gate = Arc::clone(&gate);
            std::thread::spawn(move || {
                let reply = worker.request_gated(fake_load(), Duration::from_secs(60), &gate);
                (worker, reply)
            })
        };
        let (built, moved) = (dir.path().join("built"), dir.path().join("moved"));
        let waited = Instant::now();
        while !built.exists() && waited.elapsed() < Duration::from_secs(8) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(built.exists(), "the host part was paused by the timing");
        assert_eq!(wait_state(pid, 'T'), 'T', "its device work was not paused");
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !moved.exists(),
            "it moved the model while a kernel was timed"
        );
        gate.end_timing();
        let (worker, reply) = loading.join().unwrap();
        assert_eq!(reply.unwrap().kind(), "loaded");
        assert!(moved.exists());
        assert!(
            gate.state.lock().unwrap().starting.is_empty(),
            "left in the gate"
        );
        worker.shutdown();
    }

    /// A stand-in whose load goes wrong as the file in its folder says: `forge`, a
    /// `device_work` for another command's id (a forged or stray frame); `fail`, an error at
    /// once; `hang`, no answer after `proceed`.
    const FAKE_MISLOADER: &str = r#"frame({"type": "hello", "magic": "kbench-worker", "protocol": 2})
load = read()
if os.path.exists(os.path.join(d, "fail")):
    frame({"type": "error", "id": load["id"], "kind": "environment", "message": "no such problem"})
elif os.path.exists(os.path.join(d, "forge")):
    frame({"type": "device_work", "id": load["id"] + 1})
else:
    frame({"type": "device_work", "id": load["id"]})
    read()
time.sleep(30)
"#;

    #[test]
    fn a_load_sent_ahead_that_goes_wrong_leaves_the_gate_and_says_why() {
        let limit = Duration::from_secs(3);
        for how in ["forge", "fail", "hang"] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join(how), "").unwrap();
            let gate = Arc::new(StartGate::for_device(kbench_record::Device::Cuda(0)));
            let spec = fake_spec(dir.path(), FAKE_MISLOADER, &gate);
            let mut worker = Worker::start(&spec, Duration::from_secs(60)).unwrap();
            let reply = worker.request_gated(fake_load(), limit, &gate);
            match how {
                // An error before the device work is the load's answer.
                "fail" => assert_eq!(reply.unwrap().kind(), "error"),
                // A forged id kills the worker; later requests fail the same way.
                "forge" => {
                    let fault = reply.unwrap_err();
                    assert!(
                        matches!(&fault, WorkerFault::Protocol(m) if m.contains("expected 1")),
                        "{fault:?}"
                    );
                    assert_eq!(
                        worker
                            .request(
                                kbench_record::protocol::Frame::command(&fake_load()),
                                Duration::from_secs(5)
                            )
                            .unwrap_err(),
                        fault
                    );
                }
                // A timeout after proceed names the load's whole limit.
                _ => assert_eq!(reply.unwrap_err(), WorkerFault::Timeout { limit }),
            }
            assert!(gate.state.lock().unwrap().starting.is_empty(), "{how}");
            worker.shutdown();
        }
    }
}
