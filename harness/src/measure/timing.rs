//! Timing a candidate against its reference: interleaved rounds, bounded by the harness's
//! own clock.

use std::time::Instant;

use kbench_record::protocol::Frame;
use kbench_record::{HostTensor, Outcome};
use serde_json::{json, Value};

use crate::config::{RoundWarmup, TimingConfig, ROUND_WARMUP_UNTIL_MS};
use crate::measure::reference::DevTensorOwned;
use crate::worker::{error_text, str_field};
use crate::worker::{Worker, WorkerFault};

/// How a timing phase runs.
#[derive(Clone, Copy)]
pub struct TimingSettings<'a> {
    pub config: &'a TimingConfig,
    /// Limit of each side's request of a round.
    pub timeout: std::time::Duration,
    /// Fresh input copies for every timed call (off for the harness's own baselines).
    pub fresh_inputs: bool,
    /// Both workers hand their allocator's blocks back after every round, not only the last:
    /// for a case whose tensors are a large share of the GPU (see [`release_every_round`]).
    pub release_rounds: bool,
}

/// At most this many rounds where every round releases memory ([`release_every_round`]):
/// on level-1 problem 20 (6 GiB tensors, H100) 50 released rounds cost 6.4 s of timing
/// against 2.0 s for 50 rounds released only at the end.
pub const RELEASED_ROUNDS: u32 = 10;

/// Whether a timing of a case with `io_bytes` of inputs and outputs on a GPU of `total`
/// bytes releases memory after every round: from a sixteenth of the card on. Between rounds
/// each worker keeps its input copies and outputs cached (the case's inputs, two fresh
/// copies, an output or two), so the idle side held what the side being timed needed:
/// level-1 problem 20 (6 GiB in, 6 GiB out) ran an honest candidate out of memory on an 80
/// GB H100. Releasing costs an empty_cache and a few large allocations per round, little
/// beside calls of milliseconds on tensors this large. A timing that runs out of memory
/// without it is run again with it (`Evaluation::time`).
pub fn release_every_round(io_bytes: u64, total: u64) -> bool {
    total > 0 && io_bytes >= total / 16
}

/// The integrity checks of a timing phase (issue 6).
pub struct TimedChecks<'a> {
    /// Probe one timed call in some rounds ([`checks_for`]) and send its outputs back.
    pub check_outputs: bool,
    /// Bytes of one call's outputs (what each checked call sends back).
    pub output_bytes: u64,
    /// Where the probed calls' outputs go (sent back to the host).
    pub checked: &'a mut Vec<CheckedCall>,
    /// Device cases: harness buffers shaped like the reference's outputs, which the
    /// candidate copies a checked call's outputs into (NaN-poisoned before each); the
    /// judge compares them on the GPU as each round ends, so outputs of any size are
    /// checked and nothing crosses the pipe.
    pub device_slots: Option<&'a [DevTensorOwned]>,
    /// Checked calls compared on the device.
    pub checked_on_device: &'a mut u32,
    /// The reference's outputs per call: a checked call that returns none of them (a
    /// tampered worker) is a verdict.
    pub outputs: usize,
    /// The timed case's forward seed: both workers seed their random generators with it
    /// before every timed call, as before the case's own forward, so a model that draws
    /// random numbers (training-mode dropout) gives the case's outputs in its checked calls.
    /// Every call, not only the checked ones: a seed set only before those would tell a
    /// kernel which calls are checked.
    pub forward_seed: u64,
}

/// What sets one round's `time` command apart from the others.
struct RoundShape {
    round: u32,
    /// Timed calls of the round.
    n: u32,
    /// The final round of the phase.
    last: bool,
    forward_seed: u64,
    fresh_inputs: bool,
    release_rounds: bool,
    /// The core kept free for this GPU's timing.
    cpu: Option<usize>,
    /// Untimed calls opening the round when it is not the first ([`opening_calls`]).
    opening: u32,
}

