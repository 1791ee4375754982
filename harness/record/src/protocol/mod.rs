//! The framed protocol between the harness and its Python workers
//! (`harness/python/kbench_worker/`).
//!
//! A frame is `b"KBF1"`, a little-endian `u32` header length, a little-endian `u64` payload
//! length, the header (one UTF-8 JSON object) and the payload. A payload is empty or one
//! [safetensors](https://github.com/huggingface/safetensors) buffer holding the frame's
//! tensors by name (dense, row-major, little-endian). A worker is untrusted: its payloads are
//! parsed and bounds-checked by the `safetensors` crate, never by hand. The first frame a
//! worker sends is `{"type": "hello", "magic": HELLO_MAGIC, "protocol": PROTOCOL_VERSION, ...}`.
//! The commands are [`Command`] (`command.rs`), what the harness reads of the replies
//! [`reply`]; `harness/python/PROTOCOL.md` states both.

mod command;
pub mod reply;

pub use command::{
    Audit, Build, Command, EvalCase, ExchangeFile, Export, Load, MakeCase, Poison, RunCase, Seeds,
    TensorSpec, TimeAs, TimeOpen,
};

use std::borrow::Cow;
use std::cmp::Ordering;
use std::io::{Read, Write};

use safetensors::tensor::{Dtype as StDtype, SafeTensors, View};

use crate::tensor::{Dtype, HostTensor};

/// Bytes that open every frame.
pub const FRAME_MAGIC: &[u8; 4] = b"KBF1";
/// The `magic` field of a worker's hello.
pub const HELLO_MAGIC: &str = "kbench-worker";
/// Protocol version spoken by this harness; a worker must answer with the same.
/// 2: payloads are safetensors buffers (1 listed tensors in the JSON header).
pub const PROTOCOL_VERSION: u32 = 2;
/// Largest header accepted. Headers are small JSON; anything larger is a corrupt channel.
pub const MAX_HEADER_BYTES: u32 = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("worker channel closed")]
    Closed,
    #[error("i/o on the worker channel: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed frame: {0}")]
    Malformed(String),
}

/// One message: a JSON header and an optional payload of tensor bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub header: serde_json::Value,
    pub payload: Vec<u8>,
}

/// A [`HostTensor`] as the `safetensors` crate's serialiser sees it.
struct Wire<'a> {
    tensor: &'a HostTensor,
    shape: Vec<usize>,
}

impl View for Wire<'_> {
    fn dtype(&self) -> StDtype {
        match self.tensor.dtype() {
            Dtype::F64 => StDtype::F64,
            Dtype::F32 => StDtype::F32,
            Dtype::F16 => StDtype::F16,
            Dtype::Bf16 => StDtype::BF16,
            Dtype::I64 => StDtype::I64,
            Dtype::I32 => StDtype::I32,
            Dtype::I16 => StDtype::I16,
            Dtype::I8 => StDtype::I8,
            Dtype::U8 => StDtype::U8,
            Dtype::Bool => StDtype::BOOL,
        }
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.tensor.data())
    }
    fn data_len(&self) -> usize {
        self.tensor.data().len()
    }
}
fn from_wire(d: StDtype) -> Option<Dtype> {
    Some(match d {
        StDtype::F64 => Dtype::F64,
        StDtype::F32 => Dtype::F32,
        StDtype::F16 => Dtype::F16,
        StDtype::BF16 => Dtype::Bf16,
        StDtype::I64 => Dtype::I64,
        StDtype::I32 => Dtype::I32,
        StDtype::I16 => Dtype::I16,
        StDtype::I8 => Dtype::I8,
        StDtype::U8 => Dtype::U8,
        StDtype::BOOL => Dtype::Bool,
        _ => return None,
    })
}

