//! One task (one problem) of an agent run: the [`TaskCtx`] each agent's loop gets (model
//! calls charged to the task, kernels evaluated and kept, rounds logged), what the task
//! produced ([`KernelResult`], [`Round`], [`TaskResult`], [`SelectionReport`]) and the old
//! final pick (the fastest measurement), which [`super::select`] falls back on.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, Result};
use kbench_record::EvalRecord;
use kbench_suites::Problem;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::client::{ChatReply, Llm, LlmError, Spend};
use super::evaluator::Evaluator;
use super::feedback::ProfileFeedback;
use super::options::{Budget, Options};

/// One kernel an agent produced, with its evaluation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KernelResult {
    pub name: String,
    pub sha256: String,
    pub correct: bool,
    pub speedup: Option<f64>,
    pub outcome: String,
}

impl KernelResult {
    pub fn from_record(r: &EvalRecord) -> Self {
        Self {
            name: r.candidate.name.clone(),
            sha256: r.candidate.sha256.clone(),
            correct: r.outcome.is_ok(),
            speedup: r.timing.as_ref().map(|t| t.speedup),
            outcome: r.outcome.to_string(),
        }
    }

    /// Speedup counted for picking: correct kernels by speedup (untimed ones as 0).
    pub fn score(&self) -> Option<f64> {
        self.correct.then(|| self.speedup.unwrap_or(0.0))
    }
}

/// One round / turn / step of a task, as logged in `agent/<task>/rounds.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Round {
    pub index: u32,
    /// e.g. `seed`, `correction`, `optimisation`, `turn`, `step`.
    pub kind: String,
    /// Trajectory (kevin), else 0.
    #[serde(default)]
    pub trajectory: u32,
    /// The feedback this round's prompt carried (error tail, Judge issue, speedup …).
    pub feedback: Option<String>,
    pub kernel: Option<KernelResult>,
    /// Why the round failed without a kernel (malformed reply, bad tool arguments …).
    pub failed: Option<String>,
}

/// The outcome of one task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskResult {
    pub problem: String,
    pub agent: String,
    pub kernels: Vec<KernelResult>,
    /// The kernel written to `runs/`, chosen as [`super::select`] says: with a selection,
    /// the result of its fresh measurement (record `final_<name>`); else the fastest
    /// correct one, else the last one produced.
    pub final_kernel: Option<KernelResult>,
    /// How the final kernel was chosen (absent without a selection: no correct timed kernel,
    /// a run without timing, `--finalists 0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<SelectionReport>,
    pub rounds: u32,
    pub failed_rounds: u32,
    pub spend: Spend,
    pub wall_s: f64,
    pub stopped: Option<String>,
    /// Agent-specific numbers (kevin: best-of-T and average-of-T).
    pub extra: Value,
}

/// How a task's final kernel was chosen ([`super::select`]), in `agent_tasks.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SelectionReport {
    /// Correct, timed kernels with distinct sources the agent wrote.
    pub distinct_correct: u32,
    /// The finalists, in the order they were re-timed.
    pub finalists: Vec<Finalist>,
    /// The agent's kernel chosen.
    pub chosen: String,
    /// The record of the fresh measurement taken after the choice: the task's result.
    pub final_record: String,
    /// That fresh measurement's speedup (`None` when it was not correct or not timed).
    pub final_speedup: Option<f64>,
}

/// One finalist: its speedup as the agent measured it and in the selection batch.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Finalist {
    pub name: String,
    pub sha256: String,
    /// Mean over the agent's measurements of this source.
    pub agent_speedup: f64,
    /// In the selection batch (`None` for a lone finalist, or when it failed there).
    pub selection_speedup: Option<f64>,
}

