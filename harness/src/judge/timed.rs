//! Every timed call's outputs against the reference's for the same inputs (each call gets
//! fresh values, so the reference's output is the working-precision forward it ran on them
//! in its own window; there is no float64 reference per call).
//!
//! Without a float64 reference the strict profile's gate cannot rescue an honest kernel's
//! long reductions, so a timed call is held to the errors the kernel itself made on the
//! problem's own cases ([`CaseErrors`]), times [`SLACK`], and never less than the profile's
//! tolerance: a kernel exact on its cases stays within the profile's tolerance under timing,
//! and no output that is stale (an earlier call's), partly unwritten, or computed at a lower
//! precision than on its cases passes.
//!
//! An element passes when it is within [`SLACK`] times the tolerance the cases needed
//! relative to its value (`tol_needed`, `|c − r|/(1 + |r|)`), or within [`SLACK`] times the
//! largest absolute error the cases showed. The second arm is needed because the first is
//! heavy-tailed for an honest reduction: its rounding error is absolute (set by the terms'
//! sizes, not the sum's), so an output that happens to land near zero needs a far larger
//! relative tolerance, and a timing's hundreds of calls draw far more such outputs than five
//! cases did. (On an H100, a matrix-vector kernel summing 131,072 products in order needed
//! 5.5e-4 on its cases and 3.5e-3 on one timed call, whose largest error, 8.4e-3, was half of
//! the 1.6e-2 its cases showed.)

use std::cell::Cell;

use kbench_adversarial::{tolerance, Comparison};
use kbench_record::{Dtype, HostTensor, Outcome};
use serde_json::Value;

use super::{integrity, Tolerance};
use crate::measure::exchange::{ArgLayout, CaseLayout, Exchange};
use crate::measure::Station;

/// A timed call may need up to this multiple of the tolerance the kernel needed on its
/// cases: other values reorder an honest reduction's rounding differently.
pub(crate) const SLACK: f64 = 4.0;

/// The errors the kernel made on the problem's own (`random`) cases, all of which passed:
/// what its timed calls are held to.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct CaseErrors {
    /// The largest `tol_needed` of those cases.
    pub(crate) tol_needed: f64,
    /// The largest `max_abs` of those cases (over all of a case's outputs: a record keeps no
    /// per-output figure, so the absolute arm is used only for a problem of one output).
    pub(crate) max_abs: f64,
}

impl CaseErrors {
    /// Folds in one more passed case.
    pub(crate) fn add(&mut self, tol_needed: Option<f64>, max_abs: f64) {
        self.tol_needed = self.tol_needed.max(tol_needed.unwrap_or(0.0));
        if max_abs.is_finite() {
            self.max_abs = self.max_abs.max(max_abs);
        }
    }
}

/// What the timed calls are held to.
pub(crate) struct TimedCheck<'a> {
    pub(crate) tol: Tolerance,
    pub(crate) station: &'a Station,
    pub(crate) cases: CaseErrors,
    /// Staged inputs the reference's own forward writes to (an in-place problem): the
    /// candidate may write to them too.
    pub(crate) allowed_mutations: Vec<usize>,
    /// Calls whose outputs passed only by the absolute arm, and the largest relative
    /// tolerance and absolute error among them: for the record's note.
    by_absolute_arm: Cell<(u32, f64, f64)>,
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
        cases: CaseErrors,
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
            cases,
            allowed_mutations,
            by_absolute_arm: Cell::new((0, 0.0, 0.0)),
            input_checks,
        }
    }

    /// A note for the record when some timed calls passed only by the absolute arm (the
    /// relative arm alone would have flagged them): how many, and by how much.
    pub(crate) fn absolute_arm_note(&self) -> Option<String> {
        let (calls, rel, abs) = self.by_absolute_arm.get();
        (calls > 0).then(|| {
            format!(
                "timed calls: {calls} passed only within {SLACK} times the largest absolute error of the kernel's cases ({:.3e}): off by up to {abs:.3e}, they needed up to {rel:.3e} relative to the reference's values, beyond the {:.3e} allowed relative (outputs near zero of a reduction whose rounding error is absolute)",
                self.cases.max_abs,
                rel_limit(self.profile_tol(), self.cases)
            )
        })
    }

    /// The profile's elementwise tolerance (atol = rtol for every profile and precision).
    fn profile_tol(&self) -> f64 {
        let t = tolerance(self.tol.profile, self.tol.precision);
        t.atol.max(t.rtol)
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
                Ok(Ok(c)) => self.failure(&c, reference.dtype, k, layout.outputs.len() == 1),
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
    fn failure(&self, c: &Comparison, dtype: Dtype, k: usize, one_output: bool) -> Option<String> {
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
        match standing(
            self.profile_tol(),
            self.cases,
            one_output,
            v.tol_needed,
            v.max_abs,
        ) {
            Standing::Within => None,
            Standing::ByAbsoluteArm => {
                let (calls, rel, abs) = self.by_absolute_arm.get();
                self.by_absolute_arm
                    .set((calls + 1, rel.max(v.tol_needed), abs.max(v.max_abs)));
                None
            }
            Standing::Beyond(why) => Some(format!("output {k}: {why}")),
        }
    }
}

