//! Whether the harness's own clock supports the times a candidate claims.
//!
//! A candidate's claim for a call (its CUDA events, its `perf_counter`) comes from its own
//! process, which it controls down to the C library: a detour in `clock_gettime` or
//! `cudaEventElapsedTime`, a patched GOT entry, a write through `/proc/self/mem`, or plain
//! Python reaching the worker's sample list. The harness times every call's window itself
//! (`measure::gated`): from the thaw to the answer, the freeze asked for at once. A window holds the call and
//! a fixed part, the same code on both sides (the request and answer, the output copy into
//! the slots). So for the pair of calls `k` the candidate's unexplained time,
//! window minus claim, should be the reference's:
//!
//!   d_k = (W_cand,k − claim_cand,k) − (W_ref,k − claim_ref,k)  ≈ 0.
//!
//! A candidate that claims `δ` less than its call took adds `δ` to every `d_k`. Which side
//! goes first alternates from pair to pair, and going first costs a window more on some
//! problems (on an H200, 0.5 ms on level-1 ReLU's 6 GiB tensors, the same for either side):
//! so consecutive pairs, one of each order, are averaged first, `e_j = (d_2j + d_2j+1) / 2`,
//! which cancels the order's cost within each `e_j`. The check takes the median of the `e_j`
//! with a distribution-free 99% confidence interval (order statistics of the binomial, normal
//! approximation) and counts the claims as unsupported when even its lower bound exceeds what
//! is allowed: [`allowed_fraction`] of the candidate's median claim, and never less than a
//! floor for the device's jitter. The reference's claims are trusted (its process runs only
//! the problem file).

use kbench_record::{Device, HarnessClock};

use crate::measure::gated::{CallTime, RawGated};

/// The share of the candidate's median claim its median excess may reach: what timing noise
/// alone may leave between the two sides' fixed parts.
pub(crate) fn allowed_fraction(device: Device) -> f64 {
    match device {
        Device::Cuda(_) => 0.05,
        // A CPU's calls share its cores with everything else the host runs.
        Device::Cpu => 0.15,
    }
}

/// The least excess ever counted, milliseconds: the jitter of a window's fixed part (a
/// request, an answer and a freeze through two processes and the kernel's scheduler). Honest
/// kernels measured: on an H200, calls of about 10 us had excess intervals reaching 45 us at
/// their upper bound and 21 us at their lower; on 2 CPU cores loaded about 3 times over,
/// calls of 10 us to 2 ms had medians from -108 to 148 us and lower bounds up to 124 us. The
/// CPU's floor still leaves a forged clock caught: the corpus's forgeries claim half of a
/// 1.7 ms product, an excess of about 0.85 ms.
pub(crate) fn floor_ms(device: Device) -> f64 {
    match device {
        Device::Cuda(_) => 0.025,
        Device::Cpu => 0.2,
    }
}

/// The share of the candidate's median claim that an unsupported claim's excess (the lower
/// bound of its interval) must pass to fail the kernel as `time-claim-unsupported`, and twice
/// the floor for short calls. Below it the claims are not believed either: the speedup is the
/// one the harness's clock supports ([`harness_timed`]), so a forgery that small gains
/// nothing, and an honest kernel whose windows hold a little more than its claims is not
/// failed. Measured on an H200 while 15 builds ran on the host: KernelBenchLeaderboard's
/// naive level-1 LogSoftmax and L2 norm kernels (0.7 ms claims, 33 times slower than the
/// reference) held 40 to 47 us at the interval's lower bound, 5.5% and 6.2% of their claims,
/// over the 5% allowed; the forgeries of the corpus and of the GPU attacks claim half of
/// their time (an excess of 100% of the claim).
pub(crate) fn forged_fraction(device: Device) -> f64 {
    match device {
        Device::Cuda(_) => 0.25,
        Device::Cpu => 0.5,
    }
}

/// Whether the candidate's claims give way to the harness's clock ([`supported_times`])
/// rather than stand or fail the kernel: the clock did not support them, by less than a
/// forged clock's margin (see [`forged_fraction`]), or could not tell ([`inconclusive`]:
/// a median excess beyond what is allowed, an interval reaching below it). After the last
/// timing an inconclusive check used to leave the claims standing, so a kernel forging its
/// clock in just over half of its calls kept a median of forged claims (simulated: 10x
/// reported for a true 2x, the clock's 2x beside it).
pub(crate) fn harness_timed(h: &HarnessClock, median_claim_ms: f64, device: Device) -> bool {
    let forged = (forged_fraction(device) * median_claim_ms).max(2.0 * floor_ms(device));
    let beyond_doubt = !h.supported && h.excess_low_ms.is_finite() && h.excess_low_ms <= forged;
    beyond_doubt || inconclusive(h)
}

