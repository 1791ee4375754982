//! A Python worker process and the channel to it.
//!
//! Each worker runs in its own process group so that a timeout kills everything it started
//! (compilers included). Frames are written by a writer thread and read by a reader thread, so
//! a worker that stops reading or writing can never block the harness: every request waits on
//! a channel with the phase's time limit. stdout/stderr output of the worker (the worker routes
//! anything user code prints there) is drained on a third thread and truncated.

use std::collections::VecDeque;
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kbench_record::protocol::{self, Frame, ProtocolError, HELLO_MAGIC, PROTOCOL_VERSION};

/// Which side of the trust boundary a worker is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Trusted: loads only the problem file.
    Reference,
    /// Untrusted: executes candidate code.
    Candidate,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Reference => "reference",
            Role::Candidate => "candidate",
        }
    }
}

/// How to start a worker.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    pub python: PathBuf,
    /// The worker package's folder, from [`super::python::materialize_worker`]: the worker
    /// runs as `python -u` with [`super::python::worker_args`] of it and the role.
    pub script: PathBuf,
    pub role: Role,
    /// Working directory (a private temporary directory for candidates).
    pub cwd: PathBuf,
    /// The complete environment: the child inherits nothing else.
    pub env: Vec<(String, String)>,
    /// Where to keep the first [`LOG_FILE_CAP`] bytes of the worker's output.
    pub log_path: Option<PathBuf>,
    /// Largest frame payload accepted from this worker.
    pub max_payload: u64,
    /// Set by the signal handler; a waiting request gives up and kills the worker.
    pub interrupt: Option<Arc<AtomicBool>>,
    /// Workers started ahead register here while they start, so timing can pause them.
    pub gate: Option<Arc<StartGate>>,
    /// Run inside this sandbox (untrusted workers); `None`: a plain child process.
    pub sandbox: Option<super::sandbox::Sandbox>,
}

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
/// H100, where its start takes about 5 s.
#[derive(Debug, Default)]
pub struct StartGate {
    state: Mutex<GateState>,
    /// Starting workers join the gate once they have imported torch (a GPU's gate), not
    /// from their spawn (the CPU's: there every start competes with the timed code).
    after_imports: bool,
}

#[derive(Debug, Default)]
struct GateState {
    starting: std::collections::HashSet<i32>,
    timing: usize,
}

impl StartGate {
    /// The gate of `device`: a GPU's lets workers import unpaused.
    pub fn for_device(device: kbench_record::Device) -> StartGate {
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
    pub fn hold(&self, pgid: i32) -> GateHold<'_> {
        self.register(pgid);
        GateHold { gate: self, pgid }
    }

    fn register(&self, pgid: i32) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.starting.insert(pgid);
        if st.timing > 0 {
            Self::signal(pgid, nix::sys::signal::Signal::SIGSTOP);
        }
    }

    fn unregister(&self, pgid: i32) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.starting.remove(&pgid) && st.timing > 0 {
            Self::signal(pgid, nix::sys::signal::Signal::SIGCONT);
        }
    }

    /// A timing phase begins; starting workers are paused until every phase has ended.
    pub fn begin_timing(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.timing += 1;
        if st.timing == 1 {
            for pgid in &st.starting {
                Self::signal(*pgid, nix::sys::signal::Signal::SIGSTOP);
            }
        }
    }

    pub fn end_timing(&self) {
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
pub struct Gates(Mutex<std::collections::HashMap<kbench_record::Device, Arc<StartGate>>>);

impl Gates {
    pub fn of(&self, device: kbench_record::Device) -> Arc<StartGate> {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(
            m.entry(device)
                .or_insert_with(|| Arc::new(StartGate::for_device(device))),
        )
    }
}

/// See [`StartGate::hold`].
pub struct GateHold<'a> {
    gate: &'a StartGate,
    pgid: i32,
}

impl Drop for GateHold<'_> {
    fn drop(&mut self) {
        self.gate.unregister(self.pgid);
    }
}

/// Why a worker did not answer a request normally. These become outcomes, never `Err`s of the
/// run.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkerFault {
    /// No answer within the limit; the process group was killed.
    Timeout { limit: Duration },
    /// The process ended: by a signal, or by exiting on its own.
    Died {
        signal: Option<i32>,
        exit_code: Option<i32>,
    },
    /// The worker sent something that is not a well-formed protocol frame.
    Protocol(String),
    /// The worker could not be started at all.
    Spawn(String),
    /// The user interrupted the run; the worker was killed.
    Interrupted,
}

