//! The kbench engine: configuration, Python environment, worker processes, agents, the
//! evaluation loop and the run log. `main.rs` is a thin dispatcher over this library.

pub mod affinity;
pub mod agents;
pub mod audit;
pub mod baselines;
pub mod build;
pub mod check;
pub mod cli;
pub mod config;
pub mod devcmp;
pub mod devmem;
pub mod engine;
pub mod exit;
pub mod fakellm;
pub mod gpu;
pub mod integrity;
pub mod llm;
pub mod llm_agents;
pub mod merge;
pub mod nvml;
pub mod profile;
pub mod python;
pub(crate) mod reference;
pub mod report;
pub mod runlog;
pub mod seed;
pub mod shard;
pub mod slurm;
pub(crate) mod timing;
pub mod worker;

#[cfg(test)]
mod test_support;
