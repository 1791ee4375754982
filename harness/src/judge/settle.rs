//! When a timing has seen enough calls to stop before `--timed-calls`.
//!
//! Every timed call costs its protections (fresh values drawn for it, both sides' windows,
//! every output compared): on an H200 they made the side-by-side set's timing 16% longer
//! per call than timing without them. A kernel whose speedup is already pinned down gains
//! nothing from more calls, so a timing may stop at a checkpoint once
//!
//! - at least `--min-timed-calls` calls were timed (checkpoints every [`SETTLE_EVERY`]
//!   calls, whole rounds);
//! - the paired speedup's distribution-free 99% interval lies within [`SETTLED_WITHIN`] of
//!   its median on both sides;
//! - the harness's clock supports the candidate's claims conclusively: even the upper bound
//!   of its excess interval is within what is allowed (`clock::check`). A forged clock adds
//!   its excess to every pair, so it never settles and is timed to the end, and judged
//!   there exactly as before; so is a kernel whose windows are too noisy to tell (calls
//!   of a few microseconds, where the interval is wider than the floor).
//!
//! What stopping early gives a hostile kernel: nothing it can steer. The checkpoints come
//! only after the minimum, the decision reads the reference's claims, which are trusted,
//! and the harness's windows, and a kernel that slows itself after the first calls to look
//! steady gains no speed. A kernel that cheats on a share of its calls meets a check on
//! every one of at least the minimum.

use kbench_record::Device;

use super::clock::{check, median_interval};
use crate::measure::gated::{CallTime, RawGated, CALLS_PER_ROUND};

/// Calls between checkpoints (five rounds of two).
pub(crate) const SETTLE_EVERY: usize = 10;

/// The largest distance, as a share of the median, from the paired speedup's median to
/// either end of its 99% interval at which a timing settles. The reference timed as its
/// own candidate is held to 1% on a GPU; the interval then bounds the noise well inside it.
pub(crate) const SETTLED_WITHIN: f64 = 0.01;

/// Whether the timing so far (`raw`, warm-up calls left out) may stop at `min_calls` or
/// later: a checkpoint, the speedup pinned within [`SETTLED_WITHIN`], the claims
/// conclusively supported by the harness's clock.
pub(crate) fn settled(raw: &RawGated, device: Device, min_calls: usize) -> bool {
    let n = raw.candidate.len();
    if n < min_calls.max(1) || !n.is_multiple_of(SETTLE_EVERY) || raw.reference.len() != n {
        return false;
    }
    let clock = check(raw, device);
    if !(clock.excess_high_ms.is_finite() && clock.excess_high_ms <= clock.allowed_ms) {
        return false;
    }
    let claims = |v: &[CallTime]| -> Vec<f64> { v.iter().map(|t| t.claimed_ms).collect() };
    let Some(mut ratios) = kbench_reports::paired_round_ratios(
        &claims(&raw.reference),
        &claims(&raw.candidate),
        CALLS_PER_ROUND as usize,
    ) else {
        return false;
    };
    let (median, low, high) = median_interval(&mut ratios);
    median.is_finite()
        && median > 0.0
        && median - low <= SETTLED_WITHIN * median
        && high - median <= SETTLED_WITHIN * median
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::clock::tests::{jitter, pairs};

    #[test]
    fn a_steady_honest_timing_settles_at_a_checkpoint_after_the_minimum() {
        // 2 ms calls, 20 us of jitter in windows and claims alike.
        let mut raw = pairs(30, 2.0, 0.1, 0.02, 1.0);
        for (i, c) in raw.candidate.iter_mut().enumerate() {
            c.claimed_ms += 0.01 * jitter(i + 900);
        }
        assert!(settled(&raw, Device::Cuda(0), 30));
        assert!(!settled(&raw, Device::Cuda(0), 40), "before the minimum");
        raw.reference.pop();
        raw.candidate.pop();
        assert!(
            !settled(&raw, Device::Cuda(0), 20),
            "29 calls: no checkpoint"
        );
    }

    #[test]
    fn a_forged_clock_never_settles() {
        // Claims 10% short of a 2 ms call: 200 us of excess, 100 us allowed.
        let shaved = pairs(100, 2.0, 0.1, 0.02, 0.9);
        for n in (30..=100).step_by(SETTLE_EVERY) {
            let mut part = shaved.clone();
            part.reference.truncate(n);
            part.candidate.truncate(n);
            assert!(!settled(&part, Device::Cuda(0), 30), "{n} calls");
        }
        // Within the allowance at its median but not conclusively: 4% short, and windows
        // noisy enough that the excess interval reaches past the 5% allowed.
        let mut edge = pairs(30, 2.0, 0.1, 0.3, 0.96);
        for (i, c) in edge.candidate.iter_mut().enumerate() {
            c.wall_ms += 0.05 * jitter(i + 77).abs();
        }
        let clock = check(&edge, Device::Cuda(0));
        assert!(clock.excess_high_ms > clock.allowed_ms, "{clock:?}");
        assert!(!settled(&edge, Device::Cuda(0), 30));
    }

    #[test]
    fn a_noisy_speedup_does_not_settle() {
        // Claims that vary by 5% from call to call: the interval is wider than 1%.
        let mut raw = pairs(30, 2.0, 0.1, 0.02, 1.0);
        for (i, (r, c)) in raw.reference.iter_mut().zip(&mut raw.candidate).enumerate() {
            let d = 0.1 * jitter(i + 300);
            r.claimed_ms += d;
            r.wall_ms += d;
            let d = 0.1 * jitter(i + 600);
            c.claimed_ms += d;
            c.wall_ms += d;
        }
        let clock = check(&raw, Device::Cuda(0));
        assert!(clock.excess_high_ms <= clock.allowed_ms, "{clock:?}");
        assert!(!settled(&raw, Device::Cuda(0), 30));
    }
}