impl std::fmt::Display for WorkerFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkerFault::Timeout { limit } => {
                write!(f, "no answer within {:.1} s", limit.as_secs_f64())
            }
            WorkerFault::Died {
                signal: Some(s), ..
            } => write!(f, "killed by signal {s}"),
            WorkerFault::Died {
                exit_code: Some(c), ..
            } => write!(f, "exited with code {c}"),
            WorkerFault::Died { .. } => f.write_str("died"),
            WorkerFault::Protocol(m) => write!(f, "protocol violation: {m}"),
            WorkerFault::Spawn(m) => write!(f, "could not start: {m}"),
            WorkerFault::Interrupted => f.write_str("interrupted"),
        }
    }
}

/// A frame on its way to a worker: its own header, and the payload of a shared frame.
struct Outgoing {
    header: serde_json::Value,
    payload: Arc<Frame>,
}

/// Bytes of worker output kept in memory (the tail shown in records).
pub const LOG_TAIL_CAP: usize = 16 << 10;
/// Bytes of worker output kept on disk per worker.
pub const LOG_FILE_CAP: u64 = 1 << 20;

#[derive(Default)]
struct LogSink {
    tail: VecDeque<u8>,
    total: u64,
    file: Option<std::fs::File>,
    written: u64,
}

impl LogSink {
    fn push(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        if let Some(f) = self.file.as_mut() {
            let room = LOG_FILE_CAP.saturating_sub(self.written) as usize;
            let n = room.min(chunk.len());
            if n > 0 && f.write_all(&chunk[..n]).is_ok() {
                self.written += n as u64;
            }
        }
        let keep = chunk.len().min(LOG_TAIL_CAP);
        let chunk = &chunk[chunk.len() - keep..];
        while self.tail.len() + chunk.len() > LOG_TAIL_CAP {
            self.tail.pop_front();
        }
        self.tail.extend(chunk);
    }
}

/// A running worker.
pub struct Worker {
    child: Child,
    pgid: i32,
    to_worker: Option<Sender<Outgoing>>,
    from_worker: Receiver<Result<Frame, ProtocolError>>,
    log: Arc<Mutex<LogSink>>,
    next_id: u64,
    hello: serde_json::Value,
    dead: Option<WorkerFault>,
    interrupt: Option<Arc<AtomicBool>>,
    /// Runs under bwrap: a signal that ended the worker comes back as bwrap's exit code.
    sandboxed: bool,
}

impl Worker {
    /// Starts a worker and waits for its hello.
    pub fn start(spec: &WorkerSpec, timeout: Duration) -> Result<Worker, WorkerFault> {
        let mut cmd = match &spec.sandbox {
            Some(s) => {
                let mut cmd = Command::new(&s.bwrap);
                cmd.args(s.view.args(&spec.cwd)).arg("--").arg(&spec.python);
                cmd
            }
            None => Command::new(&spec.python),
        };
        cmd.arg("-u")
            .args(super::python::worker_args(&spec.script))
            .arg(spec.role.as_str())
            .current_dir(&spec.cwd)
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let spawned = if spec.sandbox.is_some() {
            super::sandbox::spawn_from_lasting_thread(cmd)
        } else {
            cmd.spawn()
        };
        let mut child = spawned.map_err(|e| {
            WorkerFault::Spawn(format!(
                "{} {}: {e}",
                spec.python.display(),
                spec.script.display()
            ))
        })?;
        let pgid = child.id() as i32;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            return Err(WorkerFault::Spawn("child pipes missing".into()));
        };

        let log = Arc::new(Mutex::new(LogSink {
            file: spec
                .log_path
                .as_ref()
                .and_then(|p| std::fs::File::create(p).ok()),
            ..LogSink::default()
        }));
        let log2 = Arc::clone(&log);
        std::thread::spawn(move || drain(stderr, log2));

        let (to_tx, to_rx) = mpsc::channel::<Outgoing>();
        std::thread::spawn(move || {
            let mut w = BufWriter::with_capacity(1 << 20, stdin);
            for out in to_rx {
                if protocol::write_frame_parts(&mut w, &out.header, &out.payload.payload).is_err() {
                    break;
                }
            }
        });
        let (from_tx, from_rx) = mpsc::channel();
        let max_payload = spec.max_payload;
        std::thread::spawn(move || {
            let mut r = BufReader::with_capacity(1 << 20, stdout);
            loop {
                let res = protocol::read_frame(&mut r, max_payload);
                let stop = res.is_err();
                if from_tx.send(res).is_err() || stop {
                    break;
                }
            }
        });

