//! What `GET /metrics` says, in Prometheus's text format: queue depth and submissions by
//! state (from the store), evaluations and cache answers, each GPU's busy share, and the
//! quantiles of API and verdict latency over the latest requests.
//!
//! Written by hand: the format is a few lines of text, and the Rust Prometheus clients offer
//! histograms, not the summary quantiles asked for here.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use kbench_record::EvalRecord;

use super::store::Counts;

/// Latencies kept for the quantiles (the latest ones).
const WINDOW: usize = 10_000;

#[derive(Default)]
struct Window(VecDeque<f64>);

impl Window {
    fn push(&mut self, v: f64) {
        if self.0.len() == WINDOW {
            self.0.pop_front();
        }
        self.0.push_back(v);
    }

    fn quantiles(&self) -> Vec<(f64, f64)> {
        let mut v: Vec<f64> = self.0.iter().copied().collect();
        v.sort_by(f64::total_cmp);
        [0.5, 0.9, 0.99]
            .iter()
            .filter(|_| !v.is_empty())
            .map(|&q| (q, kbench_reports::percentile_sorted(&v, q * 100.0)))
            .collect()
    }
}

/// Which record: run, suite, level, problem, kernel, sample.
type RecordId = (String, String, u8, u32, String, u32);

/// Records counted lately, as hashes of their ids, the oldest forgotten first: a service runs
/// for months, and copies of a kernel are joined to its evaluation only while it runs, far
/// fewer records ago than this. (A hash collision counts an evaluation as a cache hit: a
/// metric, never a verdict.)
const COUNTED_KEPT: usize = 1 << 16;

#[derive(Default)]
struct Counted {
    set: HashSet<u64>,
    order: VecDeque<u64>,
}

impl Counted {
    /// Whether `id` was not counted lately; it is counted now.
    fn insert(&mut self, id: &RecordId) -> bool {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        id.hash(&mut h);
        let h = h.finish();
        if !self.set.insert(h) {
            return false;
        }
        self.order.push_back(h);
        if self.order.len() > COUNTED_KEPT {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        true
    }
}

pub(crate) struct Metrics {
    start: Instant,
    evaluations: AtomicU64,
    cache_hits: AtomicU64,
    /// The records counted as evaluations lately (run, problem, kernel, sample): one
    /// evaluation answers every copy of a kernel in flight at once, and each copy gets its
    /// record.
    counted: Mutex<Counted>,
    busy_s: Mutex<BTreeMap<String, f64>>,
    api: Mutex<Window>,
    verdict: Mutex<Window>,
    responses: Mutex<BTreeMap<u16, u64>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        Metrics {
            start: Instant::now(),
            evaluations: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
            counted: Mutex::new(Counted::default()),
            busy_s: Mutex::new(BTreeMap::new()),
            api: Mutex::new(Window::default()),
            verdict: Mutex::new(Window::default()),
            responses: Mutex::new(BTreeMap::new()),
        }
    }

    pub(crate) fn cache_hit(&self) {
        self.cache_hits.fetch_add(1, Ordering::Relaxed);
    }

    /// A record this worker's engine answered a claim with. The first time: an evaluation,
    /// which held its device for its wall time. After that, a copy of the same kernel that
    /// was joined to that evaluation while it ran (claimed in another batch): answered
    /// without evaluating, like a cache hit, and counted as one.
    pub(crate) fn evaluated(&self, r: &EvalRecord) {
        let id = (
            r.run_id.clone(),
            r.problem.suite.clone(),
            r.problem.level,
            r.problem.id,
            r.candidate.name.clone(),
            r.candidate.sample,
        );
        if !lock(&self.counted).insert(&id) {
            self.cache_hit();
            return;
        }
        self.evaluations.fetch_add(1, Ordering::Relaxed);
        let device = r.gpu.map_or_else(|| "cpu".to_string(), |g| g.to_string());
        *lock(&self.busy_s).entry(device).or_default() += r.wall_s;
    }

    pub(crate) fn verdict_latency(&self, s: f64) {
        lock(&self.verdict).push(s);
    }

