//! Raw measurements: reference sessions and their cases, interleaved timing, profiling.

pub mod profile;
pub(crate) mod reference;
pub(crate) mod timing;
