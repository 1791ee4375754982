//! The float64 gate's second pass: the element farthest from the float64 reference, run
//! only to explain a failed gate (the scan's hot path does not track it).

use kbench_record::Dtype;

use crate::codec::{
    decode_partial, decode_partial_f64, Bf16Codec, F16Codec, F32Codec, F64Codec, FloatCodec, BLOCK,
};
use crate::scan::chunked;

/// The element farthest from the float64 reference, `|c − r64|`, over elements where
/// candidate, reference and float64 reference are all finite: (flat index, error), the
/// lowest index among equals. A second pass, run only to explain a failed float64 gate.
pub(crate) fn worst_vs_f64(
    dtype: Dtype,
    cand: &[u8],
    refr: &[u8],
    truth: &[u8],
    numel: usize,
    chunk_elems: usize,
) -> Option<(u64, f64)> {
    fn worst<C: FloatCodec>(c: &[u8], r: &[u8], t: &[u8], base: u64) -> Option<(u64, f64)> {
        let (mut cv, mut rv, mut tv) = ([0.0f64; BLOCK], [0.0f64; BLOCK], [0.0f64; BLOCK]);
        let mut best: Option<(u64, f64)> = None;
        let n = c.len() / C::SIZE;
        for b in 0..n.div_ceil(BLOCK) {
            let (s, e) = (b * BLOCK, ((b + 1) * BLOCK).min(n));
            decode_partial::<C>(&c[s * C::SIZE..e * C::SIZE], &mut cv);
            decode_partial::<C>(&r[s * C::SIZE..e * C::SIZE], &mut rv);
            decode_partial_f64(&t[s * 8..e * 8], &mut tv);
            for i in 0..e - s {
                if cv[i].is_finite() && rv[i].is_finite() && tv[i].is_finite() {
                    let err = (cv[i] - tv[i]).abs();
                    if best.map(|(_, e)| err > e).unwrap_or(true) {
                        best = Some((base + (s + i) as u64, err));
                    }
                }
            }
        }
        best
    }
    let w = dtype.size();
    chunked(numel, chunk_elems, |start, end| {
        let (c, r, t) = (
            &cand[start * w..end * w],
            &refr[start * w..end * w],
            &truth[start * 8..end * 8],
        );
        match dtype {
            Dtype::F64 => worst::<F64Codec>(c, r, t, start as u64),
            Dtype::F32 => worst::<F32Codec>(c, r, t, start as u64),
            Dtype::F16 => worst::<F16Codec>(c, r, t, start as u64),
            Dtype::Bf16 => worst::<Bf16Codec>(c, r, t, start as u64),
            _ => None,
        }
    })
    .into_iter()
    .fold(None, |best, next| match (best, next) {
        (Some(b), Some(n)) if n.1 > b.1 => Some(n),
        (None, n) => n,
        (b, _) => b,
    })
}
