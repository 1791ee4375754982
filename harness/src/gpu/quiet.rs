//! Whether another process's work is running on the GPU. Contexts of different processes
//! share a GPU by time slices: while another context has work running or queued, a tiny
//! operation of the harness's own context waits for that context's slice to end. On an H200
//! (2026-12-01) a 4 KiB memset and its wait took 13-20 µs on a quiet GPU (another context
//! idle beside it) and 2.4 ms while another process's kernel spun or its queued matmuls
//! drained, the queue draining even with that process stopped (SIGSTOP). A frozen candidate
//! whose GPU work is still running or queued, or a kernel it left spinning, is seen here.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::devmem::{DevBuf, Gpu};

/// A probe at or above this latency means another context's work held the GPU (a time
/// slice is milliseconds; a quiet probe tens of microseconds).
pub(crate) const BUSY_AT: Duration = Duration::from_micros(400);

/// A small buffer of the harness's own whose fill is the probe.
pub(crate) struct QuietProbe {
    buf: DevBuf,
}

/// What waiting for a quiet GPU found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Quiet {
    /// The first probe's latency.
    pub(crate) first: Duration,
    /// From the first probe's start to the end of the first quiet one.
    pub(crate) waited: Duration,
}

impl Quiet {
    /// Whether the first probe found the GPU busy.
    pub(crate) fn was_busy(&self) -> bool {
        self.first >= BUSY_AT
    }
}

impl QuietProbe {
    pub(crate) fn new(gpu: &Arc<Gpu>) -> Result<Self> {
        Ok(Self {
            buf: gpu.alloc(4096)?,
        })
    }

    /// One probe: a 4 KiB fill on the harness's context, waited for.
    pub(crate) fn latency(&self) -> Result<Duration> {
        let t = Instant::now();
        self.buf.gpu().fill(&self.buf, 0)?;
        Ok(t.elapsed())
    }

    /// Probes until one finds the GPU quiet, for at most `limit`. `Ok(None)`: still busy
    /// after `limit`.
    pub(crate) fn wait_quiet(&self, limit: Duration) -> Result<Option<Quiet>> {
        let t = Instant::now();
        let mut first = None;
        loop {
            let l = self.latency()?;
            first.get_or_insert(l);
            if l < BUSY_AT {
                return Ok(Some(Quiet {
                    first: first.unwrap_or(l),
                    waited: t.elapsed(),
                }));
            }
            if t.elapsed() > limit {
                return Ok(None);
            }
        }
    }
}