/// z for a two-sided 99% interval.
const Z99: f64 = 2.576;

/// The median of `v` (sorted in place) and the ranks bounding its 99% confidence interval:
/// `[v_(j), v_(k)]` with `j = ⌊n/2 − z√n/2⌋`, `k = ⌈1 + n/2 + z√n/2⌉` (1-based; Conover,
/// Practical Nonparametric Statistics, the sign-test interval for a quantile).
pub(super) fn median_interval(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    let half = Z99 * (n as f64).sqrt() / 2.0;
    let j = ((n as f64 / 2.0 - half).floor() as i64).max(1) as usize;
    let k = (((1.0 + n as f64 / 2.0 + half).ceil()) as usize).min(n);
    (median, v[j - 1], v[k - 1])
}

/// The median excess with its 99% interval: over the pairs of calls, the candidate's
/// `unexplained` time less the reference's, averaged over consecutive pairs, one of each order
/// (a single pair left over stands alone).
fn excess_interval(raw: &RawGated, unexplained: impl Fn(&CallTime) -> f64) -> (f64, f64, f64) {
    let d: Vec<f64> = raw
        .reference
        .iter()
        .zip(&raw.candidate)
        .map(|(r, c)| unexplained(c) - unexplained(r))
        .collect();
    let mut e: Vec<f64> = d
        .chunks(2)
        .map(|c| c.iter().sum::<f64>() / c.len() as f64)
        .collect();
    median_interval(&mut e)
}

/// The harness clock's check of a complete timing.
pub(crate) fn check(raw: &RawGated, device: Device) -> HarnessClock {
    let (excess, low, high) = excess_interval(raw, |c| c.wall_ms - c.claimed_ms);
    let mut claims: Vec<f64> = raw.candidate.iter().map(|c| c.claimed_ms).collect();
    let (median_claim, _, _) = median_interval(&mut claims);
    let allowed = (allowed_fraction(device) * median_claim).max(floor_ms(device));
    let mut supported_ratio: Vec<f64> = raw
        .reference
        .iter()
        .zip(supported_times(raw))
        .map(|(r, c)| r.claimed_ms / c.max(f64::MIN_POSITIVE))
        .collect();
    let (speedup, _, _) = median_interval(&mut supported_ratio);
    HarnessClock {
        freeze: raw.freeze.to_string(),
        reference_wall_ms: raw.reference.iter().map(|t| t.wall_ms).collect(),
        candidate_wall_ms: raw.candidate.iter().map(|t| t.wall_ms).collect(),
        excess_ms: excess,
        excess_low_ms: low,
        excess_high_ms: high,
        allowed_ms: allowed,
        // No pairs (nothing timed) supports nothing: the caller times at least one call.
        supported: low.is_finite() && low <= allowed,
        speedup,
        reference_retimed: raw.retimed,
        candidate_busy: raw.candidate_busy,
        candidate_claimed_ms: Vec::new(),
        reference_worker_wait_ms: waits(&raw.reference, |c| c.worker_wait_ms),
        candidate_worker_wait_ms: waits(&raw.candidate, |c| c.worker_wait_ms),
        reference_harness_wait_ms: waits(&raw.reference, |c| c.harness_wait_ms),
        candidate_harness_wait_ms: waits(&raw.candidate, |c| c.harness_wait_ms),
    }
}

/// Each window's wait for a CPU (`wait` reads one), where every one of them was read.
fn waits(calls: &[CallTime], wait: impl Fn(&CallTime) -> f64) -> Vec<f64> {
    let v: Vec<f64> = calls.iter().map(wait).collect();
    if v.iter().all(|w| w.is_finite()) {
        v
    } else {
        Vec::new()
    }
}

/// Each candidate call's time as the harness's clock supports it: its claim plus its excess
/// over the reference's unexplained time in the same pair, where positive. (The claim
/// cancels: this is the candidate's window less the reference's fixed part, so nothing the
/// candidate claims moves it, except below its own claim.)
pub(crate) fn supported_times(raw: &RawGated) -> Vec<f64> {
    raw.reference
        .iter()
        .zip(&raw.candidate)
        .map(|(r, c)| {
            let excess = (c.wall_ms - c.claimed_ms) - (r.wall_ms - r.claimed_ms);
            c.claimed_ms + excess.max(0.0)
        })
        .collect()
}

