//! The hot path: one pass over candidate, reference and (optionally) float64 reference bytes,
//! decoded in place, in fixed chunks scanned in parallel and combined in index order.
//!
//! Within a chunk, elements go in blocks of [`BLOCK`]: a branch-free pass over a block
//! (written so that the compiler vectorises it; on f32 lanes for f32, f16 and bf16 data,
//! see [`Scanner::fast_block32`]) accepts the common case, every element finite and within
//! tolerance with no new `max_rel`; any other block is rescanned one element at a time with
//! the full rules, in f64. Float sums are kept in [`LANES`] fixed lanes.
//!
//! Chunk boundaries depend only on the element count, never on the thread count, and chunk
//! results are folded sequentially in index order, so every statistic (float sums included)
//! is bitwise reproducible whatever the number of threads.

use kbench_record::Dtype;
use rayon::prelude::*;

use crate::codec::{
    decode_partial, decode_partial_f64, Bf16Codec, F16Codec, F32Codec, F64Codec, FloatCodec,
    NarrowCodec, BLOCK,
};
use crate::rule::{judge_nonfinite, Nonfinite, Rule};
use crate::tolerance::{RescueScales, Tolerance};

/// Elements per parallel chunk: 256 KiB of fp32 per input, large enough that rayon's
/// per-task cost vanishes, small enough to balance over many cores.
pub(crate) const CHUNK_ELEMS: usize = 1 << 16;

/// Independent accumulators for the fast path's float sums and maxima.
const LANES: usize = 4;

/// Slack of the `max_rel` filter (see [`update_rel`]).
const REL_SLACK: f64 = 1.0 + 1e-12;

/// The f32 fast path's margins (see [`Scanner::fast_block32`]): tolerances shrink by
/// `TOL_SHRINK_32`, differences grow by `GROW_32` before comparing with `max_rel`. Both
/// dwarf the few f32 roundings (each ≤ 2⁻²⁴ relative) between the f32 and the exact test.
const TOL_SHRINK_32: f64 = 1.0 - 1.0 / (1u64 << 18) as f64;
const GROW_32: f32 = 1.0 + 1.0 / (1u32 << 20) as f32;

/// What the scan applies to each element.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScanParams {
    pub tol: Tolerance,
    /// The float64 gate's element rescue, when enforced (see [`Rescue::accepts`]).
    pub rescue: Option<Rescue>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Rescue {
    pub factor: f64,
    pub slack: f64,
    pub scales: RescueScales,
}

impl Rescue {
    /// An element outside `tol` passes if `|c − r64| ≤ factor·max(|r − r64|, typical) +
    /// slack`, where `typical` is the larger of the reference's typical error at this size,
    /// `rel_scale·|r64| + abs_scale`, and the candidate's own error spread over the elements
    /// within tolerance, `own_rel·|r64| + own_abs`. The GPU comparison kernel does the same
    /// operations in the same order.
    #[inline(always)]
    fn accepts(&self, c: f64, r: f64, t: f64) -> bool {
        let sc = &self.scales;
        let ta = t.abs();
        let reference = sc.rel_scale * ta + sc.abs_scale;
        let spread = sc.own_rel * ta + sc.own_abs;
        (c - t).abs() <= self.factor * (r - t).abs().max(reference.max(spread)) + self.slack
    }
}

/// The first element outside tolerance: flat index, rule, candidate value, reference value.
pub(crate) type FirstFailure = (u64, Rule, f64, f64);

/// Sums over the elements where candidate, reference and float64 reference are all finite.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GateSums {
    pub elements: u64,
    /// Σ (c − r64)²
    pub cand_err2: f64,
    /// Σ (c − r64)² over the elements within the elementwise tolerance: the candidate's
    /// error where nothing is wrong, the element rescue's yardstick.
    pub within_err2: f64,
    /// Σ (r − r64)²
    pub ref_err2: f64,
    /// Σ r64²
    pub truth2: f64,
}

