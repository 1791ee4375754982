//! The compile pipeline: candidate extensions are built ahead of time on a pool of CPU
//! processes, so a worker that later loads the candidate finds its extension in the
//! content-addressed build cache instead of waiting for the compiler.
//!
//! A build job is an untrusted candidate worker with no GPU visible (`CUDA_VISIBLE_DEVICES=`)
//! that passes over the candidate on the CPU (the worker's `build` command): it imports it,
//! constructs it, calls every `load_inline`/`load` site that did not run with its arguments
//! evaluated, and if need be runs one forward, so a build made at module level, in
//! `__init__`, in a method or at the first call compiles into the job's build directory.
//! Nothing a build job says decides a verdict: the evaluating worker loads the candidate
//! again and reports the real outcome; a failed build ahead only means the evaluating worker
//! builds (and fails) itself.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kbench_record::protocol::{reply, Command, Frame};
use serde_json::json;

use crate::worker::{Worker, WorkerSpec};

/// One candidate to build ahead.
#[derive(Debug, Clone)]
pub(crate) struct BuildJob {
    /// The content-addressed build directory; also the job's identity.
    pub(crate) build_dir: PathBuf,
    pub(crate) problem_path: PathBuf,
    pub(crate) candidate_path: PathBuf,
    /// Where the build worker's output goes.
    pub(crate) log_path: PathBuf,
}

/// What became of a build ahead.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Built {
    /// Wall time of the build job, seconds.
    pub(crate) seconds: f64,
    /// Whether the build job's pass built every extension build it found in the candidate
    /// (PROTOCOL.md, "build"): then the cache holds all of them and a later run skips the job.
    pub(crate) complete: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    Queued,
    Running,
    Done(Built),
}

#[derive(Default)]
struct Shared {
    queue: VecDeque<BuildJob>,
    states: HashMap<PathBuf, State>,
    closed: bool,
    /// Builds running now, and the pool's threads.
    running: usize,
    jobs: usize,
    /// Where each finished build job is written as a line (`builds.jsonl` of the run).
    journal: Option<std::fs::File>,
    /// The run's stop flag (its signal handler raises it): once raised, no queued job starts.
    stop: Option<Arc<AtomicBool>>,
}

/// A fixed number of threads, each driving one build process at a time.
///
/// Every thread builds from the start; the builds needed first get more of the host's cores
/// by their niceness ([`SpecFor`]'s second argument; why, in `worker::build_niceness`). Until
/// 2026-12-06 half the threads built until the first build was done (a first wave), so that
/// the first builds should end as fast as with 8 of 15 at once (an H100 host with torch's
/// headers, 2026-11-27: 8 at once took 70 s each, 15 took 93 s, one alone 54 s). With the
/// light headers on an H200 host the wave's 8 builds took 32-37 s and the 15 after it 35-40 s
/// with the host's CPU 72% busy during the wave: it held back builds the cores had room for.
/// On another H200 host, one pair: with the wave, its 8 ended together 37-49 s after they
/// started; niced by need, the first 15 ended one after another 36-67 s after.
pub(crate) struct BuildPool {
    shared: Arc<(Mutex<Shared>, Condvar)>,
    threads: Vec<JoinHandle<()>>,
}

/// How build jobs start their workers: the job, and how many builds were running when it
/// started (all of them taken from the queue before it).
pub(crate) type SpecFor = dyn Fn(&BuildJob, usize) -> WorkerSpec + Send + Sync;

impl BuildPool {
    /// Starts `jobs` build threads (at least one).
    pub(crate) fn start(
        jobs: usize,
        spec_for: Arc<SpecFor>,
        start_timeout: Duration,
        load_timeout: Duration,
    ) -> Self {
        let jobs = jobs.max(1);
        let shared = Arc::new((
            Mutex::new(Shared {
                jobs,
                ..Shared::default()
            }),
            Condvar::new(),
        ));
        let threads = (0..jobs)
            .map(|_| {
                let shared = Arc::clone(&shared);
                let spec_for = Arc::clone(&spec_for);
                std::thread::spawn(move || {
                    build_loop(&shared, &*spec_for, start_timeout, load_timeout)
                })
            })
            .collect();
        Self { shared, threads }
    }