/// Whether the check could not tell: the median excess is beyond what is allowed, as a
/// forged clock's would be, but the interval still reaches below it. With few pairs the
/// 99% interval spans every pair (10 pairs: from the least to the greatest), so one window
/// of a host busy elsewhere (measured: 2 cores loaded by compilers, one reference window of
/// 7.8 ms among 1.7 ms ones) let a clock forged to half pass as supported. Such a timing is
/// timed again and judged on the pairs of every timing together, like an unsupported one.
pub(crate) fn inconclusive(h: &HarnessClock) -> bool {
    h.supported && h.excess_ms > h.allowed_ms
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::measure::gated::CallTime;

    fn raw(pairs: Vec<(CallTime, CallTime)>) -> RawGated {
        let (reference, candidate) = pairs.into_iter().unzip();
        RawGated {
            reference_clock: "perf_counter".into(),
            candidate_clock: "perf_counter".into(),
            reference,
            candidate,
            opening: 1,
            freeze: "cgroup",
            retimed: 0,
            candidate_busy: 0,
            staging_s: 0.0,
        }
    }

    /// A deterministic jitter in [-1, 1): splitmix64 of `i`.
    pub(in crate::judge) fn jitter(i: usize) -> f64 {
        let mut z = (i as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }

    /// `n` pairs of calls of `call_ms` claimed by both sides, windows `fixed_ms` longer with
    /// `noise_ms` of jitter; the candidate claims `forged` of its true time.
    pub(in crate::judge) fn pairs(
        n: usize,
        call_ms: f64,
        fixed_ms: f64,
        noise_ms: f64,
        forged: f64,
    ) -> RawGated {
        raw((0..n)
            .map(|i| {
                let r = CallTime {
                    claimed_ms: call_ms,
                    wall_ms: call_ms + fixed_ms + noise_ms * jitter(i),
                    harness_wait_ms: f64::NAN,
                    worker_wait_ms: f64::NAN,
                };
                let c = CallTime {
                    claimed_ms: call_ms * forged,
                    wall_ms: call_ms + fixed_ms + noise_ms * jitter(i + 500),
                    harness_wait_ms: f64::NAN,
                    worker_wait_ms: f64::NAN,
                };
                (r, c)
            })
            .collect())
    }

    #[test]
    fn honest_claims_are_supported_and_halved_ones_are_not() {
        // A 0.4 ms call with a 0.1 ms fixed part and 20 us of jitter per window.
        let honest = check(&pairs(100, 0.4, 0.1, 0.02, 1.0), Device::Cuda(0));
        assert!(honest.supported, "{honest:?}");
        assert!(honest.excess_ms.abs() < 0.01, "{honest:?}");
        let halved = check(&pairs(100, 0.4, 0.1, 0.02, 0.5), Device::Cuda(0));
        assert!(!halved.supported, "{halved:?}");
        assert!((halved.excess_ms - 0.2).abs() < 0.01, "{halved:?}");
        // The clock still supports the true speedup, 1.
        assert!((halved.speedup - 1.0).abs() < 0.1, "{halved:?}");
        assert!((honest.speedup - 1.0).abs() < 0.1, "{honest:?}");
        // Claiming 10% less than the call took is beyond the 5% allowed.
        let shaved = check(&pairs(100, 0.4, 0.1, 0.02, 0.9), Device::Cuda(0));
        assert!(!shaved.supported, "{shaved:?}");
    }

    #[test]
    fn the_floor_covers_the_jitter_of_short_calls() {
        // 20 us calls with 10 us of jitter: 5% of the claim is 1 us, the floor 20 us (CPU).
        let honest = check(&pairs(100, 0.02, 0.1, 0.01, 1.0), Device::Cpu);
        assert!(honest.supported, "{honest:?}");
        assert_eq!(honest.allowed_ms, floor_ms(Device::Cpu));
        // A claim of nothing at all on a 1 ms call is caught whatever the noise.
        let nothing = check(&pairs(100, 1.0, 0.1, 0.05, 0.001), Device::Cpu);
        assert!(!nothing.supported, "{nothing:?}");
    }

    /// Whoever goes first pays 0.5 ms more of its window (the order alternates): averaged
    /// over consecutive pairs the cost cancels, and a 10% forgery of a 6 ms call still shows.
    #[test]
    fn the_cost_of_going_first_cancels_over_consecutive_pairs() {
        let ordered = |forged: f64| {
            raw((0..100)
                .map(|i| {
                    let first = 0.5 * jitter(i + 7).abs();
                    let (r_extra, c_extra) = if i % 2 == 0 {
                        (first, 0.0)
                    } else {
                        (0.0, first)
                    };
                    let r = CallTime {
                        claimed_ms: 6.0,
                        wall_ms: 6.0 + 1.0 + r_extra + 0.02 * jitter(i),
                        harness_wait_ms: f64::NAN,
                        worker_wait_ms: f64::NAN,
                    };
                    let c = CallTime {
                        claimed_ms: 6.0 * forged,
                        wall_ms: 6.0 + 1.0 + c_extra + 0.02 * jitter(i + 500),
                        harness_wait_ms: f64::NAN,
                        worker_wait_ms: f64::NAN,
                    };
                    (r, c)
                })
                .collect())
        };
        let honest = check(&ordered(1.0), Device::Cuda(0));
        assert!(honest.supported, "{honest:?}");
        assert!(
            honest.excess_high_ms - honest.excess_low_ms < 0.2,
            "{honest:?}"
        );
        let shaved = check(&ordered(0.9), Device::Cuda(0));
        assert!(!shaved.supported, "{shaved:?}");
    }

    /// Twenty calls (ten pairs of pairs) of a clock forged to half, one reference window
    /// disturbed: supported by the interval alone, and inconclusive; the honest control is
    /// neither unsupported nor inconclusive, and with a hundred calls the forgery is caught.
    #[test]
    fn a_forgery_hidden_by_one_disturbed_window_is_inconclusive() {
        let disturbed = |n: usize, forged: f64| {
            let mut raw = pairs(n, 1.4, 0.3, 0.05, forged);
            raw.reference[14].wall_ms += 6.0;
            raw
        };
        let hidden = check(&disturbed(20, 0.5), Device::Cpu);
        assert!(hidden.supported && inconclusive(&hidden), "{hidden:?}");
        let honest = check(&disturbed(20, 1.0), Device::Cpu);
        assert!(honest.supported && !inconclusive(&honest), "{honest:?}");
        let caught = check(&disturbed(100, 0.5), Device::Cpu);
        assert!(!caught.supported && !inconclusive(&caught), "{caught:?}");
    }

    /// An honest 0.7 ms kernel whose windows hold 6% more than it claims (a host busy with
    /// builds) is timed by the harness's clock, at the true speedup; a clock forged to half
    /// is not. Short calls get twice the floor.
    #[test]
    fn small_excesses_are_timed_by_the_harness_and_forgeries_fail() {
        let cuda = Device::Cuda(0);
        let busy = check(&pairs(100, 0.7, 0.5, 0.01, 1.0 / 1.06), cuda);
        assert!(!busy.supported, "{busy:?}");
        assert!(harness_timed(&busy, 0.7 / 1.06, cuda), "{busy:?}");
        assert!((busy.speedup - 1.0).abs() < 0.02, "{busy:?}");
        let halved = check(&pairs(100, 0.7, 0.5, 0.01, 0.5), cuda);
        assert!(
            !halved.supported && !harness_timed(&halved, 0.35, cuda),
            "{halved:?}"
        );
        // A supported claim is not "timed by the harness": its own speedup stands.
        let honest = check(&pairs(100, 0.7, 0.5, 0.01, 1.0), cuda);
        assert!(
            honest.supported && !harness_timed(&honest, 0.7, cuda),
            "{honest:?}"
        );
        // 10 us claimed of a 50 us call: 40 us over, beyond the floor, within twice it.
        let short = check(&pairs(100, 0.05, 0.1, 0.001, 0.2), cuda);
        assert!(
            !short.supported && harness_timed(&short, 0.01, cuda),
            "{short:?}"
        );
        let shorter = check(&pairs(100, 0.08, 0.1, 0.001, 0.1), cuda);
        assert!(!harness_timed(&shorter, 0.008, cuda), "{shorter:?}");
        // The corpus's CPU forgeries (half of a 1.7 ms product) still fail.
        let cpu = check(&pairs(100, 1.7, 0.3, 0.05, 0.5), Device::Cpu);
        assert!(
            !cpu.supported && !harness_timed(&cpu, 0.85, Device::Cpu),
            "{cpu:?}"
        );
    }

    #[test]
    fn the_median_interval_brackets_the_median() {
        let mut v: Vec<f64> = (0..100).map(|i| i as f64).collect();
        let (m, lo, hi) = median_interval(&mut v);
        assert_eq!(m, 49.5);
        assert_eq!((lo, hi), (36.0, 63.0));
        let mut one = vec![3.0];
        assert_eq!(median_interval(&mut one), (3.0, 3.0, 3.0));
        let (m, lo, hi) = median_interval(&mut []);
        assert!(m.is_nan() && lo.is_nan() && hi.is_nan());
    }
}
