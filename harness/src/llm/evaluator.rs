//! The agents' way into the engine: [`Evaluator`] submits each kernel to the evaluation
//! service ([`crate::exec::Service`]) and checks that the record it gets back is that
//! kernel's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use kbench_record::{AgentCost, EvalRecord};
use kbench_suites::Problem;

use crate::agents::Candidate;
use crate::config::{AgentConfig, RunConfig};

/// Evaluates kernels through the engine's evaluation service ([`crate::exec::Service`]),
/// into the run directory. Tasks submit concurrently; the service evaluates one kernel at a
/// time per device (the CPU, or each `--gpus` GPU, as `kbench run` does) and keeps each
/// problem's reference worker and cases open between a task's rounds.
pub(crate) struct Evaluator {
    service: crate::exec::Service,
    agent: &'static str,
    stop: Arc<AtomicBool>,
}

impl Evaluator {
    /// Starts the service on the run's settings (device, GPUs, families, timing, run
    /// directory), its records named after `agent`.
    pub(crate) fn new(
        base: &RunConfig,
        agent: &'static str,
        stop: Arc<AtomicBool>,
    ) -> Result<Self> {
        let mut c = base.clone();
        c.agent = AgentConfig::Given {
            agent,
            candidates: Vec::new(),
        };
        c.resume = true;
        c.quiet = true;
        let service = crate::exec::Service::start(&c, Arc::clone(&stop))?;
        Ok(Self {
            service,
            agent,
            stop,
        })
    }

    /// Correctness on every configured case family, then timing (when the run times).
    /// A kernel already recorded under this name (a resumed run) is not evaluated again.
    /// `sample` is the trajectory (kevin) or 0: `kbench report` takes each sample as one
    /// independent trajectory for best@k / avg@k. `cost` (the model calls that produced the
    /// kernel) goes into its record.
    pub(crate) fn evaluate(
        &self,
        problem: &Problem,
        name: &str,
        sample: u32,
        source: &str,
        cost: Option<AgentCost>,
    ) -> Result<EvalRecord> {
        if self.stop.load(Ordering::SeqCst) {
            bail!("interrupted");
        }
        let mut cand = Candidate::new(name.to_string(), sample, source.to_string(), None);
        cand.cost = cost;
        let key = crate::plan::record_key(problem, self.agent, &cand);
        let record = self.service.evaluate(problem, cand)?;
        if record.key() != key {
            bail!(
                "the engine answered kernel {name} of {} with the record of {}",
                problem.key(),
                record.key()
            );
        }
        Ok(record)
    }

    /// Re-measures kernels the agent already wrote, to choose its final one
    /// ([`super::select`]): each `(name, source, selection)` is evaluated under its new
    /// name, all of them as one batch (back to back in the problem's one reference session),
    /// in the order given. Records come back in that order. `last_cost` goes into the last
    /// one's record (the final measurement carries the model calls made after the agent's
    /// last kernel).
    pub(crate) fn remeasure(
        &self,
        problem: &Problem,
        kernels: Vec<(String, String, kbench_record::Selection)>,
        last_cost: Option<AgentCost>,
    ) -> Result<Vec<EvalRecord>> {
        if self.stop.load(Ordering::SeqCst) {
            bail!("interrupted");
        }
        let mut cands: Vec<Candidate> = kernels
            .into_iter()
            .map(|(name, source, selection)| {
                let mut c = Candidate::new(name, 0, source, None);
                c.selection = Some(selection);
                c
            })
            .collect();
        if let Some(last) = cands.last_mut() {
            last.cost = last_cost;
        }
        let keys: Vec<String> = cands
            .iter()
            .map(|c| crate::plan::record_key(problem, self.agent, c))
            .collect();
        let records: Vec<EvalRecord> = self
            .service
            .evaluate_together(problem, cands)?
            .into_iter()
            .map(|(r, _)| r)
            .collect();
        for (record, key) in records.iter().zip(&keys) {
            if &record.key() != key {
                bail!(
                    "the engine answered kernel {key} with the record of {}",
                    record.key()
                );
            }
        }
        Ok(records)
    }

    /// Records that the task of `problem` ended without producing any kernel (`no_kernel`,
    /// no worker started), with what the agent's model calls cost; a resumed run finds the
    /// record already there.
    pub(crate) fn no_kernel(
        &self,
        problem: &Problem,
        cost: Option<AgentCost>,
    ) -> Result<EvalRecord> {
        let mut cand = Candidate::missing();
        cand.cost = cost;
        let u = crate::plan::blank_kernel(problem, self.agent, &cand)
            .context("the stand-in of a missing kernel is blank")?;
        self.service.record_unjudged(u)
    }

    /// Records a broken problem file of the run (`problem_error`, no worker started).
    pub(crate) fn problem_error(
        &self,
        broken: &kbench_suites::BrokenProblem,
    ) -> Result<EvalRecord> {
        self.service
            .record_unjudged(crate::plan::broken_problem(broken, self.agent))
    }

    /// The task of `problem` ended: its reference worker may close.
    pub(crate) fn release(&self, problem: &Problem) {
        self.service.release(problem);
    }

    /// Whether the run was told to stop.
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    pub(crate) fn stats(&self) -> crate::exec::ServiceStats {
        self.service.stats()
    }

    /// Waits for the service to stop; what it did.
    pub(crate) fn finish(&self) -> Result<crate::exec::ServiceStats> {
        self.service.finish()
    }
}
