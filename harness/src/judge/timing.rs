//! Timing's verdicts: a candidate's answers to its timed calls (errors, integrity probes,
//! claims the window does not hold, malformed samples), every call's outputs (`timed`), the
//! harness clock's support for its claims (`clock`), and the summary of the raw samples.

use kbench_record::protocol::{reply, Frame};
use kbench_record::{Device, Outcome, Phase, TimingSummary};
use serde_json::Value;

use super::faults::error_outcome;
use super::integrity;
use super::timed::TimedCheck;
use crate::measure::exchange::{CaseLayout, Exchange};
use crate::measure::gated::{CallJudge, RawGated, CALLS_PER_ROUND};

/// How a candidate's timing ended.
pub(crate) enum TimingResult {
    Measured(Box<TimingSummary>),
    /// Measured, and the harness's clock does not support the candidate's claims, by more
    /// than [`super::clock::forged_fraction`] of them: the summary is kept for the record
    /// (with the speedup the clock does support), the outcome fails the kernel. (Claims
    /// unsupported by less are `Measured`, every speedup the clock's.)
    Unsupported(Box<TimingSummary>, Outcome),
    /// The candidate broke a timing rule.
    Failed(Outcome),
    /// The reference could not be timed; the candidate keeps its verdict, untimed.
    ReferenceFailed(String),
}

/// The candidate's timed calls judged as they come.
pub(crate) struct CandidateCalls<'a> {
    pub(crate) check: TimedCheck<'a>,
    pub(crate) layout: &'a CaseLayout,
    pub(crate) device: Device,
    /// Timed calls before the timing may stop early (`settle`); set out of reach for the
    /// timings after the first.
    pub(crate) min_calls: std::cell::Cell<usize>,
}

impl CallJudge for CandidateCalls<'_> {
    fn answer(&self, reply: &Frame, call: u32) -> Option<Outcome> {
        if reply.kind() == "error" {
            return Some(error_outcome(reply, Phase::Time));
        }
        let what = format!("timed call {call}");
        let timed: reply::TimedCall = reply.reply();
        integrity::probe_failure(timed.integrity.as_ref(), &[], &what)
    }

    fn outputs(&self, reply: &Frame, call: u32, exchange: &Exchange) -> Option<Outcome> {
        let timed: reply::TimedCall = reply.reply();
        let described: Vec<Value> = timed.outputs.unwrap_or_default();
        self.check.judge(exchange, &described, self.layout, call)
    }

    fn sample(&self, claimed: Result<f64, String>, wall_ms: f64, call: u32) -> Option<Outcome> {
        match claimed {
            // The window holds the call: a claim longer than the window is impossible.
            Ok(ms) => (ms > wall_ms * 1.01 + 1e-3).then(|| Outcome::Integrity {
                flag: integrity::TIME_CLAIM_EXCEEDS_WALL_CLOCK.into(),
                detail: format!(
                    "timed call {call} claimed {ms:.6} ms but its window took {wall_ms:.6} ms by the harness's clock"
                ),
            }),
            Err(e) => Some(Outcome::Integrity {
                flag: integrity::MALFORMED_TIMING.into(),
                detail: format!("timed call {call}: {e}"),
            }),
        }
    }

    fn disturbed(&self, detail: String) -> Outcome {
        Outcome::Integrity {
            flag: integrity::REFERENCE_DISTURBED.into(),
            detail,
        }
    }

    fn settled(&self, raw: &RawGated) -> bool {
        super::settle::settled(raw, self.device, self.min_calls.get())
    }
}

