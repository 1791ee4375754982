//! Verdicts from measurements: worker faults and error answers as outcomes, each case's
//! comparison (on the host, or on the GPU through the harness's own comparison kernels),
//! the timed-call checks, integrity flags and advisories, and the speed of light.
//!
//! May import: `gpu` (the comparison kernels), `worker` (to read answers), `measure` (the
//! data it judges) and the small crates. Starts no process and prints nothing.

pub(crate) mod case;
pub mod clock;
pub(crate) mod device;
pub mod faults;
pub mod integrity;
pub(crate) mod kernels;
pub mod mode;
pub mod self_timing;
pub mod speed;
pub(crate) mod timed;
pub mod timing;

use kbench_record::{Precision, ToleranceProfile};

/// The tolerance a comparison is judged by: the profile and the working precision.
#[derive(Debug, Clone, Copy)]
pub struct Tolerance {
    pub profile: ToleranceProfile,
    pub precision: Precision,
}