/// The `time` command of one round, the same for both sides (check_calls aside).
fn round_command(tc: &TimingConfig, r: &RoundShape) -> Value {
    // A released round allocates its buffers again, so it opens like the first round, with
    // `--warmup` untimed calls (at least one): that cost (the reference's eager outputs come
    // from the allocator, a kernel's persistent buffers do not) must land on no sample. One
    // opening call was not enough: on an H100 (2026-11-27, 23 level-1 problems timed in
    // released rounds) a round's first timed call was up to 5x its settled time (L1/87: 24 ms
    // against 4.9) and the next three 5-15% slower, so the round means that pair the two
    // sides swung by 2-3% (self-speedups of 0.979-1.034); without a round's first two timed
    // calls every one of 41 such timings (four runs) was within 1%.
    let warmup = if r.round == 0 {
        tc.warmup
    } else {
        opening_used(tc, r.opening, r.release_rounds)
    };
    let mut cmd = json!({"cmd": "time", "warmup": warmup, "trials": r.n, "l2_flush": tc.l2_flush, "forward_seed": r.forward_seed});
    // Fresh input copies per call defeat caches keyed on addresses (issue 6); the
    // harness's own baselines are trusted, and torch.compile's CUDA-graph modes would
    // time a copy into their static inputs, so they keep KernelBench's reused inputs.
    if !r.fresh_inputs {
        cmd["fresh_inputs"] = json!(false);
    }
    if let Some(cpu) = r.cpu {
        cmd["cpu"] = json!(cpu);
    }
    // The workers hand their allocator's blocks back after the last round only (a timing
    // stopped early leaves them cached until the worker's next release), or after every
    // round for a case too large to keep cached on both sides.
    if !r.last && !r.release_rounds {
        cmd["release"] = json!(false);
    }
    cmd
}

/// Untimed calls opening each round after the first as sent: [`opening_calls`], or for
/// released rounds at least `--warmup` and one (see [`round_command`]).
fn opening_used(tc: &TimingConfig, opening: u32, release_rounds: bool) -> u32 {
    if release_rounds {
        opening.max(tc.warmup).max(1)
    } else {
        opening
    }
}

/// Untimed calls opening each round after the first: `--round-warmup N` as given; `auto`
/// one (at most `--warmup`) unless the reference's first round timed calls of at least
/// [`ROUND_WARMUP_UNTIL_MS`] each. Decided on the reference's samples only: the candidate
/// cannot steer how both sides are timed.
fn opening_calls(tc: &TimingConfig, reference_first_round: Option<&[f64]>) -> u32 {
    match tc.round_warmup {
        RoundWarmup::Calls(n) => n,
        RoundWarmup::Auto => {
            let long = reference_first_round
                .is_some_and(|s| !s.is_empty() && s.iter().all(|&ms| ms >= ROUND_WARMUP_UNTIL_MS));
            if long {
                0
            } else {
                tc.warmup.min(1)
            }
        }
    }
}

/// The outputs of one probed timed call.
pub struct CheckedCall {
    pub round: u32,
    /// Index among the round's timed calls.
    pub call: u32,
    pub outputs: Vec<HostTensor>,
}

/// What the interleaved timing measured: every sample of both sides, the claimed clocks and
/// the harness's own wall time of each side's requests. Raw: `judge::timing` makes the
/// summary and any verdict.
pub struct RawTiming {
    pub reference_clock: String,
    pub reference_samples: Vec<f64>,
    pub reference_wall_s: f64,
    pub candidate_clock: String,
    pub candidate_samples: Vec<f64>,
    pub candidate_wall_s: f64,
    /// Timed calls per round (the pairing unit of the paired speedup).
    pub per_round: u32,
    pub rounds: u32,
    /// Untimed calls that opened each round after the first (as sent: a released round's
    /// count, where rounds were released).
    pub round_warmup: u32,
}

/// How a timing phase ended.
pub enum TimingRun {
    Complete(RawTiming),
    /// A candidate's round answer was judged failing; timing stopped there.
    Stopped(Outcome),
    /// The reference could not be timed; the candidate keeps its verdict, untimed.
    ReferenceFailed(String),
}

