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

    /// The first of `dirs` whose candidate can be evaluated without waiting for a build
    /// ahead: one not built ahead at all, or whose job is done (failed ones included, as
    /// [`Self::claim`] returns them at once). A job still queued counts once the pool starts
    /// no more jobs (stopped or shut down), as its claim then drops it at once. `None`: none.
    pub(crate) fn ready_now(&self, dirs: &[&Path]) -> Option<usize> {
        let (lock, _) = &*self.shared;
        ready_among(&lock.lock().unwrap_or_else(|e| e.into_inner()), dirs)
    }

    /// [`Self::ready_now`], waiting until one of `dirs` is ready; `None` once `stop` is
    /// raised (or for no `dirs`). Checks `stop` at least every 200 ms.
    pub(crate) fn first_ready(&self, dirs: &[&Path], stop: &AtomicBool) -> Option<usize> {
        let (lock, cv) = &*self.shared;
        let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
        while !dirs.is_empty() && !stop.load(Ordering::SeqCst) {
            if let Some(i) = ready_among(&s, dirs) {
                return Some(i);
            }
            s = cv
                .wait_timeout(s, Duration::from_millis(200))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        None
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

impl Shared {
    /// Whether the run's stop flag is raised: no queued job starts from then on.
    fn stopped(&self) -> bool {
        self.stop.as_ref().is_some_and(|f| f.load(Ordering::SeqCst))
    }
}

/// [`BuildPool::ready_now`] on the pool's state.
fn ready_among(s: &Shared, dirs: &[&Path]) -> Option<usize> {
    let halted = s.closed || s.stopped();
    dirs.iter().position(|d| match s.states.get(*d) {
        None | Some(State::Done(_)) => true,
        Some(State::Queued) => halted,
        Some(State::Running) => false,
    })
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
                if s.stopped() {
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
mod tests;
