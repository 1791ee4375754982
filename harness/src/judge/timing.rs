//! Timing's verdicts: a candidate's timing answers (errors, integrity probes, claims that do
//! not fit the harness's clock, malformed samples), and the summary of the raw samples.

use kbench_record::protocol::Frame;
use kbench_record::{Device, Outcome, Phase, TimingSummary};

use serde_json::Value;

use super::faults::error_outcome;
use super::{integrity, Tolerance};
use crate::measure::reference::{DevTensorOwned, RefCase};
use crate::measure::timing::{RawTiming, RoundJudge};
use crate::measure::Station;

/// How a candidate's timing ended.
pub enum TimingResult {
    Measured(TimingSummary),
    /// The candidate broke a timing rule.
    Failed(Outcome),
    /// The reference could not be timed; the candidate keeps its verdict, untimed.
    ReferenceFailed(String),
}

/// The candidate's timing rounds judged as they come.
pub struct CandidateRounds<'a> {
    /// Inputs the reference itself writes to (not flagged `input-mutated`).
    pub allowed_mutations: &'a [u64],
    /// The timed case on the device (its checked calls are compared there): the run's
    /// tolerance, the station and the case.
    pub device: Option<(Tolerance, &'a Station, &'a RefCase)>,
}

impl RoundJudge for CandidateRounds<'_> {
    fn answer(&self, reply: &Frame, round: u32) -> Option<Outcome> {
        if reply.kind() == "error" {
            return Some(error_outcome(reply, Phase::Time));
        }
        let what = format!("timing round {round}");
        integrity::probe_failure(reply.header.get("integrity"), self.allowed_mutations, &what)
    }

    fn samples(&self, samples: Result<&[f64], &str>, n: u32, wall: f64) -> Option<Outcome> {
        match samples {
            Ok(s) => {
                // The harness's own clock bounds what the candidate claims.
                let claimed: f64 = s.iter().sum::<f64>() / 1e3;
                (claimed > wall * 1.01 + 1e-3).then(|| Outcome::Integrity {
                    flag: integrity::TIME_CLAIM_EXCEEDS_WALL_CLOCK.into(),
                    detail: format!(
                        "{n} timed calls claimed {claimed:.6} s but the timing phase took {wall:.6} s by the harness's clock"
                    ),
                })
            }
            Err(e) => Some(Outcome::Integrity {
                flag: integrity::MALFORMED_TIMING.into(),
                detail: e.to_string(),
            }),
        }
    }

    fn device_call(
        &self,
        round: u32,
        call: u32,
        described: &[Value],
        slots: &[DevTensorOwned],
    ) -> Option<Outcome> {
        let (tol, station, rc) = self.device?;
        super::timed::judge_timed_device_call(tol, station, rc, round, call, described, slots)
    }

    fn unreturned(&self, round: u32, call: u32) -> Outcome {
        Outcome::Integrity {
            flag: integrity::MALFORMED_TIMING.into(),
            detail: format!(
                "timing round {round}: the answer lacks the outputs of its checked timed call {call}"
            ),
        }
    }
}

/// The timing summary of a complete timing phase: statistics of both sides and the
/// speedups, or why there are none.
pub fn summarize(raw: RawTiming, warmup: u32, l2_flush: bool, device: Device) -> TimingResult {
    let stats =
        |clock: String, s: Vec<f64>, wall: f64| kbench_reports::timing_stats(&clock, s, wall);
    let (reference, candidate) = match (
        stats(
            raw.reference_clock,
            raw.reference_samples,
            raw.reference_wall_s,
        ),
        stats(
            raw.candidate_clock,
            raw.candidate_samples,
            raw.candidate_wall_s,
        ),
    ) {
        (Ok(r), Ok(c)) => (r, c),
        (Err(e), _) => return TimingResult::ReferenceFailed(format!("reference samples: {e}")),
        (_, Err(e)) => {
            return TimingResult::Failed(Outcome::Integrity {
                flag: integrity::MALFORMED_TIMING.into(),
                detail: e.to_string(),
            })
        }
    };
    let paired = kbench_reports::paired_speedup(
        &reference.samples_ms,
        &candidate.samples_ms,
        raw.per_round as usize,
    );
    let (
        Some(kbench_reports::Speedup {
            median: speedup_of_medians,
            mean: speedup_mean,
        }),
        Some(speedup),
    ) = (kbench_reports::speedup(&reference, &candidate), paired)
    else {
        return TimingResult::Failed(Outcome::Integrity {
            flag: integrity::MALFORMED_TIMING.into(),
            detail: format!(
                "no finite speedup from reference {} ms and candidate {} ms",
                reference.median_ms, candidate.median_ms
            ),
        });
    };
    TimingResult::Measured(TimingSummary {
        reference,
        candidate,
        speedup,
        speedup_of_medians: Some(speedup_of_medians),
        speedup_mean,
        warmup,
        l2_flush: l2_flush && matches!(device, Device::Cuda(_)),
        rounds: raw.rounds,
        round_warmup: Some(raw.round_warmup),
    })
}
