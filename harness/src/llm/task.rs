//! One task (one problem) of an agent run: the [`TaskCtx`] each agent's loop gets (model
//! calls charged to the task, kernels evaluated and kept, rounds logged), what the task
//! produced ([`KernelResult`], [`Round`], [`TaskResult`], [`SelectionReport`]) and the old
//! final pick (the fastest measurement), which [`super::select`] falls back on.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, Result};
use kbench_record::{AgentCost, EvalRecord};
use kbench_suites::Problem;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::client::{ChatReply, Llm, LlmError, Spend};
use super::evaluator::Evaluator;
use super::feedback::ProfileFeedback;
use super::options::{Budget, Options};

/// One kernel an agent produced, with its evaluation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct KernelResult {
    pub(crate) name: String,
    pub(crate) sha256: String,
    pub(crate) correct: bool,
    pub(crate) speedup: Option<f64>,
    pub(crate) outcome: String,
}

impl KernelResult {
    pub(crate) fn from_record(r: &EvalRecord) -> Self {
        Self {
            name: r.candidate.name.clone(),
            sha256: r.candidate.sha256.clone(),
            correct: r.outcome.is_ok(),
            speedup: r.timing.as_ref().map(|t| t.speedup),
            outcome: r.outcome.to_string(),
        }
    }

    /// Speedup counted for picking: correct kernels by speedup (untimed ones as 0).
    pub(crate) fn score(&self) -> Option<f64> {
        self.correct.then(|| self.speedup.unwrap_or(0.0))
    }
}

/// One round / turn / step of a task, as logged in `agent/<task>/rounds.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub(crate) struct Round {
    pub(crate) index: u32,
    /// e.g. `seed`, `correction`, `optimisation`, `turn`, `step`.
    pub(crate) kind: String,
    /// Trajectory (kevin), else 0.
    #[serde(default)]
    pub(crate) trajectory: u32,
    /// The feedback this round's prompt carried (error tail, Judge issue, speedup …).
    pub(crate) feedback: Option<String>,
    pub(crate) kernel: Option<KernelResult>,
    /// Why the round failed without a kernel (malformed reply, bad tool arguments …).
    pub(crate) failed: Option<String>,
}

/// The outcome of one task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct TaskResult {
    pub(crate) problem: String,
    pub(crate) agent: String,
    pub(crate) kernels: Vec<KernelResult>,
    /// The kernel written to `runs/`, chosen as [`super::select`] says: with a selection,
    /// the result of its fresh measurement (record `final_<name>`); else the fastest
    /// correct one, else the last one produced.
    pub(crate) final_kernel: Option<KernelResult>,
    /// How the final kernel was chosen (absent without a selection: no correct timed kernel,
    /// a run without timing, `--finalists 0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) selection: Option<SelectionReport>,
    pub(crate) rounds: u32,
    pub(crate) failed_rounds: u32,
    pub(crate) spend: Spend,
    pub(crate) wall_s: f64,
    pub(crate) stopped: Option<String>,
    /// Agent-specific numbers (kevin: best-of-T and average-of-T).
    pub(crate) extra: Value,
}

/// How a task's final kernel was chosen ([`super::select`]), in `agent_tasks.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct SelectionReport {
    /// Correct, timed kernels with distinct sources the agent wrote.
    pub(crate) distinct_correct: u32,
    /// The finalists, in the order they were re-timed.
    pub(crate) finalists: Vec<Finalist>,
    /// The agent's kernel chosen.
    pub(crate) chosen: String,
    /// The record of the fresh measurement taken after the choice: the task's result.
    pub(crate) final_record: String,
    /// That fresh measurement's speedup (`None` when it was not correct or not timed).
    pub(crate) final_speedup: Option<f64>,
}

/// One finalist: its speedup as the agent measured it and in the selection batch.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Finalist {
    pub(crate) name: String,
    pub(crate) sha256: String,
    /// Mean over the agent's measurements of this source.
    pub(crate) agent_speedup: f64,
    /// In the selection batch (`None` for a lone finalist, or when it failed there).
    pub(crate) selection_speedup: Option<f64>,
}

/// What each agent's task function gets.
pub(crate) struct TaskCtx<'a> {
    pub(crate) problem: &'a Problem,
    pub(crate) opts: &'a Options,
    pub(crate) llm: Option<&'a Llm>,
    pub(crate) eval: &'a Evaluator,
    pub(crate) budget: &'a Budget,
    pub(crate) profiler: &'a dyn ProfileFeedback,
    pub(crate) dir: PathBuf,
    pub(crate) started: Instant,
    pub(crate) spend: Mutex<Spend>,
    pub(crate) gpu: String,
    pub(super) rounds_log: Mutex<Vec<Round>>,
    /// Sources by kernel name, for the final pick.
    pub(super) sources: Mutex<Vec<(KernelResult, String)>>,
    pub(crate) stopped: Mutex<Option<String>>,
    /// Per stream: the model calls since its previous kernel and when that kernel was
    /// submitted (absent: since the task's start), for each kernel's record `cost`.
    pub(super) unbilled: Mutex<HashMap<String, (Spend, Instant)>>,
}

