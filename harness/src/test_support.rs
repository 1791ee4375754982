//! Fixtures shared by unit tests of several modules.

use kbench_record::perf::{ArchRates, Peaks};
use kbench_record::EvalRecord;

/// An H100 SXM's peaks as `kbench gpus` derives them: 132 SMs at 1980 MHz, HBM3 at 2619 MHz
/// on a 5120-bit bus.
pub fn h100() -> Peaks {
    Peaks::from_rates(
        &ArchRates::for_cc(9, 0).unwrap(),
        132,
        1980.0,
        2.0 * 2619e6 * 5120.0 / 8.0,
    )
}

/// The records of the committed `one-shot` report fixture run.
pub fn one_shot_records() -> Vec<EvalRecord> {
    include_str!("../../tests/fixtures/report_runs/one-shot/records.jsonl")
        .lines()
        .filter_map(|l| serde_json::from_str::<EvalRecord>(l).ok())
        .collect()
}