impl GateSums {
    #[inline(always)]
    fn add(&mut self, c: f64, r: f64, t: f64, within: bool) {
        let (ec, er) = (c - t, r - t);
        self.elements += 1;
        self.cand_err2 += ec * ec;
        if within {
            self.within_err2 += ec * ec;
        }
        self.ref_err2 += er * er;
        self.truth2 += t * t;
    }

    fn merge(self, later: GateSums) -> GateSums {
        GateSums {
            elements: self.elements + later.elements,
            cand_err2: self.cand_err2 + later.cand_err2,
            within_err2: self.within_err2 + later.within_err2,
            ref_err2: self.ref_err2 + later.ref_err2,
            truth2: self.truth2 + later.truth2,
        }
    }
}

/// Statistics of one chunk, or of several chunks combined in index order.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ChunkStats {
    pub elements: u64,
    /// Finite pairs outside the elementwise tolerance and not rescued.
    pub elementwise_failures: u64,
    /// Elements failing a NaN/Inf rule ([`Rule::is_nonfinite`]).
    pub nonfinite_mismatches: u64,
    /// Elements where the reference is NaN/±Inf only through its own algorithm and the
    /// candidate is finite, within tolerance of the probe reference (`nan-inf` family).
    pub artefacts: u64,
    /// The lowest flat index of those.
    pub first_artefact: Option<u64>,
    /// `max |c − r|/(1 + |r|)` over finite pairs (and `|c − a|/(1 + |a|)` over artefacts):
    /// the smallest `t` with which `atol = rtol = t` would pass them all.
    pub tol_needed: f64,
    /// Finite pairs outside the elementwise tolerance, accepted by the float64 element rescue.
    pub rescued: u64,
    /// Over finite pairs only.
    pub max_abs: f64,
    pub max_rel: f64,
    pub first: Option<FirstFailure>,
    pub gate: GateSums,
}

impl ChunkStats {
    /// `self` covers lower indices than `later`.
    pub(crate) fn merge(self, later: ChunkStats) -> ChunkStats {
        ChunkStats {
            elements: self.elements + later.elements,
            elementwise_failures: self.elementwise_failures + later.elementwise_failures,
            nonfinite_mismatches: self.nonfinite_mismatches + later.nonfinite_mismatches,
            rescued: self.rescued + later.rescued,
            artefacts: self.artefacts + later.artefacts,
            first_artefact: self.first_artefact.or(later.first_artefact),
            tol_needed: self.tol_needed.max(later.tol_needed),
            max_abs: self.max_abs.max(later.max_abs),
            max_rel: self.max_rel.max(later.max_rel),
            first: self.first.or(later.first),
            gate: self.gate.merge(later.gate),
        }
    }

    fn fail(&mut self, flat: u64, rule: Rule, c: f64, r: f64) {
        if rule.is_nonfinite() {
            self.nonfinite_mismatches += 1;
        } else {
            self.elementwise_failures += 1;
        }
        if self.first.is_none() {
            self.first = Some((flat, rule, c, r));
        }
    }
}

/// `max_rel` update with a division only where the maximum may grow. The filter
/// `d·(1 + 1e-12) > m·|r|` holds whenever `fl(d/|r|) > m` (rounding of the product is far
/// below the slack), so the result is exactly the maximum of `fl(d/|r|)`. For `r = 0` it
/// gives `+inf` when `d > 0` and leaves `m` alone when `d = 0` (`inf·0 = NaN` compares false).
#[inline(always)]
fn update_rel(max_rel: &mut f64, diff: f64, ref_abs: f64) {
    if diff * REL_SLACK > *max_rel * ref_abs {
        let rel = diff / ref_abs;
        if rel > *max_rel {
            *max_rel = rel;
        }
    }
}