/// The verdicts timing needs while it runs, supplied by the judge: a failing round stops the
/// timing at once (the candidate is not timed further).
pub trait RoundJudge {
    /// The candidate's answer to timing round `round`, before its samples are read: an error
    /// answer, or what its integrity probes found.
    fn answer(&self, reply: &Frame, round: u32) -> Option<Outcome>;
    /// The candidate's samples of `n` timed calls (or why they are malformed), against the
    /// harness's wall time of the round.
    fn samples(&self, samples: Result<&[f64], &str>, n: u32, wall_s: f64) -> Option<Outcome>;
    /// Checked call `call` of round `round`, its outputs in `slots` as `described` by the
    /// candidate's worker.
    fn device_call(
        &self,
        round: u32,
        call: u32,
        described: &[Value],
        slots: &[DevTensorOwned],
    ) -> Option<Outcome>;
    /// The answer to round `round` lacks the outputs of its checked call `call`.
    fn unreturned(&self, round: u32, call: u32) -> Outcome;
}

/// Times reference and candidate in alternating rounds on the same inputs (the last case),
/// so that drift (clocks, temperature, other load) hits both alike.
///
/// With `check_outputs`, one timed call of each round (picked by the round number; the
/// reference's call of the same index is probed alike) is probed and its outputs sent back; they land in `checked` as (round, call,
/// outputs) for the caller to compare with the reference (issue 6: a kernel must not behave
/// differently under timing).
pub fn time_pair(
    settings: TimingSettings<'_>,
    exec: &crate::measure::Station,
    reference: &mut Worker,
    candidate: &mut Worker,
    checks: TimedChecks<'_>,
    judge: &dyn RoundJudge,
) -> Result<TimingRun, WorkerFault> {
    let TimingSettings {
        config: tc,
        timeout,
        fresh_inputs,
        release_rounds,
    } = settings;
    let TimedChecks {
        check_outputs,
        output_bytes,
        checked,
        device_slots,
        checked_on_device,
        outputs,
        forward_seed,
    } = checks;
    // On the device a check costs a copy and a comparison on the GPU, whatever the size.
    let checks = checks_for(if device_slots.is_some() {
        0
    } else {
        output_bytes
    });
    let mut ref_samples = Vec::with_capacity(tc.timed_calls as usize);
    let mut cand_samples = Vec::with_capacity(tc.timed_calls as usize);
    let (mut ref_wall, mut cand_wall) = (0.0f64, 0.0f64);
    let mut ref_clock = String::new();
    let mut cand_clock = String::new();
    // Released rounds pay their allocations again (tens of ms a side for GiB tensors):
    // fewer, longer rounds, still alternating.
    let rounds = if release_rounds {
        tc.rounds.min(RELEASED_ROUNDS)
    } else {
        tc.rounds
    };
    let per_round = tc.timed_calls.div_ceil(rounds.max(1));
    let total_rounds = tc.timed_calls.div_ceil(per_round.max(1));
    let mut left = tc.timed_calls;
    let mut round = 0u32;
    let mut opening = opening_calls(tc, None);
    while left > 0 {
        let n = per_round.min(left);
        left -= n;
        let shape = RoundShape {
            round,
            n,
            last: left == 0,
            forward_seed,
            fresh_inputs,
            release_rounds,
            cpu: exec.timing_cpu,
            opening,
        };
        let mut cmd = round_command(tc, &shape);
        let mut checked_call = None;
        if check_outputs && checked_round(round, total_rounds, checks) {
            // One timed call in each checked round, the same index on both sides: the
            // probes before it (input checksums, poisoned memory) touch caches and the
            // allocator alike.
            let j = round.wrapping_mul(2_654_435_761) % n;
            cmd["check_calls"] = json!([j]);
            checked_call = Some(j);
        }
        let mut cand_cmd = cmd.clone();
        if let (Some(slots), Some(_)) = (device_slots, checked_call) {
            let gpu = exec.gpu.as_ref().expect("device slots without a GPU");
            for s in slots {
                // NaN bits: an element the candidate does not write cannot pass.
                if let Err(e) = gpu.fill(&s.buf, 0xff) {
                    return Ok(TimingRun::ReferenceFailed(format!(
                        "poisoning the harness's output buffers on the GPU: {e:#}"
                    )));
                }
            }
            cand_cmd["device_outputs"] =
                json!(slots.iter().map(DevTensorOwned::spec).collect::<Vec<_>>());
        }
        let order = if round.is_multiple_of(2) {
            [true, false]
        } else {
            [false, true]
        };
        for is_ref in order {
            let t = Instant::now();
            if is_ref {
                let reply = match reference.request(Frame::new(cmd.clone()), timeout) {
                    Ok(r) => r,
                    Err(f) => {
                        return Ok(TimingRun::ReferenceFailed(format!("reference timing: {f}")))
                    }
                };
                ref_wall += t.elapsed().as_secs_f64();
                match parse_samples(&reply, n) {
                    Ok((clock, s)) => {
                        if round == 0 {
                            opening = opening_calls(tc, Some(&s));
                        }
                        ref_clock = clock;
                        ref_samples.extend(s);
                    }
                    Err(e) => {
                        return Ok(TimingRun::ReferenceFailed(format!("reference timing: {e}")))
                    }
                }
            } else {
                let reply = candidate.request(Frame::new(cand_cmd.clone()), timeout)?;
                let wall = t.elapsed().as_secs_f64();
                cand_wall += wall;
                if let Some(o) = judge.answer(&reply, round) {
                    return Ok(TimingRun::Stopped(o));
                }
                if let (Some(slots), Some(j)) = (device_slots, checked_call) {
                    let described = reply
                        .header
                        .get("checked_device")
                        .and_then(Value::as_array)
                        .and_then(|calls| {
                            calls.iter().find(|c| {
                                c.get("call").and_then(Value::as_u64) == Some(u64::from(j))
                            })
                        })
                        .and_then(|c| c.get("outputs"))
                        .and_then(Value::as_array);
                    let Some(described) = described else {
                        return Ok(TimingRun::Stopped(judge.unreturned(round, j)));
                    };
                    if let Some(o) = judge.device_call(round, j, described, slots) {
                        return Ok(TimingRun::Stopped(o));
                    }
                    *checked_on_device += 1;
                } else if check_outputs {
                    let tensors = reply
                        .tensors()
                        .map_err(|e| WorkerFault::Protocol(e.to_string()))?;
                    let mut by_call: std::collections::BTreeMap<u32, Vec<(u32, HostTensor)>> =
                        Default::default();
                    for (name, t) in tensors {
                        // timed:J:out:K
                        let mut parts = name.split(':');
                        let (Some("timed"), Some(j), Some("out"), Some(k), None) = (
                            parts.next(),
                            parts.next(),
                            parts.next(),
                            parts.next(),
                            parts.next(),
                        ) else {
                            return Err(WorkerFault::Protocol(format!(
                                "unexpected tensor {name} in a timing reply"
                            )));
                        };
                        let (Ok(j), Ok(k)) = (j.parse::<u32>(), k.parse::<u32>()) else {
                            return Err(WorkerFault::Protocol(format!(
                                "unexpected tensor {name} in a timing reply"
                            )));
                        };
                        by_call.entry(j).or_default().push((k, t));
                    }
                    if let Some(j) =
                        checked_call.filter(|j| outputs > 0 && !by_call.contains_key(j))
                    {
                        return Ok(TimingRun::Stopped(judge.unreturned(round, j)));
                    }
                    for (call, mut outs) in by_call {
                        outs.sort_by_key(|(k, _)| *k);
                        checked.push(CheckedCall {
                            round,
                            call,
                            outputs: outs.into_iter().map(|(_, t)| t).collect(),
                        });
                    }
                }
                let parsed = parse_samples(&reply, n);
                let verdict = match &parsed {
                    Ok((_, s)) => judge.samples(Ok(s), n, wall),
                    Err(e) => judge.samples(Err(e), n, wall),
                };
                if let Some(o) = verdict {
                    return Ok(TimingRun::Stopped(o));
                }
                if let Ok((clock, s)) = parsed {
                    cand_clock = clock;
                    cand_samples.extend(s);
                }
            }
        }
        round += 1;
    }
    Ok(TimingRun::Complete(RawTiming {
        reference_clock: ref_clock,
        reference_samples: ref_samples,
        reference_wall_s: ref_wall,
        candidate_clock: cand_clock,
        candidate_samples: cand_samples,
        candidate_wall_s: cand_wall,
        per_round,
        rounds: round,
        round_warmup: opening_used(tc, opening, release_rounds),
    }))
}