    /// Writes a line for each build job from now on into `path` (appended): when it started
    /// and ended, how long and whether it was complete, so a benchmark can see how many
    /// builds ran at once. Best effort: a journal that cannot be opened is none.
    pub(crate) fn journal_to(&self, path: &Path) {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok();
        let (lock, _) = &*self.shared;
        lock.lock().unwrap_or_else(|e| e.into_inner()).journal = file;
    }

    /// Starts no queued job once `flag` is raised (the run's stop flag): every build job's
    /// worker is told of it and ends at once, so a stopped run's pool would otherwise start
    /// and fail every job left in its queue, a sandbox and a journal line each (an H100 run
    /// cut by its time limit wrote 56 such lines in its last second).
    pub(crate) fn stop_starting_on(&self, flag: Arc<AtomicBool>) {
        let (lock, _) = &*self.shared;
        lock.lock().unwrap_or_else(|e| e.into_inner()).stop = Some(flag);
    }

    /// Queues a job unless the same build directory is already known.
    pub(crate) fn submit(&self, job: BuildJob) {
        let (lock, cv) = &*self.shared;
        let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
        if s.states.contains_key(&job.build_dir) {
            return;
        }
        if already_built(&job.build_dir) {
            // An earlier run's build job built all of it: nothing to do ahead.
            let cached = Built {
                seconds: 0.0,
                complete: true,
            };
            s.states.insert(job.build_dir.clone(), State::Done(cached));
            cv.notify_all();
            return;
        }
        s.states.insert(job.build_dir.clone(), State::Queued);
        s.queue.push_back(job);
        cv.notify_all();
    }

    /// Called when a candidate is about to be evaluated. A job still queued is dropped (the
    /// evaluating worker builds it now); a running one is waited for; `None` when nothing
    /// was built ahead.
    pub(crate) fn claim(&self, build_dir: &Path) -> Option<Built> {
        let (lock, cv) = &*self.shared;
        let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match s.states.get(build_dir).cloned() {
                None => return None,
                Some(State::Queued) => {
                    s.queue.retain(|j| j.build_dir != build_dir);
                    s.states.remove(build_dir);
                    return None;
                }
                Some(State::Running) => {
                    s = cv.wait(s).unwrap_or_else(|e| e.into_inner());
                }
                Some(State::Done(b)) => return Some(b),
            }
        }
    }

    /// Drops the queued jobs of `problems` (never to be evaluated: `--stop-starting-after`
    /// came first), so the pool does not go on building for them; running ones finish, and
    /// their builds serve the run that resumes. Returns how many were dropped.
    pub(crate) fn drop_queued_for(&self, problems: &std::collections::HashSet<PathBuf>) -> usize {
        let (lock, cv) = &*self.shared;
        let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
        let dropped: Vec<PathBuf> = s
            .queue
            .iter()
            .filter(|j| problems.contains(&j.problem_path))
            .map(|j| j.build_dir.clone())
            .collect();
        s.queue.retain(|j| !problems.contains(&j.problem_path));
        for d in &dropped {
            s.states.remove(d);
        }
        cv.notify_all();
        dropped.len()
    }

    /// Drops queued jobs and waits for running ones.
    pub(crate) fn shutdown(self) {
        {
            let (lock, cv) = &*self.shared;
            let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
            s.closed = true;
            s.queue.clear();
            cv.notify_all();
        }
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn build_loop(
    shared: &(Mutex<Shared>, Condvar),
    spec_for: &SpecFor,
    start_timeout: Duration,
    load_timeout: Duration,
) {
    let (lock, cv) = shared;
    loop {
        let (job, ahead) = {
            let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if s.stop.as_ref().is_some_and(|f| f.load(Ordering::SeqCst)) {
                    return;
                }
                if s.running < s.jobs {
                    if let Some(job) = s.queue.pop_front() {
                        s.states.insert(job.build_dir.clone(), State::Running);
                        let ahead = s.running;
                        s.running += 1;
                        break (job, ahead);
                    }
                }
                if s.closed {
                    return;
                }
                s = cv.wait(s).unwrap_or_else(|e| e.into_inner());
            }
        };
        // A panic in a build (spawning its worker) is a failed build: the job is done and its
        // slot given back, so no claim waits on it and the pool does not shrink.
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_build(&job, ahead, spec_for, start_timeout, load_timeout)
        }))
        .unwrap_or(Built {
            seconds: 0.0,
            complete: false,
        });
        let ended_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        if built.complete {
            // Best effort: without the marker the next run only builds ahead again.
            let _ = std::fs::write(job.build_dir.join(BUILT_MARKER), b"");
        }
        let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = s.journal.as_mut() {
            use std::io::Write;
            let line = json!({
                "build_dir": job.build_dir,
                "problem": job.problem_path,
                "candidate": job.candidate_path,
                "started_unix_s": ended_unix - built.seconds,
                "ended_unix_s": ended_unix,
                "seconds": built.seconds,
                "complete": built.complete,
            });
            let _ = writeln!(f, "{line}");
        }
        s.states.insert(job.build_dir.clone(), State::Done(built));
        s.running -= 1;
        cv.notify_all();
    }
}

