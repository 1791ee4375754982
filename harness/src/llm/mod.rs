//! Agents that write kernels in a loop with feedback: `coder-judge` (CudaForge), `kevin`
//! (Kevin's multi-turn refinement), `cuda-agent` (CUDA Agent's ReAct with tools) and
//! `command` (any external program). Each module names the published system it follows
//! (paper and released code) and what it keeps of it.
//!
//! Every kernel an agent writes is evaluated by the engine (the same workers,
//! case families and timing as `kbench run`), under the agent's name, into the run's own
//! `records.jsonl`; so `kbench report` picks the fastest correct kernel per task as
//! CudaForge does. Tasks and their LLM calls run concurrently (`--jobs`) and submit their
//! kernels to one evaluation service ([`crate::exec::Service`]): one evaluation at a time
//! per device (CPU timing and a GPU are never shared), each GPU of `--gpus` in parallel.
//!
//! What lives where: `options` (the agent kind, options, models per role and budgets),
//! `session` (the run over the problems), `task` (one task's context and results),
//! `evaluator` (kernels into the engine), `select` (the final kernel, chosen without rewarding
//! timing noise and measured afresh), `feedback` and [`ncu_feedback`] (profile
//! feedback), `prompt` (shared prompt pieces and reply parsing), [`client`] (the LLM client)
//! and [`fake_server`] (a scripted server for tests); one module per agent.
//!
//! `llm` is the last box before `commands/`: it may import any box below it (`exec`, `eval`,
//! `judge`, `measure`, `plan`, `agents`, `runlog`, `config`, `worker`, `gpu`, `exit`), and
//! no box below it imports it (`commands::run_config` builds [`Options`] from the flags).

pub mod client;
pub mod fake_server;

pub(crate) mod coder_judge;
pub(crate) mod command;
pub(crate) mod cuda_agent;
pub(crate) mod kevin;
pub(crate) mod ncu_feedback;

mod evaluator;
mod feedback;
mod options;
mod prompt;
mod select;
mod session;
mod task;

pub(crate) use feedback::{ProfileFeedback, TimingOnly};
pub(crate) use options::{Kind, Options};
#[cfg(test)]
pub(crate) use select::DEFAULT_FINALISTS;
pub(crate) use session::run;
