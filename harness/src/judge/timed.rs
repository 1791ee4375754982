//! Every timed call's outputs against the reference's for the same inputs (each call gets
//! fresh values, so the reference's output is the working-precision forward it ran on them
//! in its own window; there is no float64 reference per call).
//!
//! Without a float64 reference the strict profile's gate cannot rescue an honest kernel's
//! long reductions, so a timed call is held to the elementwise tolerance the kernel itself
//! needed on the problem's own cases (`CaseResult::tol_needed`, which passed), times
//! [`SLACK`], and never less than the profile's: a kernel exact on its cases stays within the
//! profile's tolerance under timing, and no output that is stale (an earlier call's), partly
//! unwritten, or computed at a lower precision than on its cases passes.

use kbench_adversarial::{tolerance, Comparison};
use kbench_record::{Dtype, HostTensor, Outcome};
use serde_json::Value;

use super::{integrity, Tolerance};
use crate::measure::exchange::{ArgLayout, CaseLayout, Exchange};
use crate::measure::Station;

/// A timed call may need up to this multiple of the tolerance the kernel needed on its
/// cases: other values reorder an honest reduction's rounding differently.
pub(crate) const SLACK: f64 = 4.0;

/// What the timed calls are held to.
pub(crate) struct TimedCheck<'a> {
    pub(crate) tol: Tolerance,
    pub(crate) station: &'a Station,
    /// The largest `tol_needed` of the problem's own (`random`) cases, all of which passed.
    pub(crate) case_tol_needed: f64,
    /// Staged inputs the reference's own forward writes to (an in-place problem): the
    /// candidate may write to them too.
    pub(crate) allowed_mutations: Vec<usize>,
    /// By call (warm-up calls first): whether its staged inputs are compared after it. A
    /// byte-for-byte comparison reads both sides' inputs, so a share of the calls drawn from
    /// the run's secret is checked: the candidate cannot tell which, and a kernel that writes
    /// to its inputs does so on the calls it cannot tell apart either.
    pub(crate) input_checks: Vec<bool>,
}

impl<'a> TimedCheck<'a> {
    pub(crate) fn new(
        tol: Tolerance,
        station: &'a Station,
        case_tol_needed: f64,
        layout: &CaseLayout,
        mutated_args: &[u64],
        input_checks: Vec<bool>,
    ) -> Self {
        let allowed_mutations = layout
            .args
            .iter()
            .enumerate()
            .filter_map(|(i, a)| match a {
                ArgLayout::Staged(j) if mutated_args.contains(&(i as u64)) => Some(*j),
                _ => None,
            })
            .collect();
        TimedCheck {
            tol,
            station,
            case_tol_needed,
            allowed_mutations,
            input_checks,
        }
    }

