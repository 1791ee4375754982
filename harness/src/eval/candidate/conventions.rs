//! `--time-as`: the candidate and its reference timed again under other evaluators'
//! conventions (the workers' `time_as` command), a part of [`super::Evaluation`]. Each side
//! times itself in its own worker, so the candidate's number comes from a clock in its own
//! process: a diagnosis for a published claim ("method-dependent"), recorded beside kbench's
//! timing and never used as a speedup.

use kbench_record::protocol::{reply, Command, Frame, TimeAs};
use kbench_record::MethodTiming;

use super::Evaluation;
use crate::worker::{error_text, Worker};

/// Timed calls per convention (the conventions use 100), and the seconds each side may spend
/// on them before it stops with the calls it has (at least three): a mean for a diagnosis,
/// not a measurement kbench reports. Four seconds, since `cuda-l1` makes fresh inputs on the
/// host for every call: at 20 s a side, a 4096 x 4096 problem spent 40 s of GPU time a
/// kernel on this convention alone on a published set.
const CALLS: u32 = 100;
const BUDGET_S: f64 = 4.0;

impl Evaluation<'_, '_> {
    /// Times both sides under each `--time-as` convention and adds the results to the
    /// timing summary; a side that cannot be timed so leaves a note, never a verdict.
    pub(super) fn time_as(&mut self, worker: &mut Worker) {
        let c = self.ctx.config;
        if c.time_as.is_empty() || self.timing.is_none() {
            return;
        }
        let sha = &self.unit.problem.sha256;
        let mut timings = Vec::new();
        for method in &c.time_as {
            let seed = self
                .run_dir
                .secret
                .derive(&format!("time-as/{sha}/{method}"));
            let request = Frame::command(&Command::TimeAs(TimeAs {
                method: method.clone(),
                timed_calls: CALLS,
                seed,
                budget_s: BUDGET_S,
            }));
            let limit = c.timeouts.run + std::time::Duration::from_secs_f64(2.0 * BUDGET_S);
            let side = |w: &mut Worker| -> Result<(f64, u32), String> {
                match w.request(request.clone(), limit) {
                    Ok(r) if r.kind() == "time_as" => {
                        let done: reply::TimeAsDone = r.reply();
                        match (done.mean_ms, done.timed_calls) {
                            (Some(m), Some(n)) if m > 0.0 && m.is_finite() => Ok((m, n as u32)),
                            _ => Err(format!("unreadable time_as reply: {}", r.header)),
                        }
                    }
                    Ok(r) => Err(error_text(&r)
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .to_string()),
                    Err(f) => Err(f.to_string()),
                }
            };
            let reference = side(&mut self.reference.worker);
            if reference.is_err() {
                // A failed request may have ended the worker: the next case starts another.
                self.reference.forget_worker_case();
            }
            let candidate = side(worker);
            match (reference, candidate) {
                (Ok((r, rn)), Ok((k, kn))) => timings.push(MethodTiming {
                    method: method.clone(),
                    reference_ms: r,
                    candidate_ms: k,
                    reference_calls: rn,
                    candidate_calls: kn,
                    speedup: r / k,
                }),
                (r, k) => {
                    let why = [("reference", r.err()), ("candidate", k.err())]
                        .into_iter()
                        .filter_map(|(who, e)| e.map(|e| format!("{who}: {e}")))
                        .collect::<Vec<_>>()
                        .join("; ");
                    self.notes.push(format!("not timed as {method}: {why}"));
                }
            }
        }
        if let Some(t) = self.timing.as_mut() {
            t.method_timings = timings;
        }
    }
}