/// The timing summary of a complete timing: both sides' statistics, the speedups, and the
/// harness clock's check of the candidate's claims.
pub(crate) fn summarize(
    raw: RawGated,
    warmup: u32,
    l2_flush: bool,
    device: Device,
) -> TimingResult {
    let mut clock = super::clock::check(&raw, device);
    let claims: Vec<f64> = raw.candidate.iter().map(|t| t.claimed_ms).collect();
    let (median_claim, _, _) = super::clock::median_interval(&mut claims.clone());
    // Claims the clock does not support by a little, or could not tell about: every figure
    // of the summary (speedups, intervals, times, the baselines' speedups read from them)
    // comes from the harness's clock, and the claims are kept beside its windows.
    let harness_timed = super::clock::harness_timed(&clock, median_claim, device);
    let candidate_samples = if harness_timed {
        clock.candidate_claimed_ms = claims;
        super::clock::supported_times(&raw)
    } else {
        claims
    };
    let walls = |v: &[f64]| v.iter().sum::<f64>() / 1e3;
    let stats = |clock: &str, s: Vec<f64>, wall: f64| kbench_reports::timing_stats(clock, s, wall);
    let (reference, candidate) = match (
        stats(
            &raw.reference_clock,
            raw.reference.iter().map(|t| t.claimed_ms).collect(),
            walls(&clock.reference_wall_ms),
        ),
        stats(
            if harness_timed {
                "harness"
            } else {
                &raw.candidate_clock
            },
            candidate_samples,
            walls(&clock.candidate_wall_ms),
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
    // Two consecutive pairs of calls make a round, one of each order (who goes first
    // alternates): the paired speedup is the median over rounds of the reference's mean over
    // the candidate's, so a cost of going first cancels within each round (on an H200 it
    // split level-1 LeakyReLU's per-pair ratios into two modes 5% apart).
    let paired = kbench_reports::paired_speedup(
        &reference.samples_ms,
        &candidate.samples_ms,
        CALLS_PER_ROUND as usize,
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
    let supported = clock.supported;
    let detail = format!(
        "the harness's clock does not support the times the candidate claimed: its windows held a median {:.4} ms more than its claims explain, beyond the reference's for the same calls (99% interval {:.4} to {:.4} ms; {:.4} ms allowed); claimed speedup {speedup:.3}x, supported by the harness's clock {:.3}x",
        clock.excess_ms, clock.excess_low_ms, clock.excess_high_ms, clock.allowed_ms, clock.speedup
    );
    let summary = TimingSummary {
        reference,
        candidate,
        speedup,
        speedup_of_medians: Some(speedup_of_medians),
        speedup_mean,
        warmup,
        l2_flush: l2_flush && matches!(device, Device::Cuda(_)),
        rounds: (raw.reference.len() as u32).div_ceil(CALLS_PER_ROUND),
        round_warmup: Some(raw.opening),
        harness_clock: Some(clock),
        method_timings: Vec::new(),
    };
    if supported || harness_timed {
        TimingResult::Measured(Box::new(summary))
    } else {
        TimingResult::Unsupported(
            Box::new(summary),
            Outcome::Integrity {
                flag: integrity::TIME_CLAIM_UNSUPPORTED.into(),
                detail,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::clock::tests::pairs;

    fn measured(r: TimingResult) -> TimingSummary {
        match r {
            TimingResult::Measured(t) => *t,
            TimingResult::Unsupported(_, o) | TimingResult::Failed(o) => panic!("{o:?}"),
            TimingResult::ReferenceFailed(m) => panic!("{m}"),
        }
    }

    /// Claims the clock backs stand; claims it does not back by a little give way to it in
    /// every figure of the summary (the baselines, the claims report and the agents read
    /// the candidate's times, not only the speedup); a clock forged to half fails.
    #[test]
    fn claims_the_clock_does_not_back_give_way_to_it_in_every_figure() {
        let cuda = Device::Cuda(0);
        let honest = measured(summarize(pairs(100, 0.7, 0.5, 0.01, 1.0), 0, false, cuda));
        let h = honest.harness_clock.as_ref().unwrap();
        assert!(h.candidate_claimed_ms.is_empty(), "{h:?}");
        assert_ne!(honest.candidate.clock, "harness");

        let busy = measured(summarize(
            pairs(100, 0.7, 0.5, 0.01, 1.0 / 1.06),
            0,
            false,
            cuda,
        ));
        let h = busy.harness_clock.as_ref().unwrap();
        assert_eq!(h.candidate_claimed_ms.len(), 100);
        assert!(
            (h.candidate_claimed_ms[0] - 0.7 / 1.06).abs() < 1e-9,
            "{h:?}"
        );
        assert_eq!(busy.candidate.clock, "harness");
        assert!((busy.candidate.median_ms - 0.7).abs() < 0.01, "{busy:?}");
        for s in [
            busy.speedup,
            busy.speedup_mean,
            busy.speedup_of_medians.unwrap(),
        ] {
            assert!((s - 1.0).abs() < 0.02, "{busy:?}");
        }

        let halved = summarize(pairs(100, 0.7, 0.5, 0.01, 0.5), 0, false, cuda);
        assert!(matches!(halved, TimingResult::Unsupported(..)));
    }

    /// A clock forged in 55% of the calls (claims of a fifth of the time): the median of the
    /// excess is the forgery's, its interval reaches the honest calls' (the check cannot
    /// tell). The claims' median speedup would be 5x; the summary's is the clock's, 1x.
    #[test]
    fn a_clock_forged_in_just_over_half_the_calls_gains_nothing() {
        let mut raw = pairs(200, 1.0, 0.5, 0.01, 1.0);
        for (i, c) in raw.candidate.iter_mut().enumerate() {
            if (i / 2) % 20 < 11 {
                c.claimed_ms = 0.2;
            }
        }
        let h = crate::judge::clock::check(&raw, Device::Cuda(0));
        assert!(crate::judge::clock::inconclusive(&h), "{h:?}");
        let t = measured(summarize(raw, 0, false, Device::Cuda(0)));
        assert!((t.speedup - 1.0).abs() < 0.05, "{}", t.speedup);
        assert!((t.speedup_mean - 1.0).abs() < 0.05, "{}", t.speedup_mean);
        assert_eq!(t.harness_clock.unwrap().candidate_claimed_ms.len(), 200);
    }
}