/// `tol_needed` update: `m = max(m, fl(d/fl(1 + |r|)))`, dividing only where it may grow
/// (the filter is [`update_rel`]'s, with `1 + |r|` for `|r|`).
#[inline(always)]
fn update_tol_needed(m: &mut f64, diff: f64, ref_abs: f64) {
    let q = 1.0 + ref_abs;
    if diff * REL_SLACK > *m * q {
        let t = diff / q;
        if t > *m {
            *m = t;
        }
    }
}

/// The running state of one chunk's scan.
struct Scanner<'p> {
    p: &'p ScanParams,
    s: ChunkStats,
    /// Maxima of the element-at-a-time path.
    max_abs: f64,
    max_rel: f64,
    /// Fast-path accumulators, lane `k` taking block elements `k, k + LANES, ...`.
    lane_max_abs: [f64; LANES],
    lane_cand_err2: [f64; LANES],
    lane_ref_err2: [f64; LANES],
    lane_truth2: [f64; LANES],
    lane_gate_elements: u64,
    /// `atol`, `rtol` times `TOL_SHRINK_32`, rounded to f32 (see `fast_block32`).
    atol32: f32,
    rtol32: f32,
    /// `4·atol`: from here up, a difference within tolerance is exact in f32.
    sterbenz32: f32,
}

/// The largest f32 not above `x` (x ≥ 0, not NaN).
fn f32_at_or_below(x: f64) -> f32 {
    if x >= f64::from(f32::MAX) {
        return if x == f64::INFINITY {
            f32::INFINITY
        } else {
            f32::MAX
        };
    }
    let y = x as f32;
    if f64::from(y) > x {
        // x > 0 here, and y > 0: the next f32 towards zero.
        f32::from_bits(y.to_bits() - 1)
    } else {
        y
    }
}

/// The smallest f32 not below `x` (x ≥ 0, not NaN).
fn f32_at_or_above(x: f64) -> f32 {
    if x > f64::from(f32::MAX) {
        return f32::INFINITY;
    }
    let y = x as f32;
    if f64::from(y) < x {
        // y ≥ 0 and finite here: the next f32 away from zero.
        f32::from_bits(y.to_bits() + 1)
    } else {
        y
    }
}

impl<'p> Scanner<'p> {
    fn new(p: &'p ScanParams) -> Self {
        Scanner {
            p,
            s: ChunkStats::default(),
            max_abs: 0.0,
            max_rel: 0.0,
            lane_max_abs: [0.0; LANES],
            lane_cand_err2: [0.0; LANES],
            lane_ref_err2: [0.0; LANES],
            lane_truth2: [0.0; LANES],
            lane_gate_elements: 0,
            atol32: f32_at_or_below(p.tol.atol * TOL_SHRINK_32),
            rtol32: f32_at_or_below(p.tol.rtol * TOL_SHRINK_32),
            // Rounded up, so that every |r| at or above it is at least 4·atol; the argument
            // needs rtol ≤ 1/8 (every profile has rtol ≤ 1e-2).
            sterbenz32: if p.tol.rtol <= 0.125 {
                f32_at_or_above(4.0 * p.tol.atol)
            } else {
                f32::INFINITY
            },
        }
    }

