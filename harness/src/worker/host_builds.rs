//! The host's builds ahead, paused while a candidate's claims are timed again.
//!
//! Build jobs (`super::build`) fill the host's cores with compilers while kernels are timed.
//! They are niced and kept off the timing cores, yet an honest kernel was once failed as
//! `time-claim-unsupported` on an H100 host whose 16 cores were 92-96% busy with them: its
//! windows held a 1-3 ms stall in most pairs, through all three timings, and its claims held
//! none. A timing after the first is taken only when the harness's clock did not support the
//! candidate's claims, or could not tell (`eval::candidate::time`); those timings run with
//! every build job of this process frozen, so that a verdict of forgery rests on timings of a
//! host doing nothing else of kbench's. A forged clock gains nothing from the quiet: its
//! excess is its own and stays.
//!
//! One registry for the whole process: every executor's builds share the host's cores, so a
//! pause holds them all. Pauses nest (two executors confirming at once); the builds run again
//! when the last one ends, and never stay frozen long ([`PAUSE_MAX`]). A build job that starts
//! during a pause is frozen once its worker is up (its Python start and torch's import run).
//! A frozen build keeps its compiler's state and goes on where it stopped; a pause costs the
//! builds its length, and whatever waits on a frozen build (another executor's candidate
//! whose build it is) waits as long. Freezing a build may take up to [`FREEZE_LIMIT`] each,
//! with the registry held: a build job that keeps forking delays a pause by that much. The precompiled-header helper
//! (`super::pch`) is registered too: it compiles beside the first builds.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::freeze::FreezeHandle;

/// How long one build's freeze may take to be confirmed. A build is load to be quieted, not a
/// party to the timing: one that takes longer is left to freeze on its own.
const FREEZE_LIMIT: Duration = Duration::from_millis(200);

struct Registry {
    next: u64,
    pauses: usize,
    /// Since when the builds have been frozen without a break, while they are.
    frozen_since: Option<Instant>,
    /// After a stretch frozen, until when no new one starts: as long again as it lasted.
    cool_until: Option<Instant>,
    builds: Vec<(u64, FreezeHandle)>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    next: 0,
    pauses: 0,
    frozen_since: None,
    cool_until: None,
    builds: Vec::new(),
});

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// A build job's place in the registry, for as long as its worker runs; dropped before the
/// worker ends (its group folder goes with it).
#[must_use]
#[derive(Debug)]
pub(crate) struct Registered(u64);

/// Registers a build job's worker, frozen at once if a pause holds.
pub(crate) fn register(handle: FreezeHandle) -> Registered {
    let mut r = registry();
    r.next += 1;
    let id = r.next;
    if r.pauses > 0 {
        let _ = handle.freeze(FREEZE_LIMIT);
    }
    r.builds.push((id, handle));
    Registered(id)
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut r = registry();
        if let Some(i) = r.builds.iter().position(|(id, _)| *id == self.0) {
            let (_, handle) = r.builds.remove(i);
            // Let go frozen, it could not be shut down.
            if r.pauses > 0 {
                let _ = handle.thaw();
            }
        }
    }
}

/// The longest one pause holds the builds: a candidate whose timings again are slow (or made
/// slow on purpose) must not starve every other kernel's build. Nor may pauses that overlap,
/// one executor's after another's: a pause asked for when the builds have been frozen this
/// long already holds nothing, so they are never frozen for more than twice this at a stretch.
/// Nor a stream of forged clocks on several GPUs, each retimed in turn: after a stretch frozen
/// the builds run at least as long again before the next one (a pause asked for meanwhile
/// holds nothing), so they run at least half of the time.
pub(crate) const PAUSE_MAX: Duration = Duration::from_secs(30);

/// Every registered build frozen until the guard drops or [`PAUSE_MAX`] has passed (and no
/// other pause holds).
#[must_use]
pub(crate) struct Paused {
    /// Build jobs running when the pause began.
    pub(crate) builds: usize,
    /// Whether this pause holds the builds (see [`PAUSE_MAX`]).
    pub(crate) held: bool,
    ended: Arc<AtomicBool>,
}

impl Paused {
    /// Whether the pause ran out of time before its guard dropped: the builds ran again.
    pub(crate) fn ran_out(&self) -> bool {
        self.held && self.ended.load(Ordering::SeqCst)
    }
}

/// Freezes every build job of this process (already frozen if another pause holds).
pub(crate) fn pause() -> Paused {
    pause_for(PAUSE_MAX)
}

