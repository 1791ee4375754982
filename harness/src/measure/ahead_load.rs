//! A reference's `load` sent ahead, while other work ran on its GPU, that failed for GPU
//! memory: what [`super::reference::ReferenceSession::open`] loads again.

use kbench_record::protocol::{reply, Frame};

use crate::worker::first_line;

/// The first line of the out-of-memory error in a `load` reply, if it had one: the load's own
/// error, or a float64 copy that failed for memory (the load then answers `loaded` without
/// it, and the strict profile's float64 gate would be skipped for every candidate). Only a
/// message's first line counts, not a traceback. Here, not in `judge`, which this layer may
/// not import.
pub(super) fn ahead_out_of_memory(reply: &Frame) -> Option<String> {
    let loaded: reply::Loaded = reply.reply();
    let first = match reply.kind() {
        "error" => first_line(&reply.reply::<reply::Error>().message.unwrap_or_default()),
        "loaded" if loaded.f64_available == Some(false) => {
            format!(
                "float64 copy: {}",
                first_line(&loaded.f64_error.unwrap_or_default())
            )
        }
        _ => return None,
    };
    [
        "OutOfMemoryError",
        "CUDA out of memory",
        "CUDA error: out of memory",
    ]
    .iter()
    .any(|m| first.contains(m))
    .then_some(first)
}

#[cfg(test)]
mod tests {
    use super::{ahead_out_of_memory, Frame};
    use serde_json::json;

    #[test]
    fn a_load_out_of_memory_is_its_error_or_its_float64_copys() {
        let oom = "constructing Model failed: OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB\nTraceback ...";
        let error =
            |m: &str| Frame::new(json!({"type": "error", "kind": "runtime_error", "message": m}));
        assert_eq!(
            ahead_out_of_memory(&error(oom)).as_deref(),
            Some("constructing Model failed: OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB")
        );
        assert!(ahead_out_of_memory(&error("RuntimeError: CUDA error: out of memory")).is_some());
        // Another error, or "out of memory" only in a traceback: the problem's own.
        assert!(ahead_out_of_memory(&error("SyntaxError: bad\n  # CUDA out of memory")).is_none());
        let loaded = |h: serde_json::Value| {
            let mut h = h;
            h["type"] = json!("loaded");
            Frame::new(h)
        };
        let f64_oom = loaded(
            json!({"f64_available": false, "f64_error": "OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB"}),
        );
        assert!(ahead_out_of_memory(&f64_oom)
            .unwrap()
            .starts_with("float64 copy: OutOfMemoryError"));
        // A float64 copy that failed otherwise (a dtype it cannot hold), or none failed.
        assert!(ahead_out_of_memory(&loaded(
            json!({"f64_available": false, "f64_error": "TypeError: no float64"})
        ))
        .is_none());
        assert!(ahead_out_of_memory(&loaded(json!({"f64_available": true}))).is_none());
    }
}