    /// The fast pass for dtypes that decode to f32 (f32, f16, bf16), on f32 lanes: twice as
    /// many per instruction as f64. The filter is conservative, so anything it lets through
    /// the exact rules let through too, with `d₃₂ = fl₃₂|c − r|`:
    /// - within: `d₃₂ ≤ atol₃₂ + rtol₃₂·|r|` with the tolerances shrunk by 2⁻¹⁸ implies
    ///   `|c − r| ≤ atol + rtol·|r|` (the f32 roundings add up to under 2⁻²¹ relative);
    ///   elements within 2⁻¹⁸ of the bound take the exact path. `|r|` is clamped to
    ///   `f32::MAX` there, so that `r = ±inf` can never pass;
    /// - no new `max_rel`: `d₃₂·(1 + 2⁻²⁰) ≤ m₃₂·|r|`, with `m₃₂` the f32 at or below
    ///   `max_rel`, implies `|c − r|/|r| ≤ max_rel`;
    /// - `max_abs` stays exact: where `|r| ≥ 4·atol` an element within tolerance has
    ///   `|c − r| ≤ |r|/2`, so `c − r` is exact in f32 (Sterbenz). For f16 and bf16 (at most
    ///   11 significant bits) it is also exact when neither magnitude exceeds 2¹² times the
    ///   other, or one is zero (the difference needs at most 11 + 13 bits). A block with an
    ///   element covered by neither takes its maximum from f64 differences.
    #[inline(always)]
    fn fast_block32<C: NarrowCodec>(
        &mut self,
        c: &C::Block<'_>,
        r: &C::Block<'_>,
        t: Option<&[u8; 8 * BLOCK]>,
    ) -> bool {
        const W: usize = 4;
        let (atol, rtol, exact_from) = (self.atol32, self.rtol32, self.sterbenz32);
        let max_rel = f32_at_or_below(self.max_rel);
        let tol_needed = f32_at_or_below(self.s.tol_needed);
        let mut max_abs = [0.0f32; W];
        let mut bad = [0u32; W];
        for j in 0..BLOCK / W {
            for k in 0..W {
                let i = j * W + k;
                let (cv, rv) = (C::get32(c, i), C::get32(r, i));
                let d = (cv - rv).abs();
                let ra = rv.abs();
                let within = d <= atol + rtol * ra.min(f32::MAX);
                let grows = d * GROW_32 > max_rel * ra;
                // `tol_needed` may grow: the same margins as `max_rel`'s (1 + |r| rounds
                // once more, far inside GROW_32).
                let needs = d * GROW_32 > tol_needed * (1.0 + ra);
                bad[k] |= u32::from(!within | grows | needs);
                max_abs[k] = if d > max_abs[k] { d } else { max_abs[k] };
            }
        }
        let (mut cand_err2, mut ref_err2, mut truth2) =
            ([0.0f64; LANES], [0.0f64; LANES], [0.0f64; LANES]);
        if let Some(t) = t {
            for j in 0..BLOCK / LANES {
                for k in 0..LANES {
                    let i = j * LANES + k;
                    let tv = F64Codec::get(&t, i);
                    let (ec, er) = (C::get(c, i) - tv, C::get(r, i) - tv);
                    bad[k % W] |= u32::from(!tv.is_finite());
                    cand_err2[k] += ec * ec;
                    ref_err2[k] += er * er;
                    truth2[k] += tv * tv;
                }
            }
        }
        if bad.iter().any(|&b| b != 0) {
            return false;
        }
        let block_max32 = max_abs.iter().fold(0.0f32, |a, &b| a.max(b));
        let running = self.lane_max_abs[0].max(self.max_abs);
        // Every |c − r| here is at most d₃₂·(1 + 2⁻²³): a block that cannot beat the running
        // maximum needs no exact value (the common case after a chunk's first blocks).
        if f64::from(block_max32) * (1.0 + 1.0 / (1u64 << 22) as f64) > running {
            let block_max = self.exact_block_max::<C>(c, r, block_max32, exact_from);
            if block_max > self.lane_max_abs[0] {
                self.lane_max_abs[0] = block_max;
            }
        }
        self.keep_gate_lanes(t.is_some(), &cand_err2, &ref_err2, &truth2);
        true
    }

