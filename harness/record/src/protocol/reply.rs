//! What the harness reads of a worker's replies, typed. A reply's `type` names it
//! ([`super::Frame::kind`]); [`super::Frame::reply`] reads its fields into one of these.
//! A worker may be untrusted: every field is optional and a field of the wrong type reads
//! as absent, so a reply is never refused for its shape here, only judged by its reader.
//! Fields a reader forwards or measures as they are (argument lists, integrity
//! observations, an audit's families, tensor and kernel descriptions) stay JSON. The harness
//! reads no reply field by key outside this module (`tests/layers.rs` checks); a reply's
//! `type` and `id` are [`super::Frame::kind`] and [`super::Frame::id`], and `cost` is
//! read whole into `crate::perf::ProblemCost`.

use serde::de::{DeserializeOwned, Deserializer};
use serde::Deserialize;
use serde_json::Value;

/// A field read as `T`, or `None` when it is absent, null or of another type.
fn lenient<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<T>, D::Error> {
    let v = Value::deserialize(d)?;
    Ok(serde_json::from_value(v).ok())
}

macro_rules! reply {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $field:ident: $ty:ty),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Default, PartialEq, Deserialize)]
        pub struct $name {
            $($(#[$fm])* #[serde(default, deserialize_with = "lenient")] pub $field: Option<$ty>,)*
        }
    };
}

reply!(
    /// `hello`: the worker's first frame.
    Hello { magic: String, protocol: u64, uid: u64 }
);

reply!(
    /// `error`: any command that failed.
    Error {
        kind: String,
        message: String,
        traceback: String,
        /// An integrity probe's name for what went wrong (`non-plain-output`).
        integrity: Value,
    }
);

reply!(
    /// `loaded`.
    Loaded {
        load_s: f64,
        device_name: String,
        f64_available: bool,
        f64_error: String,
        integrity: Value,
    }
);

reply!(
    /// `built`: a build job's pass.
    Built { complete: bool }
);

reply!(
    /// `case`: the reference's case.
    Case {
        /// The argument list, forwarded to the candidate as it is.
        inputs: Value,
        inputs_s: f64,
        f64_error: String,
        probe_error: String,
        transformed: u64,
        /// `{"repeat": M, "f64": M}` (PROTOCOL.md, "Reference stability").
        stability: Value,
        device_tensors: Vec<Value>,
        /// Inputs the reference's own forward changed (entries that are not indices are
        /// skipped by the reader).
        inputs_changed: Vec<Value>,
    }
);

reply!(
    /// `eval_case`.
    EvalCaseDone { inputs: Value }
);

reply!(
    /// `outputs`: the candidate's answer to `run_case`.
    Outputs { device_outputs: Vec<Value>, integrity: Value }
);

reply!(
    /// `audit`.
    AuditDone { families: Value }
);

reply!(
    /// `profile`.
    Profile { kernels: Vec<Value>, default_stream: i64 }
);

reply!(
    /// `time_as`: the calls kept and their mean.
    TimeAsDone { timed_calls: u64, mean_ms: f64 }
);

reply!(
    /// `time_opened`: `calls` the placement probe ran on the worker's case (0 without one),
    /// and `tid`, the thread that runs the timed calls as the worker's namespace numbers it.
    TimeOpened { calls: u64, tid: u64 }
);

reply!(
    /// `timed_call`.
    TimedCall {
        clock: String,
        sample_ms: f64,
        outputs: Vec<Value>,
        integrity: Value,
    }
);

#[cfg(test)]
mod tests {
    use super::super::Frame;
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_of_the_wrong_type_read_as_absent() {
        let f = Frame::new(json!({"type": "time_as", "timed_calls": "many", "mean_ms": 2}));
        let r: TimeAsDone = f.reply();
        assert_eq!(r.timed_calls, None);
        assert_eq!(r.mean_ms, Some(2.0));
        let l: Loaded = Frame::new(json!({"type": "loaded", "f64_available": true})).reply();
        assert_eq!(l.f64_available, Some(true));
        assert_eq!(l.device_name, None);
        let e: Error = Frame::new(json!({"kind": 3, "message": "m"})).reply();
        assert_eq!((e.kind, e.message.as_deref()), (None, Some("m")));
    }

    #[test]
    fn a_json_field_reads_as_the_header_holds_it() {
        // An `integrity` report present as null is present (readers tell it from absent).
        let o: Outputs = Frame::new(json!({"type": "outputs", "integrity": null})).reply();
        assert_eq!(o.integrity, Some(Value::Null));
        let o: Outputs = Frame::new(json!({"type": "outputs"})).reply();
        assert_eq!(o.integrity, None);
        // A list keeps entries of any type; a non-list reads as absent.
        let c: Case = Frame::new(json!({"inputs_changed": [1, "x"], "device_tensors": 3})).reply();
        assert_eq!(c.inputs_changed, Some(vec![json!(1), json!("x")]));
        assert_eq!(c.device_tensors, None);
        let t: TimedCall = Frame::new(json!({"sample_ms": 3, "clock": "cuda_event"})).reply();
        assert_eq!(
            (t.sample_ms, t.clock.as_deref()),
            (Some(3.0), Some("cuda_event"))
        );
    }
}
