//! The worker-driving part of an audit: reference workers started one per problem on a pool
//! of job threads, a memory guard that stops the youngest worker when the host runs short,
//! admission that runs problems alone after one ran out of memory beside another, and the
//! `load` + `audit` conversation with each worker.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kbench_record::protocol::{self, reply, Command, Frame};
use kbench_suites::Problem;
use serde_json::Value;

use super::progress::Progress;
use super::report::{is_oom_text, one_line, ProblemAudit};
use super::setup::{Measured, Opts, Setup};
use super::{FAMILIES, MAX_WEIGHTS};
use crate::config::materialize_problem;
use crate::measure::reference::load_request;
use crate::measure::{Ctx, Station};
use crate::worker::error_text;
use crate::worker::{Role, Worker, WorkerFault};

/// Watches host memory while workers run: when less than a reserve is left, the worker
/// started last (the one that has done the least work) is stopped, and its problem is then
/// audited again with nothing beside it, or, when it already was, recorded as "not audited:
/// out of host memory"; an audit never takes the machine down. It also keeps each worker's
/// peak resident memory (sampled).
struct MemoryGuard {
    active: Mutex<BTreeMap<i32, Watched>>,
    /// Workers stopped for memory: why, and whether another worker was running beside.
    killed: Mutex<BTreeMap<i32, (String, bool)>>,
    reserve: u64,
    total: u64,
}

struct Watched {
    started: Instant,
    peak: u64,
    stopped: bool,
}

fn meminfo() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    Some((field("MemAvailable:")?, field("MemTotal:")?))
}

/// Resident bytes of one process.
fn rss_bytes(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/statm"))
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

const GIB: f64 = (1u64 << 30) as f64;

impl MemoryGuard {
    fn new() -> Self {
        let total = meminfo().map_or(8 << 30, |(_, t)| t);
        Self {
            active: Mutex::new(BTreeMap::new()),
            killed: Mutex::new(BTreeMap::new()),
            // 2 GiB on a 24 GiB host, never less than 1 GiB.
            reserve: (total / 12).max(1 << 30),
            total,
        }
    }

    fn register(&self, pgid: i32) {
        let mut a = self.active.lock().unwrap_or_else(|e| e.into_inner());
        a.insert(
            pgid,
            Watched {
                started: Instant::now(),
                peak: rss_bytes(pgid),
                stopped: false,
            },
        );
    }

    /// Forgets a worker; returns its peak resident memory.
    fn unregister(&self, pgid: i32) -> u64 {
        let mut a = self.active.lock().unwrap_or_else(|e| e.into_inner());
        a.remove(&pgid).map_or(0, |w| w.peak.max(rss_bytes(pgid)))
    }

    fn killed_why(&self, pgid: i32) -> Option<(String, bool)> {
        let k = self.killed.lock().unwrap_or_else(|e| e.into_inner());
        k.get(&pgid).cloned()
    }

    /// One look: samples every worker, and stops the youngest when memory is short.
    /// Returns whether it stopped one.
    fn check(&self) -> bool {
        let mut active = self.active.lock().unwrap_or_else(|e| e.into_inner());
        for (&pgid, w) in active.iter_mut().filter(|(_, w)| !w.stopped) {
            w.peak = w.peak.max(rss_bytes(pgid));
        }
        let Some((available, _)) = meminfo() else {
            return false;
        };
        if available >= self.reserve {
            return false;
        }
        let Some((&pgid, _)) = active
            .iter()
            .filter(|(_, w)| !w.stopped)
            .max_by_key(|(_, w)| w.started)
        else {
            return false;
        };
        let rss = rss_bytes(pgid);
        let why = format!(
            "out of host memory: the worker held {:.1} GiB with {:.1} GiB left on the host ({:.1} GiB in all); kbench stopped it",
            rss as f64 / GIB,
            available as f64 / GIB,
            self.total as f64 / GIB
        );
        let beside = active.values().filter(|w| !w.stopped).count() > 1;
        self.killed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pgid, (why, beside));
        // The worker leads its own process group (started by this audit).
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGKILL,
        );
        // Its entry stays (with its peak) until its job thread takes it out.
        if let Some(w) = active.get_mut(&pgid) {
            w.stopped = true;
        }
        true
    }
}