    /// The exact `max |c − r|` of a block that passed the f32 filter, whose f32 maximum is
    /// `block_max32`: that value itself when every difference in the block is exact in f32,
    /// else taken from f64 differences.
    #[inline(always)]
    fn exact_block_max<C: NarrowCodec>(
        &self,
        c: &C::Block<'_>,
        r: &C::Block<'_>,
        block_max32: f32,
        exact_from: f32,
    ) -> f64 {
        const W: usize = 4;
        let mut inexact = [0u32; W];
        for j in 0..BLOCK / W {
            for (k, flag) in inexact.iter_mut().enumerate() {
                let i = j * W + k;
                let (cv, rv) = (C::get32(c, i), C::get32(r, i));
                let ra = rv.abs();
                let mut maybe = ra < exact_from;
                if C::NARROW_MANTISSA {
                    let ca = cv.abs();
                    let (lo, hi) = (ca.min(ra), ca.max(ra));
                    maybe &= (lo > 0.0) & (hi > 4096.0 * lo);
                }
                *flag |= u32::from(maybe);
            }
        }
        if inexact.iter().all(|&f| f == 0) {
            return f64::from(block_max32);
        }
        let mut m = [0.0f64; W];
        for j in 0..BLOCK / W {
            for (k, m) in m.iter_mut().enumerate() {
                let i = j * W + k;
                let d = (C::get(c, i) - C::get(r, i)).abs();
                *m = if d > *m { d } else { *m };
            }
        }
        m.iter().fold(0.0f64, |a, &b| a.max(b))
    }

    #[inline(always)]
    fn keep_gate_lanes(
        &mut self,
        gate: bool,
        cand_err2: &[f64; LANES],
        ref_err2: &[f64; LANES],
        truth2: &[f64; LANES],
    ) {
        if gate {
            for k in 0..LANES {
                self.lane_cand_err2[k] += cand_err2[k];
                self.lane_ref_err2[k] += ref_err2[k];
                self.lane_truth2[k] += truth2[k];
            }
            self.lane_gate_elements += BLOCK as u64;
        }
    }

    /// The branch-free pass over a full block, fused: decode, check and accumulate in one
    /// loop, into block-local lanes that are kept only if the whole block passed. Returns
    /// false, having changed nothing, when some element needs the full rules (non-finite,
    /// outside tolerance, a possible new `max_rel`, a non-finite float64 reference).
    #[inline(always)]
    fn fast_block64<C: FloatCodec>(
        &mut self,
        c: &C::Block<'_>,
        r: &C::Block<'_>,
        t: Option<&[u8; 8 * BLOCK]>,
    ) -> bool {
        let (atol, rtol) = (self.p.tol.atol, self.p.tol.rtol);
        let (max_rel, tol_needed) = (self.max_rel, self.s.tol_needed);
        let mut max_abs = [0.0f64; LANES];
        // Count rather than branch, so that the loop vectorises. NaN compares false, so a
        // NaN anywhere counts as bad; r = ±inf is bad because inf ≤ atol + rtol·inf would
        // accept any finite candidate.
        let mut bad = [0u64; LANES];
        for j in 0..BLOCK / LANES {
            for k in 0..LANES {
                let i = j * LANES + k;
                let (cv, rv) = (C::get(c, i), C::get(r, i));
                let d = (cv - rv).abs();
                let ra = rv.abs();
                let within = d <= atol + rtol * ra;
                let grows = d * REL_SLACK > max_rel * ra;
                let needs = d * REL_SLACK > tol_needed * (1.0 + ra);
                bad[k] |= u64::from(!within | (ra == f64::INFINITY) | grows | needs);
                max_abs[k] = if d > max_abs[k] { d } else { max_abs[k] };
            }
        }
        let (mut cand_err2, mut ref_err2, mut truth2) =
            ([0.0f64; LANES], [0.0f64; LANES], [0.0f64; LANES]);
        if let Some(t) = t {
            for j in 0..BLOCK / LANES {
                for k in 0..LANES {
                    let i = j * LANES + k;
                    let tv = F64Codec::get(&t, i);
                    let (ec, er) = (C::get(c, i) - tv, C::get(r, i) - tv);
                    bad[k] |= u64::from(!tv.is_finite());
                    cand_err2[k] += ec * ec;
                    ref_err2[k] += er * er;
                    truth2[k] += tv * tv;
                }
            }
        }
        if bad.iter().any(|&b| b != 0) {
            return false;
        }
        for (lane, &m) in self.lane_max_abs.iter_mut().zip(&max_abs) {
            *lane = if m > *lane { m } else { *lane };
        }
        self.keep_gate_lanes(t.is_some(), &cand_err2, &ref_err2, &truth2);
        true
    }