/// How a floating output stands against the rule (module comment).
#[derive(Debug, PartialEq)]
enum Standing {
    /// Within the relative arm.
    Within,
    /// Beyond the relative arm, within the absolute one.
    ByAbsoluteArm,
    /// Beyond the rule, and why.
    Beyond(String),
}

/// The relative arm's limit: [`SLACK`] times the larger of the profile's tolerance and the
/// one the cases needed.
fn rel_limit(profile_tol: f64, cases: CaseErrors) -> f64 {
    SLACK * profile_tol.max(cases.tol_needed)
}

/// Where a floating output that needed `tol_needed` and was off by at most `max_abs` stands
/// against the rule (module comment) for a kernel whose cases made `cases`. The arms are
/// checked on the output's maxima, not element by element: an output fails when some element
/// is beyond the relative arm and some element beyond the absolute one, which is stricter
/// than the rule when they are different elements, never looser.
fn standing(
    profile_tol: f64,
    cases: CaseErrors,
    one_output: bool,
    tol_needed: f64,
    max_abs: f64,
) -> Standing {
    let rel_limit = rel_limit(profile_tol, cases);
    if tol_needed <= rel_limit {
        return Standing::Within;
    }
    if !one_output {
        return Standing::Beyond(format!(
            "needs atol = rtol = {tol_needed:.3e}, beyond the {rel_limit:.3e} allowed ({SLACK} times the larger of the profile's tolerance and the {:.3e} it needed on its cases); max abs {max_abs:.3e}",
            cases.tol_needed
        ));
    }
    let abs_limit = SLACK * profile_tol.max(cases.max_abs);
    if max_abs <= abs_limit {
        return Standing::ByAbsoluteArm;
    }
    Standing::Beyond(format!(
        "needs atol = rtol = {tol_needed:.3e} and is off by up to {max_abs:.3e}, beyond both the {rel_limit:.3e} and the {abs_limit:.3e} allowed ({SLACK} times the larger of the profile's tolerance and what it needed on its cases: {:.3e} relative, {:.3e} absolute)",
        cases.tol_needed, cases.max_abs
    ))
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

    /// The matrix-vector kernel of the module comment (figures from its H100 record): a timed
    /// call whose output landed near zero is within the errors of its cases; a stale output,
    /// one computed at lower precision, or an error beyond both arms is not.
    #[test]
    fn an_honest_reduction_passes_where_only_its_relative_need_grew() {
        let mut cases = CaseErrors::default();
        for (tol, abs) in [
            (5.257e-4, 1.422e-2),
            (3.053e-4, 1.581e-2),
            (5.450e-4, 8.728e-3),
            (4.556e-4, 8.087e-3),
            (5.246e-4, 7.568e-3),
        ] {
            cases.add(Some(tol), abs);
        }
        assert_eq!(cases.max_abs, 1.581e-2);
        let fp32 = 1e-4;
        let beyond = |s: Standing| match s {
            Standing::Beyond(why) => why,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            standing(fp32, cases, true, 3.461e-3, 8.362e-3),
            Standing::ByAbsoluteArm
        );
        assert_eq!(
            standing(fp32, cases, true, 2.1e-3, 8.362e-3),
            Standing::Within
        );
        // The same call judged by the relative arm alone (a problem of several outputs).
        let why = beyond(standing(fp32, cases, false, 3.461e-3, 8.362e-3));
        assert!(why.contains("2.180e-3 allowed"), "{why}");
        // An earlier call's output: off by the outputs' own size (hundreds).
        let why = beyond(standing(fp32, cases, true, 0.9, 610.0));
        assert!(why.contains("6.324e-2 allowed"), "{why}");
        // TF32 products: about ten times the in-order sum's error, everywhere.
        beyond(standing(fp32, cases, true, 4.0e-3, 0.18));
        // Beyond the relative arm, and beyond the absolute one by a hair.
        beyond(standing(fp32, cases, true, 2.181e-3, 6.33e-2));
        assert_eq!(
            standing(fp32, cases, true, 2.181e-3, 6.32e-2),
            Standing::ByAbsoluteArm
        );
    }

    /// A kernel exact on its cases is held to the profile's tolerance on both arms.
    #[test]
    fn an_exact_kernel_is_held_to_the_profile() {
        let mut cases = CaseErrors::default();
        cases.add(Some(0.0), 0.0);
        cases.add(None, f64::NAN);
        assert_eq!(cases, CaseErrors::default());
        assert_eq!(standing(1e-4, cases, true, 4e-4, 4e-4), Standing::Within);
        assert!(matches!(
            standing(1e-4, cases, true, 4.1e-4, 4.1e-4),
            Standing::Beyond(_)
        ));
    }

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