/// Admits problems to the job threads. After a problem ran out of memory beside another,
/// problems run one at a time ("alone") until three in a row stayed below a quarter of the
/// host's memory; the job threads then share the host again.
pub(super) struct Admission {
    state: Mutex<AdmissionState>,
    cv: std::sync::Condvar,
    light_limit: u64,
}

#[derive(Default)]
struct AdmissionState {
    running: usize,
    alone: bool,
    light_streak: usize,
}

impl Admission {
    pub(super) fn new(total_memory: u64) -> Self {
        Self {
            state: Mutex::new(AdmissionState::default()),
            cv: std::sync::Condvar::new(),
            light_limit: total_memory / 4,
        }
    }

    /// Waits for a turn; returns whether the problem runs alone (`None`: stopped).
    pub(super) fn enter(&self, stopped: &dyn Fn() -> bool) -> Option<bool> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while s.alone && s.running > 0 {
            if stopped() {
                return None;
            }
            s = self
                .cv
                .wait_timeout(s, Duration::from_millis(500))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        s.running += 1;
        Some(s.alone)
    }

    pub(super) fn leave(&self, peak: u64, memory_failure: bool) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.running -= 1;
        if memory_failure {
            s.alone = true;
            s.light_streak = 0;
        } else if s.alone {
            s.light_streak = if peak < self.light_limit {
                s.light_streak + 1
            } else {
                0
            };
            if s.light_streak >= 3 {
                s.alone = false;
                s.light_streak = 0;
            }
        }
        self.cv.notify_all();
    }
}

fn fault_text(f: &WorkerFault, phase: &str, opts: &Opts) -> String {
    match f {
        WorkerFault::Timeout { .. } => format!(
            "timed out while {phase} (the per-problem limit is {:.0} s, --timeout)",
            opts.timeout.as_secs_f64()
        ),
        WorkerFault::Died {
            signal: Some(9), ..
        } => format!(
            "the worker was killed by signal 9 while {phase} (out of memory: the kernel's OOM killer?)"
        ),
        other => format!("the worker {other} while {phase}"),
    }
}

/// The reason of an `error` frame on one line, naming an out-of-memory error as such.
fn error_reason(reply: &Frame, phase: &str) -> String {
    let error: reply::Error = reply.reply();
    let kind = error.kind.as_deref().unwrap_or("error");
    let text = error_text(reply);
    format!(
        "{}{phase} failed ({kind}): {}",
        if is_oom_text(&text) {
            "out of memory: "
        } else {
            ""
        },
        one_line(&text, 300)
    )
}

fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

enum Outcome {
    Measured(Value),
    Failed(String),
    Interrupted,
}