    /// The full rules for one element; `a` is the probe reference's value (`nan-inf`).
    #[inline(always)]
    fn element(&mut self, flat: u64, c: f64, r: f64, t: Option<f64>, a: Option<f64>) {
        let diff = (c - r).abs();
        let ra = r.abs();
        let t_finite = t.map(f64::is_finite).unwrap_or(true);
        if diff <= self.p.tol.atol + self.p.tol.rtol * ra && ra != f64::INFINITY && t_finite {
            self.max_abs = self.max_abs.max(diff);
            update_rel(&mut self.max_rel, diff, ra);
            update_tol_needed(&mut self.s.tol_needed, diff, ra);
            if let Some(t) = t {
                self.s.gate.add(c, r, t, true);
            }
        } else {
            self.slow_element(flat, c, r, t, a);
        }
    }

    /// Everything the fast checks do not take: non-finite values (the NaN/Inf rules,
    /// [`judge_nonfinite`]), elements outside tolerance, and a non-finite float64 reference.
    #[cold]
    #[inline(never)]
    fn slow_element(&mut self, flat: u64, c: f64, r: f64, t: Option<f64>, a: Option<f64>) {
        let s = &mut self.s;
        if !r.is_finite() || !c.is_finite() {
            let tol = self.p.tol;
            match judge_nonfinite(c, r, a, |c, a| (c - a).abs() <= tol.bound(a)) {
                Nonfinite::Pass => {}
                Nonfinite::Artefact => {
                    let a = a.expect("an artefact has a probe value");
                    s.artefacts += 1;
                    s.first_artefact.get_or_insert(flat);
                    update_tol_needed(&mut s.tol_needed, (c - a).abs(), a.abs());
                }
                Nonfinite::Fail(rule) => s.fail(flat, rule, c, r),
            }
            return;
        }
        let diff = (c - r).abs();
        self.max_abs = self.max_abs.max(diff);
        update_rel(&mut self.max_rel, diff, r.abs());
        update_tol_needed(&mut s.tol_needed, diff, r.abs());
        let within = diff <= self.p.tol.bound(r);
        match t {
            Some(t) if t.is_finite() => {
                s.gate.add(c, r, t, within);
                if within {
                    return;
                }
                match self.p.rescue {
                    Some(res) if res.accepts(c, r, t) => s.rescued += 1,
                    _ => s.fail(flat, Rule::Elementwise, c, r),
                }
            }
            _ => {
                if !within {
                    s.fail(flat, Rule::Elementwise, c, r);
                }
            }
        }
    }

    fn finish(mut self, elements: u64) -> ChunkStats {
        self.s.elements = elements;
        self.s.max_abs = self
            .lane_max_abs
            .iter()
            .fold(self.max_abs, |a, &b| a.max(b));
        self.s.max_rel = self.max_rel;
        let g = &mut self.s.gate;
        // Blocks of the fast path hold only elements within tolerance.
        for k in 0..LANES {
            g.cand_err2 += self.lane_cand_err2[k];
            g.within_err2 += self.lane_cand_err2[k];
            g.ref_err2 += self.lane_ref_err2[k];
            g.truth2 += self.lane_truth2[k];
        }
        g.elements += self.lane_gate_elements;
        self.s
    }
}

/// The fast pass each float codec takes over a full block.
trait FastPath: FloatCodec {
    fn fast(
        sc: &mut Scanner<'_>,
        c: &Self::Block<'_>,
        r: &Self::Block<'_>,
        t: Option<&[u8; 8 * BLOCK]>,
    ) -> bool;
}

impl FastPath for F64Codec {
    #[inline(always)]
    fn fast(
        sc: &mut Scanner<'_>,
        c: &Self::Block<'_>,
        r: &Self::Block<'_>,
        t: Option<&[u8; 8 * BLOCK]>,
    ) -> bool {
        sc.fast_block64::<Self>(c, r, t)
    }
}

