//! The eval-mode re-check of a `mode-switch` candidate (`judge::mode`): one random case with
//! both models as constructed and in `.eval()` (the workers' `eval_case`, PROTOCOL.md,
//! "Model mode"). The reference makes the inputs and its outputs, the candidate answers on
//! the same inputs; neither worker's current case or model state changes.

use std::time::Duration;

use kbench_record::protocol::{reply, Command, EvalCase, Frame};
use kbench_record::HostTensor;
use serde_json::json;

use super::reference::ReferenceSession;
use crate::worker::{error_text, first_line, Worker};

/// Both sides' outputs of one eval-mode case.
pub(crate) struct EvalModeOutputs {
    pub(crate) candidate: Vec<HostTensor>,
    pub(crate) reference: Vec<HostTensor>,
}

/// Runs the case of `seed` (inputs) and `forward_seed` in eval mode on both workers. Err:
/// why it could not be run (a worker fault or error answer).
pub(crate) fn eval_mode_case(
    reference: &mut ReferenceSession,
    worker: &mut Worker,
    seed: u64,
    forward_seed: u64,
    timeout: Duration,
) -> Result<EvalModeOutputs, String> {
    let request = Command::EvalCase(EvalCase {
        forward_seed,
        seed: Some(seed),
        inputs: None,
    });
    let reply = match reference.worker.request(Frame::command(&request), timeout) {
        Ok(r) => r,
        Err(f) => {
            // It may be dead: the next case or timing restarts it.
            reference.forget_worker_case();
            return Err(format!("the reference worker: {f}"));
        }
    };
    if reply.kind() != "eval_case" {
        return Err(format!(
            "the reference: {}",
            first_line(&error_text(&reply))
        ));
    }
    let tensors = reply
        .tensors()
        .map_err(|e| format!("the reference sent a malformed eval_case: {e}"))?;
    let inputs: Vec<(String, &HostTensor)> = tensors
        .iter()
        .filter(|(n, _)| n.starts_with("in:"))
        .map(|(n, t)| (n.clone(), t))
        .collect();
    let arg_list = reply.reply::<reply::EvalCaseDone>().inputs;
    let frame = Frame::command_with_tensors(
        &Command::EvalCase(EvalCase {
            forward_seed,
            seed: None,
            inputs: Some(arg_list.unwrap_or(json!([]))),
        }),
        &inputs,
    );
    let answer = worker
        .request(frame, timeout)
        .map_err(|f| format!("the candidate's worker: {f}"))?;
    if answer.kind() != "eval_case" {
        return Err(format!(
            "the candidate: {}",
            first_line(&error_text(&answer))
        ));
    }
    let outputs = |frame: &Frame, who: &str| -> Result<Vec<HostTensor>, String> {
        Ok(frame
            .tensors()
            .map_err(|e| format!("{who} sent a malformed eval_case: {e}"))?
            .into_iter()
            .filter(|(n, _)| n.starts_with("out:"))
            .map(|(_, t)| t)
            .collect())
    };
    Ok(EvalModeOutputs {
        candidate: outputs(&answer, "the candidate")?,
        reference: outputs(&reply, "the reference")?,
    })
}