fn audit_one(
    ctx: &Ctx,
    exec: &Station,
    problem: &Problem,
    opts: &Opts,
    guard: &MemoryGuard,
    logs: &Path,
) -> (ProblemAudit, Option<String>) {
    let t0 = Instant::now();
    let deadline = t0 + opts.timeout;
    let mut pa = ProblemAudit::new(problem);
    let c = ctx.config;
    let mut tail = None;
    // Some(beside) when the memory guard stopped the worker.
    let mut killed_beside = None;
    let outcome = (|| {
        let path = match materialize_problem(&c.cache, problem) {
            Ok(p) => p,
            Err(e) => return Outcome::Failed(format!("{e:#}")),
        };
        let log = logs.join(format!("{}.log", crate::runlog::sanitize(&problem.key())));
        let spec = ctx.spec(
            Role::Reference,
            &std::env::temp_dir(),
            Some(log),
            exec.device,
        );
        let mut worker = match Worker::start(&spec, c.timeouts.start.min(remaining(deadline))) {
            Ok(w) => w,
            Err(WorkerFault::Interrupted) => return Outcome::Interrupted,
            Err(f) => return Outcome::Failed(fault_text(&f, "starting", opts)),
        };
        let pgid = worker.pgid();
        guard.register(pgid);
        let result = converse(ctx, exec, &mut worker, &path, &mut pa, opts, deadline);
        pa.peak_rss_gib = (guard.unregister(pgid) as f64 / GIB * 10.0).round() / 10.0;
        let result = match result {
            Outcome::Failed(why) => {
                tail = Some(worker.log_tail());
                match guard.killed_why(pgid) {
                    Some((why, beside)) => {
                        killed_beside = Some(beside);
                        Outcome::Failed(why)
                    }
                    None => Outcome::Failed(why),
                }
            }
            other => other,
        };
        worker.shutdown();
        result
    })();
    match outcome {
        Outcome::Measured(families) => pa.set_measured(families, opts.atol),
        Outcome::Failed(why) => {
            // Worth a try with nothing beside it, unless it had nothing beside it already.
            pa.memory_failure = match killed_beside {
                Some(beside) => beside,
                None => why.starts_with("out of") || why.contains("signal 9"),
            };
            pa.not_audited = Some(one_line(&why, 400));
            pa.log_tail = tail.map(|t| {
                let n = t.chars().count();
                t.chars().skip(n.saturating_sub(2000)).collect()
            });
        }
        Outcome::Interrupted => pa.not_audited = Some("interrupted".into()),
    }
    pa.seconds = t0.elapsed().as_secs_f64();
    let interrupted = matches!(pa.not_audited.as_deref(), Some("interrupted"));
    (pa, interrupted.then(|| "interrupted".to_string()))
}

/// `load`, then `audit`, on a started reference worker.
fn converse(
    ctx: &Ctx,
    exec: &Station,
    worker: &mut Worker,
    path: &Path,
    pa: &mut ProblemAudit,
    opts: &Opts,
    deadline: Instant,
) -> Outcome {
    let ask = |worker: &mut Worker, frame: Frame, phase: &str, want: &str| match worker
        .request(frame, remaining(deadline))
    {
        Ok(r) if r.kind() == want => Ok(r),
        Ok(r) => Err(Outcome::Failed(error_reason(&r, phase))),
        Err(WorkerFault::Interrupted) => Err(Outcome::Interrupted),
        Err(f) => Err(Outcome::Failed(fault_text(&f, phase, opts))),
    };
    let load = Frame::command(&load_request(ctx, exec, path));
    match ask(worker, load, "loading", "loaded") {
        Ok(r) => pa.device_name = r.reply::<reply::Loaded>().device_name.unwrap_or_default(),
        Err(o) => return o,
    }
    let cmd = Command::Audit(protocol::Audit {
        seed: pa.seed,
        forward_seed: pa.forward_seed,
        families: FAMILIES.iter().map(|f| f.to_string()).collect(),
        rtol: opts.rtol,
        max_weights: MAX_WEIGHTS,
        max_rows: opts.max_rows,
    });
    match ask(worker, Frame::command(&cmd), "measuring", "audit") {
        Ok(r) => Outcome::Measured(
            r.reply::<reply::AuditDone>()
                .families
                .unwrap_or(Value::Null),
        ),
        Err(o) => o,
    }
}

