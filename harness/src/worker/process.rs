//! A Python worker process and the channel to it.
//!
//! Each worker runs in its own process group so that a timeout kills everything it started
//! (compilers included). Frames are written by a writer thread and read by a reader thread, so
//! a worker that stops reading or writing can never block the harness: every request waits on
//! a channel with the phase's time limit. stdout/stderr output of the worker (the worker routes
//! anything user code prints there) is drained on a third thread and truncated.

use std::io::{BufReader, BufWriter};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kbench_record::protocol::{self, reply, Frame, ProtocolError, HELLO_MAGIC, PROTOCOL_VERSION};

use super::cgroup::WorkerGroup;
use super::gate::StartGate;

/// Which side of the trust boundary a worker is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
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
pub(crate) struct WorkerSpec {
    pub(crate) python: PathBuf,
    /// The worker package's folder, from [`super::python::materialize_worker`]: the worker
    /// runs as `python -u` with [`super::python::worker_args`] of it and the role.
    pub(crate) script: PathBuf,
    pub(crate) role: Role,
    /// Working directory (a private temporary directory for candidates).
    pub(crate) cwd: PathBuf,
    /// The complete environment: the child inherits nothing else.
    pub(crate) env: Vec<(String, String)>,
    /// Where to keep the first [`LOG_FILE_CAP`] bytes of the worker's output.
    pub(crate) log_path: Option<PathBuf>,
    /// Largest frame payload accepted from this worker.
    pub(crate) max_payload: u64,
    /// Set by the signal handler; a waiting request gives up and kills the worker.
    pub(crate) interrupt: Option<Arc<AtomicBool>>,
    /// Workers started ahead register here while they start, so timing can pause them.
    pub(crate) gate: Option<Arc<StartGate>>,
    /// Run inside this sandbox (untrusted workers); `None`: a plain child process.
    pub(crate) sandbox: Option<super::sandbox::Sandbox>,
    /// Start the worker in a cgroup of its own under this tree (freezing, killing it whole);
    /// `None`, or a group that cannot be entered: frozen with signals.
    pub(crate) cgroups: Option<Arc<super::cgroup::CgroupTree>>,
    /// The worker's memory cap; `None`: no cap.
    pub(crate) memory: Option<MemoryCap>,
}

pub(crate) use super::bounds::{CapMet, MemoryCap};

/// How a running worker's memory is capped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MemoryBound {
    None,
    /// Its group's `memory.max`, bytes.
    Cgroup(u64),
    /// Its own RLIMIT_AS, this many bytes beyond what torch maps.
    Rlimit(u64),
}

/// Why a worker did not answer a request normally. These become outcomes, never `Err`s of the
/// run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum WorkerFault {
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

/// Frames read from a worker, or why reading them stopped.
type FromWorker = Receiver<Result<Frame, ProtocolError>>;

use super::log_sink::{drain, LogSink};

/// A running worker.
pub(crate) struct Worker {
    child: Child,
    pgid: i32,
    to_worker: Option<Sender<Outgoing>>,
    from_worker: FromWorker,
    log: Arc<Mutex<LogSink>>,
    next_id: u64,
    hello: serde_json::Value,
    dead: Option<WorkerFault>,
    interrupt: Option<Arc<AtomicBool>>,
    /// Runs under bwrap: a signal that ended the worker comes back as bwrap's exit code.
    sandboxed: bool,
    /// How the worker's processes are frozen (and, with a group, killed whole).
    freezer: super::freeze::Freezer,
    /// The tree its group is in (the cap of all workers together and its events).
    tree: Option<Arc<super::cgroup::CgroupTree>>,
    memory: MemoryBound,
    /// The uid it runs as in the sandbox, when the harness asked for one: files a command
    /// names in its working folder are handed to it ([`Self::hand_over_named_files`]).
    uid: Option<u32>,
    cwd: PathBuf,
}

