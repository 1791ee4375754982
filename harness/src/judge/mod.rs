//! Verdicts from measurements: worker faults and error answers as outcomes, each case's
//! comparison (on the host, or on the GPU through the harness's own comparison kernels),
//! the timed-call checks, integrity flags and advisories, and the speed of light.
//!
//! May import: `gpu` (the comparison kernels), `worker` (to read answers), `measure` (the
//! data it judges) and the small crates. Starts no process and prints nothing.

pub(crate) mod case;
pub(crate) mod clock;
pub(crate) mod device;
pub(crate) mod faults;
pub(crate) mod integrity;
pub(crate) mod kernels;
pub(crate) mod mode;
pub(crate) mod self_timing;
pub(crate) mod settle;
pub(crate) mod speed;
pub(crate) mod timed;
pub(crate) mod timing;

use kbench_record::{Precision, ToleranceProfile};

/// The tolerance a comparison is judged by: the profile and the working precision.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tolerance {
    pub(crate) profile: ToleranceProfile,
    pub(crate) precision: Precision,
}
