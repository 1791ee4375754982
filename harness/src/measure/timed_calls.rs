//! What a gated timing measured, call by call (`super::gated` measures it; `judge` reads it).

/// One side's measurement of one timed call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CallTime {
    /// What the worker said the call took (its CUDA events or `perf_counter`).
    pub(crate) claimed_ms: f64,
    /// The window as the harness measured it: from the thaw to the freeze asked for on the
    /// answer (and the wait for a quiet GPU, when it was busy).
    pub(crate) wall_ms: f64,
    /// How long the harness's thread waited for a CPU in the window, and the worker's timing
    /// thread from just before the window to the freeze after it (`super::host_wait`), in
    /// milliseconds; NaN where unread. Evidence only: no verdict reads them.
    pub(crate) harness_wait_ms: f64,
    pub(crate) worker_wait_ms: f64,
}

/// What a complete timing measured. Raw: `judge::timing` makes the summary and verdicts.
#[derive(Clone)]
pub(crate) struct RawGated {
    pub(crate) reference_clock: String,
    pub(crate) candidate_clock: String,
    /// Timed calls (warm-up calls left out), in order.
    pub(crate) reference: Vec<CallTime>,
    pub(crate) candidate: Vec<CallTime>,
    /// Untimed calls opening each timed call's window.
    pub(crate) opening: u32,
    /// How the workers were frozen: `cgroup` or `signals`.
    pub(crate) freeze: &'static str,
    /// Reference calls timed again because the GPU was busy in or before their window.
    pub(crate) retimed: u32,
    /// Candidate windows that closed only once its GPU work had drained after the answer.
    pub(crate) candidate_busy: u32,
    /// Seconds the reference spent drawing inputs.
    pub(crate) staging_s: f64,
}

impl RawGated {
    /// `later`'s calls after these: timings of one candidate pooled (same case, new values).
    pub(crate) fn extend(&mut self, later: RawGated) {
        self.reference.extend(later.reference);
        self.candidate.extend(later.candidate);
        self.retimed += later.retimed;
        self.candidate_busy += later.candidate_busy;
        self.staging_s += later.staging_s;
    }
}
