//! Workers started ahead on a thread of their own, optionally with their first request.

use kbench_record::protocol::{Command, Frame};

use super::{Worker, WorkerFault, WorkerSpec};

/// A worker process being started on a thread of its own while other work runs, so that
/// Python's start-up and torch's import never hold up the device, on a GPU and on the CPU
/// alike: the start (and a request sent ahead) is held by the device's gate, paused with
/// SIGSTOP while any kernel on that device is timed, so it never competes with a timed call
/// (on a GPU from the end of its imports: see `StartGate`).
/// (The CPU used to start each worker only when needed; starting ahead under the
/// gate halved a CPU run of the smoke suite, 77 s → 42 s on 2 cores.)
///
/// A started worker may also be sent its first request ahead (a reference worker's `load`,
/// a baseline mode's): on a GPU it joins the gate only for the device work of that request.
pub(crate) struct Prestart(std::thread::JoinHandle<Prestarted>);

/// A worker started ahead, and its answer to the request sent ahead, if any.
pub(crate) type Prestarted = (
    Result<Worker, WorkerFault>,
    Option<Result<Frame, WorkerFault>>,
);

impl Prestart {
    pub(crate) fn spawn_then(
        spec: WorkerSpec,
        timeout: std::time::Duration,
        first: Option<(Command, std::time::Duration)>,
    ) -> Self {
        Prestart(std::thread::spawn(move || {
            let mut started = Worker::start(&spec, timeout);
            let reply = match (&mut started, first) {
                // On a GPU the request's host part runs unpaused (`Worker::request_gated`);
                // on the CPU, where any work competes with the timed code, all of it is held.
                (Ok(w), Some((command, limit))) => Some(match spec.gate.as_deref() {
                    Some(g) if g.after_imports => w.request_gated(command, limit, g),
                    Some(g) => {
                        let _hold = g.hold(w.pgid());
                        w.request(Frame::command(&command), limit)
                    }
                    None => w.request(Frame::command(&command), limit),
                }),
                _ => None,
            };
            (started, reply)
        }))
    }
    pub(crate) fn take_with_reply(self) -> Prestarted {
        self.0.join().unwrap_or_else(|_| {
            (
                Err(WorkerFault::Spawn("worker start-up thread panicked".into())),
                None,
            )
        })
    }
    /// Stops a worker that was started but is not needed.
    pub(crate) fn discard(self) {
        if let Ok((Ok(w), _)) = self.0.join() {
            w.shutdown();
        }
    }
}