fn run_build(
    job: &BuildJob,
    ahead: usize,
    spec_for: &SpecFor,
    start_timeout: Duration,
    load_timeout: Duration,
) -> Built {
    let t0 = Instant::now();
    let spec = spec_for(job, ahead);
    let complete = match Worker::start(&spec, start_timeout) {
        Ok(mut w) => {
            let build = Command::Build(kbench_record::protocol::Build {
                problem_path: job.problem_path.clone(),
                candidate_path: job.candidate_path.clone(),
                build_dir: job.build_dir.clone(),
                weight_seed: 0,
                forward_s: FORWARD_S,
            });
            // Paused with the host's other builds while a candidate's claims are timed again.
            let registered = super::host_builds::register(w.freezer().handle());
            let reply = w.request(Frame::command(&build), load_timeout);
            drop(registered);
            w.shutdown();
            matches!(reply, Ok(r) if r.kind() == "built" && r.reply::<reply::Built>().complete == Some(true))
        }
        Err(_) => false,
    };
    Built {
        seconds: t0.elapsed().as_secs_f64(),
        complete,
    }
}

/// How long a build job's pass may run the candidate's forward on the CPU to reach builds
/// made at its first call (PROTOCOL.md, "build"); a build under way is never cut short.
pub(crate) const FORWARD_S: u64 = 60;

/// Written into a build directory after a build job built every extension it found. The directory is
/// content-addressed (source, torch, device, architecture), so a later run skips the build
/// job: on an H100 a cached kernel's build job still cost ~7 s (a Python start and torch's
/// import to find the cache hit). Only a scheduling hint: the evaluating worker loads (and,
/// if need be, builds) the extension itself, and that load decides the verdict.
pub(crate) const BUILT_MARKER: &str = ".kbench-built";

/// Whether a build directory holds what a build job built in full.
pub(crate) fn already_built(build_dir: &Path) -> bool {
    build_dir.join(BUILT_MARKER).is_file()
}

/// Whether a candidate builds extensions when it is loaded (worth building ahead).
pub(crate) fn builds_extensions(source: &str) -> bool {
    source.contains("load_inline") || source.contains("cpp_extension")
}

/// The content-addressed build folder of a candidate's extensions: keyed by its source, the
/// torch version, the device kind and the GPU architecture(s) it is built for (`arch`, as
/// TORCH_CUDA_ARCH_LIST: "9.0"), so a kernel is built once whoever loads it (evaluations,
/// builds ahead, `kbench profile`), and apart for builds with a light header
/// (`worker::light_headers`), so a folder built one way is never taken for the other. `uid`: the
/// unprivileged uid the candidate runs as, when it changes uid; its folders are handed to that uid, so a folder of one uid is never one
/// another uid (root without capabilities included, `KBENCH_CANDIDATE_UID=off`) must write.
pub(crate) fn extension_build_dir(
    cache: &Path,
    source_sha256: &str,
    torch: &str,
    device: kbench_record::Device,
    arch: Option<&str>,
    uid: Option<u32>,
) -> PathBuf {
    let light = super::light_headers::light_headers().unwrap_or_default();
    build_dir_of(cache, source_sha256, torch, device, arch, uid, light)
}

