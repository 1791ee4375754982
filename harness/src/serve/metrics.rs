//! What `GET /metrics` says, in Prometheus's text format: queue depth and submissions by
//! state (from the store), evaluations and cache answers, each GPU's busy share, and the
//! quantiles of API and verdict latency over the latest requests.
//!
//! Written by hand: the format is a few lines of text, and the Rust Prometheus clients offer
//! histograms, not the summary quantiles asked for here.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use kbench_record::EvalRecord;

use super::store::Counts;
use crate::exec::Provenance;

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

pub(crate) struct Metrics {
    start: Instant,
    evaluations: AtomicU64,
    cache_hits: AtomicU64,
    busy_s: Mutex<BTreeMap<String, f64>>,
    api: Mutex<Window>,
    verdict: Mutex<Window>,
    responses: Mutex<BTreeMap<u16, u64>>,
    /// Per pass: reference sessions its engine opened, and batches that found theirs open
    /// (the engine's own counts, copied after each batch).
    sessions: Mutex<BTreeMap<&'static str, (u64, u64)>>,
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
            busy_s: Mutex::new(BTreeMap::new()),
            api: Mutex::new(Window::default()),
            verdict: Mutex::new(Window::default()),
            responses: Mutex::new(BTreeMap::new()),
            sessions: Mutex::new(BTreeMap::new()),
        }
    }

    /// The reference sessions `pass`'s engine has opened and reused so far. Batch threads
    /// report as they end, in no set order: an older count never replaces a newer one (a
    /// counter that went down would read as a restart).
    pub(crate) fn sessions(&self, pass: &'static str, opened: u64, reused: u64) {
        let mut s = lock(&self.sessions);
        let c = s.entry(pass).or_default();
        *c = (c.0.max(opened), c.1.max(reused));
    }

    pub(crate) fn cache_hit(&self) {
        self.cache_hits.fetch_add(1, Ordering::Relaxed);
    }

    /// A record this worker's engine answered a claim with, and how it came about (the
    /// engine says): its own evaluation, which held its device for its wall time; or a copy
    /// of a kernel joined to an evaluation already under way, or found in the log, answered
    /// without evaluating, like a cache hit, and counted as one.
    pub(crate) fn evaluated(&self, r: &EvalRecord, how: Provenance) {
        if how != Provenance::Evaluated {
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
        let sessions = lock(&self.sessions).clone();
        for (name, help, pick) in [
            (
                "kbench_serve_reference_sessions_opened_total",
                "Reference sessions opened (a reference worker started and its problem loaded), by pass.",
                (|c: &(u64, u64)| c.0) as fn(&(u64, u64)) -> u64,
            ),
            (
                "kbench_serve_reference_sessions_reused_total",
                "Batches that found their problem's reference session open, by pass.",
                |c: &(u64, u64)| c.1,
            ),
        ] {
            let lines = sessions
                .iter()
                .map(|(p, c)| (format!("{{pass=\"{p}\"}}"), pick(c) as f64))
                .collect();
            gauge(name, help, "counter", lines);
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

    /// Only an evaluation of its own counts as one and holds its device; a copy joined to
    /// it, or answered from the log, is a cache hit.
    #[test]
    fn only_a_records_own_evaluation_counts_as_one() {
        let m = Metrics::new();
        let mut r = crate::test_support::one_shot_records().remove(0);
        r.gpu = None;
        r.wall_s = 2.0;
        m.evaluated(&r, Provenance::Evaluated);
        m.evaluated(&r, Provenance::Joined);
        m.evaluated(&r, Provenance::Recorded);
        assert_eq!(m.evaluations.load(Ordering::Relaxed), 1);
        assert_eq!(m.cache_hits.load(Ordering::Relaxed), 2);
        assert_eq!(lock(&m.busy_s).get("cpu").copied(), Some(2.0));
    }

    #[test]
    fn reference_sessions_are_counted_per_pass_as_the_engine_last_said() {
        let m = Metrics::new();
        m.sessions("public", 1, 0);
        m.sessions("public", 3, 7);
        // A batch thread that read the engine's counts before the one above reports late.
        m.sessions("public", 2, 6);
        m.sessions("ranked", 2, 1);
        let text = m.render(None);
        for line in [
            "kbench_serve_reference_sessions_opened_total{pass=\"public\"} 3",
            "kbench_serve_reference_sessions_reused_total{pass=\"public\"} 7",
            "kbench_serve_reference_sessions_opened_total{pass=\"ranked\"} 2",
            "kbench_serve_reference_sessions_reused_total{pass=\"ranked\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
    }
}
