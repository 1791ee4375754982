//! What a run planned to evaluate, as its `run.json` lists it (`planned`), so that a reader
//! can tell a record that was never written (or was deleted, or does not verify) from an
//! evaluation that was never asked for.
//!
//! A plan lists problems and, under each, the kernels (candidate name and sample) planned for
//! it. With [`PlannedKernels::Ahead`] every kernel was known when the run started (kernels on
//! disk, the reference agent, baseline modes); with [`PlannedKernels::AsWritten`] the agent
//! writes its kernels as it goes (the LLM agents): each problem is a task planned to get at
//! least one record, and each kernel joins the plan before its record is written.

use serde::{Deserialize, Serialize};

use crate::record::{eval_key, ProblemRef};

/// How a run's kernels came to be known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlannedKernels {
    /// Every kernel was listed when the run started.
    Ahead,
    /// The agent writes its kernels as it goes: every problem must get a record, and each
    /// kernel is listed before its record is written.
    AsWritten,
}

/// One kernel planned for a problem: its record's candidate name and sample.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedKernel {
    pub name: String,
    pub sample: u32,
}

/// One problem of the plan and the kernels planned for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedProblem {
    pub suite: String,
    pub level: u8,
    pub id: u32,
    pub name: String,
    #[serde(default)]
    pub kernels: Vec<PlannedKernel>,
}

impl PlannedProblem {
    /// The problem's key, as [`ProblemRef::key`] gives it (`kernelbench/L1/19`).
    pub fn key(&self) -> String {
        format!("{}/L{}/{}", self.suite, self.level, self.id)
    }
}

/// What a run planned to evaluate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub kernels: PlannedKernels,
    pub problems: Vec<PlannedProblem>,
}

impl Plan {
    pub fn new(kernels: PlannedKernels) -> Plan {
        Plan {
            kernels,
            problems: Vec::new(),
        }
    }

    /// Adds `problem` to the plan (once), with no kernel yet.
    pub fn add_problem(&mut self, problem: &ProblemRef) -> &mut PlannedProblem {
        let key = problem.key();
        let at = match self.problems.iter().position(|p| p.key() == key) {
            Some(at) => at,
            None => {
                self.problems.push(PlannedProblem {
                    suite: problem.suite.clone(),
                    level: problem.level,
                    id: problem.id,
                    name: problem.name.clone(),
                    kernels: Vec::new(),
                });
                self.problems.len() - 1
            }
        };
        &mut self.problems[at]
    }

    /// Adds a kernel of `problem` (the problem too, when new); whether it was new.
    pub fn add_kernel(&mut self, problem: &ProblemRef, name: &str, sample: u32) -> bool {
        let p = self.add_problem(problem);
        if p.kernels
            .iter()
            .any(|k| k.name == name && k.sample == sample)
        {
            return false;
        }
        p.kernels.push(PlannedKernel {
            name: name.to_string(),
            sample,
        });
        true
    }

    /// Everything `other` plans, added to this plan (a resumed run that selects more, the
    /// shards of a merge). A plan that lists its kernels as written stays so.
    pub fn extend(&mut self, other: &Plan) {
        if other.kernels == PlannedKernels::AsWritten {
            self.kernels = PlannedKernels::AsWritten;
        }
        for p in &other.problems {
            let r = p.problem_ref();
            self.add_problem(&r);
            for k in &p.kernels {
                self.add_kernel(&r, &k.name, k.sample);
            }
        }
    }

    /// The record key of every planned kernel, for `agent` ([`eval_key`]).
    pub fn keys(&self, agent: &str) -> Vec<String> {
        self.problems
            .iter()
            .flat_map(|p| {
                let pk = p.key();
                p.kernels
                    .iter()
                    .map(move |k| eval_key(&pk, agent, &k.name, k.sample))
            })
            .collect()
    }
}

impl PlannedProblem {
    /// The problem as a record names it (its file and hash are not part of the plan).
    fn problem_ref(&self) -> ProblemRef {
        ProblemRef {
            suite: self.suite.clone(),
            level: self.level,
            id: self.id,
            name: self.name.clone(),
            file: String::new(),
            sha256: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(id: u32) -> ProblemRef {
        ProblemRef {
            suite: "smoke".into(),
            level: 1,
            id,
            name: format!("P{id}"),
            file: format!("{id}_P{id}.py"),
            sha256: "0".repeat(64),
        }
    }

    #[test]
    fn kernels_are_listed_once_and_keyed_as_records_are() {
        let mut plan = Plan::new(PlannedKernels::Ahead);
        assert!(plan.add_kernel(&problem(1), "reference", 0));
        assert!(!plan.add_kernel(&problem(1), "reference", 0));
        assert!(plan.add_kernel(&problem(1), "reference", 1));
        plan.add_problem(&problem(2));
        assert_eq!(plan.problems.len(), 2);
        assert_eq!(
            plan.keys("reference"),
            vec![
                "smoke/L1/1::reference::reference::0",
                "smoke/L1/1::reference::reference::1"
            ]
        );
        let mut other = Plan::new(PlannedKernels::AsWritten);
        other.add_kernel(&problem(3), "round01", 0);
        other.add_kernel(&problem(1), "reference", 0);
        plan.extend(&other);
        assert_eq!(plan.kernels, PlannedKernels::AsWritten);
        assert_eq!(plan.keys("reference").len(), 3);
        let json = serde_json::to_string(&plan).unwrap();
        assert!(json.contains("\"kernels\":\"as-written\""), "{json}");
        assert_eq!(serde_json::from_str::<Plan>(&json).unwrap(), plan);
    }
}