/// Rounds whose probed timed call is checked: [`CHECKED_ROUNDS`] spread evenly over the
/// timing (every round when there are fewer), fewer for large outputs ([`checks_for`]).
pub const CHECKED_ROUNDS: u32 = 6;

/// Output bytes the checked calls of one timing may send back before fewer rounds are
/// checked. Each checked call's outputs cross the pipe to the harness: level-1 LayerNorm's
/// 256 MiB took 0.4 s a call on an H100, 2.5 s of its 6 s of timing with 6 checks.
pub const CHECKED_BYTES: u64 = 512 << 20;

/// Rounds to check for outputs of `output_bytes`: [`CHECKED_ROUNDS`], fewer where they would
/// send more than [`CHECKED_BYTES`], never fewer than 2 (the first round and one late in
/// the timing: a kernel that behaves differently under timing does so on every timed call,
/// and one that counts its calls is caught late).
pub fn checks_for(output_bytes: u64) -> u32 {
    let fit = CHECKED_BYTES / output_bytes.max(1);
    u32::try_from(fit)
        .unwrap_or(u32::MAX)
        .clamp(2, CHECKED_ROUNDS)
}

/// Whether round `round` of `rounds` has a checked call, with `checks` checked rounds spread
/// evenly. A checked call sends its outputs back and poisons free memory before it: on an
/// H200 checking every round of 50 cost up to 150 ms a call where outputs are hundreds of MB
/// (level-1 LayerNorm: 36 s of timing instead of 3).
pub fn checked_round(round: u32, rounds: u32, checks: u32) -> bool {
    rounds <= checks
        || (u64::from(round) * u64::from(checks)) % u64::from(rounds) < u64::from(checks)
}

