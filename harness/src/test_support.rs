//! Fixtures shared by unit tests of several modules.

use kbench_record::perf::{ArchRates, Peaks};
use kbench_record::EvalRecord;

/// An H100 SXM's peaks as `kbench gpus` derives them: 132 SMs at 1980 MHz, HBM3 at 2619 MHz
/// on a 5120-bit bus.
pub(crate) fn h100() -> Peaks {
    Peaks::from_rates(
        &ArchRates::for_cc(9, 0).unwrap(),
        132,
        1980.0,
        2.0 * 2619e6 * 5120.0 / 8.0,
    )
}

/// The records of the committed `one-shot` report fixture run.
pub(crate) fn one_shot_records() -> Vec<EvalRecord> {
    include_str!("../../tests/fixtures/report_runs/one-shot/records.jsonl")
        .lines()
        .filter_map(|l| serde_json::from_str::<EvalRecord>(l).ok())
        .collect()
}

/// An ncu profile of 3 calls on an H100 as `kbench profile` reports it (no cost, no speed of
/// light); tests set what they need on top.
pub(crate) fn h100_ncu_report(
    problem: &str,
    ncu: crate::measure::profile::NcuProfile,
) -> crate::measure::profile::ProfileReport {
    crate::measure::profile::ProfileReport {
        problem: problem.into(),
        kernel: "k.py".into(),
        device: "cuda:0".into(),
        device_name: "NVIDIA H100 80GB HBM3".into(),
        source: "ncu".into(),
        fallback_reason: None,
        calls: 3,
        wall_s_per_call: Some(2e-3),
        ncu: Some(ncu),
        torch_events: vec![],
        peaks: Some(h100()),
        cost: None,
        speed_of_light: None,
        sol_ratio: None,
        ncu_csv: None,
    }
}