    /// The candidate's outputs of timed call `call`, in its slots as `described` by its
    /// worker, and its staged inputs after the call.
    pub(crate) fn judge(
        &self,
        exchange: &Exchange,
        described: &[Value],
        layout: &CaseLayout,
        call: u32,
    ) -> Option<Outcome> {
        let what = format!("timed call {call}");
        let mismatch = |why: String| Outcome::Integrity {
            flag: integrity::TIMED_OUTPUT_MISMATCH.into(),
            detail: format!("{what}: passed the correctness cases but under timing returned {why}"),
        };
        if described.len() != layout.outputs.len() {
            return Some(mismatch(format!(
                "{} output(s) where the reference has {}",
                described.len(),
                layout.outputs.len()
            )));
        }
        for (k, (d, reference)) in described.iter().zip(&layout.outputs).enumerate() {
            let (dtype, shape) = super::device::described_tensor(d);
            let copied = d.get("copied").and_then(Value::as_bool) == Some(true);
            if dtype != Some(reference.dtype) || shape.as_ref() != Some(&reference.shape) || !copied
            {
                return Some(mismatch(format!(
                    "output {k} as {d} where the reference's is a {} tensor of shape {:?}",
                    reference.dtype.as_str(),
                    reference.shape
                )));
            }
            let compared =
                exchange.compare_output(self.station, k, self.tol.profile, self.tol.precision);
            let failure = match compared {
                Ok(Ok(c)) => self.failure(&c, reference.dtype, k),
                Ok(Err(e)) => Some(format!("output {k}: {e}")),
                Err(e) => {
                    return Some(Outcome::ReferenceError {
                        message: format!("comparing {what}'s outputs: {e:#}"),
                    })
                }
            };
            let Some(why) = failure else { continue };
            // Read back once: elements still holding the slot's fill were never written.
            if let Some(o) = exchange
                .candidate_output(k)
                .ok()
                .and_then(|t| unwritten(&t, k, &what))
            {
                return Some(o);
            }
            return Some(mismatch(why));
        }
        if !self
            .input_checks
            .get(call as usize)
            .copied()
            .unwrap_or(true)
        {
            return None;
        }
        match exchange.inputs_differ(self.station, call) {
            Ok(differ) => {
                let written: Vec<String> = differ
                    .into_iter()
                    .filter(|j| !self.allowed_mutations.contains(j))
                    .map(|j| j.to_string())
                    .collect();
                (!written.is_empty()).then(|| Outcome::Integrity {
                    flag: integrity::INPUT_MUTATED.into(),
                    detail: format!(
                        "{what}: tensor input(s) {} changed during the call",
                        written.join(", ")
                    ),
                })
            }
            Err(e) => Some(Outcome::ReferenceError {
                message: format!("comparing {what}'s inputs: {e:#}"),
            }),
        }
    }

    /// Why output `k`'s comparison fails the timed calls' rule, if it does.
    fn failure(&self, c: &Comparison, dtype: Dtype, k: usize) -> Option<String> {
        let v = match c {
            Comparison::Values(v) => v,
            other => return Some(format!("output {k}: {other}")),
        };
        if v.nonfinite_mismatches > 0 {
            return Some(format!("output {k}: {c}"));
        }
        if !dtype.is_float() {
            return (v.mismatches > 0).then(|| format!("output {k}: {c}"));
        }
        let t = tolerance(self.tol.profile, self.tol.precision);
        let limit = SLACK * t.atol.max(t.rtol).max(self.case_tol_needed);
        (v.tol_needed > limit).then(|| {
            format!(
                "output {k}: needs atol = rtol = {:.3e}, beyond the {limit:.3e} allowed ({SLACK} times the larger of the profile's tolerance and the {:.3e} it needed on its cases); max abs {:.3e}",
                v.tol_needed, self.case_tol_needed, v.max_abs
            )
        })
    }
}

/// `unwritten-output` when elements of a slot still hold its fill (all bits set: a NaN no
/// arithmetic makes) after the call.
fn unwritten(t: &HostTensor, k: usize, what: &str) -> Option<Outcome> {
    let size = t.dtype().size();
    if !t.dtype().is_float() {
        return None;
    }
    let n = t
        .data()
        .chunks_exact(size)
        .filter(|c| c.iter().all(|&b| b == 0xff))
        .count();
    (n > 0).then(|| Outcome::Integrity {
        flag: integrity::UNWRITTEN_OUTPUT.into(),
        detail: format!(
            "output {k} of {what}: {n} of {} elements still hold the NaN the harness wrote into the slot before the call (never written: uninitialised or partial output)",
            t.numel()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_fill_left_in_an_output_is_unwritten() {
        let mut bytes = vec![0u8; 16];
        bytes[4..8].copy_from_slice(&[0xff; 4]);
        let t = HostTensor::new(Dtype::F32, vec![4], bytes).unwrap();
        let o = unwritten(&t, 0, "timed call 3").unwrap();
        assert!(o.to_string().contains("1 of 4"), "{o}");
        let clean = HostTensor::new(Dtype::F32, vec![4], vec![0u8; 16]).unwrap();
        assert!(unwritten(&clean, 0, "x").is_none());
        // Integer outputs can hold any pattern honestly.
        let ints = HostTensor::new(Dtype::I32, vec![1], vec![0xff; 4]).unwrap();
        assert!(unwritten(&ints, 0, "x").is_none());
    }
}
