//! The plan of a run: every (problem, candidate) its agent proposes, less those the run log
//! already holds (the resume filter), keyed as records are; and the records whose verdict
//! is known without running anything (a problem with no kernel, an empty kernel, a broken
//! problem file).
//!
//! May import: `agents` and the small crates.

use anyhow::Result;
use kbench_record::{Outcome, ProblemRef};
use kbench_suites::{BrokenProblem, Problem};

use crate::agents::{Agent, Candidate, NO_KERNEL};

/// The key a candidate's record has in the run log (`problem::agent::name::sample`).
pub(crate) fn record_key(p: &Problem, agent: &str, c: &Candidate) -> String {
    kbench_record::eval_key(&p.key(), agent, &c.name, c.sample)
}

/// The candidate name of a broken problem file's `problem_error` record.
pub(crate) const PROBLEM_ERROR: &str = "problem_error";

/// A record written without starting any worker: its verdict is known from the plan alone.
#[derive(Debug, Clone)]
pub(crate) struct Unjudged {
    pub(crate) problem: ProblemRef,
    pub(crate) cand: Candidate,
    /// `no_kernel`, `problem_error`, or `compile_error` for a kernel file not read.
    pub(crate) outcome: Outcome,
    /// Its record key.
    pub(crate) key: String,
}

/// What is left to do.
pub(crate) struct Plan<'p> {
    /// Each problem with its candidates not yet recorded, in the suite's order (problems
    /// with nothing left are omitted).
    pub(crate) pending: Vec<(&'p Problem, Vec<Candidate>)>,
    /// Records to write without a worker, not yet recorded.
    pub(crate) unjudged: Vec<Unjudged>,
    /// Candidates skipped because they were already recorded (unjudged ones included).
    pub(crate) skipped: usize,
}

impl Plan<'_> {
    /// Candidates to evaluate.
    pub(crate) fn total(&self) -> usize {
        self.pending.iter().map(|(_, c)| c.len()).sum()
    }
}

/// The `no_kernel` record of a blank candidate (empty or whitespace-only source), if it is
/// one: a placeholder file, or the stand-in of a problem that got no kernel at all.
pub(crate) fn blank_kernel(p: &Problem, agent: &str, c: &Candidate) -> Option<Unjudged> {
    if !c.is_blank() {
        return None;
    }
    let message = match &c.source_path {
        Some(path) => format!(
            "kernel file {} is empty (whitespace only): nothing to evaluate for {}",
            path.display(),
            p.key()
        ),
        None if c.name == NO_KERNEL => format!("agent {agent} gave no kernel for {}", p.key()),
        None => format!(
            "agent {agent} gave an empty kernel ({}) for {}",
            c.name,
            p.key()
        ),
    };
    Some(Unjudged {
        problem: p.to_ref(),
        cand: c.clone(),
        outcome: Outcome::NoKernel { message },
        key: record_key(p, agent, c),
    })
}

/// The `compile_error` record of a candidate whose file was not taken as a kernel (a link
/// out of its folder, a FIFO, not UTF-8, too large: [`Candidate::unreadable`]). Python
/// could not have loaded it either, and a reviewer reads why in the message.
pub(crate) fn unreadable_kernel(p: &Problem, agent: &str, c: &Candidate) -> Option<Unjudged> {
    let message = c.unreadable.clone()?;
    Some(Unjudged {
        problem: p.to_ref(),
        cand: c.clone(),
        outcome: Outcome::CompileError { message },
        key: record_key(p, agent, c),
    })
}

/// The `problem_error` record of a broken problem file.
pub(crate) fn broken_problem(b: &BrokenProblem, agent: &str) -> Unjudged {
    let cand = Candidate::new(PROBLEM_ERROR.into(), 0, String::new(), None);
    Unjudged {
        problem: b.to_ref(),
        key: kbench_record::eval_key(&b.key(), agent, &cand.name, cand.sample),
        cand,
        outcome: Outcome::ProblemError {
            message: b.to_string(),
        },
    }
}

/// The candidates of `agent` for `problems` whose record key `is_recorded` does not know,
/// and, for an agent that answers every problem, the `no_kernel` records of the problems it
/// gave no kernel for and the `problem_error` records of the `broken` problem files.
pub(crate) fn pending<'p>(
    problems: &'p [Problem],
    broken: &[BrokenProblem],
    agent: &dyn Agent,
    is_recorded: impl Fn(&str) -> bool,
) -> Result<Plan<'p>> {
    let mut pending = Vec::new();
    let mut unjudged = Vec::new();
    let mut skipped = 0;
    let answers = agent.answers_every_problem();
    let name = agent.name();
    for p in problems {
        let cands = agent.candidates(p)?;
        if cands.is_empty() && answers {
            let c = Candidate::missing();
            unjudged.push(Unjudged {
                problem: p.to_ref(),
                key: record_key(p, name, &c),
                cand: c,
                outcome: Outcome::NoKernel {
                    message: agent.why_no_kernel(p),
                },
            });
        }
        let mut left = Vec::new();
        for c in cands {
            match unreadable_kernel(p, name, &c).or_else(|| blank_kernel(p, name, &c)) {
                Some(u) => unjudged.push(u),
                None => left.push(c),
            }
        }
        left.retain(|c| {
            let done = is_recorded(&record_key(p, name, c));
            skipped += usize::from(done);
            !done
        });
        if !left.is_empty() {
            pending.push((p, left));
        }
    }
    if answers {
        unjudged.extend(broken.iter().map(|b| broken_problem(b, name)));
    }
    unjudged.retain(|u| {
        let done = is_recorded(&u.key);
        skipped += usize::from(done);
        !done
    });
    Ok(Plan {
        pending,
        unjudged,
        skipped,
    })
}