/// What each agent's task function gets.
pub struct TaskCtx<'a> {
    pub problem: &'a Problem,
    pub opts: &'a Options,
    pub llm: Option<&'a Llm>,
    pub eval: &'a Evaluator,
    pub budget: &'a Budget,
    pub profiler: &'a dyn ProfileFeedback,
    pub dir: PathBuf,
    pub started: Instant,
    pub spend: Mutex<Spend>,
    pub gpu: String,
    pub(super) rounds_log: Mutex<Vec<Round>>,
    /// Sources by kernel name, for the final pick.
    pub(super) sources: Mutex<Vec<(KernelResult, String)>>,
    pub stopped: Mutex<Option<String>>,
}

impl TaskCtx<'_> {
    /// The task's stream name for the LLM log (`L1_P3`, plus a suffix per trajectory).
    pub fn stream(&self, suffix: &str) -> String {
        format!(
            "level{}_problem{}{}",
            self.problem.level, self.problem.id, suffix
        )
    }

    /// Checks the budgets; records and returns the reason when one is exceeded.
    pub fn over_budget(&self) -> Option<String> {
        let spent = *self.spend.lock().unwrap_or_else(|e| e.into_inner());
        let why = self.budget.exceeded(self.llm, self.started, &spent)?;
        self.stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(why.clone());
        Some(why)
    }

    /// A model call charged to this task. Fatal errors (bad key, unknown model, replay
    /// mismatch) end the run; others are returned for the round to fail with.
    pub fn chat(
        &self,
        model: &str,
        stream: &str,
        label: &str,
        messages: &[Value],
        tools: Option<&[Value]>,
    ) -> Result<std::result::Result<ChatReply, LlmError>> {
        let llm = self.llm.context("this agent has no model configured")?;
        match llm.chat(model, stream, label, messages, tools) {
            Ok(r) => {
                self.spend.lock().unwrap_or_else(|e| e.into_inner()).add(&r);
                Ok(Ok(r))
            }
            Err(e) if e.is_fatal() => Err(anyhow::anyhow!("{e}")),
            Err(e) => Ok(Err(e)),
        }
    }

    /// Evaluates a kernel, keeps its source under `agent/<task>/kernels/` and notes it.
    pub fn evaluate(&self, name: &str, source: &str) -> Result<(EvalRecord, KernelResult)> {
        self.evaluate_sample(name, 0, source)
    }

    /// [`evaluate`](Self::evaluate) as sample (trajectory) `sample`.
    pub fn evaluate_sample(
        &self,
        name: &str,
        sample: u32,
        source: &str,
    ) -> Result<(EvalRecord, KernelResult)> {
        let kdir = self.dir.join("kernels");
        std::fs::create_dir_all(&kdir)?;
        std::fs::write(kdir.join(format!("{name}.py")), source)
            .with_context(|| format!("saving kernel {name}"))?;
        let rec = self.eval.evaluate(self.problem, name, sample, source)?;
        let k = KernelResult::from_record(&rec);
        self.sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((k.clone(), source.to_string()));
        Ok((rec, k))
    }

    pub fn log_round(&self, r: Round) -> Result<()> {
        let line = serde_json::to_string(&r)?;
        let path = self.dir.join("rounds.jsonl");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        use std::io::Write;
        writeln!(f, "{line}")?;
        self.rounds_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(r);
        Ok(())
    }

    /// Saves a prompt or message as text beside the rounds (for people reading the run).
    pub fn save_text(&self, name: &str, text: &str) {
        let _ = std::fs::write(self.dir.join(name), text);
    }
}

/// The fastest correct kernel, else the last one produced.
pub(super) fn pick_final(sources: &[(KernelResult, String)]) -> Option<(KernelResult, String)> {
    let best = sources.iter().filter(|(k, _)| k.correct).max_by(|a, b| {
        a.0.score()
            .unwrap_or(0.0)
            .total_cmp(&b.0.score().unwrap_or(0.0))
    });
    best.or(sources.last()).cloned()
}

/// Reads `agent_tasks.jsonl` of a run.
pub fn read_tasks(dir: &Path) -> Result<Vec<TaskResult>> {
    let path = dir.join("agent_tasks.jsonl");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).with_context(|| format!("a line of {}", path.display())))
        .collect()
}