macro_rules! narrow_fast_path {
    ($($codec:ty),*) => {$(
        impl FastPath for $codec {
            #[inline(always)]
            fn fast(
                sc: &mut Scanner<'_>,
                c: &Self::Block<'_>,
                r: &Self::Block<'_>,
                t: Option<&[u8; 8 * BLOCK]>,
            ) -> bool {
                sc.fast_block32::<Self>(c, r, t)
            }
        }
    )*};
}

narrow_fast_path!(F32Codec, F16Codec, Bf16Codec);

/// Scans floats, elements `base..` of the whole tensor.
fn scan_float<C: FastPath>(
    cand: &[u8],
    refr: &[u8],
    truth: Option<&[u8]>,
    alt: Option<&[u8]>,
    base: u64,
    p: &ScanParams,
) -> ChunkStats {
    let n = cand.len() / C::SIZE;
    let mut sc = Scanner::new(p);
    let (mut c, mut r, mut t) = ([0.0f64; BLOCK], [0.0f64; BLOCK], [0.0f64; BLOCK]);
    let mut a = [0.0f64; BLOCK];
    let (w, wt) = (C::SIZE * BLOCK, 8 * BLOCK);
    for b in 0..n.div_ceil(BLOCK) {
        let len = BLOCK.min(n - b * BLOCK);
        let (cb, rb) = (
            &cand[b * w..b * w + len * C::SIZE],
            &refr[b * w..b * w + len * C::SIZE],
        );
        let tb = truth.map(|t| &t[b * wt..b * wt + len * 8]);
        if len == BLOCK {
            let tb = tb.map(|t| t.try_into().expect("one block of f64"));
            if C::fast(&mut sc, &C::load(cb), &C::load(rb), tb) {
                continue;
            }
        }
        decode_partial::<C>(cb, &mut c);
        decode_partial::<C>(rb, &mut r);
        if let Some(tb) = tb {
            decode_partial_f64(tb, &mut t);
        }
        // The probe reference matters only where c or r is not finite: slow blocks only.
        let ab = alt.map(|a| &a[b * w..b * w + len * C::SIZE]);
        if let Some(ab) = ab {
            decode_partial::<C>(ab, &mut a);
        }
        let first = base + (b * BLOCK) as u64;
        for i in 0..len {
            sc.element(
                first + i as u64,
                c[i],
                r[i],
                tb.map(|_| t[i]),
                ab.map(|_| a[i]),
            );
        }
    }
    sc.finish(n as u64)
}

/// Scans integers and bools: exact comparison, statistics on the exact difference.
#[inline(always)]
fn scan_int<const N: usize, D: Fn([u8; N]) -> i64>(
    cand: &[u8],
    refr: &[u8],
    base: u64,
    decode: D,
) -> ChunkStats {
    let mut s = ChunkStats {
        elements: (cand.len() / N) as u64,
        ..ChunkStats::default()
    };
    let arr = |b: &[u8]| -> [u8; N] { b.try_into().expect("chunks_exact yields N bytes") };
    for (i, (cb, rb)) in cand.chunks_exact(N).zip(refr.chunks_exact(N)).enumerate() {
        let c = decode(arr(cb));
        let r = decode(arr(rb));
        if c != r {
            // i128: i64::MIN − i64::MAX does not fit an i64.
            let diff = (i128::from(c) - i128::from(r)).unsigned_abs() as f64;
            let ra = r.unsigned_abs() as f64;
            s.max_abs = s.max_abs.max(diff);
            update_rel(&mut s.max_rel, diff, ra);
            update_tol_needed(&mut s.tol_needed, diff, ra);
            s.fail(base + i as u64, Rule::Elementwise, c as f64, r as f64);
        }
    }
    s
}