/// Audits every problem not in `prefilled` on `setup.jobs` job threads, recording each in
/// `progress` as it ends, until all are done or `stop` is set.
pub(super) fn measure(
    setup: &Setup,
    prefilled: Vec<Option<ProblemAudit>>,
    progress: &Progress,
    stop: &Arc<AtomicBool>,
) -> Measured {
    let (config, opts, logs) = (&setup.config, &setup.opts, &setup.logs);
    let ctx = Ctx::for_reference_workers(config, &setup.info, &setup.script, Arc::clone(stop));
    let guard = MemoryGuard::new();
    let total = config.problems.len();
    let reused = prefilled.iter().filter(|p| p.is_some()).count();
    let queue = Mutex::new(
        (0..total)
            .filter(|&i| prefilled[i].is_none())
            .collect::<VecDeque<usize>>(),
    );
    let results: Mutex<Vec<Option<ProblemAudit>>> = Mutex::new(prefilled);
    let attempts: Mutex<Vec<u32>> = Mutex::new(vec![0; total]);
    let admission = Admission::new(guard.total);
    let done = AtomicUsize::new(reused);
    let finished = AtomicBool::new(false);
    let interrupted = AtomicBool::new(false);
    let device_name = Mutex::new(
        results
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .flatten()
            .map(|p| p.device_name.clone())
            .find(|d| !d.is_empty())
            .unwrap_or_default(),
    );
    let jobs = setup.jobs.min(total.max(1));
    let stopped = || stop.load(Ordering::SeqCst) || interrupted.load(Ordering::SeqCst);
    // Audits problem i and records it, or puts it back at the head of the queue when it ran
    // out of memory beside another problem (it is then audited alone).
    let audit_and_record = |i: usize, exec: &Station| {
        let problem = &config.problems[i];
        let Some(alone) = admission.enter(&stopped) else {
            return;
        };
        let alone = alone || jobs == 1;
        let (mut pa, halted) = audit_one(&ctx, exec, problem, opts, &guard, logs.path());
        admission.leave((pa.peak_rss_gib * GIB) as u64, pa.memory_failure);
        if halted.is_some() {
            interrupted.store(true, Ordering::SeqCst);
        }
        let tries = {
            let mut t = attempts.lock().unwrap_or_else(|e| e.into_inner());
            t[i] += 1;
            t[i]
        };
        if !alone && pa.memory_failure && halted.is_none() && tries < 3 {
            eprintln!(
                "kbench audit: level {} {}: {}; audited again with nothing beside it",
                pa.level,
                pa.label(),
                pa.not_audited.as_deref().unwrap_or("out of memory")
            );
            queue
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_front(i);
            return;
        }
        pa.audited_alone = alone && jobs > 1;
        let n = done.fetch_add(1, Ordering::SeqCst) + 1;
        eprintln!(
            "kbench audit: [{n}/{total}] level {} {}: {} ({:.1} s, {:.1} GiB)",
            pa.level,
            pa.label(),
            pa.summary(),
            pa.seconds,
            pa.peak_rss_gib
        );
        if !pa.device_name.is_empty() {
            let mut d = device_name.lock().unwrap_or_else(|e| e.into_inner());
            if d.is_empty() {
                d.push_str(&pa.device_name);
            }
        }
        if halted.is_none() {
            if let Err(e) = progress.record(&pa) {
                eprintln!(
                    "kbench audit: could not record {} for --resume: {e:#}",
                    pa.key
                );
            }
        }
        results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(pa);
    };
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !finished.load(Ordering::SeqCst) {
                let pause = if guard.check() { 2000 } else { 100 };
                std::thread::sleep(Duration::from_millis(pause));
            }
        });
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                scope.spawn(|| {
                    let exec = Station {
                        device: config.device,
                        gpu: None,
                        cmp: None,
                        timing_cpu: None,
                        gpu_uuid: None,
                    };
                    while !stopped() {
                        let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                        let Some(i) = next else { break };
                        audit_and_record(i, &exec);
                    }
                })
            })
            .collect();
        for w in workers {
            let _ = w.join();
        }
        finished.store(true, Ordering::SeqCst);
    });
    Measured {
        results: results.into_inner().unwrap_or_else(|e| e.into_inner()),
        device_name: device_name.into_inner().unwrap_or_else(|e| e.into_inner()),
        interrupted: interrupted.load(Ordering::SeqCst),
    }
}
