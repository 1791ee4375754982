//! Unit tests of the build pool (`worker::build`).

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
    assert!(!claim_built(&pool, "/b/1", "p.py").complete);
    pool.shutdown();
}

/// `dir`'s build, claimed once its job ran: a claim that found it still queued dropped it,
/// so it is submitted again (for `problem`) and claimed again.
fn claim_built(pool: &BuildPool, dir: &str, problem: &str) -> Built {
    loop {
        if let Some(b) = pool.claim(Path::new(dir)) {
            return b;
        }
        pool.submit(job(dir, problem));
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A one-thread pool whose thread is held inside its first job until the returned flag is
/// raised, with `first` submitted and running, so the jobs submitted next stay queued; its
/// workers cannot start, so every job ends as not loaded.
fn held_pool(first: BuildJob) -> (BuildPool, Arc<AtomicBool>) {
    let go = Arc::new(AtomicBool::new(false));
    let held = Arc::clone(&go);
    let spec_for: Arc<SpecFor> = Arc::new(move |job: &BuildJob, n: usize| {
        while !held.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        unstartable(job, n)
    });
    let pool = BuildPool::start(1, spec_for, Duration::from_secs(5), Duration::from_secs(5));
    let dir = first.build_dir.clone();
    pool.submit(first);
    while !matches!(
        pool.shared.0.lock().unwrap().states.get(&dir),
        Some(State::Running)
    ) {
        std::thread::sleep(Duration::from_millis(5));
    }
    (pool, go)
}

#[test]
fn queued_builds_of_problems_never_started_are_dropped() {
    // The thread has taken the first job (it is Running) before the others are queued.
    let (pool, go) = held_pool(job("/d/1", "a.py"));
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
    assert!(!claim_built(&pool, "/d/3", "c.py").complete);
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
    assert_eq!(
        claim_built(&pool, "/h/2", "p.py"),
        Built {
            seconds: 0.0,
            complete: false
        }
    );
    for d in ["/h/0", "/h/1", "/h/3"] {
        assert!(!claim_built(&pool, d, "p.py").complete, "{d}");
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

#[test]
fn a_candidate_is_ready_when_nothing_is_built_for_it_or_its_build_is_done() {
    // /r/1 runs and /r/2 stays queued.
    let (pool, go) = held_pool(job("/r/1", "p.py"));
    pool.submit(job("/r/2", "p.py"));
    let (r1, r2, none) = (Path::new("/r/1"), Path::new("/r/2"), Path::new("/r/none"));
    // Running and queued builds are not ready; a candidate with nothing built ahead is.
    assert_eq!(pool.ready_now(&[r1, r2]), None);
    assert_eq!(pool.ready_now(&[r1, r2, none]), Some(2));
    let stop = AtomicBool::new(false);
    assert_eq!(pool.first_ready(&[r2, none], &stop), Some(1));
    // Waiting: the first build done is the one returned.
    let t = Instant::now();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        go.store(true, Ordering::SeqCst);
    });
    let first = pool.first_ready(&[r2, r1], &stop);
    assert!(t.elapsed() >= Duration::from_millis(250));
    assert!(matches!(first, Some(0 | 1)), "{first:?}");
    assert!(pool.claim(r1).is_some());
    // A raised stop ends the wait.
    stop.store(true, Ordering::SeqCst);
    assert_eq!(pool.first_ready(&[Path::new("/r/never-done")], &stop), None);
    assert_eq!(pool.first_ready(&[], &AtomicBool::new(false)), None);
    pool.shutdown();
}

#[test]
fn a_queued_build_is_ready_once_the_pool_starts_no_more() {
    let stop = Arc::new(AtomicBool::new(false));
    let (pool, go) = held_pool(job("/q/1", "p.py"));
    pool.stop_starting_on(Arc::clone(&stop));
    pool.submit(job("/q/2", "p.py"));
    assert_eq!(pool.ready_now(&[Path::new("/q/2")]), None);
    // The run stops: /q/2 will never start, so its claim would drop it at once.
    stop.store(true, Ordering::SeqCst);
    assert_eq!(
        pool.ready_now(&[Path::new("/q/1"), Path::new("/q/2")]),
        Some(1)
    );
    go.store(true, Ordering::SeqCst);
    pool.shutdown();
}