        let gate = spec.gate.as_deref();
        if let Some(g) = gate.filter(|g| !g.after_imports) {
            g.register(pgid);
        }
        let mut worker = Worker {
            child,
            pgid,
            to_worker: Some(to_tx),
            from_worker: from_rx,
            log,
            next_id: 1,
            hello: serde_json::Value::Null,
            dead: None,
            interrupt: spec.interrupt.clone(),
            sandboxed: spec.sandbox.is_some(),
        };
        let started = Instant::now();
        let mut hello = worker.receive(timeout);
        if matches!(&hello, Ok(f) if f.kind() == "imported") {
            // Torch is imported; what follows (the CUDA context) is paused while timing.
            if let Some(g) = gate.filter(|g| g.after_imports) {
                g.register(pgid);
            }
            hello = worker.receive(timeout.saturating_sub(started.elapsed()));
        }
        if let Some(g) = gate {
            g.unregister(pgid);
        }
        let hello = hello?;
        if hello.kind() != "hello"
            || hello.header.get("magic").and_then(|m| m.as_str()) != Some(HELLO_MAGIC)
        {
            let detail = if hello.kind() == "error" {
                hello
                    .header
                    .get("message")
                    .and_then(|m| m.as_str())
                    .unwrap_or("")
                    .to_string()
            } else {
                format!("expected a hello, got {}", hello.header)
            };
            worker.kill();
            return Err(WorkerFault::Protocol(detail));
        }
        let version = hello.header.get("protocol").and_then(|v| v.as_u64());
        if version != Some(u64::from(PROTOCOL_VERSION)) {
            worker.kill();
            return Err(WorkerFault::Protocol(format!(
                "worker speaks protocol {version:?}, the harness speaks {PROTOCOL_VERSION}; the worker script is stale"
            )));
        }
        worker.hello = hello.header;
        Ok(worker)
    }

    /// The worker's hello (python and torch versions, CUDA availability).
    pub fn hello(&self) -> &serde_json::Value {
        &self.hello
    }

    /// Sends a command and waits up to `timeout` for its answer. The command's header gets an
    /// `id` that the answer must echo, so stray frames from a hostile worker are detected.
    pub fn request(&mut self, frame: Frame, timeout: Duration) -> Result<Frame, WorkerFault> {
        self.request_shared(Arc::new(frame), timeout)
    }

    /// Like [`Worker::request`] for a frame shared between workers (large inputs are not
    /// copied: only the header, which gets the `id`, is rebuilt).
    pub fn request_shared(
        &mut self,
        frame: Arc<Frame>,
        timeout: Duration,
    ) -> Result<Frame, WorkerFault> {
        if let Some(f) = &self.dead {
            return Err(f.clone());
        }
        let id = self.next_id;
        self.next_id += 1;
        let mut header = frame.header.clone();
        if let Some(obj) = header.as_object_mut() {
            obj.insert("id".into(), id.into());
        }
        // Only the (small) header is rebuilt; the payload is shared.
        let send = Outgoing {
            header,
            payload: frame,
        };
        if let Some(tx) = &self.to_worker {
            if tx.send(send).is_err() {
                return Err(self.died());
            }
        }
        let reply = self.receive(timeout)?;
        match reply.header.get("id").and_then(|v| v.as_u64()) {
            Some(got) if got == id => Ok(reply),
            got => {
                self.kill();
                let fault =
                    WorkerFault::Protocol(format!("answer carries id {got:?}, expected {id}"));
                self.dead = Some(fault.clone());
                Err(fault)
            }
        }
    }

    fn receive(&mut self, timeout: Duration) -> Result<Frame, WorkerFault> {
        let deadline = Instant::now() + timeout;
        let got = loop {
            // Wake up regularly to notice an interrupt.
            let left = deadline.saturating_duration_since(Instant::now());
            match self
                .from_worker
                .recv_timeout(left.min(Duration::from_millis(200)))
            {
                Err(RecvTimeoutError::Timeout) if Instant::now() < deadline => {
                    if self
                        .interrupt
                        .as_ref()
                        .is_some_and(|f| f.load(Ordering::SeqCst))
                    {
                        self.kill();
                        self.dead = Some(WorkerFault::Interrupted);
                        return Err(WorkerFault::Interrupted);
                    }
                }
                other => break other,
            }
        };
        match got {
            Ok(Ok(frame)) => Ok(frame),
            Ok(Err(ProtocolError::Closed)) | Err(RecvTimeoutError::Disconnected) => {
                Err(self.died())
            }
            Ok(Err(e)) => {
                // A worker that died mid-frame shows up as a truncated frame: report the death.
                if let Some(fault) = self.exited_within(Duration::from_millis(500)) {
                    return Err(fault);
                }
                self.kill();
                let fault = WorkerFault::Protocol(e.to_string());
                self.dead = Some(fault.clone());
                Err(fault)
            }
            Err(RecvTimeoutError::Timeout) => {
                self.kill();
                let fault = WorkerFault::Timeout { limit: timeout };
                self.dead = Some(fault.clone());
                Err(fault)
            }
        }
    }

    /// The channel closed: find out how the process ended.
    fn died(&mut self) -> WorkerFault {
        let fault = self
            .exited_within(Duration::from_secs(5))
            .unwrap_or_else(|| {
                self.kill();
                WorkerFault::Protocol("closed its channel but kept running".into())
            });
        self.kill_group();
        self.dead = Some(fault.clone());
        fault
    }

    fn exited_within(&mut self, limit: Duration) -> Option<WorkerFault> {
        let fault = self.exit_status_within(limit)?;
        Some(self.stopped_from_outside(fault))
    }

    /// A worker killed by SIGINT, SIGTERM or SIGHUP, none of which kbench sends its workers
    /// (it kills with SIGKILL and pauses with SIGSTOP), was most likely signalled with the
    /// whole job: Slurm's scancel and a terminal's Ctrl-C signal every process, one after
    /// another, so the worker can die a moment before kbench's own handler raises the stop
    /// flag. Such a death is an interruption, not the kernel's verdict, when the flag comes
    /// up within 2 s; otherwise (a kernel that signalled itself) it stays what it was.
    fn stopped_from_outside(&self, fault: WorkerFault) -> WorkerFault {
        use nix::sys::signal::Signal;
        let Some(flag) = &self.interrupt else {
            return fault;
        };
        let outside = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP].map(|s| s as i32);
        if !matches!(fault, WorkerFault::Died { signal: Some(s), .. } if outside.contains(&s)) {
            return fault;
        }
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until {
            if flag.load(Ordering::SeqCst) {
                return WorkerFault::Interrupted;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        fault
    }

    fn exit_status_within(&mut self, limit: Duration) -> Option<WorkerFault> {
        let until = Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    return Some(match (status.signal(), status.code()) {
                        // bwrap exits 128 + N when the process it ran died of signal N.
                        (None, Some(code)) if self.sandboxed && (129..=192).contains(&code) => {
                            WorkerFault::Died {
                                signal: Some(code - 128),
                                exit_code: None,
                            }
                        }
                        (signal, exit_code) => WorkerFault::Died { signal, exit_code },
                    });
                }
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
                _ => return None,
            }
        }
    }

    fn kill_group(&self) {
        use nix::sys::signal::{killpg, Signal};
        use nix::unistd::Pid;
        // The group may already be gone; that is fine.
        let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
    }

    /// Kills the worker's whole process group and reaps it.
    pub fn kill(&mut self) {
        self.kill_group();
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.to_worker = None;
    }

    /// Asks the worker to exit, then makes sure its process group is gone.
    pub fn shutdown(mut self) {
        if self.dead.is_none() {
            let _ = self.request(
                Frame::new(serde_json::json!({"cmd": "exit"})),
                Duration::from_secs(5),
            );
        }
        self.kill();
    }

    /// The worker's process group (it leads its own).
    pub fn pgid(&self) -> i32 {
        self.pgid
    }

    /// The last bytes the worker printed, lossily decoded, with a note when output was cut.
    pub fn log_tail(&self) -> String {
        let sink = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let (a, b) = sink.tail.as_slices();
        let mut bytes = a.to_vec();
        bytes.extend_from_slice(b);
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if sink.total > sink.tail.len() as u64 {
            format!(
                "[... {} earlier bytes of output not shown]\n{text}",
                sink.total - sink.tail.len() as u64
            )
        } else {
            text
        }
    }

    /// Total bytes the worker printed.
    pub fn log_bytes(&self) -> u64 {
        self.log.lock().map(|s| s.total).unwrap_or(0)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn drain(mut r: impl Read, log: Arc<Mutex<LogSink>>) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if let Ok(mut sink) = log.lock() {
                    sink.push(&buf[..n]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_sink_keeps_the_tail_and_caps_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut sink = LogSink {
            file: Some(std::fs::File::create(&path).unwrap()),
            ..Default::default()
        };
        for i in 0..200u32 {
            sink.push(format!("line {i:06}\n").repeat(1000).as_bytes());
        }
        assert_eq!(sink.tail.len(), LOG_TAIL_CAP);
        assert!(sink.total > LOG_FILE_CAP);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), LOG_FILE_CAP);
        let tail: Vec<u8> = sink.tail.iter().copied().collect();
        assert!(String::from_utf8_lossy(&tail).ends_with("line 000199\n"));
    }

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

    /// CI caught a Slurm-killed shard recording `reference_error ... killed by signal 15`:
    /// scancel signalled the worker a moment before kbench itself. A worker killed by such a
    /// signal is an interruption once kbench's stop flag comes up soon after; without the
    /// flag it stays the worker's own death.
    #[test]
    fn a_worker_killed_with_the_job_is_an_interruption_not_a_verdict() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let fake_python = dir.path().join("python");
        std::fs::write(&fake_python, "#!/bin/sh\nsleep 0.2\nkill -TERM $$\n").unwrap();
        std::fs::set_permissions(&fake_python, std::fs::Permissions::from_mode(0o755)).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let spec = WorkerSpec {
            python: fake_python,
            script: dir.path().into(),
            role: Role::Reference,
            cwd: dir.path().into(),
            env: vec![],
            log_path: None,
            max_payload: 1 << 20,
            interrupt: Some(Arc::clone(&stop)),
            gate: None,
            sandbox: None,
        };
        // The job's signal reaches kbench about 100 ms after the worker.
        let setter = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                stop.store(true, Ordering::SeqCst);
            })
        };
        let fault = Worker::start(&spec, Duration::from_secs(10)).err().unwrap();
        setter.join().unwrap();
        assert_eq!(fault, WorkerFault::Interrupted);
        // No stop follows: the worker killed itself, and that is what it did.
        stop.store(false, Ordering::SeqCst);
        let fault = Worker::start(&spec, Duration::from_secs(10)).err().unwrap();
        assert_eq!(
            fault,
            WorkerFault::Died {
                signal: Some(15),
                exit_code: None
            }
        );
    }

    #[test]
    fn start_gate_pauses_starting_processes_only_while_timing() {
        let mut child = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
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

    /// A stand-in worker: writes its pid, "imports" for a second, says `imported`, sets up
    /// "CUDA" for three seconds, then says hello.
    const FAKE_WORKER: &str = r#"#!/usr/bin/env python3
import json, os, struct, sys, time
d = os.path.dirname(os.path.abspath(__file__))
def frame(h):
    b = json.dumps(h).encode()
    sys.stdout.buffer.write(b"KBF1" + struct.pack("<IQ", len(b), 0) + b)
    sys.stdout.buffer.flush()
open(os.path.join(d, "pid"), "w").write(str(os.getpid()))
time.sleep(1.0)
open(os.path.join(d, "imported"), "w").close()
frame({"type": "imported"})
time.sleep(3.0)
frame({"type": "hello", "magic": "kbench-worker", "protocol": 2})
time.sleep(30)
"#;

    /// Starts [`FAKE_WORKER`] under `gate` while a kernel is timed; returns what its start
    /// looked like: whether it finished "importing" while timing went on, and whether it was
    /// paused before its hello. The timing ends after that and the start must succeed.
    fn start_while_timing(gate: StartGate) -> (bool, bool) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("python");
        std::fs::write(&fake, FAKE_WORKER).unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let gate = Arc::new(gate);
        gate.begin_timing();
        let spec = WorkerSpec {
            python: fake,
            script: dir.path().into(),
            role: Role::Reference,
            cwd: dir.path().into(),
            env: vec![("PATH".into(), std::env::var("PATH").unwrap_or_default())],
            log_path: None,
            max_payload: 1 << 20,
            interrupt: None,
            gate: Some(Arc::clone(&gate)),
            sandbox: None,
        };
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
        assert_eq!(worker.hello()["type"], "hello");
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
        let mut child = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
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
}
