//! `faster-than-speed-of-light`: a median time below the problem's physical limit.

use kbench_record::{EvalRecord, Outcome};

/// The outcome replacing `Ok` when the record's median time, taken with the L2 flushed, is
/// below the problem's strict speed of light by more than the slack
/// ([`EvalRecord::below_speed_of_light`]).
pub(crate) fn faster_than_light(r: &EvalRecord) -> Option<Outcome> {
    if !r.outcome.is_ok() || !r.below_speed_of_light(kbench_reports::SOL_SLACK) {
        return None;
    }
    let (t, sol) = (r.timing.as_ref()?, r.speed_of_light.as_ref()?);
    Some(Outcome::Integrity {
        flag: super::integrity::FASTER_THAN_LIGHT.into(),
        detail: format!(
            "median {:.3} us per call, but reading the inputs and weights ({:.3} MB) at peak bandwidth takes at least {:.3} us on {}",
            t.candidate.median_ms * 1e3,
            (sol.cost.input_bytes + sol.cost.weight_bytes) / 1e6,
            sol.strict_min_s * 1e6,
            sol.arch
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{h100, one_shot_records};
    use approx::assert_abs_diff_eq;
    use kbench_record::perf::{speed_of_light, ProblemCost};

    #[test]
    fn a_time_below_the_speed_of_light_is_flagged_and_only_then() {
        let mut record = one_shot_records()
            .into_iter()
            .find(|r| r.timing.is_some() && r.outcome == Outcome::Ok)
            .expect("a timed correct record in the fixture run");
        // 335.2 MB of inputs at 3352 GB/s: at least 100 us.
        let cost = ProblemCost {
            flops: 0.0,
            flops_by_op: Default::default(),
            precision: "fp32".into(),
            input_bytes: 335.2e6,
            weight_bytes: 0.0,
            output_bytes: 335.2e6,
        };
        let sol = speed_of_light(&cost, &h100());
        assert_abs_diff_eq!(sol.strict_min_s, 100e-6, epsilon = 1e-7);
        record.speed_of_light = Some(sol);
        let t = record.timing.as_mut().unwrap();
        t.l2_flush = true;
        t.candidate.median_ms = 0.050;
        let flagged = faster_than_light(&record);
        match flagged {
            Some(Outcome::Integrity { flag, detail }) => {
                assert_eq!(flag, crate::judge::integrity::FASTER_THAN_LIGHT);
                assert!(detail.contains("takes at least 99.99"), "{detail}");
            }
            other => panic!("expected the flag, got {other:?}"),
        }
        // Within the 10% slack, slower, without the L2 flush, without a speed of light, or
        // already failed: no flag.
        let t = record.timing.as_mut().unwrap();
        t.candidate.median_ms = 0.095;
        assert!(faster_than_light(&record).is_none());
        let t = record.timing.as_mut().unwrap();
        t.candidate.median_ms = 0.050;
        t.l2_flush = false;
        assert!(faster_than_light(&record).is_none());
        record.timing.as_mut().unwrap().l2_flush = true;
        let sol = record.speed_of_light.take();
        assert!(faster_than_light(&record).is_none());
        record.speed_of_light = sol;
        assert!(faster_than_light(&record).is_some());
        record.outcome = Outcome::Integrity {
            flag: "output-replayed".into(),
            detail: String::new(),
        };
        assert!(faster_than_light(&record).is_none());
    }
}
