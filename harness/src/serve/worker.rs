//! The evaluating side of the service: one engine session ([`crate::exec::Service`]) per pass,
//! fed from the store. It claims a problem's queued kernels, answers those the verdict cache
//! knows, evaluates the rest as one batch in the problem's warm reference session (builds go
//! through the engine's shared build pool), signs and stores each answer, and renews its
//! leases while it works. A worker that dies holds its claims only until their lease ends; a
//! restarted one queues its own claims again, and the run log answers every kernel whose
//! record was written before it died, so nothing is evaluated twice.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kbench_record::EvalRecord;
use kbench_suites::Problem;

use super::fleet::{now, Fleet};
use super::metrics::Metrics;
use super::store::{Done, Job, Known, Pass, Store, Warm};
use super::verdict::{cache_key, kernel_name, Verdict};
use crate::agents::Candidate;
use crate::config::{AgentConfig, RunConfig};
use crate::runlog::seed::RunSecret;

/// The agent name of the service's records.
pub(crate) const AGENT: &str = "serve";

/// Kernels one pass has claimed and not yet answered, per executor: enough that the next
/// batches start while the current one is timed (the engine takes two ahead), few enough
/// that a client's slow kernels claimed first hold back another's only so long.
const IN_FLIGHT_PER_DEVICE: usize = 4;

/// Kernels a worker's pass claims for one client ahead of that client's oldest queued one,
/// because their problems were warm, before that oldest gets its turn. A warm problem skips
/// its reference session's opening and its reference cases (on an H200, 0.8 s an evaluation
/// and up to 3 s of reference stress for level 1 in a queue of six problems taken in turn).
const WARM_RUN: usize = 16;

/// Per client, the kernels claimed ahead of its oldest queued one since that oldest last
/// moved: once [`WARM_RUN`] or more, the client's next claim takes its oldest. Counted per
/// client, so that no other client's claims (whatever their problems) start a run again.
#[derive(Default)]
struct WarmRuns {
    ahead: HashMap<String, usize>,
}

impl WarmRuns {
    /// The clients whose oldest goes first at their next claim.
    fn spent(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .ahead
            .iter()
            .filter(|(_, n)| **n >= WARM_RUN)
            .map(|(c, _)| c.clone())
            .collect();
        v.sort_unstable();
        v
    }

    /// A claim came back: `jobs` (one client's, one problem's, not empty).
    fn claimed(&mut self, jobs: &[Job]) {
        let Some(j) = jobs.first() else {
            return;
        };
        if j.ahead_of_oldest {
            *self.ahead.entry(j.client.clone()).or_default() += jobs.len();
        } else {
            // Its oldest was taken: the next one starts afresh.
            self.ahead.remove(&j.client);
        }
    }
}

/// Wakes idle claim loops when work arrives (in this process; other hosts poll).
#[derive(Default)]
pub(crate) struct Wake {
    n: Mutex<u64>,
    cv: Condvar,
}

impl Wake {
    pub(crate) fn ring(&self) {
        *self.n.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.cv.notify_all();
    }

    fn wait(&self, d: Duration) {
        let g = self.n.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self.cv.wait_timeout(g, d);
    }
}