impl TaskCtx<'_> {
    /// The task's stream name for the LLM log (`L1_P3`, plus a suffix per trajectory).
    pub(crate) fn stream(&self, suffix: &str) -> String {
        format!(
            "level{}_problem{}{}",
            self.problem.level, self.problem.id, suffix
        )
    }

    /// Checks the budgets; records and returns the reason when one is exceeded.
    pub(crate) fn over_budget(&self) -> Option<String> {
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
    pub(crate) fn chat(
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
                self.unbilled
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(stream.to_string())
                    .or_insert((Spend::default(), self.started))
                    .0
                    .add(&r);
                Ok(Ok(r))
            }
            Err(e) if e.is_fatal() => Err(anyhow::anyhow!("{e}")),
            Err(e) => Ok(Err(e)),
        }
    }

    /// Evaluates a kernel of the task's one stream, keeps its source under
    /// `agent/<task>/kernels/` and notes it.
    pub(crate) fn evaluate(&self, name: &str, source: &str) -> Result<(EvalRecord, KernelResult)> {
        self.evaluate_sample(&self.stream(""), name, 0, source)
    }

    /// [`evaluate`](Self::evaluate) as sample (trajectory) `sample`, written by the model
    /// calls of `stream`: its record's `cost` is theirs since the stream's previous kernel.
    pub(crate) fn evaluate_sample(
        &self,
        stream: &str,
        name: &str,
        sample: u32,
        source: &str,
    ) -> Result<(EvalRecord, KernelResult)> {
        let kdir = self.dir.join("kernels");
        std::fs::create_dir_all(&kdir)?;
        std::fs::write(kdir.join(format!("{name}.py")), source)
            .with_context(|| format!("saving kernel {name}"))?;
        let cost = self.bill(stream);
        let rec = self
            .eval
            .evaluate(self.problem, name, sample, source, cost)?;
        let k = KernelResult::from_record(&rec);
        self.sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((k.clone(), source.to_string()));
        Ok((rec, k))
    }

    /// The cost of the next kernel of `stream`: its calls since its previous kernel, and the
    /// time since then (or since the task's start); the stream starts afresh. `None` for
    /// an agent without a model (the command agent: what its program spent is unknown).
    fn bill(&self, stream: &str) -> Option<AgentCost> {
        self.llm?;
        let now = Instant::now();
        let mut m = self.unbilled.lock().unwrap_or_else(|e| e.into_inner());
        let (spend, since) = m
            .insert(stream.to_string(), (Spend::default(), now))
            .unwrap_or((Spend::default(), self.started));
        Some(agent_cost(&spend, now.duration_since(since).as_secs_f64()))
    }

    /// The model calls of every stream since its last kernel, taken (billed once): for the
    /// record of the task's final measurement, or its `no_kernel` record when it produced
    /// none. Wall time: since the task's latest kernel (or its start). `None` when there
    /// are no such calls (the command agent has none at all).
    pub(super) fn unbilled_rest(&self) -> Option<AgentCost> {
        let mut m = self.unbilled.lock().unwrap_or_else(|e| e.into_inner());
        let mut spend = Spend::default();
        let mut latest = self.started;
        for (s, since) in m.values_mut() {
            spend.calls += s.calls;
            spend.input_tokens += s.input_tokens;
            spend.output_tokens += s.output_tokens;
            spend.cost_usd += s.cost_usd;
            latest = latest.max(*since);
            *s = Spend::default();
        }
        (spend.calls > 0).then(|| agent_cost(&spend, latest.elapsed().as_secs_f64()))
    }

    pub(crate) fn log_round(&self, r: Round) -> Result<()> {
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
    pub(crate) fn save_text(&self, name: &str, text: &str) {
        let _ = std::fs::write(self.dir.join(name), text);
    }
}

fn agent_cost(spend: &Spend, wall_s: f64) -> AgentCost {
    AgentCost {
        calls: spend.calls,
        prompt_tokens: spend.input_tokens,
        completion_tokens: spend.output_tokens,
        tokens: spend.input_tokens + spend.output_tokens,
        usd: spend.cost_usd,
        wall_s,
        gpu_s: None,
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
