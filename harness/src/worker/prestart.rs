//! Workers started ahead on a thread of their own, optionally with their first request.

use kbench_record::protocol::Frame;

use super::{Worker, WorkerFault, WorkerSpec};

/// A worker process being started on a thread of its own while other work runs, so that
/// Python's start-up and torch's import never hold up the GPU. On the CPU the start waits
/// until the worker is needed: a second process importing torch would disturb CPU timing.
///
/// A started worker may also be sent its first request ahead (a reference worker's `load`):
/// like a start, it is paused while any kernel is timed (the gate), so it never competes
/// with a timed call.
pub enum Prestart {
    Started(std::thread::JoinHandle<Prestarted>),
    Later(Box<WorkerSpec>, std::time::Duration),
}

/// A worker started ahead, and its answer to the request sent ahead, if any.
pub type Prestarted = (
    Result<Worker, WorkerFault>,
    Option<Result<Frame, WorkerFault>>,
);

impl Prestart {
    pub fn spawn_then(
        spec: WorkerSpec,
        timeout: std::time::Duration,
        ahead: bool,
        first: Option<(Frame, std::time::Duration)>,
    ) -> Self {
        if !ahead {
            return Prestart::Later(Box::new(spec), timeout);
        }
        Prestart::Started(std::thread::spawn(move || {
            let mut started = Worker::start(&spec, timeout);
            let reply = match (&mut started, first) {
                (Ok(w), Some((frame, limit))) => {
                    let hold = spec.gate.as_ref().map(|g| g.hold(w.pgid()));
                    let reply = w.request(frame, limit);
                    drop(hold);
                    Some(reply)
                }
                _ => None,
            };
            (started, reply)
        }))
    }
    pub fn take_with_reply(self) -> Prestarted {
        match self {
            Prestart::Started(h) => h.join().unwrap_or_else(|_| {
                (
                    Err(WorkerFault::Spawn("worker start-up thread panicked".into())),
                    None,
                )
            }),
            Prestart::Later(spec, timeout) => (Worker::start(&spec, timeout), None),
        }
    }
    /// Stops a worker that was started but is not needed.
    pub fn discard(self) {
        if let Prestart::Started(h) = self {
            if let Ok((Ok(w), _)) = h.join() {
                w.shutdown();
            }
        }
    }
}
