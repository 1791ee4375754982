//! Verdicts from measurements: pure functions, no processes.

pub mod integrity;