impl Worker {
    /// Starts a worker and waits for its hello.
    pub(crate) fn start(spec: &WorkerSpec, timeout: Duration) -> Result<Worker, WorkerFault> {
        let group = spec.cgroups.as_ref().and_then(|t| t.group().ok());
        let mut env = spec.env.clone();
        // The worker ends with this process (`kbench_worker/startup.py`, `_die_with_harness`).
        env.push(("KBENCH_HARNESS_PID".into(), std::process::id().to_string()));
        let memory = cap_memory(spec, group.as_ref(), &mut env);
        let cmd = worker_command(spec, group.as_ref(), &env);
        let mut child = super::spawn::spawn_from_lasting_thread(cmd).map_err(|e| {
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
        let (log, to_tx, from_rx) = start_io_threads(spec, stdin, stdout, stderr);
        let gate = spec.gate.as_deref();
        if let Some(g) = gate.filter(|g| !g.after_imports) {
            g.register(pgid);
        }
        let mut worker = Worker {
            // Decided once the worker has said hello (its shell has long run by then).
            freezer: super::freeze::Freezer::Signals { root: pgid },
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
            tree: spec.cgroups.clone(),
            memory,
            uid: spec.sandbox.as_ref().and_then(|s| s.uid),
            cwd: spec.cwd.clone(),
        };
        let hello = worker.await_hello(gate, timeout)?;
        worker.check_hello(&hello)?;
        worker.hello = hello.header;
        // The shell put itself (now the worker) into the group before its exec; where it
        // could not, the worker is frozen with signals.
        if let Some(g) = group {
            if g.holds(worker.child.id()) {
                worker.freezer = super::freeze::Freezer::Group(g);
            }
        }
        Ok(worker)
    }

    /// Waits for the hello, registered with the start gate (if any) while the worker starts.
    fn await_hello(
        &mut self,
        gate: Option<&StartGate>,
        timeout: Duration,
    ) -> Result<Frame, WorkerFault> {
        let pgid = self.pgid;
        let started = Instant::now();
        let mut hello = self.receive(timeout);
        if matches!(&hello, Ok(f) if f.kind() == "imported") {
            // Torch is imported; what follows (the CUDA context) is paused while timing.
            if let Some(g) = gate.filter(|g| g.after_imports) {
                g.register(pgid);
            }
            hello = self.receive(timeout.saturating_sub(started.elapsed()));
        }
        if let Some(g) = gate {
            g.unregister(pgid);
        }
        hello
    }

    /// Checks the hello (magic, protocol version, uid); a worker that fails is killed.
    fn check_hello(&mut self, hello: &Frame) -> Result<(), WorkerFault> {
        let said: reply::Hello = hello.reply();
        if hello.kind() != "hello" || said.magic.as_deref() != Some(HELLO_MAGIC) {
            let detail = if hello.kind() == "error" {
                hello.reply::<reply::Error>().message.unwrap_or_default()
            } else {
                format!("expected a hello, got {}", hello.header)
            };
            self.kill();
            return Err(WorkerFault::Protocol(detail));
        }
        let version = said.protocol;
        if version != Some(u64::from(PROTOCOL_VERSION)) {
            self.kill();
            return Err(WorkerFault::Protocol(format!(
                "worker speaks protocol {version:?}, the harness speaks {PROTOCOL_VERSION}; the worker script is stale"
            )));
        }
        let ran_as = said.uid;
        if let Some(uid) = self.uid.filter(|u| ran_as != Some(u64::from(*u))) {
            self.kill();
            return Err(WorkerFault::Spawn(format!(
                "the sandboxed worker runs as uid {ran_as:?}, not the unprivileged uid {uid} it was \
                 started as; set {}=off to run sandboxed candidates as the invoking user",
                super::bounds::CANDIDATE_UID_ENV
            )));
        }
        Ok(())
    }

    #[cfg(test)]
    /// The worker's hello (python and torch versions, CUDA availability).
    pub(crate) fn hello(&self) -> &serde_json::Value {
        &self.hello
    }

    /// Sends a command and waits up to `timeout` for its answer. The command's header gets an
    /// `id` that the answer must echo, so stray frames from a hostile worker are detected.
    pub(crate) fn request(
        &mut self,
        frame: Frame,
        timeout: Duration,
    ) -> Result<Frame, WorkerFault> {
        self.request_shared(Arc::new(frame), timeout)
    }

    /// Like [`Worker::request`] for a frame shared between workers (large inputs are not
    /// copied: only the header, which gets the `id`, is rebuilt).
    pub(crate) fn request_shared(
        &mut self,
        frame: Arc<Frame>,
        timeout: Duration,
    ) -> Result<Frame, WorkerFault> {
        let id = self.send_command(frame)?;
        self.answer(id, timeout)
    }

    /// Sends a command without waiting; [`Self::answer`] takes its answer. Two workers'
    /// commands then run at once.
    pub(crate) fn send(&mut self, frame: Frame) -> Result<u64, WorkerFault> {
        self.send_command(Arc::new(frame))
    }

    /// The answer to command `id` (from [`Self::send`]), waiting at most `timeout`.
    pub(crate) fn answer(&mut self, id: u64, timeout: Duration) -> Result<Frame, WorkerFault> {
        let reply = self.receive(timeout)?;
        self.answer_to(id, reply)
    }

    /// A `load` sent ahead while kernels may be timed on the worker's device (PROTOCOL.md,
    /// `gate_device_work`): its host part (the problem's module, the model built on the
    /// host, seconds of CPU for a model of a few GiB) runs unpaused, like torch's import; when
    /// the worker says its device work is next it joins `gate` (paused while a kernel is
    /// timed) and is told to proceed, and stays in the gate until it answers. Held in the
    /// gate for the whole load, the reference of a 4 GiB model took 38 s to load ahead where
    /// 13 s of work was all it needed (4 × H200, 2026-11-28), and its GPU stood idle meanwhile.
    pub(crate) fn request_gated(
        &mut self,
        command: protocol::Command,
        timeout: Duration,
        gate: &StartGate,
    ) -> Result<Frame, WorkerFault> {
        let started = Instant::now();
        let mut command = command;
        if let protocol::Command::Load(load) = &mut command {
            load.gate_device_work = true;
        }
        let id = self.send_command(Arc::new(Frame::command(&command)))?;
        let first = self.receive(timeout)?;
        let first = self.answer_to(id, first)?;
        if first.kind() != "device_work" {
            return Ok(first);
        }
        let _hold = gate.hold(self.pgid);
        let proceed = Frame::command(&protocol::Command::Proceed { id });
        self.send_out(Outgoing {
            header: proceed.header.clone(),
            payload: Arc::new(proceed),
        })?;
        // The load's limit covers both parts; a timeout names that limit, not what was left.
        let reply = match self.receive(timeout.saturating_sub(started.elapsed())) {
            Err(WorkerFault::Timeout { .. }) => {
                let fault = WorkerFault::Timeout { limit: timeout };
                self.dead = Some(fault.clone());
                return Err(fault);
            }
            other => other?,
        };
        self.answer_to(id, reply)
    }

    /// Sends `frame` with the next command id, which it returns.
    fn send_command(&mut self, frame: Arc<Frame>) -> Result<u64, WorkerFault> {
        if let Some(f) = &self.dead {
            return Err(f.clone());
        }
        self.hand_over_named_files(&frame.header);
        let id = self.next_id;
        self.next_id += 1;
        let mut header = frame.header.clone();
        if let Some(obj) = header.as_object_mut() {
            obj.insert("id".into(), id.into());
        }
        // Only the (small) header is rebuilt; the payload is shared.
        self.send_out(Outgoing {
            header,
            payload: frame,
        })?;
        Ok(id)
    }

    /// Hands `out` to the writer thread; a worker whose channel is gone (killed) has died.
    fn send_out(&mut self, out: Outgoing) -> Result<(), WorkerFault> {
        if self
            .to_worker
            .as_ref()
            .is_none_or(|tx| tx.send(out).is_err())
        {
            return Err(self.died());
        }
        Ok(())
    }

    /// A worker running as an unprivileged uid must be able to open the files the harness
    /// made for it in its working folder and names in a command: the timing exchange file
    /// (`exchange.path` of `time_open`, created by the harness as root). Only a file directly
    /// in the working folder, and a link there is changed itself, never followed.
    fn hand_over_named_files(&self, header: &serde_json::Value) {
        let Some(uid) = self.uid else { return };
        let Some(path) = header.pointer("/exchange/path").and_then(|p| p.as_str()) else {
            return;
        };
        let path = std::path::Path::new(path);
        if path.parent() == Some(self.cwd.as_path()) {
            let _ = std::os::unix::fs::lchown(path, Some(uid), Some(uid));
        }
    }

    /// Whether the worker went past a memory cap, from its group's memory events (a group
    /// cap: the kernel killed it) or, under an address-space limit, from `detail` (what it
    /// said or how it failed: an allocation refused). `None` when nothing says so.
    pub(crate) fn memory_cap_met(&self, detail: &str) -> Option<CapMet> {
        match self.memory {
            MemoryBound::None => None,
            MemoryBound::Rlimit(bytes) => {
                super::bounds::allocation_failed(detail).then(|| CapMet {
                    limit_bytes: bytes,
                    all_workers: false,
                    how: "an allocation was refused at its address-space limit".into(),
                })
            }
            MemoryBound::Cgroup(bytes) => {
                let group = self.freezer.group()?;
                let events = group.memory_events();
                if events.oom_kill == 0 && events.oom == 0 {
                    return None;
                }
                if events.oom > 0 {
                    return Some(CapMet {
                        limit_bytes: bytes,
                        all_workers: false,
                        how: "its cgroup's memory.max was met; the kernel killed it".into(),
                    });
                }
                let tree = self.tree.as_ref()?;
                let all = tree.all_cap()?;
                (tree.memory_events().oom > 0).then(|| CapMet {
                    limit_bytes: all,
                    all_workers: true,
                    how: "the workers' cgroup folder met its memory.max; the kernel killed this worker".into(),
                })
            }
        }
    }

    /// `reply` if it answers command `id`; otherwise the worker is killed (a forged or stray
    /// frame).
    fn answer_to(&mut self, id: u64, reply: Frame) -> Result<Frame, WorkerFault> {
        match reply.id() {
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
        // Processes that left the process group (`setsid`) are still in the cgroup.
        if let super::freeze::Freezer::Group(g) = &self.freezer {
            g.kill();
        }
    }

    /// Stops every process of the worker, confirmed, waiting at most `limit`; returns how
    /// long the confirmation took. See [`super::freeze`].
    pub(crate) fn freeze(&self, limit: Duration) -> Result<Duration, String> {
        self.freezer.freeze(limit)
    }

    /// Lets a frozen worker run again. Its process group also gets SIGCONT: under
    /// `--no-sandbox` a candidate's detached helper can SIGSTOP the reference and then be
    /// frozen with its cgroup, leaving the reference stopped while the harness waits for it
    /// (`adversarial/exploits/cpu/level1/4_signal_reference.py`); what the harness thaws runs.
    pub(crate) fn thaw(&self) -> Result<(), String> {
        use nix::sys::signal::{killpg, Signal};
        use nix::unistd::Pid;
        let thawed = self.freezer.thaw();
        let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGCONT);
        thawed
    }

    /// How this worker is frozen: `cgroup` or `signals`.
    pub(crate) fn freeze_method(&self) -> &'static str {
        self.freezer.method()
    }

    /// What freezes this worker (a build job's is also paused: `super::host_builds`).
    pub(crate) fn freezer(&self) -> &super::freeze::Freezer {
        &self.freezer
    }

    /// Kills the worker's whole process group and reaps it.
    pub(crate) fn kill(&mut self) {
        self.kill_group();
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.to_worker = None;
    }

    /// Asks the worker to exit, then makes sure its process group is gone.
    pub(crate) fn shutdown(mut self) {
        if self.dead.is_none() {
            let _ = self.request(
                Frame::command(&protocol::Command::Exit),
                Duration::from_secs(5),
            );
        }
        self.kill();
    }

    /// The worker's process group (it leads its own).
    pub(crate) fn pgid(&self) -> i32 {
        self.pgid
    }

    /// The last bytes the worker printed, lossily decoded, with a note when output was cut.
    pub(crate) fn log_tail(&self) -> String {
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
}

/// How the worker's memory is capped: its group's `memory.max`, else RLIMIT_AS (via `env`).
fn cap_memory(
    spec: &WorkerSpec,
    group: Option<&WorkerGroup>,
    env: &mut Vec<(String, String)>,
) -> MemoryBound {
    let mut memory = MemoryBound::None;
    if let Some(cap) = spec.memory {
        let tree_has_memory = spec.cgroups.as_ref().is_some_and(|t| t.has_memory());
        if let Some(g) = group.filter(|_| tree_has_memory) {
            if g.cap_memory(cap.bytes).is_ok() {
                memory = MemoryBound::Cgroup(cap.bytes);
            }
        }
        if memory == MemoryBound::None && cap.rlimit_fallback {
            env.push(("KBENCH_MEMORY_CAP_RLIMIT".into(), cap.bytes.to_string()));
            memory = MemoryBound::Rlimit(cap.bytes);
        }
    }
    memory
}

/// The worker's command line: `python -u` on the worker in its role, in its group and sandbox.
fn worker_command(
    spec: &WorkerSpec,
    group: Option<&WorkerGroup>,
    env: &[(String, String)],
) -> Command {
    let mut argv: Vec<std::ffi::OsString> = Vec::new();
    if let Some(g) = group {
        argv.extend(g.enter_args());
    }
    match &spec.sandbox {
        Some(s) => {
            argv.push(s.bwrap.clone().into());
            argv.extend(s.view.args(&spec.cwd));
            argv.push("--".into());
            argv.push(spec.python.clone().into());
        }
        None => argv.push(spec.python.clone().into()),
    }
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .arg("-u")
        .args(super::python::worker_args(&spec.script))
        .arg(spec.role.as_str())
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    cmd
}

/// Threads that drain the worker's stderr into its log, and write and read its frames.
fn start_io_threads(
    spec: &WorkerSpec,
    stdin: ChildStdin,
    stdout: ChildStdout,
    stderr: ChildStderr,
) -> (Arc<Mutex<LogSink>>, Sender<Outgoing>, FromWorker) {
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
    (log, to_tx, from_rx)
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            cgroups: None,
            memory: None,
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
}