/// Checks a timing answer: the right number of finite, positive samples.
fn parse_samples(reply: &Frame, expected: u32) -> Result<(String, Vec<f64>), String> {
    if reply.kind() != "timing" {
        return Err(format!(
            "expected timing samples, got {}",
            error_text(reply)
        ));
    }
    let samples: Vec<f64> = reply
        .header
        .get("samples_ms")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    if samples.len() != expected as usize {
        return Err(format!(
            "{} samples for {expected} timed calls",
            samples.len()
        ));
    }
    if let Some(bad) = samples.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
        return Err(format!("sample {bad} ms is not a positive time"));
    }
    Ok((str_field(&reply.header, "clock"), samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_outputs_are_checked_in_fewer_rounds_but_at_least_two() {
        assert_eq!(checks_for(0), CHECKED_ROUNDS);
        assert_eq!(checks_for(64 << 20), CHECKED_ROUNDS);
        assert_eq!(checks_for(128 << 20), 4);
        assert_eq!(checks_for(256 << 20), 2);
        assert_eq!(checks_for(6 << 30), 2);
        // Two checks over 10 rounds: the first and one in the second half.
        let picked: Vec<u32> = (0..10).filter(|&r| checked_round(r, 10, 2)).collect();
        assert_eq!(picked, vec![0, 5]);
    }

    #[test]
    fn rounds_seed_the_case_and_only_the_last_frees_the_allocator() {
        let tc = TimingConfig {
            timed_calls: 100,
            warmup: 3,
            rounds: 50,
            l2_flush: true,
            round_warmup: RoundWarmup::Auto,
        };
        let shape = |round, last| RoundShape {
            round,
            n: 2,
            last,
            forward_seed: 77,
            fresh_inputs: true,
            release_rounds: false,
            cpu: None,
            opening: 1,
        };
        let first = round_command(&tc, &shape(0, false));
        assert_eq!(first["release"], false);
        assert_eq!(first["forward_seed"], 77);
        assert_eq!(first["warmup"], tc.warmup);
        assert!(first.get("fresh_inputs").is_none() && first.get("cpu").is_none());
        let middle = round_command(&tc, &shape(7, false));
        assert_eq!(middle["release"], false);
        assert_eq!(middle["warmup"], 1);
        let last = round_command(&tc, &shape(49, true));
        assert!(last.get("release").is_none(), "{last}");
        assert_eq!(last["forward_seed"], 77);
        // A case too large to keep cached on both sides: every round releases.
        let large = RoundShape {
            release_rounds: true,
            ..shape(7, false)
        };
        assert!(round_command(&tc, &large).get("release").is_none());
        let long = RoundShape {
            opening: 0,
            ..large
        };
        assert_eq!(
            round_command(&tc, &long)["warmup"],
            tc.warmup,
            "released: opens like the first round"
        );
        let no_warmup = TimingConfig { warmup: 0, ..tc };
        assert_eq!(
            round_command(&no_warmup, &long)["warmup"],
            1,
            "released: at least one untimed call"
        );
        let gib = 1u64 << 30;
        assert!(release_every_round(12 * gib, 80 * gib), "L1/20");
        assert!(release_every_round(5 * gib, 80 * gib));
        assert!(!release_every_round(2 * gib, 80 * gib), "L1/70");
        assert!(
            !release_every_round(12 * gib, 0),
            "no GPU: nothing to release"
        );
    }

    #[test]
    fn rounds_open_without_a_call_once_the_reference_is_long() {
        let mut tc = TimingConfig {
            timed_calls: 100,
            warmup: 3,
            rounds: 50,
            l2_flush: true,
            round_warmup: RoundWarmup::Auto,
        };
        // Before the reference's first samples, and for short calls: one opening call.
        assert_eq!(opening_calls(&tc, None), 1);
        assert_eq!(opening_calls(&tc, Some(&[0.08, 0.09])), 1);
        // One of the two calls short: still one.
        let long = ROUND_WARMUP_UNTIL_MS;
        assert_eq!(opening_calls(&tc, Some(&[long * 0.99, 14.9])), 1);
        assert_eq!(opening_calls(&tc, Some(&[long, 14.9])), 0);
        // Never more than --warmup.
        tc.warmup = 0;
        assert_eq!(opening_calls(&tc, Some(&[0.08, 0.09])), 0);
        // A number given is used as it is.
        tc.round_warmup = RoundWarmup::Calls(2);
        assert_eq!(opening_calls(&tc, Some(&[14.9, 15.0])), 2);
    }

    #[test]
    fn a_few_rounds_spread_over_the_timing_are_checked() {
        let picked: Vec<u32> = (0..50)
            .filter(|&r| checked_round(r, 50, CHECKED_ROUNDS))
            .collect();
        assert_eq!(picked.len(), CHECKED_ROUNDS as usize, "{picked:?}");
        assert_eq!(picked[0], 0);
        assert!(*picked.last().unwrap() >= 40, "{picked:?}");
        for w in picked.windows(2) {
            assert!((7..=10).contains(&(w[1] - w[0])), "{picked:?}");
        }
        // Fewer rounds than checks: every round; one more: all but one.
        assert!((0..4).all(|r| checked_round(r, 4, CHECKED_ROUNDS)));
        assert_eq!((0..7).filter(|&r| checked_round(r, 7, 6)).count(), 6);
        assert_eq!((0..1000).filter(|&r| checked_round(r, 1000, 6)).count(), 6);
    }
}
