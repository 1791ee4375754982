//! A worker's output (its stderr): the first [`LOG_FILE_CAP`] bytes kept on disk, the last
//! [`LOG_TAIL_CAP`] in memory for records, drained by a thread of its own so a worker that
//! writes much never blocks on a full pipe. May import only the standard library.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

/// Bytes of worker output kept in memory (the tail shown in records).
pub(crate) const LOG_TAIL_CAP: usize = 16 << 10;
/// Bytes of worker output kept on disk per worker.
pub(crate) const LOG_FILE_CAP: u64 = 1 << 20;

#[derive(Default)]
pub(super) struct LogSink {
    pub(super) tail: VecDeque<u8>,
    pub(super) total: u64,
    pub(super) file: Option<std::fs::File>,
    pub(super) written: u64,
}

impl LogSink {
    pub(super) fn push(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        if let Some(f) = self.file.as_mut() {
            let room = LOG_FILE_CAP.saturating_sub(self.written) as usize;
            let n = room.min(chunk.len());
            if n > 0 && f.write_all(&chunk[..n]).is_ok() {
                self.written += n as u64;
            }
        }
        let keep = chunk.len().min(LOG_TAIL_CAP);
        let chunk = &chunk[chunk.len() - keep..];
        while self.tail.len() + chunk.len() > LOG_TAIL_CAP {
            self.tail.pop_front();
        }
        self.tail.extend(chunk);
    }
}

pub(super) fn drain(mut r: impl Read, log: Arc<Mutex<LogSink>>) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if let Ok(mut sink) = log.lock() {
                    sink.push(&buf[..n]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_sink_keeps_the_tail_and_caps_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut sink = LogSink {
            file: Some(std::fs::File::create(&path).unwrap()),
            ..Default::default()
        };
        for i in 0..200u32 {
            sink.push(format!("line {i:06}\n").repeat(1000).as_bytes());
        }
        assert_eq!(sink.tail.len(), LOG_TAIL_CAP);
        assert!(sink.total > LOG_FILE_CAP);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), LOG_FILE_CAP);
        let tail: Vec<u8> = sink.tail.iter().copied().collect();
        assert!(String::from_utf8_lossy(&tail).ends_with("line 000199\n"));
    }
}
