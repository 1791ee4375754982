//! The plan of a run: every (problem, candidate) its agent proposes, less those the run log
//! already holds (the resume filter), keyed as records are.
//!
//! May import: `agents` and the small crates.

use anyhow::Result;
use kbench_suites::Problem;

use crate::agents::{Agent, Candidate};

/// The key a candidate's record has in the run log (`problem::agent::name::sample`).
pub fn record_key(p: &Problem, agent: &str, c: &Candidate) -> String {
    kbench_record::eval_key(&p.key(), agent, &c.name, c.sample)
}

/// What is left to evaluate.
pub struct Plan<'p> {
    /// Each problem with its candidates not yet recorded, in the suite's order (problems
    /// with nothing left are omitted).
    pub pending: Vec<(&'p Problem, Vec<Candidate>)>,
    /// Candidates skipped because they were already recorded.
    pub skipped: usize,
}

impl Plan<'_> {
    /// Candidates to evaluate.
    pub fn total(&self) -> usize {
        self.pending.iter().map(|(_, c)| c.len()).sum()
    }
}

/// The candidates of `agent` for `problems` whose record key `is_recorded` does not know.
pub fn pending<'p>(
    problems: &'p [Problem],
    agent: &dyn Agent,
    is_recorded: impl Fn(&str) -> bool,
) -> Result<Plan<'p>> {
    let mut pending = Vec::new();
    let mut skipped = 0;
    for p in problems {
        let left: Vec<Candidate> = agent
            .candidates(p)?
            .into_iter()
            .filter(|c| {
                let done = is_recorded(&record_key(p, agent.name(), c));
                skipped += usize::from(done);
                !done
            })
            .collect();
        if !left.is_empty() {
            pending.push((p, left));
        }
    }
    Ok(Plan { pending, skipped })
}
