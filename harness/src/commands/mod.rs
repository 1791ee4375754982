//! The subcommands: the only layer that prints, and (with `cli/`) the only one that knows
//! clap's argument types. Each subcommand is a `command(args)` returning its exit code;
//! `run_config` turns arguments into the plain values of `config/`, `stop` installs the stop
//! flag of long commands. May import every box below it (`exit` to `llm/`).

pub mod audit;
pub mod baselines;
pub mod check;
pub mod demo;
pub mod gpus;
pub mod import;
pub mod list;
pub mod merge;
pub mod profile;
pub mod report;
pub mod run;
pub(crate) mod run_config;
pub mod serve;
pub mod setup;
pub mod slurm;
pub mod stop;
