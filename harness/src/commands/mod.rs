//! The subcommands: the only layer that prints.

pub mod audit;
pub mod baselines;
pub mod check;
pub mod merge;
pub mod profile;
pub mod report;
pub mod slurm;