/// One pass's engine session and how its answers are signed.
pub(crate) struct Engine {
    pass: Pass,
    service: crate::exec::Service,
    records_key: RunSecret,
    /// The pass's fleet identity (the verdict cache's namespace).
    pub(crate) fleet: String,
    /// Server paths a record may hold (a traceback names the kernel's file in the run
    /// folder), with what stands for them in what clients get.
    redact: Vec<(String, &'static str)>,
}

/// `record` with every string's server paths replaced by their stand-ins.
fn redacted(record: &EvalRecord, redact: &[(String, &'static str)]) -> Result<EvalRecord> {
    fn walk(v: &mut serde_json::Value, redact: &[(String, &'static str)]) {
        match v {
            serde_json::Value::String(s) => {
                for (path, stand_in) in redact {
                    if s.contains(path.as_str()) {
                        *s = s.replace(path.as_str(), stand_in);
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(|x| walk(x, redact)),
            serde_json::Value::Object(o) => o.values_mut().for_each(|x| walk(x, redact)),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(record)?;
    walk(&mut v, redact);
    let mut r: EvalRecord = serde_json::from_value(v)?;
    // The host's name is the operator's, not the client's.
    r.env.hostname = String::new();
    Ok(r)
}

/// The run configuration of `pass` under `base`: its own run folder in the service's folder
/// `out` (`public/`, `ranked/`), records named after the service.
pub(crate) fn pass_config(base: &RunConfig, pass: Pass, out: &std::path::Path) -> RunConfig {
    let mut c = base.clone();
    c.agent = AgentConfig::Given {
        agent: AGENT,
        candidates: Vec::new(),
    };
    c.resume = true;
    c.quiet = true;
    c.out = out.join(pass.name());
    c
}

impl Engine {
    /// Starts the engine of `pass` and joins the store's fleet with its identity.
    pub(crate) fn start(
        config: &RunConfig,
        pass: Pass,
        store: &dyn Store,
        stop: Arc<AtomicBool>,
    ) -> Result<Engine> {
        let service = crate::exec::Service::start_taking_ahead(config, stop, true)
            .with_context(|| format!("starting the {} pass's evaluation engine", pass.name()))?;
        let secret = RunSecret::load(&config.out.join(crate::runlog::SECRET))?;
        let manifest =
            crate::runlog::ManifestFile::read(&config.out.join(crate::runlog::MANIFEST))?.manifest;
        let records_key = crate::runlog::records_key(&secret, manifest.record_mac.as_deref())?;
        let fleet = Fleet::of(config, &manifest.run_id)?;
        store.join_fleet(pass, &fleet.fingerprint, &fleet.describe)?;
        // Longest first, so that a folder inside another is replaced as itself.
        let mut redact: Vec<(String, &'static str)> = Vec::new();
        let mut add = |p: &std::path::Path, stand_in: &'static str| {
            if let Ok(abs) = std::path::absolute(p) {
                let s = abs.to_string_lossy().trim_end_matches('/').to_string();
                if s.len() > 1 {
                    redact.push((s, stand_in));
                }
            }
        };
        if let Some(service_dir) = config.out.parent() {
            add(service_dir, "<service>");
        }
        add(&config.cache, "<cache>");
        if let Some(home) = dirs::home_dir() {
            add(&home, "<home>");
        }
        redact.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        Ok(Engine {
            pass,
            service,
            records_key,
            fleet: fleet.fingerprint,
            redact,
        })
    }

    fn answer(&self, record: &EvalRecord) -> Result<(Verdict, Known)> {
        let record = &redacted(record, &self.redact)?;
        let verdict = Verdict::of(record);
        let line = crate::runlog::signed_line(&self.records_key, record)?;
        let record = String::from_utf8(line)
            .context("a signed record line that is not UTF-8")?
            .trim_end()
            .to_string();
        let known = Known {
            verdict: serde_json::to_string(&verdict)?,
            record,
        };
        Ok((verdict, known))
    }

    pub(crate) fn finish(&self) -> Result<()> {
        self.service.finish().map(|_| ())
    }
}

/// The ranked pass's secret: derived from the public one's, so that worker hosts sharing
/// `--secret-from` share it too; written beside the run (owner-only) for the engine to read.
pub(crate) fn ranked_secret_file(out: &std::path::Path) -> Result<PathBuf> {
    let public = out.join(Pass::Public.name());
    let secret = RunSecret::load(&public.join(crate::runlog::SECRET))?;
    let path = out.join("ranked-secret");
    let ranked = secret.subkey("ranked-seeds");
    if path.exists() {
        // A restart: the file must be the one this secret derives.
        if RunSecret::load(&path)? != ranked {
            anyhow::bail!(
                "{} is not the ranked secret of {}: the service folder was tampered with or mixed up; restore it or start a new --out",
                path.display(),
                public.join(crate::runlog::SECRET).display()
            );
        }
    } else {
        ranked.save(&path)?;
    }
    Ok(path)
}

/// Everything the claim loops share.
pub(crate) struct Worker {
    pub(crate) id: String,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) problems: HashMap<String, Problem>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) wake: Arc<Wake>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) lease_s: f64,
    pub(crate) devices: usize,
    /// Claimed and not yet answered, by pass, with their problems: what the lease renewals
    /// cover (empty at start).
    pub(crate) held: Mutex<HashMap<Pass, HashMap<i64, String>>>,
}

impl Worker {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Pass, HashMap<i64, String>>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Claims and evaluates `engine`'s pass until the stop flag is raised; returns once every
    /// batch it started has been answered or abandoned.
    pub(crate) fn run(self: &Arc<Self>, engine: Arc<Engine>) -> Result<()> {
        let pass = engine.pass;
        let capacity = IN_FLIGHT_PER_DEVICE * self.devices.max(1);
        let mut batches: Vec<std::thread::JoinHandle<()>> = Vec::new();
        let mut failing = StoreFailures::default();
        let mut warm_runs = WarmRuns::default();
        while !self.stop.load(Ordering::SeqCst) {
            batches.retain(|b| !b.is_finished());
            let (in_flight, mut warm) = match self.held().get(&pass) {
                // Problems of kernels claimed and not yet answered are warm too: their
                // sessions are open, opening, or will be when the engine takes them.
                Some(h) => (h.len(), h.values().cloned().collect::<HashSet<String>>()),
                None => (0, HashSet::new()),
            };
            if in_flight >= capacity {
                self.wake.wait(Duration::from_millis(100));
                continue;
            }
            // The store's problem ids are the problems' keys, as the engine's are.
            warm.extend(engine.service.warm_problems());
            warm.retain(|k| self.problems.contains_key(k));
            let mut warm: Vec<String> = warm.into_iter().collect();
            warm.sort_unstable();
            let spent = warm_runs.spent();
            let claimed = self.store.claim(
                pass,
                &self.id,
                (capacity - in_flight).min(capacity / 2).max(1),
                self.lease_s,
                now(),
                Warm {
                    problems: &warm,
                    spent: &spent,
                },
            );
            // A store out of reach for now (a server restarting, a dropped connection) is
            // waited out: what this worker holds is kept by its leases or taken over by
            // another worker, and nothing is claimed twice. Any other error stops the worker.
            let jobs = match claimed {
                Ok(jobs) => {
                    failing.recovered(pass);
                    jobs
                }
                Err(e) if super::store::transient(&e) => {
                    std::thread::sleep(failing.failed(pass, &e));
                    continue;
                }
                Err(e) => return Err(e),
            };
            if jobs.is_empty() {
                self.wake.wait(Duration::from_millis(250));
                continue;
            }
            warm_runs.claimed(&jobs);
            self.held()
                .entry(pass)
                .or_default()
                .extend(jobs.iter().map(|j| (j.seq, j.problem.clone())));
            let me = Arc::clone(self);
            let engine = Arc::clone(&engine);
            batches.push(
                std::thread::Builder::new()
                    .name("kbench-serve-batch".into())
                    .spawn(move || me.batch(&engine, jobs))?,
            );
        }
        for b in batches {
            let _ = b.join();
        }
        Ok(())
    }

    /// Renews the leases of everything held, every quarter lease, until stopped.
    pub(crate) fn renew_leases(&self) {
        let every = Duration::from_secs_f64((self.lease_s / 4.0).max(0.5));
        let mut last = Instant::now();
        while !self.stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(100));
            if last.elapsed() < every {
                continue;
            }
            last = Instant::now();
            let held: Vec<(Pass, Vec<i64>)> = self
                .held()
                .iter()
                .map(|(p, s)| (*p, s.keys().copied().collect()))
                .collect();
            for (pass, seqs) in held {
                if let Err(e) = self
                    .store
                    .renew(pass, &self.id, &seqs, now() + self.lease_s)
                {
                    eprintln!("kbench serve: renewing leases: {e:#}");
                }
            }
        }
    }

    /// One claimed batch (one problem): cache answers first, then one engine batch.
    fn batch(&self, engine: &Engine, jobs: Vec<Job>) {
        if let Err(e) = self.try_batch(engine, &jobs) {
            // Left claimed: the lease runs out, or a restart queues it again.
            eprintln!(
                "kbench serve: a batch of {} kernel(s) of {} not answered in full: {e:#}",
                jobs.len(),
                jobs.first().map_or("", |j| j.problem.as_str())
            );
        }
        let mut held = self.held();
        if let Some(s) = held.get_mut(&engine.pass) {
            for j in &jobs {
                s.remove(&j.seq);
            }
        }
        drop(held);
        self.wake.ring();
    }

    fn try_batch(&self, engine: &Engine, jobs: &[Job]) -> Result<()> {
        let Some(first) = jobs.first() else {
            return Ok(());
        };
        let problem = self
            .problems
            .get(&first.problem)
            .with_context(|| format!("problem {} is not in this worker's suite", first.problem))?;
        let mut to_evaluate = Vec::new();
        for j in jobs {
            let key = cache_key(&engine.fleet, &problem.sha256, &j.source);
            if !j.remeasure {
                if let Some(known) = self.store.cache_get(&key)? {
                    self.metrics.cache_hit();
                    self.store_answer(engine, j, &known, true)?;
                    continue;
                }
            }
            to_evaluate.push((j, key));
        }
        if to_evaluate.is_empty() {
            return Ok(());
        }
        let cands = to_evaluate
            .iter()
            .map(|(j, _)| {
                // A re-measurement is a new sample of the same kernel: its own record. Its
                // number comes from the submission's random id, not its place in the queue
                // (which would tell the client how many others submitted).
                let sample = if j.remeasure {
                    u32::from_str_radix(j.id.get(..8).unwrap_or("1"), 16).unwrap_or(1) | 1
                } else {
                    0
                };
                Candidate::new(
                    kernel_name(&problem.sha256, &j.source),
                    sample,
                    j.source.clone(),
                    None,
                )
            })
            .collect();
        // Every answer is stored and counted before a failed one is reported: the engine
        // evaluated the kernels after it too, and a retry would find them in its log.
        let answers = engine.service.evaluate_each(problem, cands)?;
        let stats = engine.service.stats();
        self.metrics.sessions(
            engine.pass.name(),
            stats.reference_sessions_opened,
            stats.reference_sessions_reused,
        );
        let mut first_failure = None;
        for ((j, key), answer) in to_evaluate.iter().zip(answers) {
            let stored = answer.and_then(|(record, how)| {
                self.metrics.evaluated(&record, how);
                let (_, known) = engine.answer(&record)?;
                self.store.cache_put(key, &known)?;
                self.store_answer(engine, j, &known, false)
            });
            if let Err(e) = stored {
                first_failure.get_or_insert(e);
            }
        }
        first_failure.map_or(Ok(()), Err)
    }

    fn store_answer(&self, engine: &Engine, j: &Job, known: &Known, cached: bool) -> Result<()> {
        let verdict: Verdict = serde_json::from_str(&known.verdict)?;
        let done = Done {
            known: known.clone(),
            then_rank: (engine.pass == Pass::Public).then(|| verdict.counts()),
            cached,
        };
        let now = now();
        if self
            .store
            .finish(engine.pass, &self.id, j.seq, &done, now)?
        {
            if engine.pass == Pass::Public {
                self.metrics.verdict_latency(now - j.submitted_s);
            }
        } else {
            eprintln!(
                "kbench serve: submission {} was no longer this worker's (its lease ran out); its answer is the other worker's",
                j.seq
            );
        }
        Ok(())
    }
}

/// Failed claims in a row: how long to wait before the next, and what to say of them (the
/// first failure and every tenth, then the recovery), so that an unreachable store is
/// reported without flooding the log.
#[derive(Default)]
struct StoreFailures {
    in_a_row: u32,
}

impl StoreFailures {
    fn failed(&mut self, pass: Pass, e: &anyhow::Error) -> Duration {
        self.in_a_row += 1;
        if self.in_a_row % 10 == 1 {
            eprintln!(
                "kbench serve: the {} pass cannot claim from the store ({} failure(s) in a row), retrying: {e:#}",
                pass.name(),
                self.in_a_row
            );
        }
        // 0.5 s, doubling, at most 8 s.
        Duration::from_millis(500u64 << self.in_a_row.min(5).saturating_sub(1))
    }

    fn recovered(&mut self, pass: Pass) {
        if self.in_a_row > 0 {
            eprintln!(
                "kbench serve: the {} pass claims from the store again after {} failure(s)",
                pass.name(),
                self.in_a_row
            );
            self.in_a_row = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs(client: &str, n: usize, ahead_of_oldest: bool) -> Vec<Job> {
        (0..n)
            .map(|i| Job {
                seq: i as i64,
                id: format!("{client}{i}"),
                problem: "p/1".into(),
                source: String::new(),
                remeasure: false,
                submitted_s: 0.0,
                client: client.into(),
                ahead_of_oldest,
            })
            .collect()
    }

    #[test]
    fn a_clients_oldest_gets_its_turn_after_a_run_of_its_own_kernels_only() {
        let mut runs = WarmRuns::default();
        // Bob's claims go ahead of his oldest, two kernels each: his run is spent at WARM_RUN.
        for k in 0..WARM_RUN / 2 {
            assert!(runs.spent().is_empty(), "after {k} claims");
            runs.claimed(&jobs("bob", 2, true));
            // Another client's claim of its own oldest does not start Bob's run again.
            runs.claimed(&jobs("eve", 1, false));
        }
        assert_eq!(runs.spent(), ["bob"]);
        // Eve's claims ahead of her oldest count for her alone.
        runs.claimed(&jobs("eve", 3, true));
        assert_eq!(runs.spent(), ["bob"]);
        // Bob's oldest is taken: his next run starts from nothing.
        runs.claimed(&jobs("bob", 1, false));
        assert!(runs.spent().is_empty());
        runs.claimed(&[]);
        assert!(runs.spent().is_empty());
    }
}
