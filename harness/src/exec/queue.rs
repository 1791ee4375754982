//! The work queue the executors take from: batches of one problem's candidates, fed all at
//! once (`kbench run`'s plan) or as submissions come (the agents' service), and which batch
//! an executor takes next.

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kbench_suites::Problem;

use crate::agents::Candidate;
use crate::eval::prepare::Prepared;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One candidate of a batch, written out and keyed.
#[derive(Clone)]
pub(crate) struct Item {
    pub(crate) cand: Candidate,
    pub(crate) prep: Prepared,
    /// Its record key.
    pub(crate) key: String,
}

/// Candidates of one problem, evaluated in order by one executor against one reference
/// session.
#[derive(Clone)]
pub(crate) struct Batch {
    pub(crate) problem: Problem,
    /// `problem.key()`.
    pub(crate) pkey: String,
    pub(crate) problem_path: PathBuf,
    pub(crate) items: Vec<Item>,
    pub(crate) queued: Instant,
    /// Nothing more of this problem will come (`kbench run`): its reference session closes
    /// once the batch is done. Otherwise the session stays open for later batches until the
    /// problem is released or the executor needs the room.
    pub(crate) last: bool,
}

#[derive(Default)]
struct State {
    batches: VecDeque<Batch>,
    /// No more batches: executors leave once the queue is empty.
    closing: bool,
}

/// The queue, with what the executors tell each other about the problems they hold open.
pub(crate) struct Queue {
    state: Mutex<State>,
    cv: Condvar,
    /// Problems whose session each executor holds open.
    held: Mutex<Vec<HashSet<String>>>,
    /// Problems released by their tasks (the service): their sessions may close.
    released: Mutex<HashSet<String>>,
    /// An executor failed: every executor stops.
    failed: AtomicBool,
    /// `--stop-starting-after`: nothing is taken from this instant on.
    deadline: Mutex<Option<Instant>>,
    /// A take was refused at the deadline: what is still queued was never started.
    cut_off: AtomicBool,
}

impl Queue {
    pub(crate) fn new(executors: usize) -> Self {
        Queue {
            state: Mutex::default(),
            cv: Condvar::new(),
            held: Mutex::new(vec![HashSet::new(); executors]),
            released: Mutex::default(),
            failed: AtomicBool::new(false),
            deadline: Mutex::new(None),
            cut_off: AtomicBool::new(false),
        }
    }

    /// Nothing is taken from `at` on: executors finish what they hold and leave.
    pub(crate) fn stop_taking_at(&self, at: Instant) {
        *lock(&self.deadline) = Some(at);
        self.cv.notify_all();
    }

    /// Whether a take was refused at the deadline.
    pub(crate) fn cut_off(&self) -> bool {
        self.cut_off.load(Ordering::SeqCst)
    }

    fn past_deadline(&self) -> bool {
        let past = lock(&self.deadline).is_some_and(|at| Instant::now() >= at);
        if past {
            self.cut_off.store(true, Ordering::SeqCst);
        }
        past
    }

    pub(crate) fn push(&self, batch: Batch) {
        lock(&self.released).remove(&batch.pkey);
        lock(&self.state).batches.push_back(batch);
        self.cv.notify_all();
    }

    /// Puts batches taken but not evaluated back at the front, in their order.
    pub(crate) fn push_front(&self, batches: Vec<Batch>) {
        let mut s = lock(&self.state);
        for b in batches.into_iter().rev() {
            s.batches.push_front(b);
        }
        drop(s);
        self.cv.notify_all();
    }

    pub(crate) fn close(&self) {
        lock(&self.state).closing = true;
        self.cv.notify_all();
    }

    pub(crate) fn fail(&self) {
        self.failed.store(true, Ordering::SeqCst);
        self.cv.notify_all();
    }

    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    pub(crate) fn release(&self, pkey: String) {
        lock(&self.released).insert(pkey);
        self.cv.notify_all();
    }

    /// Released problems with nothing queued: their sessions may close.
    pub(crate) fn closable(&self) -> HashSet<String> {
        let released = lock(&self.released).clone();
        if released.is_empty() {
            return released;
        }
        let s = lock(&self.state);
        let queued: HashSet<&String> = s.batches.iter().map(|b| &b.pkey).collect();
        released
            .into_iter()
            .filter(|k| !queued.contains(k))
            .collect()
    }

