//! Running evaluations: the work queue, the one executor (one per device, the only code that
//! drives workers concurrently), `kbench run`'s whole-plan run, the agents' evaluation
//! service, progress, and the timing cores' affinity.
//!
//! May import every box below it (`eval` and what it builds on). Prints only progress.

pub(crate) mod affinity;
mod engine;
mod executor;
mod order;
mod progress;
mod queue;
mod run;
pub(crate) mod run_dir;
mod service;

pub(crate) use executor::device_lock;
pub(crate) use progress::Heartbeat;
pub(crate) use run::run;
pub(crate) use service::{Provenance, Service, ServiceStats};