    /// An API answer, and its time unless it was a long poll's.
    pub(crate) fn response(&self, status: u16, s: Option<f64>) {
        if let Some(s) = s {
            lock(&self.api).push(s);
        }
        *lock(&self.responses).entry(status).or_default() += 1;
    }

    pub(crate) fn render(&self, counts: Option<Counts>) -> String {
        let mut o = String::new();
        let uptime = self.start.elapsed().as_secs_f64().max(1e-9);
        let mut gauge = |name: &str, help: &str, kind: &str, lines: Vec<(String, f64)>| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, v) in lines {
                let _ = writeln!(o, "{name}{labels} {v}");
            }
        };
        if let Some(c) = counts {
            gauge(
                "kbench_serve_queue_depth",
                "Evaluations queued (both passes).",
                "gauge",
                vec![(String::new(), c.queued as f64)],
            );
            gauge(
                "kbench_serve_submissions",
                "Submissions by state.",
                "gauge",
                vec![
                    ("{state=\"queued\"}".into(), c.queued as f64),
                    ("{state=\"running\"}".into(), c.running as f64),
                    ("{state=\"done\"}".into(), c.done as f64),
                ],
            );
        }
        gauge(
            "kbench_serve_evaluations_total",
            "Kernels this process evaluated.",
            "counter",
            vec![(
                String::new(),
                self.evaluations.load(Ordering::Relaxed) as f64,
            )],
        );
        gauge(
            "kbench_serve_cache_hits_total",
            "Claimed kernels this process answered from the verdict cache.",
            "counter",
            vec![(
                String::new(),
                self.cache_hits.load(Ordering::Relaxed) as f64,
            )],
        );
        gauge(
            "kbench_serve_uptime_seconds",
            "Seconds since this process started.",
            "gauge",
            vec![(String::new(), uptime)],
        );
        let busy_s: Vec<(String, f64)> = lock(&self.busy_s)
            .iter()
            .map(|(d, s)| (format!("{{gpu=\"{d}\"}}"), *s))
            .collect();
        let busy = busy_s
            .iter()
            .map(|(l, s)| (l.clone(), (s / uptime).min(1.0)))
            .collect();
        gauge(
            "kbench_serve_gpu_busy_seconds_total",
            "Seconds an evaluation of this process held the device (a window's share is its increase over the window's length).",
            "counter",
            busy_s,
        );
        gauge(
            "kbench_serve_gpu_busy_ratio",
            "Share of wall time since start that an evaluation held the device.",
            "gauge",
            busy,
        );
        for (name, help, w) in [
            (
                "kbench_serve_api_latency_seconds",
                "Time to answer an API request (latest 10000).",
                &self.api,
            ),
            (
                "kbench_serve_verdict_latency_seconds",
                "Submission to verdict (latest 10000 this process evaluated).",
                &self.verdict,
            ),
        ] {
            let lines = lock(w)
                .quantiles()
                .into_iter()
                .map(|(q, v)| (format!("{{quantile=\"{q}\"}}"), v))
                .collect();
            gauge(name, help, "summary", lines);
        }
        let responses = lock(&self.responses)
            .iter()
            .map(|(s, n)| (format!("{{status=\"{s}\"}}"), *n as f64))
            .collect();
        gauge(
            "kbench_serve_responses_total",
            "API responses by status.",
            "counter",
            responses,
        );
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u32) -> RecordId {
        ("run".into(), "smoke".into(), 1, n, "k".into(), 0)
    }

    /// A copy counted lately is a cache hit; the set forgets the oldest, so it stays bounded
    /// however long the service runs.
    #[test]
    fn counted_records_are_remembered_lately_and_bounded() {
        let mut c = Counted::default();
        assert!(c.insert(&id(0)));
        assert!(!c.insert(&id(0)));
        for n in 1..=COUNTED_KEPT as u32 {
            assert!(c.insert(&id(n)));
        }
        assert_eq!((c.set.len(), c.order.len()), (COUNTED_KEPT, COUNTED_KEPT));
        // The first was forgotten, a recent one is not.
        assert!(c.insert(&id(0)));
        assert!(!c.insert(&id(COUNTED_KEPT as u32)));
    }
}
