//! The agent of baseline measurements: one candidate per baseline mode still to measure
//! (`kbench baselines measure`, and the missing times of `kbench run --baselines`).

use std::collections::BTreeMap;

use anyhow::Result;
use kbench_baselines::Mode;
use kbench_suites::Problem;

use super::{Agent, Candidate};

/// Agent name of baseline candidates in records.
pub(crate) use kbench_baselines::AGENT;

/// Proposes, per problem, one candidate per baseline mode still to measure.
pub(crate) struct BaselineAgent {
    /// Problem key (`kernelbench/L1/19`) → modes to measure.
    pub(crate) plan: BTreeMap<String, Vec<Mode>>,
}

impl Agent for BaselineAgent {
    fn name(&self) -> &str {
        AGENT
    }

    /// It measures, it does not answer: a problem whose modes are all stored proposes none.
    fn answers_every_problem(&self) -> bool {
        false
    }

    fn candidates(&self, problem: &Problem) -> Result<Vec<Candidate>> {
        let Some(modes) = self.plan.get(&problem.to_ref().key()) else {
            return Ok(Vec::new());
        };
        let compiled: Vec<Mode> = modes
            .iter()
            .copied()
            .filter(|m| *m != Mode::Eager)
            .collect();
        // Eager comes from the reference side of any record; only when no compile mode is
        // measured for the problem does an eager candidate carry the timing.
        let modes = if compiled.is_empty() {
            vec![Mode::Eager]
        } else {
            compiled
        };
        Ok(modes
            .into_iter()
            .map(|m| {
                let mut c = Candidate::new(
                    m.as_str().into(),
                    0,
                    m.candidate_source(&problem.source),
                    None,
                );
                c.warm_up = m != Mode::Eager;
                c
            })
            .collect())
    }
}
