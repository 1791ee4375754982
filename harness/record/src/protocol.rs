//! The framed protocol between the harness and its Python workers
//! (`harness/python/kbench_worker/`).
//!
//! A frame is `b"KBF1"`, a little-endian `u32` header length, a little-endian `u64` payload
//! length, the header (one UTF-8 JSON object) and the payload (raw tensor bytes). A header may
//! carry `"tensors": [{"name", "dtype", "shape", "offset", "nbytes"}]`, each naming a slice of
//! the payload holding a dense row-major little-endian tensor. The first frame a worker sends is
//! `{"type": "hello", "magic": HELLO_MAGIC, "protocol": PROTOCOL_VERSION, ...}`.
//! See `harness/python/PROTOCOL.md` for the commands.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use crate::tensor::{Dtype, HostTensor};

/// Bytes that open every frame.
pub const FRAME_MAGIC: &[u8; 4] = b"KBF1";
/// The `magic` field of a worker's hello.
pub const HELLO_MAGIC: &str = "kbench-worker";
/// Protocol version spoken by this harness; a worker must answer with the same.
pub const PROTOCOL_VERSION: u32 = 1;
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

/// Describes one tensor inside a frame's payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorSpec {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    pub offset: u64,
    pub nbytes: u64,
}

/// One message: a JSON header and an optional payload of tensor bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub header: serde_json::Value,
    pub payload: Vec<u8>,
}

impl Frame {
    pub fn new(header: serde_json::Value) -> Self {
        Self {
            header,
            payload: Vec::new(),
        }
    }

    /// Builds a frame carrying `tensors`, listed in the header under `"tensors"`.
    pub fn with_tensors(mut header: serde_json::Value, tensors: &[(String, &HostTensor)]) -> Self {
        let total: usize = tensors.iter().map(|(_, t)| t.data().len()).sum();
        let mut payload = Vec::with_capacity(total);
        let mut specs = Vec::with_capacity(tensors.len());
        for (name, t) in tensors {
            specs.push(TensorSpec {
                name: name.clone(),
                dtype: t.dtype(),
                shape: t.shape().to_vec(),
                offset: payload.len() as u64,
                nbytes: t.data().len() as u64,
            });
            payload.extend_from_slice(t.data());
        }
        if let Some(obj) = header.as_object_mut() {
            obj.insert(
                "tensors".into(),
                serde_json::to_value(specs).unwrap_or_default(),
            );
        }
        Self { header, payload }
    }

    /// The header's `type` field, or "" when absent.
    pub fn kind(&self) -> &str {
        self.header
            .get("type")
            .and_then(|v| v.as_str())
            .unwrap_or("")
    }

    /// Splits the payload into the tensors the header describes, checking every bound.
    pub fn tensors(&self) -> Result<Vec<(String, HostTensor)>, ProtocolError> {
        let Some(list) = self.header.get("tensors") else {
            return Ok(Vec::new());
        };
        let specs: Vec<TensorSpec> = serde_json::from_value(list.clone())
            .map_err(|e| ProtocolError::Malformed(format!("bad tensor list: {e}")))?;
        let mut out = Vec::with_capacity(specs.len());
        for s in specs {
            let end = s
                .offset
                .checked_add(s.nbytes)
                .filter(|&e| e <= self.payload.len() as u64)
                .ok_or_else(|| {
                    ProtocolError::Malformed(format!(
                        "tensor '{}' lies outside the payload ({} + {} > {})",
                        s.name,
                        s.offset,
                        s.nbytes,
                        self.payload.len()
                    ))
                })?;
            let data = self.payload[s.offset as usize..end as usize].to_vec();
            let t = HostTensor::new(s.dtype, s.shape, data)
                .map_err(|e| ProtocolError::Malformed(format!("tensor '{}': {e}", s.name)))?;
            out.push((s.name, t));
        }
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
    use serde_json::json;

    #[test]
    fn frames_round_trip_with_tensors() {
        let a = HostTensor::from_f32(vec![2, 2], &[1.0, -2.0, f32::NAN, 4.0]).unwrap();
        let b = HostTensor::new(Dtype::Bool, vec![3], vec![1, 0, 1]).unwrap();
        let f = Frame::with_tensors(
            json!({"type": "outputs"}),
            &[("out:0".into(), &a), ("out:1".into(), &b)],
        );
        let mut buf = Vec::new();
        write_frame(&mut buf, &f).unwrap();
        let g = read_frame(&mut buf.as_slice(), 1 << 20).unwrap();
        assert_eq!(g.kind(), "outputs");
        let ts = g.tensors().unwrap();
        assert_eq!(ts[0].0, "out:0");
        assert_eq!(ts[0].1.data(), a.data());
        assert_eq!(ts[1].1, b);
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
        // tensor pointing outside the payload
        let f = Frame {
            header: json!({"type": "x", "tensors": [{"name": "t", "dtype": "f32", "shape": [4], "offset": 0, "nbytes": 16}]}),
            payload: vec![0; 8],
        };
        assert!(f.tensors().is_err());
    }
}
