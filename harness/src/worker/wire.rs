//! Reading a worker's answers: fields of a frame's JSON header, error texts, and the device
//! name a worker is told (plain helpers that every box driving workers shares).

use kbench_record::protocol::{reply, Frame};
use kbench_record::Device;
use serde_json::Value;

pub(crate) fn device_for_worker(d: Device) -> &'static str {
    match d {
        Device::Cpu => "cpu",
        // CUDA_VISIBLE_DEVICES narrows each worker to its one GPU.
        Device::Cuda(_) => "cuda:0",
    }
}

pub(crate) fn str_field(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

/// The first line of a message (an error's, before its traceback).
pub(crate) fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_string()
}

/// The message of an `error` frame (or a description of an unexpected one).
pub(crate) fn error_text(reply: &Frame) -> String {
    if reply.kind() == "error" {
        let e: reply::Error = reply.reply();
        let msg = e.message.unwrap_or_default();
        let tb = e.traceback.unwrap_or_default();
        if tb.is_empty() {
            msg
        } else {
            format!("{msg}\n{tb}")
        }
    } else {
        format!("unexpected answer {}", reply.header)
    }
}
