//! Validated configuration: plain values in (the strings and numbers of the command line, but
//! no clap type: `commands/` turns arguments into these), checked values and resolved paths
//! out. Everything that can be wrong with a run's settings is reported here, before any
//! worker starts.
//!
//! Owns [`RunConfig`] and its parts (`run`), the reading of device, GPU, case-family and
//! `--select` values (`resolve`), problem loading (`suite`) and shards (`shard`). May import
//! `exit`, `gpu/`, `worker/` and `agents/` (the candidates of `AgentConfig::Given`), and the
//! small crates (the baseline table is the baselines crate's).

pub mod resolve;
pub mod run;
pub mod shard;
pub mod suite;

pub use resolve::{
    default_case_cache_bytes, families_help, parse_families, resolve_device, resolve_gpus,
    Selection,
};
pub use run::{
    AgentConfig, EvalSpec, RoundWarmup, RunConfig, Timeouts, TimingConfig, DEFAULT_COMPILE_LOAD_S,
    DEFAULT_LOAD_S, ROUND_WARMUP_UNTIL_MS,
};
pub use suite::{load_suite, materialize_problem, Suite, SuiteSpec};
