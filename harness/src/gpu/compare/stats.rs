//! The host side of a scan: the parameters a kernel is launched with, the blocks' partial
//! results folded into one [`Stats`], the float64 gate's normwise check on those statistics,
//! and single elements decoded from their little-endian bytes as the CPU comparator decodes
//! them.

use kbench_adversarial::{Float64Check, Float64Gate, Rule, Tolerance};
use kbench_record::Dtype;

/// Bytes of one block's partial result (`struct Acc` in the kernel source).
pub(super) const PARTIAL_BYTES: usize = 128;

/// The scan parameters (the CPU's `ScanParams` with its `Rescue`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Params {
    pub(super) tol: Tolerance,
    pub(super) rescue: Option<Rescue>,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Rescue {
    pub(super) factor: f64,
    pub(super) slack: f64,
    pub(super) scales: kbench_adversarial::RescueScales,
}

/// The folded statistics of one scan (the CPU's `ChunkStats`, plus the worst element).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Stats {
    pub(super) elementwise_failures: u64,
    pub(super) nonfinite_mismatches: u64,
    pub(super) rescued: u64,
    /// Lowest failing flat index, and the rule it broke.
    pub(super) first: Option<(u64, Rule)>,
    /// `nan-inf`: reference artefacts accepted, and the lowest flat index of one.
    pub(super) artefacts: u64,
    pub(super) first_artefact: Option<u64>,
    /// `max |c − r|/(1 + |r|)` (see `ValueReport::tol_needed`).
    pub(super) tol_needed: f64,
    pub(super) gate_elements: u64,
    /// (flat index, |c − r64|) of the worst element, lowest index among equals.
    pub(super) worst: Option<(u64, f64)>,
    pub(super) max_abs: f64,
    pub(super) max_rel: f64,
    pub(super) cand_err2: f64,
    pub(super) ref_err2: f64,
    pub(super) truth2: f64,
    pub(super) within_err2: f64,
}

impl Stats {
    pub(super) const EMPTY: Stats = Stats {
        elementwise_failures: 0,
        nonfinite_mismatches: 0,
        rescued: 0,
        first: None,
        artefacts: 0,
        first_artefact: None,
        tol_needed: 0.0,
        gate_elements: 0,
        worst: None,
        max_abs: 0.0,
        max_rel: 0.0,
        cand_err2: 0.0,
        ref_err2: 0.0,
        truth2: 0.0,
        within_err2: 0.0,
    };

    /// Folds the blocks' partial results, in block order.
    pub(super) fn fold(partials: &[u8]) -> Stats {
        const NONE: u64 = u64::MAX;
        let mut fails = 0u64;
        let mut nonfinite = 0u64;
        let mut rescued = 0u64;
        let mut first = NONE;
        let mut gate_n = 0u64;
        let mut worst_idx = NONE;
        let mut worst_err = -1.0f64;
        let (mut artefacts, mut first_art) = (0u64, NONE);
        let mut tol_needed = 0.0f64;
        let (mut max_abs, mut max_rel) = (0.0f64, 0.0f64);
        let (mut ce2, mut re2, mut t2, mut we2) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
        for p in partials.chunks_exact(PARTIAL_BYTES) {
            let word = |k: usize| {
                let b: [u8; 8] = p[8 * k..8 * k + 8].try_into().expect("8 bytes");
                u64::from_le_bytes(b)
            };
            let float = |k: usize| f64::from_bits(word(k));
            fails += word(0);
            nonfinite += word(1);
            rescued += word(2);
            first = first.min(word(3));
            gate_n += word(4);
            artefacts += word(6);
            first_art = first_art.min(word(7));
            let (idx, err) = (word(5), float(13));
            if err > worst_err || (err == worst_err && idx < worst_idx) {
                worst_err = err;
                worst_idx = idx;
            }
            max_abs = max_abs.max(float(8));
            max_rel = max_rel.max(float(9));
            ce2 += float(10);
            re2 += float(11);
            t2 += float(12);
            tol_needed = tol_needed.max(float(14));
            we2 += float(15);
        }
        Stats {
            elementwise_failures: fails,
            nonfinite_mismatches: nonfinite,
            rescued,
            // The low 3 bits are the rule's code (`Rule::code`); the kernel writes no other.
            first: (first != NONE).then(|| {
                (
                    first >> 3,
                    Rule::from_code(first & 7).unwrap_or(Rule::Elementwise),
                )
            }),
            artefacts,
            first_artefact: (first_art != NONE).then_some(first_art),
            tol_needed,
            gate_elements: gate_n,
            worst: (worst_idx != NONE).then_some((worst_idx, worst_err)),
            max_abs,
            max_rel,
            cand_err2: ce2,
            ref_err2: re2,
            truth2: t2,
            within_err2: we2,
        }
    }
}

impl Stats {
    /// The float64 gate's sums, in the CPU comparator's own type.
    pub(super) fn gate_sums(&self) -> kbench_adversarial::GateSums {
        kbench_adversarial::GateSums {
            elements: self.gate_elements,
            cand_err2: self.cand_err2,
            ref_err2: self.ref_err2,
            truth2: self.truth2,
            within_err2: self.within_err2,
        }
    }
}

/// The normwise part of the float64 gate, by the CPU comparator's own function.
pub(super) fn float64_check(s: &Stats, gate: Float64Gate, enforced: bool) -> Float64Check {
    kbench_adversarial::float64_check_of(&s.gate_sums(), gate, enforced)
}

/// One little-endian element as f64 (integers above 2⁵³ rounded, as the CPU path does).
pub(super) fn decode(dtype: Dtype, b: &[u8]) -> f64 {
    let arr = |n: usize| -> [u8; 8] {
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(&b[..n]);
        a
    };
    match dtype {
        Dtype::F64 => f64::from_le_bytes(arr(8)),
        Dtype::F32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        Dtype::F16 => f16_to_f64(u16::from_le_bytes([b[0], b[1]])),
        Dtype::Bf16 => f64::from(f32::from_bits(
            u32::from(u16::from_le_bytes([b[0], b[1]])) << 16,
        )),
        Dtype::I64 => i64::from_le_bytes(arr(8)) as f64,
        Dtype::I32 => f64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        Dtype::I16 => f64::from(i16::from_le_bytes([b[0], b[1]])),
        Dtype::I8 => f64::from(b[0] as i8),
        Dtype::U8 => f64::from(b[0]),
        Dtype::Bool => f64::from(u8::from(b[0] != 0)),
    }
}

/// IEEE binary16 to f64, exactly.
pub(super) fn f16_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((bits >> 10) & 0x1f);
    let man = f64::from(bits & 0x3ff);
    sign * match exp {
        0 => man * 2f64.powi(-24),
        31 if man == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1024.0 + man) * 2f64.powi(e - 25),
    }
}