/// Orders tensor names so that a worker cannot reorder what it sends: by `:`-separated
/// segments, numeric segments by value (`out:2` before `out:10`), others as text.
fn natural_order(a: &str, b: &str) -> Ordering {
    let seg = |s: &str| -> Vec<(Option<u64>, String)> {
        s.split(':')
            .map(|p| (p.parse::<u64>().ok(), p.to_string()))
            .collect()
    };
    let (sa, sb) = (seg(a), seg(b));
    for (x, y) in sa.iter().zip(&sb) {
        let o = match (x.0, y.0) {
            (Some(i), Some(j)) => i.cmp(&j).then_with(|| x.1.cmp(&y.1)),
            _ => x.1.cmp(&y.1),
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    sa.len().cmp(&sb.len())
}

impl Frame {
    /// A frame carrying `command` (its `id` is added when it is sent).
    pub fn command(command: &Command) -> Self {
        Self::new(command.to_header())
    }

    /// A frame carrying `command` and `tensors` (as [`Frame::with_tensors`]).
    pub fn command_with_tensors(command: &Command, tensors: &[(String, &HostTensor)]) -> Self {
        Self::with_tensors(command.to_header(), tensors)
    }

    /// A frame with any header: a reply, or a test's hand-made frame.
    pub fn new(header: serde_json::Value) -> Self {
        Self {
            header,
            payload: Vec::new(),
        }
    }

    /// Builds a frame carrying `tensors` as a safetensors payload (no tensors: no payload).
    /// Names must be distinct (callers name tensors by role and position, `in:0`).
    pub fn with_tensors(header: serde_json::Value, tensors: &[(String, &HostTensor)]) -> Self {
        if tensors.is_empty() {
            return Self::new(header);
        }
        let views = tensors.iter().map(|(name, t)| {
            let shape = t
                .shape()
                .iter()
                .map(|&d| usize::try_from(d).unwrap_or(usize::MAX))
                .collect();
            (name.as_str(), Wire { tensor: t, shape })
        });
        // A HostTensor's size is checked when it is made, so the serialiser's own checks
        // cannot fail here; if one ever did, the frame carries no payload and the worker
        // answers that its tensors are missing.
        let payload = safetensors::tensor::serialize(views, None).unwrap_or_default();
        Self { header, payload }
    }

    /// The header read as reply `T` ([`reply`]): its fields of the right type, the others
    /// absent.
    pub fn reply<T: serde::de::DeserializeOwned + Default>(&self) -> T {
        <T as serde::Deserialize>::deserialize(&self.header).unwrap_or_default()
    }

    /// The header's `id` (the command a reply answers), or `None` when it is absent or not
    /// a non-negative integer.
    pub fn id(&self) -> Option<u64> {
        self.header.get("id").and_then(|v| v.as_u64())
    }

    /// The header's `type` field, or "" when absent.
    pub fn kind(&self) -> &str {
        self.header
            .get("type")
            .and_then(|v| v.as_str())
            .unwrap_or("")
    }

    /// The names and shapes of the payload's tensors, read without copying their data (a
    /// malformed payload is an error, as for [`Frame::tensors`]).
    pub fn tensor_shapes(&self) -> Result<Vec<(String, Vec<u64>)>, ProtocolError> {
        if self.payload.is_empty() {
            return Ok(Vec::new());
        }
        let st = SafeTensors::deserialize(&self.payload)
            .map_err(|e| ProtocolError::Malformed(format!("bad safetensors payload: {e}")))?;
        Ok(st
            .iter()
            .map(|(name, view)| {
                let shape = view.shape().iter().map(|&d| d as u64).collect();
                (name.to_string(), shape)
            })
            .collect())
    }

    /// The tensors of the payload, parsed and bounds-checked by the `safetensors` crate, in
    /// the natural order of their names (see `natural_order`), whatever order the sender
    /// laid them out in. A dtype outside the protocol's, a size that does not match, or any
    /// malformation of the buffer is an error naming what is wrong.
    pub fn tensors(&self) -> Result<Vec<(String, HostTensor)>, ProtocolError> {
        if self.payload.is_empty() {
            return Ok(Vec::new());
        }
        let st = SafeTensors::deserialize(&self.payload)
            .map_err(|e| ProtocolError::Malformed(format!("bad safetensors payload: {e}")))?;
        let mut out = Vec::with_capacity(st.len());
        for (name, view) in st.iter() {
            let dtype = from_wire(view.dtype()).ok_or_else(|| {
                ProtocolError::Malformed(format!(
                    "tensor '{name}' has dtype {:?}, which the protocol does not carry",
                    view.dtype()
                ))
            })?;
            let shape = view.shape().iter().map(|&d| d as u64).collect();
            let t = HostTensor::new(dtype, shape, view.data().to_vec())
                .map_err(|e| ProtocolError::Malformed(format!("tensor '{name}': {e}")))?;
            out.push((name.to_string(), t));
        }
        out.sort_by(|a, b| natural_order(&a.0, &b.0));
        Ok(out)
    }
}

/// Writes one frame and flushes.
pub fn write_frame(w: &mut impl Write, frame: &Frame) -> Result<(), ProtocolError> {
    write_frame_parts(w, &frame.header, &frame.payload)
}

/// Writes a frame from a header and a payload held elsewhere (shared input payloads are sent
/// to many workers without copying).
pub fn write_frame_parts(
    w: &mut impl Write,
    header: &serde_json::Value,
    payload: &[u8],
) -> Result<(), ProtocolError> {
    let header = serde_json::to_vec(header)
        .map_err(|e| ProtocolError::Malformed(format!("unserialisable header: {e}")))?;
    let header_len = u32::try_from(header.len())
        .ok()
        .filter(|&l| l <= MAX_HEADER_BYTES)
        .ok_or_else(|| ProtocolError::Malformed("header too large".into()))?;
    w.write_all(FRAME_MAGIC)?;
    w.write_all(&header_len.to_le_bytes())?;
    w.write_all(&(payload.len() as u64).to_le_bytes())?;
    w.write_all(&header)?;
    w.write_all(payload)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame. `max_payload` bounds the allocation a corrupt or hostile peer can cause.
pub fn read_frame(r: &mut impl Read, max_payload: u64) -> Result<Frame, ProtocolError> {
    let mut prefix = [0u8; 16];
    match r.read_exact(&mut prefix) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err(ProtocolError::Closed)
        }
        Err(e) => return Err(e.into()),
    }
    if &prefix[..4] != FRAME_MAGIC {
        return Err(ProtocolError::Malformed(format!(
            "bad frame magic {:?}",
            String::from_utf8_lossy(&prefix[..4])
        )));
    }
    let header_len = u32::from_le_bytes(prefix[4..8].try_into().unwrap_or_default());
    let payload_len = u64::from_le_bytes(prefix[8..16].try_into().unwrap_or_default());
    if header_len > MAX_HEADER_BYTES {
        return Err(ProtocolError::Malformed(format!(
            "header of {header_len} bytes exceeds {MAX_HEADER_BYTES}"
        )));
    }
    if payload_len > max_payload {
        return Err(ProtocolError::Malformed(format!(
            "payload of {payload_len} bytes exceeds the limit of {max_payload}"
        )));
    }
    let mut header = vec![0u8; header_len as usize];
    read_body(r, &mut header)?;
    let header: serde_json::Value = serde_json::from_slice(&header)
        .map_err(|e| ProtocolError::Malformed(format!("header is not JSON: {e}")))?;
    if !header.is_object() {
        return Err(ProtocolError::Malformed(
            "header is not a JSON object".into(),
        ));
    }
    let mut payload = vec![0u8; payload_len as usize];
    read_body(r, &mut payload)?;
    Ok(Frame { header, payload })
}

fn read_body(r: &mut impl Read, buf: &mut [u8]) -> Result<(), ProtocolError> {
    r.read_exact(buf).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            ProtocolError::Malformed("frame truncated".into())
        } else {
            ProtocolError::Io(e)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn round_trip(f: &Frame) -> Frame {
        let mut buf = Vec::new();
        write_frame(&mut buf, f).unwrap();
        read_frame(&mut buf.as_slice(), 1 << 30).unwrap()
    }

    /// A payload written by hand: an 8-byte header length, the JSON, then `data`.
    fn hand_payload(header: &str, data: &[u8]) -> Vec<u8> {
        let mut p = (header.len() as u64).to_le_bytes().to_vec();
        p.extend_from_slice(header.as_bytes());
        p.extend_from_slice(data);
        p
    }

    fn malformed(payload: Vec<u8>) -> String {
        let f = Frame {
            header: json!({"type": "outputs"}),
            payload,
        };
        match f.tensors() {
            Err(ProtocolError::Malformed(m)) => m,
            other => panic!("expected a malformed-payload error, got {other:?}"),
        }
    }

    #[test]
    fn frames_round_trip_with_tensors_in_natural_name_order() {
        let a = HostTensor::from_f32(vec![2, 2], &[1.0, -2.0, f32::NAN, 4.0]).unwrap();
        let b = HostTensor::new(Dtype::Bool, vec![3], vec![1, 0, 1]).unwrap();
        let c = HostTensor::new(Dtype::Bf16, vec![0, 5], vec![]).unwrap();
        let d = HostTensor::new(Dtype::I64, vec![], 7i64.to_le_bytes().to_vec()).unwrap();
        // The serialiser lays tensors out by dtype; the reader gives them back by name,
        // numerically: out:2 before out:10.
        let f = Frame::with_tensors(
            json!({"type": "outputs"}),
            &[
                ("out:10".into(), &d),
                ("out:2".into(), &b),
                ("out:0".into(), &a),
                ("in:0".into(), &c),
            ],
        );
        let g = round_trip(&f);
        assert_eq!(g.kind(), "outputs");
        let ts = g.tensors().unwrap();
        let names: Vec<&str> = ts.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["in:0", "out:0", "out:2", "out:10"]);
        assert_eq!(ts[0].1, c);
        assert_eq!(ts[1].1.data(), a.data());
        assert_eq!(ts[2].1, b);
        assert_eq!(ts[3].1, d);
        // Shapes without the data, in whatever order: the same four.
        let mut shapes = g.tensor_shapes().unwrap();
        shapes.sort();
        assert_eq!(
            shapes,
            [
                ("in:0".to_string(), vec![0, 5]),
                ("out:0".to_string(), vec![2, 2]),
                ("out:10".to_string(), vec![]),
                ("out:2".to_string(), vec![3]),
            ]
        );
        // No tensors, no payload.
        let e = Frame::with_tensors(json!({"type": "x"}), &[]);
        assert!(e.payload.is_empty());
        assert!(round_trip(&e).tensors().unwrap().is_empty());
    }

    #[test]
    fn a_payload_laid_out_by_another_writer_is_read() {
        // What the Python worker writes: its own order, an unpadded header.
        let data: Vec<u8> = [1.5f32.to_le_bytes(), 2.5f32.to_le_bytes()].concat();
        let header = r#"{"out:1":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"out:0":{"dtype":"F32","shape":[1,2],"data_offsets":[2,10]}}"#;
        let mut bytes = vec![3u8, 4];
        bytes.extend_from_slice(&data);
        let f = Frame {
            header: json!({"type": "outputs"}),
            payload: hand_payload(header, &bytes),
        };
        let ts = f.tensors().unwrap();
        assert_eq!(ts[0].0, "out:0");
        assert_eq!(ts[0].1.shape(), &[1, 2]);
        assert_eq!(ts[0].1.data(), data.as_slice());
        assert_eq!(ts[1].1.data(), &[3, 4]);
    }

    #[test]
    fn hostile_frames_are_rejected() {
        assert!(matches!(
            read_frame(&mut &b""[..], 10),
            Err(ProtocolError::Closed)
        ));
        let mut bad = b"XXXX".to_vec();
        bad.extend_from_slice(&[0; 12]);
        assert!(matches!(
            read_frame(&mut bad.as_slice(), 10),
            Err(ProtocolError::Malformed(_))
        ));
        // payload larger than allowed
        let f = Frame {
            header: json!({"type": "x"}),
            payload: vec![0; 100],
        };
        let mut buf = Vec::new();
        write_frame(&mut buf, &f).unwrap();
        assert!(matches!(
            read_frame(&mut buf.as_slice(), 10),
            Err(ProtocolError::Malformed(_))
        ));
        // truncated
        assert!(matches!(
            read_frame(&mut &buf[..buf.len() - 1], 1000),
            Err(ProtocolError::Malformed(_))
        ));
    }

    #[test]
    fn hostile_payloads_are_named_errors() {
        let t = |h: &str, n: usize| hand_payload(h, &vec![0u8; n]);
        // Too short for the length prefix; a length past the buffer; a huge length.
        assert!(malformed(vec![1, 2, 3]).contains("safetensors"));
        assert!(!malformed(t("{}", 0)[..6].to_vec()).is_empty());
        let mut huge = u64::MAX.to_le_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        malformed(huge);
        // Not JSON; not an object.
        malformed(t("{not json", 0));
        malformed(t("[1,2]", 0));
        // Data outside the buffer; bytes left over; a gap; overlapping tensors.
        malformed(t(
            r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
            8,
        ));
        malformed(t(
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
            8,
        ));
        malformed(t(
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}"#,
            12,
        ));
        malformed(t(
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
            8,
        ));
        // Bytes that do not hold the shape; a shape whose size overflows.
        malformed(t(
            r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
            8,
        ));
        malformed(t(
            r#"{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}"#,
            8,
        ));
        // A dtype the format knows and the protocol does not carry is named.
        let m = malformed(t(
            r#"{"a":{"dtype":"U16","shape":[2],"data_offsets":[0,4]}}"#,
            4,
        ));
        assert!(m.contains("'a'") && m.contains("U16"), "{m}");
        // Unknown dtype string; negative offsets.
        malformed(t(
            r#"{"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}}"#,
            1,
        ));
        malformed(t(
            r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}}"#,
            1,
        ));
    }

    fn valid_payload() -> Vec<u8> {
        let a = HostTensor::from_f32(vec![3], &[1.0, 2.0, 3.0]).unwrap();
        let b = HostTensor::new(Dtype::I16, vec![2, 1], vec![1, 0, 2, 0]).unwrap();
        Frame::with_tensors(json!({}), &[("out:0".into(), &a), ("out:1".into(), &b)]).payload
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Any bytes at all: an error or tensors whose sizes hold, never a panic.
        #[test]
        fn arbitrary_payloads_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let f = Frame { header: json!({}), payload: bytes };
            if let Ok(ts) = f.tensors() {
                for (_, t) in ts {
                    let numel: u64 = t.shape().iter().product();
                    prop_assert_eq!(numel * t.dtype().size() as u64, t.data().len() as u64);
                }
            }
        }

        /// A valid payload with bytes flipped, cut or appended: an error or consistent
        /// tensors, never a panic.
        #[test]
        fn mutated_payloads_never_panic(
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
            cut in any::<prop::sample::Index>(),
            extra in proptest::collection::vec(any::<u8>(), 0..4),
        ) {
            let mut p = valid_payload();
            for (i, b) in flips {
                let k = i.index(p.len());
                p[k] ^= b;
            }
            let keep = cut.index(p.len() + 1);
            p.truncate(keep.max(p.len().saturating_sub(16)));
            p.extend(extra);
            let f = Frame { header: json!({}), payload: p };
            if let Ok(ts) = f.tensors() {
                for (_, t) in ts {
                    let numel: u64 = t.shape().iter().product();
                    prop_assert_eq!(numel * t.dtype().size() as u64, t.data().len() as u64);
                }
            }
        }
    }
}
