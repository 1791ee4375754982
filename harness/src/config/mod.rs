//! Validated configuration: plain values in (the strings and numbers of the command line, but
//! no clap type: `commands/` turns arguments into these), checked values and resolved paths
//! out. Everything that can be wrong with a run's settings is reported here, before any
//! worker starts.
//!
//! Owns [`RunConfig`] and its parts (`run`), the reading of device, GPU, case-family and
//! `--select` values (`resolve`), problem loading (`suite`) and shards (`shard`). May import
//! `exit`, `gpu/`, `worker/` and `agents/` (the candidates of `AgentConfig::Given`), and the
//! small crates (the baseline table is the baselines crate's).

pub(crate) mod resolve;
pub(crate) mod run;
pub(crate) mod shard;
pub(crate) mod suite;

pub(crate) use resolve::{families_help, resolve_device};
pub(crate) use run::{AgentConfig, EvalSpec, RunConfig, TimingConfig};
pub(crate) use suite::{load_suite, materialize_problem, Suite, SuiteSpec};
