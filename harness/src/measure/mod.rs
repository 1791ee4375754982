//! Raw measurements, no verdicts: the station (an executor's device), reference sessions
//! and their cases, running a candidate on a case, timing driven one call at a time, profiling.
//!
//! May import: `gpu`, `worker`, `config`, `runlog`, `agents` and the small crates. What it
//! returns is data (outputs, samples, replies); `judge` turns it into outcomes.

mod ahead_load;
mod ctx;
pub(crate) mod device_case;
pub(crate) mod exchange;
pub(crate) mod gated;
mod host_wait;
mod kept_cases;
pub(crate) mod mode_check;
pub(crate) mod phase_memory;
mod probe;
pub(crate) mod profile;
pub(crate) mod ref_case;
pub(crate) mod ref_failure;
pub(crate) mod reference;
mod station;
mod timed_calls;

pub(crate) use ctx::Ctx;
pub(crate) use station::Station;