/// Every evaluation `agent` plans for `problems` (and the `broken` problem files), recorded or
/// not: what `run.json` lists, so that a record never written, deleted, or that does not
/// verify is counted as missing. Problems the agent proposes nothing for (and does not
/// answer) are not in it.
pub(crate) fn planned(
    problems: &[Problem],
    broken: &[BrokenProblem],
    agent: &dyn Agent,
) -> Result<kbench_record::Plan> {
    let all = pending(problems, broken, agent, |_| false)?;
    let mut plan = kbench_record::Plan::new(kbench_record::PlannedKernels::Ahead);
    for (p, cands) in &all.pending {
        let r = p.to_ref();
        for c in cands {
            plan.add_kernel(&r, &c.name, c.sample);
        }
    }
    for u in &all.unjudged {
        plan.add_kernel(&u.problem, &u.cand.name, u.cand.sample);
    }
    Ok(plan)
}

/// What an agent that writes its kernels as it goes plans (the LLM agents): every problem is
/// a task that must get a record (a broken problem file its `problem_error`); each kernel
/// joins the plan when it is recorded.
pub(crate) fn planned_tasks(problems: &[Problem], broken: &[BrokenProblem]) -> kbench_record::Plan {
    let mut plan = kbench_record::Plan::new(kbench_record::PlannedKernels::AsWritten);
    for p in problems {
        plan.add_problem(&p.to_ref());
    }
    for b in broken {
        plan.add_problem(&b.to_ref());
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::{GivenAgent, ReferenceAgent};

    fn broken() -> BrokenProblem {
        BrokenProblem {
            suite: "kernelbench".into(),
            level: 1,
            id: 7,
            name: "Broken".into(),
            file: "7_Broken.py".into(),
            path: "kb/level1/7_Broken.py".into(),
            sha256: String::new(),
            reason: "does not define `class Model`".into(),
        }
    }

    #[test]
    fn missing_and_blank_kernels_and_broken_problems_are_planned_as_records() {
        let problems = kbench_suites::smoke();
        let (p1, p2) = (&problems[0], &problems[1]);
        let blank = Candidate::new("blank".into(), 0, " \n\t".into(), Some("k/2_x.py".into()));
        let agent = GivenAgent {
            agent: "replay",
            candidates: vec![
                (
                    p1.key(),
                    Candidate::new("a".into(), 0, "class ModelNew: pass".into(), None),
                ),
                (p2.key(), blank),
            ],
        };
        let plan = pending(&problems, &[broken()], &agent, |_| false).unwrap();
        assert_eq!(plan.total(), 1);
        assert_eq!(plan.pending[0].0.key(), p1.key());
        let kinds: Vec<(String, &str, &str)> = plan
            .unjudged
            .iter()
            .map(|u| (u.problem.key(), u.cand.name.as_str(), u.outcome.kind()))
            .collect();
        // p2's blank file, then every other smoke problem's missing kernel, then the broken file.
        assert_eq!(kinds[0], (p2.key(), "blank", "no_kernel"));
        assert_eq!(kinds.len(), problems.len());
        assert!(kinds[1..problems.len() - 1]
            .iter()
            .all(|(_, n, k)| *n == NO_KERNEL && *k == "no_kernel"));
        assert_eq!(
            kinds.last().unwrap(),
            &(
                "kernelbench/L1/7".to_string(),
                PROBLEM_ERROR,
                "problem_error"
            )
        );
        let msg = plan.unjudged[0].outcome.to_string();
        assert!(msg.contains("k/2_x.py") && msg.contains("empty"), "{msg}");
        let msg = plan.unjudged.last().unwrap().outcome.to_string();
        assert!(
            msg.contains("7_Broken.py") && msg.contains("class Model"),
            "{msg}"
        );

        // Resumed: what is recorded is skipped, unjudged records included.
        let keys: Vec<String> = plan.unjudged.iter().map(|u| u.key.clone()).collect();
        let again = pending(&problems, &[broken()], &agent, |k| {
            keys.iter().any(|x| x == k)
        })
        .unwrap();
        assert!(again.unjudged.is_empty());
        assert_eq!((again.total(), again.skipped), (1, keys.len()));

        // The reference agent answers everything: nothing missing.
        let plan = pending(&problems, &[], &ReferenceAgent, |_| false).unwrap();
        assert_eq!((plan.total(), plan.unjudged.len()), (problems.len(), 0));

        // run.json's plan lists every record the run will write, recorded or not.
        let listed = planned(&problems, &[broken()], &agent).unwrap();
        let mut keys = listed.keys("replay");
        keys.sort();
        let mut want: Vec<String> = pending(&problems, &[broken()], &agent, |_| false)
            .unwrap()
            .unjudged
            .iter()
            .map(|u| u.key.clone())
            .chain([record_key(p1, "replay", &agent.candidates(p1).unwrap()[0])])
            .collect();
        want.sort();
        assert_eq!(keys, want);
        let tasks = planned_tasks(&problems, &[broken()]);
        assert_eq!(tasks.problems.len(), problems.len() + 1);
        assert!(tasks.keys("kevin").is_empty());
    }

    #[test]
    fn an_agent_that_measures_owes_no_kernel() {
        let problems = kbench_suites::smoke();
        let agent = crate::agents::baseline::BaselineAgent {
            plan: Default::default(),
        };
        let plan = pending(&problems, &[broken()], &agent, |_| false).unwrap();
        assert_eq!((plan.total(), plan.unjudged.len()), (0, 0));
    }
}