fn build_dir_of(
    cache: &Path,
    source_sha256: &str,
    torch: &str,
    device: kbench_record::Device,
    arch: Option<&str>,
    uid: Option<u32>,
    light: super::light_headers::LightHeaders,
) -> PathBuf {
    let owner = uid.map(|u| format!("|uid {u}")).unwrap_or_default();
    // On every device: a CPU run on a host with nvcc builds CUDA sources too.
    let header = if light.cuda { "|cuda header light" } else { "" };
    // The light C++ header's folder is named after its file: another kbench's header builds
    // in folders of its own.
    let cxx = if light.cxx {
        format!("|cxx header {}", super::light_headers::light_folder_name())
    } else {
        String::new()
    };
    cache.join("torch_extensions").join(
        &kbench_suites::sha256_hex(
            format!(
                "{}|{}|{}|{}{owner}{header}{cxx}",
                source_sha256,
                torch,
                super::device_for_worker(device),
                arch.unwrap_or("cpu")
            )
            .as_bytes(),
        )[..16],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_with_a_light_header_get_folders_of_their_own_on_every_device() {
        let c = Path::new("/cache");
        let of = |d, light| build_dir_of(c, "abc", "2.11", d, Some("9.0"), None, light);
        let choices = [(false, false), (true, false), (false, true), (true, true)]
            .map(|(cuda, cxx)| super::super::light_headers::LightHeaders { cuda, cxx });
        for d in [kbench_record::Device::Cuda(0), kbench_record::Device::Cpu] {
            let dirs: std::collections::HashSet<_> = choices.iter().map(|&h| of(d, h)).collect();
            assert_eq!(dirs.len(), 4, "{d}: {dirs:?}");
            assert_eq!(
                of(d, choices[0]),
                of(d, super::super::light_headers::LightHeaders::default())
            );
        }
    }

    /// A build job's worker that cannot start: every job ends at once as not loaded.
    fn unstartable(job: &BuildJob, _ahead: usize) -> WorkerSpec {
        WorkerSpec {
            python: PathBuf::from("/nonexistent/python"),
            script: PathBuf::from("/nonexistent/worker"),
            role: crate::worker::Role::Candidate,
            cwd: std::env::temp_dir(),
            env: vec![],
            log_path: Some(job.log_path.clone()),
            max_payload: 1 << 20,
            interrupt: None,
            gate: None,
            sandbox: None,
            cgroups: None,
            memory: None,
        }
    }

    /// A job building in `dir` for `problem`, its log named after `dir` (tests run at once).
    fn job(dir: &str, problem: &str) -> BuildJob {
        BuildJob {
            build_dir: PathBuf::from(dir),
            problem_path: PathBuf::from(problem),
            candidate_path: PathBuf::from("c.py"),
            log_path: std::env::temp_dir()
                .join(format!("kbench-build-test{}.log", dir.replace('/', "-"))),
        }
    }

    #[test]
    fn extension_sources_are_recognised() {
        assert!(builds_extensions(
            "from torch.utils.cpp_extension import load_inline"
        ));
        assert!(!builds_extensions("import torch\nclass ModelNew: pass"));
    }

    #[test]
    fn unknown_and_queued_jobs_are_not_waited_for() {
        // A pool whose workers cannot start: jobs finish quickly as not loaded.
        let spec_for: Arc<SpecFor> = Arc::new(unstartable);
        let pool = BuildPool::start(1, spec_for, Duration::from_secs(5), Duration::from_secs(5));
        assert_eq!(pool.claim(Path::new("/never/submitted")), None);
        pool.submit(job("/b/1", "p.py"));
        // Waits for the job (running or done) and reports it.
        let b = loop {
            if let Some(b) = pool.claim(Path::new("/b/1")) {
                break b;
            }
            // It was still queued and got dropped: resubmit and try again.
            pool.submit(job("/b/1", "p.py"));
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(!b.complete);
        pool.shutdown();
    }

    #[test]
    fn queued_builds_of_problems_never_started_are_dropped() {
        use std::sync::atomic::{AtomicBool, Ordering};
        // The one build thread is held inside its first job until `go`, so the others stay
        // queued; its workers cannot start, so every job ends as not loaded.
        let go = Arc::new(AtomicBool::new(false));
        let held = Arc::clone(&go);
        let spec_for: Arc<SpecFor> = Arc::new(move |job: &BuildJob, n: usize| {
            while !held.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
            unstartable(job, n)
        });
        let pool = BuildPool::start(1, spec_for, Duration::from_secs(5), Duration::from_secs(5));
        pool.submit(job("/d/1", "a.py"));
        // The thread has taken the first job (it is Running) before the others are queued.
        while !matches!(
            pool.shared.0.lock().unwrap().states.get(Path::new("/d/1")),
            Some(State::Running)
        ) {
            std::thread::sleep(Duration::from_millis(5));
        }
        pool.submit(job("/d/2", "b.py"));
        pool.submit(job("/d/3", "c.py"));
        pool.submit(job("/d/4", "b.py"));
        let never: std::collections::HashSet<PathBuf> = [PathBuf::from("b.py")].into();
        assert_eq!(pool.drop_queued_for(&never), 2);
        assert_eq!(pool.claim(Path::new("/d/2")), None);
        assert_eq!(pool.claim(Path::new("/d/4")), None);
        go.store(true, Ordering::SeqCst);
        // The running job and the one of another problem are still built (and waited for).
        assert!(pool.claim(Path::new("/d/1")).is_some());
        let c = loop {
            if let Some(b) = pool.claim(Path::new("/d/3")) {
                break b;
            }
            pool.submit(job("/d/3", "c.py"));
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(!c.complete);
        pool.shutdown();
    }

    #[test]
    fn no_queued_job_starts_once_the_run_is_stopped() {
        use std::sync::atomic::AtomicUsize;
        // The one build thread is held inside its first job until `go`; the stop flag is
        // raised meanwhile. The running job ends; the queued ones never start a worker, and
        // the journal holds the one job that ran.
        let go = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicUsize::new(0));
        let (held, count) = (Arc::clone(&go), Arc::clone(&started));
        let spec_for: Arc<SpecFor> = Arc::new(move |job: &BuildJob, n: usize| {
            count.fetch_add(1, Ordering::SeqCst);
            while !held.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
            unstartable(job, n)
        });
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("builds.jsonl");
        let stop = Arc::new(AtomicBool::new(false));
        let pool = BuildPool::start(1, spec_for, Duration::from_secs(5), Duration::from_secs(5));
        pool.journal_to(&journal);
        pool.stop_starting_on(Arc::clone(&stop));
        for i in 0..3 {
            pool.submit(job(&format!("/s/{i}"), "p.py"));
        }
        while started.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::SeqCst);
        go.store(true, Ordering::SeqCst);
        assert!(pool.claim(Path::new("/s/0")).is_some());
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(started.load(Ordering::SeqCst), 1);
        // A job left queued is the evaluating worker's to build, as without the pool.
        assert_eq!(pool.claim(Path::new("/s/1")), None);
        pool.shutdown();
        assert_eq!(started.load(Ordering::SeqCst), 1);
        let lines = std::fs::read_to_string(&journal).unwrap();
        assert_eq!(lines.lines().count(), 1, "{lines}");
        assert!(lines.contains("/s/0"), "{lines}");
    }

    #[test]
    fn every_thread_builds_from_the_start_and_each_job_knows_how_many_run_ahead_of_it() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        // Each job is held inside its build until its own directory is released; `active`
        // counts the builds in progress and `most` the most at once; `ahead` keeps what
        // each job was told.
        let released = Arc::new(Mutex::new(std::collections::HashSet::<PathBuf>::new()));
        let active = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let ahead = Arc::new(Mutex::new(HashMap::<PathBuf, usize>::new()));
        let (r, a, m, k) = (
            Arc::clone(&released),
            Arc::clone(&active),
            Arc::clone(&most),
            Arc::clone(&ahead),
        );
        let spec_for: Arc<SpecFor> = Arc::new(move |job: &BuildJob, n: usize| {
            k.lock().unwrap().insert(job.build_dir.clone(), n);
            let now = a.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now, Ordering::SeqCst);
            while !r.lock().unwrap().contains(&job.build_dir) {
                std::thread::sleep(Duration::from_millis(2));
            }
            a.fetch_sub(1, Ordering::SeqCst);
            unstartable(job, n)
        });
        let pool = BuildPool::start(4, spec_for, Duration::from_secs(5), Duration::from_secs(5));
        for i in 0..6 {
            pool.submit(job(&format!("/w/{i}"), "p.py"));
        }
        let wait_for = |n: usize| {
            let t = Instant::now();
            while active.load(Ordering::SeqCst) != n {
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "never {n} builds at once"
                );
                std::thread::sleep(Duration::from_millis(2));
            }
        };
        // Every thread at once, none held back; taken in the queue's order, each told how
        // many were running: 0 for the first, 3 for the fourth.
        wait_for(4);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(most.load(Ordering::SeqCst), 4);
        let told = |i: usize| {
            ahead
                .lock()
                .unwrap()
                .get(&PathBuf::from(format!("/w/{i}")))
                .copied()
        };
        assert_eq!(
            (0..4).map(told).collect::<Vec<_>>(),
            [Some(0), Some(1), Some(2), Some(3)]
        );
        assert_eq!(told(4), None, "a fifth build with four threads");
        // The second done: the next job starts with the three others still running.
        released.lock().unwrap().insert(PathBuf::from("/w/1"));
        assert!(pool.claim(Path::new("/w/1")).is_some());
        wait_for(4);
        assert_eq!(told(4), Some(3));
        released
            .lock()
            .unwrap()
            .extend((0..6).map(|i| PathBuf::from(format!("/w/{i}"))));
        for i in 0..5 {
            assert!(
                pool.claim(Path::new(&format!("/w/{i}"))).is_some(),
                "job {i}"
            );
        }
        // Job 5 may still be queued; shutdown drops it if so.
        pool.shutdown();
    }

    #[test]
    fn a_panicking_build_is_a_failed_one() {
        let spec_for: Arc<SpecFor> = Arc::new(move |job: &BuildJob, n: usize| {
            if job.build_dir == Path::new("/h/2") {
                panic!("a build job's spec could not be made");
            }
            unstartable(job, n)
        });
        let pool = BuildPool::start(2, spec_for, Duration::from_secs(5), Duration::from_secs(5));
        for i in 0..3 {
            pool.submit(job(&format!("/h/{i}"), "p.py"));
        }
        // /h/2 panicked: a failed build, waited for like any other, not a hung claim; the
        // pool goes on (its slot was given back).
        let claimed = |d: &str| loop {
            if let Some(b) = pool.claim(Path::new(d)) {
                break b;
            }
            pool.submit(job(d, "p.py"));
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(
            claimed("/h/2"),
            Built {
                seconds: 0.0,
                complete: false
            }
        );
        for d in ["/h/0", "/h/1", "/h/3"] {
            assert!(!claimed(d).complete, "{d}");
        }
        pool.shutdown();
    }

    #[test]
    fn a_marked_build_is_done_at_once_without_a_job() {
        let d = tempfile::tempdir().unwrap();
        assert!(!already_built(d.path()));
        std::fs::write(d.path().join(BUILT_MARKER), b"").unwrap();
        assert!(already_built(d.path()));
        // A pool whose workers could not even start: the marked job never reaches one.
        let spec_for: Arc<SpecFor> = Arc::new(unstartable);
        let pool = BuildPool::start(1, spec_for, Duration::from_secs(5), Duration::from_secs(5));
        pool.submit(job(d.path().to_str().unwrap(), "p.py"));
        assert_eq!(
            pool.claim(d.path()),
            Some(Built {
                seconds: 0.0,
                complete: true
            })
        );
        pool.shutdown();
    }
}