/// Scans elements `start..end` of tensors of `dtype` (byte slices cover the whole tensors).
#[allow(clippy::too_many_arguments)]
fn scan_range(
    dtype: Dtype,
    cand: &[u8],
    refr: &[u8],
    truth: Option<&[u8]>,
    alt: Option<&[u8]>,
    start: usize,
    end: usize,
    p: &ScanParams,
) -> ChunkStats {
    let w = dtype.size();
    let (c, r) = (&cand[start * w..end * w], &refr[start * w..end * w]);
    let t = truth.map(|t| &t[start * 8..end * 8]);
    let a = alt.map(|a| &a[start * w..end * w]);
    let base = start as u64;
    match dtype {
        Dtype::F64 => scan_float::<F64Codec>(c, r, t, a, base, p),
        Dtype::F32 => scan_float::<F32Codec>(c, r, t, a, base, p),
        Dtype::F16 => scan_float::<F16Codec>(c, r, t, a, base, p),
        Dtype::Bf16 => scan_float::<Bf16Codec>(c, r, t, a, base, p),
        Dtype::I64 => scan_int(c, r, base, i64::from_le_bytes),
        Dtype::I32 => scan_int(c, r, base, |b| i64::from(i32::from_le_bytes(b))),
        Dtype::I16 => scan_int(c, r, base, |b| i64::from(i16::from_le_bytes(b))),
        Dtype::I8 => scan_int(c, r, base, |b: [u8; 1]| i64::from(b[0] as i8)),
        Dtype::U8 => scan_int(c, r, base, |b: [u8; 1]| i64::from(b[0])),
        // Any non-zero byte is `true`, as in PyTorch's bool storage.
        Dtype::Bool => scan_int(c, r, base, |b: [u8; 1]| i64::from(b[0] != 0)),
    }
}

/// Runs `f` over chunks `start..end` of `numel` elements, in parallel when there is more
/// than one chunk, and returns the results in index order.
pub(crate) fn chunked<T: Send, F: Fn(usize, usize) -> T + Sync>(
    numel: usize,
    chunk_elems: usize,
    f: F,
) -> Vec<T> {
    let chunk_elems = chunk_elems.max(1);
    if numel <= chunk_elems {
        return vec![f(0, numel)];
    }
    (0..numel.div_ceil(chunk_elems))
        .into_par_iter()
        .map(|k| {
            let start = k * chunk_elems;
            f(start, (start + chunk_elems).min(numel))
        })
        .collect()
}

/// Scans whole tensors of `numel` elements in chunks of `chunk_elems`. `truth`, when
/// present, holds `numel` little-endian f64 values; `alt` (the probe reference of a
/// `nan-inf` case) `numel` values of `dtype`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn scan(
    dtype: Dtype,
    cand: &[u8],
    refr: &[u8],
    truth: Option<&[u8]>,
    alt: Option<&[u8]>,
    numel: usize,
    p: &ScanParams,
    chunk_elems: usize,
) -> ChunkStats {
    debug_assert_eq!(cand.len(), numel * dtype.size());
    debug_assert_eq!(refr.len(), numel * dtype.size());
    debug_assert!(truth.map(|t| t.len() == numel * 8).unwrap_or(true));
    debug_assert!(alt.map(|a| a.len() == numel * dtype.size()).unwrap_or(true));
    chunked(numel, chunk_elems, |start, end| {
        scan_range(dtype, cand, refr, truth, alt, start, end, p)
    })
    .into_iter()
    .fold(ChunkStats::default(), ChunkStats::merge)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_rounding_helpers_bracket_their_argument() {
        for x in [
            0.0,
            1e-4,
            1e-2,
            4e-4,
            1.0 / 3.0,
            1e-45,
            1e-40,
            3.5e38,
            1e300,
            f64::INFINITY,
        ] {
            let (lo, hi) = (f32_at_or_below(x), f32_at_or_above(x));
            assert!(f64::from(lo) <= x && f64::from(hi) >= x, "{x}");
            assert!(
                hi.to_bits() - lo.to_bits() <= 1 || x > f64::from(f32::MAX),
                "{x}"
            );
        }
    }
}
