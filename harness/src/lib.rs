//! The kbench engine: configuration, Python environment, worker processes, agents, the
//! evaluation loop and the run log. `main.rs` is a thin dispatcher over this library.

pub mod agents;
pub mod cli;
pub mod commands;
pub mod config;
pub mod eval;
pub mod exec;
pub mod exit;
pub mod gpu;
pub mod judge;
pub mod llm;
pub mod measure;
pub mod plan;
pub mod runlog;
pub mod serve;
pub mod worker;

#[cfg(test)]
mod test_support;