    pub(crate) fn hold(&self, idx: usize, pkey: &str) {
        lock(&self.held)[idx].insert(pkey.to_string());
    }

    pub(crate) fn unhold(&self, idx: usize, pkey: &str) {
        lock(&self.held)[idx].remove(pkey);
    }

    /// Problems an executor would take up without opening a session: those whose session
    /// one holds open, and those with a batch queued (its session opens when it is taken,
    /// and stays open for the problem's next batch).
    pub(crate) fn warm(&self) -> HashSet<String> {
        let mut warm: HashSet<String> = lock(&self.held).iter().flatten().cloned().collect();
        warm.extend(lock(&self.state).batches.iter().map(|b| b.pkey.clone()));
        warm
    }

    /// The batch executor `idx` takes next ([`choose`]), holding `mine` open. With `wait`,
    /// an empty queue is waited on for a while (then `Nothing`: the executor looks around
    /// and asks again).
    pub(crate) fn take(&self, idx: usize, mine: &[&str], wait: bool, stop: &AtomicBool) -> Taken {
        if self.failed() || stop.load(Ordering::SeqCst) {
            return Taken::Leave;
        }
        let mut s = lock(&self.state);
        if !s.batches.is_empty() && self.past_deadline() {
            return Taken::Leave;
        }
        let picked = {
            let held = lock(&self.held);
            choose(
                s.batches
                    .iter()
                    .map(|b| (b.pkey.as_str(), b.queued.elapsed())),
                |k| mine.contains(&k),
                |k| {
                    held.iter()
                        .enumerate()
                        .any(|(e, set)| e != idx && set.contains(k))
                },
            )
        };
        if let Some(b) = picked.and_then(|i| s.batches.remove(i)) {
            return Taken::Batch(Box::new(b));
        }
        if s.closing {
            return Taken::Leave;
        }
        if wait {
            let _ = self
                .cv
                .wait_timeout(s, Duration::from_millis(500))
                .unwrap_or_else(|e| e.into_inner());
        }
        Taken::Nothing
    }

    /// The problem files of the batches still queued.
    pub(crate) fn queued_problem_paths(&self) -> HashSet<PathBuf> {
        lock(&self.state)
            .batches
            .iter()
            .map(|b| b.problem_path.clone())
            .collect()
    }

    /// Batches still queued (stopped, or no executor left), taken out.
    pub(crate) fn drain(&self) -> Vec<Batch> {
        lock(&self.state).batches.drain(..).collect()
    }
}

/// What [`Queue::take`] found.
pub(crate) enum Taken {
    Batch(Box<Batch>),
    /// Nothing queued yet.
    Nothing,
    /// The queue is closed and empty, the run is stopping, or an executor failed.
    Leave,
}

/// How long a batch may wait while batches of problems with open sessions go ahead of it.
const MAX_BYPASS: Duration = Duration::from_secs(20);

