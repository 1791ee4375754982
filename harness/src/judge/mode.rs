//! The `mode-switch` advisory: a candidate that runs in inference mode while the reference
//! trains (KernelBench's convention, `--model-mode train`). The worker reports what it sees
//! (PROTOCOL.md, "Model mode"): modules with `training == False` after load or a call, and
//! an output that moves when the BatchNorm running statistics do (it normalises with them
//! instead of the batch's). Here those reports become a detail line, and the eval-mode
//! re-check of such a candidate's mismatch becomes `eval_mode_correct` and a note.

use kbench_record::{HostTensor, IntegrityReport};
use serde_json::Value;

use super::integrity::MODE_SWITCH;
use super::Tolerance;

/// The note on a `mode-switch` record whose mismatch disappears with both models in eval().
pub(crate) const CORRECT_IN_EVAL: &str = "mode-switch: correct in eval mode";
/// The note on a `mode-switch` record that is wrong in eval mode too.
pub(crate) const WRONG_IN_EVAL: &str = "mode-switch: also wrong in eval mode";

fn names(r: &Value, key: &str) -> Vec<String> {
    r.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// What a worker `integrity` report (`load`, `run_case`) shows of inference mode, as a
/// detail line naming `what` (`after load`, `case random#0`); None when it shows none.
pub(crate) fn evidence(report: Option<&Value>, what: &str) -> Option<String> {
    let r = report?;
    let count = r
        .get("eval_module_count")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    if count > 0 {
        return Some(format!(
            "{what}: {count} module(s) of the candidate have training == False ({}): it switched to inference mode (.eval() / .train(False)) while the reference trains",
            names(r, "eval_modules").join(", ")
        ));
    }
    let stats = names(r, "running_stats_read");
    if !stats.is_empty() {
        return Some(format!(
            "{what}: the candidate's output depends on BatchNorm running statistics ({}) while the reference normalises with batch statistics (training mode)",
            stats.join(", ")
        ));
    }
    None
}

/// Whether the candidate's outputs of the eval-mode case match the reference's at the run's
/// tolerance (no float64 gate: the eval-mode case has no float64 reference).
pub(crate) fn eval_outputs_match(
    tol: Tolerance,
    candidate: &[HostTensor],
    reference: &[HostTensor],
) -> bool {
    candidate.len() == reference.len()
        && candidate.iter().zip(reference).all(|(c, r)| {
            kbench_adversarial::compare(c, r, None, tol.profile, tol.precision)
                .is_ok_and(|cmp| cmp.passed())
        })
}

/// Puts a `mode-switch` observation into the record: the advisory, its detail, and the
/// eval-mode re-check's result (`checked`: Ok(correct), Err(why it could not run), None when
/// it did not run).
pub(crate) fn record(
    integrity: &mut IntegrityReport,
    notes: &mut Vec<String>,
    detail: String,
    checked: Option<Result<bool, String>>,
) {
    integrity.advisories.push(MODE_SWITCH.to_string());
    notes.push(format!("{MODE_SWITCH}: {detail}"));
    integrity.mode_switch = Some(detail);
    match checked {
        Some(Ok(correct)) => {
            integrity.eval_mode_correct = Some(correct);
            notes.push(
                if correct {
                    CORRECT_IN_EVAL
                } else {
                    WRONG_IN_EVAL
                }
                .to_string(),
            );
        }
        Some(Err(why)) => notes.push(format!(
            "{MODE_SWITCH}: the eval-mode re-check failed: {why}"
        )),
        None => {}
    }
}

/// The note on a record without the advisory whose mismatch disappears with both models in
/// eval(): its output follows the module mode (`self.training`) itself.
pub(crate) const MODE_DEPENDENT: &str = "model-mode dependent: correct with both models in eval mode, wrong in training mode (KernelBench's convention): the kernel's output follows self.training";

/// Puts the eval-mode re-check of a candidate the advisory did not see into the record:
/// when that mode makes it correct, `eval_mode_correct` and a note. A kernel wrong in both
/// modes keeps its record as it was (a plain mismatch), and so does one whose re-check could
/// not run (the mismatch stands; nothing suggests the mode).
pub(crate) fn record_unseen(
    integrity: &mut IntegrityReport,
    notes: &mut Vec<String>,
    checked: Option<Result<bool, String>>,
) {
    if let Some(Ok(true)) = checked {
        integrity.eval_mode_correct = Some(true);
        notes.push(MODE_DEPENDENT.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn modules_in_eval_or_running_statistics_read_are_evidence() {
        let r = json!({"eval_modules": ["ModelNew", "bn"], "eval_module_count": 2});
        let d = evidence(Some(&r), "after load").unwrap();
        assert!(
            d.starts_with("after load: 2 module(s)") && d.contains("ModelNew, bn"),
            "{d}"
        );
        let r = json!({"eval_module_count": 0, "running_stats_read": ["bn.running_mean"]});
        let d = evidence(Some(&r), "case random#0").unwrap();
        assert!(d.contains("running statistics (bn.running_mean)"), "{d}");
        let honest = json!({"eval_modules": [], "eval_module_count": 0, "running_stats_read": []});
        assert_eq!(evidence(Some(&honest), "x"), None);
        assert_eq!(evidence(None, "x"), None);
    }

    #[test]
    fn the_record_gets_the_advisory_the_detail_and_the_recheck() {
        let mut ig = IntegrityReport::default();
        let mut notes = Vec::new();
        record(&mut ig, &mut notes, "seen".into(), Some(Ok(true)));
        assert_eq!(ig.advisories, vec!["mode-switch"]);
        assert_eq!(ig.mode_switch.as_deref(), Some("seen"));
        assert_eq!(ig.eval_mode_correct, Some(true));
        assert_eq!(notes, vec!["mode-switch: seen", CORRECT_IN_EVAL]);
        let mut ig = IntegrityReport::default();
        record(
            &mut ig,
            &mut notes,
            "seen".into(),
            Some(Err("timeout".into())),
        );
        assert_eq!(ig.eval_mode_correct, None);
        assert!(notes.last().unwrap().contains("re-check failed: timeout"));
    }
}