fn pause_for(longest: Duration) -> Paused {
    let (builds, held) = {
        let mut r = registry();
        let builds = r.builds.len();
        let now = Instant::now();
        let long_frozen = r.frozen_since.is_some_and(|t| now - t >= PAUSE_MAX);
        let cooling = r.pauses == 0 && r.cool_until.is_some_and(|t| now < t);
        if long_frozen || cooling {
            (builds, false)
        } else {
            r.pauses += 1;
            if r.pauses == 1 {
                r.frozen_since = Some(now);
                for (_, handle) in &r.builds {
                    let _ = handle.freeze(FREEZE_LIMIT);
                }
            }
            (builds, true)
        }
    };
    let ended = Arc::new(AtomicBool::new(!held));
    if held {
        let watch = Arc::clone(&ended);
        // A thread rather than a check at the next timing: the pause must end even while the
        // candidate's call holds the thread that took it.
        std::thread::spawn(move || {
            std::thread::sleep(longest);
            end(&watch);
        });
    }
    Paused {
        builds,
        held,
        ended,
    }
}

/// Ends a pause once, whichever comes first: its guard's drop or its time.
fn end(ended: &AtomicBool) {
    if ended.swap(true, Ordering::SeqCst) {
        return;
    }
    let mut r = registry();
    r.pauses = r.pauses.saturating_sub(1);
    if r.pauses == 0 {
        let now = Instant::now();
        r.cool_until = r.frozen_since.take().map(|t| now + (now - t));
        for (_, handle) in &r.builds {
            let _ = handle.thaw();
        }
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        end(&self.ended);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command, Stdio};

    /// A shell that keeps a core busy, and its pid.
    fn busy() -> (Child, i32) {
        let child = Command::new("/bin/sh")
            .args(["-c", "while :; do :; done"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        (child, pid)
    }

    fn state(pid: i32) -> String {
        let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let (_, rest) = s.rsplit_once(')').unwrap();
        rest.split_whitespace().next().unwrap().to_string()
    }

    fn stopped(pid: i32) -> bool {
        // A SIGSTOP is delivered when the process next runs: give it a moment.
        for _ in 0..100 {
            if state(pid) == "T" {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    /// One test for the whole registry: it is the process's, and tests run side by side.
    #[test]
    fn a_pause_freezes_every_registered_build_until_the_last_pause_ends() {
        let (mut a, pa) = busy();
        let (mut b, pb) = busy();
        let reg_a = register(FreezeHandle::Tree(pa));
        let outer = pause();
        assert!(outer.builds >= 1);
        assert!(stopped(pa), "a registered build runs through a pause");
        // A build that starts during the pause is frozen as it registers.
        let reg_b = register(FreezeHandle::Tree(pb));
        assert!(stopped(pb), "a build registered during a pause runs");
        // A nested pause ending does not let them go.
        let inner = pause();
        drop(inner);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!((state(pa), state(pb)), ("T".into(), "T".into()));
        // A build that ends during the pause is let go, so that it can be shut down.
        drop(reg_b);
        std::thread::sleep(Duration::from_millis(50));
        assert_ne!(state(pb), "T", "a deregistered build stays frozen");
        assert_eq!(state(pa), "T");
        drop(outer);
        std::thread::sleep(Duration::from_millis(50));
        assert_ne!(
            state(pa),
            "T",
            "the builds stay frozen after the last pause"
        );
        // Not registered any more: a later pause leaves it alone.
        drop(reg_a);
        let later = pause();
        std::thread::sleep(Duration::from_millis(50));
        assert_ne!(state(pa), "T");
        drop(later);
        // After a stretch frozen the builds run as long again: a pause meanwhile holds nothing.
        let reg_a = register(FreezeHandle::Tree(pa));
        registry().cool_until = Some(Instant::now() + Duration::from_millis(300));
        let cooling = pause();
        assert!(!cooling.held);
        std::thread::sleep(Duration::from_millis(50));
        assert_ne!(state(pa), "T", "a pause while cooling held the builds");
        drop(cooling);
        std::thread::sleep(Duration::from_millis(300));
        // A pause past its time lets the builds go, guard or not, and the builds then run
        // as long as it held them.
        let long = pause_for(Duration::from_millis(1000));
        assert!(long.held && !long.ran_out());
        assert!(stopped(pa));
        std::thread::sleep(Duration::from_millis(1500));
        assert_ne!(state(pa), "T", "a pause outlasted its time");
        assert!(long.ran_out());
        drop(long);
        let cool = registry().cool_until.expect("a cool-off after the stretch");
        assert!(
            cool > Instant::now() - Duration::from_millis(300),
            "{cool:?}"
        );
        registry().cool_until = None;
        // Frozen for PAUSE_MAX already (as if pauses had overlapped that long): a new pause
        // holds nothing, and the builds run again when the ones before end.
        let first = pause();
        registry().frozen_since = Some(Instant::now() - PAUSE_MAX);
        let chained = pause();
        assert!(!chained.held && !chained.ran_out());
        drop(first);
        std::thread::sleep(Duration::from_millis(50));
        assert_ne!(state(pa), "T", "a chained pause held the builds");
        drop(chained);
        assert!(registry().frozen_since.is_none());
        registry().cool_until = None;
        drop(reg_a);
        for c in [&mut a, &mut b] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