/// Which queued batch an executor takes, over `(problem key, time queued)`, oldest first: one
/// of a problem it holds open, else one of a problem no other executor holds, else the
/// oldest (an idle GPU opens a second session rather than wait). A batch that has waited
/// `MAX_BYPASS` goes first, so a problem with many trajectories cannot hold a device for
/// itself. With every problem queued once and nothing held (`kbench run`), this is first
/// in, first out.
fn choose<'k>(
    jobs: impl Iterator<Item = (&'k str, Duration)> + Clone,
    mine: impl Fn(&str) -> bool,
    others: impl Fn(&str) -> bool,
) -> Option<usize> {
    let mut all = jobs.clone().peekable();
    let (_, oldest) = *all.peek()?;
    if oldest >= MAX_BYPASS {
        return Some(0);
    }
    jobs.clone()
        .position(|(k, _)| mine(k))
        .or_else(|| jobs.clone().position(|(k, _)| !others(k)))
        .or(Some(0))
}
#[cfg(test)]
impl Batch {
    /// A batch of no candidates for problem `file` of `level`, keyed `pkey` (the scheduler's
    /// tests).
    pub(crate) fn fake(level: u8, file: &str, pkey: &str) -> Batch {
        Batch {
            problem: Problem {
                suite: "fake".into(),
                level,
                id: 0,
                name: file.into(),
                file: file.into(),
                source: String::new(),
                origin: None,
                sha256: String::new(),
            },
            pkey: pkey.into(),
            problem_path: PathBuf::from(file),
            items: Vec::new(),
            queued: Instant::now(),
            last: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(key: &str) -> Batch {
        Batch::fake(1, &format!("{key}.py"), key)
    }

    /// What a fake device did: (problem, started, finished) in its order.
    type Log = Vec<(String, Instant, Instant)>;

    /// `devices` fake devices take the queued batches as executors do in `kbench run`
    /// (every problem queued once, nothing held) and "evaluate" each by sleeping its cost.
    fn simulate(devices: usize, costs_ms: &[u64]) -> (Vec<Log>, Duration) {
        let queue = Queue::new(devices);
        for (i, _) in costs_ms.iter().enumerate() {
            queue.push(batch(&format!("p{i}")));
        }
        queue.close();
        let stop = AtomicBool::new(false);
        let began = Instant::now();
        let logs: Vec<Log> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..devices)
                .map(|idx| {
                    let (queue, stop) = (&queue, &stop);
                    scope.spawn(move || {
                        let mut log = Log::new();
                        loop {
                            match queue.take(idx, &[], true, stop) {
                                Taken::Batch(b) => {
                                    let i: usize = b.pkey[1..].parse().unwrap();
                                    let t0 = Instant::now();
                                    std::thread::sleep(Duration::from_millis(costs_ms[i]));
                                    log.push((b.pkey.clone(), t0, Instant::now()));
                                }
                                Taken::Nothing => {}
                                Taken::Leave => return log,
                            }
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        (logs, began.elapsed())
    }

    #[test]
    fn fake_devices_share_the_queue_evenly_with_no_batch_twice_and_no_idle_device() {
        // 32 problems of 10..45 ms (Σ 880 ms): what one GPU would do in 0.9 s.
        let costs: Vec<u64> = (0..32).map(|i| 10 + (i * 7) % 36).collect();
        let total: u64 = costs.iter().sum();
        let longest = *costs.iter().max().unwrap();
        let mut makespans = Vec::new();
        for devices in [1usize, 2, 4] {
            let (logs, makespan) = simulate(devices, &costs);
            // Every batch exactly once, whichever device took it.
            let mut seen: Vec<&str> = logs.iter().flatten().map(|(k, _, _)| k.as_str()).collect();
            seen.sort_unstable();
            let mut want: Vec<String> = (0..costs.len()).map(|i| format!("p{i}")).collect();
            want.sort_unstable();
            assert_eq!(seen, want, "{devices} device(s)");
            // Every device worked, and none waited between batches while work was queued:
            // list scheduling finishes within Σ/n + the longest batch (plus scheduling slack).
            assert!(
                logs.iter().all(|l| !l.is_empty()),
                "{devices}: a device never worked"
            );
            let bound = Duration::from_millis(total / devices as u64 + longest + 150);
            assert!(
                makespan <= bound,
                "{devices} device(s): {makespan:?} > {bound:?}"
            );
            for log in &logs {
                for w in log.windows(2) {
                    let gap = w[1].1.duration_since(w[0].2);
                    assert!(
                        gap < Duration::from_millis(100),
                        "{devices}: idle {gap:?} between batches"
                    );
                }
            }
            makespans.push(makespan.as_secs_f64());
        }
        // Scaling of the scheduler alone (the GPUs' own work is measured on GPU hosts: see
        // docs/gpu.md).
        assert!(makespans[0] / makespans[1] >= 1.6, "{makespans:?}");
        assert!(makespans[0] / makespans[2] >= 2.8, "{makespans:?}");
    }

    #[test]
    fn a_device_holding_a_problem_open_gets_its_later_batches() {
        let queue = Queue::new(2);
        let stop = AtomicBool::new(false);
        queue.push(batch("a"));
        queue.push(batch("b"));
        queue.push(batch("a"));
        // Device 1 holds "a" open (the agents' service keeps its session between batches).
        queue.hold(1, "a");
        // Device 0 passes over the problem device 1 holds and takes "b".
        let Taken::Batch(first) = queue.take(0, &[], false, &stop) else {
            panic!()
        };
        assert_eq!(first.pkey, "b");
        let Taken::Batch(held) = queue.take(1, &["a"], false, &stop) else {
            panic!()
        };
        assert_eq!(held.pkey, "a");
        // With nothing else queued, an idle device still takes the held problem's batch.
        let Taken::Batch(last) = queue.take(0, &[], false, &stop) else {
            panic!()
        };
        assert_eq!(last.pkey, "a");
        queue.close();
        assert!(matches!(queue.take(0, &[], true, &stop), Taken::Leave));
        stop.store(true, Ordering::SeqCst);
        queue.push(batch("c"));
        assert!(matches!(queue.take(1, &[], true, &stop), Taken::Leave));
    }

    #[test]
    fn problems_held_open_or_queued_are_warm_and_a_closed_one_is_not() {
        let queue = Queue::new(2);
        let stop = AtomicBool::new(false);
        let warm = |q: &Queue| {
            let mut v: Vec<String> = q.warm().into_iter().collect();
            v.sort_unstable();
            v
        };
        assert!(warm(&queue).is_empty());
        queue.hold(1, "a");
        queue.push(batch("b"));
        assert_eq!(warm(&queue), ["a", "b"]);
        // Taken by an executor that has no session of it yet: no longer queued here (the
        // serve worker counts the kernels it claimed as warm for that stretch).
        assert!(matches!(queue.take(0, &[], false, &stop), Taken::Batch(_)));
        assert_eq!(warm(&queue), ["a"]);
        queue.unhold(1, "a");
        assert!(warm(&queue).is_empty());
    }

    #[test]
    fn nothing_is_taken_after_the_deadline_and_what_is_left_is_counted() {
        let queue = Queue::new(1);
        let stop = AtomicBool::new(false);
        for k in ["a", "b", "c"] {
            queue.push(batch(k));
        }
        queue.close();
        // Before the deadline: taken as usual.
        queue.stop_taking_at(Instant::now() + Duration::from_secs(3600));
        assert!(matches!(queue.take(0, &[], false, &stop), Taken::Batch(_)));
        assert!(!queue.cut_off());
        // At the deadline: the executor leaves with two problems queued, which were never
        // started.
        queue.stop_taking_at(Instant::now());
        assert!(matches!(queue.take(0, &[], true, &stop), Taken::Leave));
        assert!(queue.cut_off());
        assert_eq!(queue.drain().len(), 2);
        // A queue already empty at its deadline was not cut off.
        let done = Queue::new(1);
        done.close();
        done.stop_taking_at(Instant::now());
        assert!(matches!(done.take(0, &[], true, &stop), Taken::Leave));
        assert!(!done.cut_off());
    }

    #[test]
    fn executors_take_their_own_problems_first_then_free_ones_then_the_oldest() {
        let s = Duration::from_secs(1);
        let jobs = [("p1", 3 * s), ("p2", 2 * s), ("p3", s)];
        let held_by = |keys: &'static [&'static str]| move |k: &str| keys.contains(&k);
        // Nothing open anywhere: first come, first served.
        assert_eq!(
            choose(jobs.into_iter(), held_by(&[]), held_by(&[])),
            Some(0)
        );
        // This executor holds p3 open: p3's job goes first.
        assert_eq!(
            choose(jobs.into_iter(), held_by(&["p3"]), held_by(&[])),
            Some(2)
        );
        // Another executor (GPU) holds p1: this one takes p2, leaving p1 to it.
        assert_eq!(
            choose(jobs.into_iter(), held_by(&[]), held_by(&["p1"])),
            Some(1)
        );
        // Every problem is held elsewhere: an idle device still takes the oldest.
        assert_eq!(
            choose(jobs.into_iter(), held_by(&[]), held_by(&["p1", "p2", "p3"])),
            Some(0)
        );
        // A job waiting too long goes first, whatever is open.
        let late = [("p1", MAX_BYPASS), ("p3", s)];
        assert_eq!(
            choose(late.into_iter(), held_by(&["p3"]), held_by(&[])),
            Some(0)
        );
        assert_eq!(choose([].into_iter(), held_by(&[]), held_by(&[])), None);
    }
}
