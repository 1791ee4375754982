//! The denormal family's flush count on the GPU ([`DeviceComparator::flush_count`])
//! against the host's [`kbench_adversarial::flush_count`], on random mixes of subnormals,
//! signed zeros, normals (the smallest included), NaN and ±Inf in every float dtype. The
//! mix is shared with the host emulation of the kernels.

use kbench_record::FlushCount;

use super::*;

/// (total, mantissa) bits of a float dtype.
fn layout(dtype: Dtype) -> (u32, u32) {
    match dtype {
        Dtype::F64 => (64, 52),
        Dtype::F32 => (32, 23),
        Dtype::F16 => (16, 10),
        Dtype::Bf16 => (16, 7),
        _ => unreachable!("not a float dtype"),
    }
}

/// One random bit pattern of `dtype` of kind 0 zero, 1 subnormal, 2 largest subnormal,
/// 3 smallest normal, 4 normal, 5 ±Inf, 6 NaN; either sign.
fn pattern(rng: &mut Rng, dtype: Dtype, kind: u64) -> u64 {
    let (total, m) = layout(dtype);
    let sign = rng.below(2) << (total - 1);
    let mant = (1u64 << m) - 1;
    let emax = (1u64 << (total - 1 - m)) - 1;
    sign | match kind {
        0 => 0,
        1 => 1 + rng.below(mant),
        2 => mant,
        3 => 1 << m,
        4 => ((1 + rng.below(emax - 1)) << m) | rng.below(mant + 1),
        5 => emax << m,
        _ => (emax << m) | (1 + rng.below(mant)),
    }
}

/// Candidate and reference of `n` elements: the reference mostly subnormal, the candidate
/// a signed zero, the reference's value or anything, a third of the time each.
pub(super) fn flush_mix(rng: &mut Rng, dtype: Dtype, n: usize) -> (HostTensor, HostTensor) {
    const REF_KINDS: [u64; 12] = [1, 1, 1, 1, 1, 0, 2, 3, 4, 4, 5, 6];
    let r: Vec<u64> = (0..n)
        .map(|_| {
            let kind = rng.pick(&REF_KINDS);
            pattern(rng, dtype, kind)
        })
        .collect();
    let c: Vec<u64> = r
        .iter()
        .map(|&x| match rng.below(3) {
            0 => pattern(rng, dtype, 0),
            1 => x,
            _ => {
                let kind = rng.below(7);
                pattern(rng, dtype, kind)
            }
        })
        .collect();
    (bits(dtype, &[n as u64], &c), bits(dtype, &[n as u64], &r))
}

#[test]
fn flush_count_matches_the_host() {
    let dc = gpu_or_skip("flush_count_matches_the_host");
    let mut rng = Rng(2424);
    for dtype in FLOATS {
        // Around the vector width and block size, and several grid strides.
        for n in [1usize, 7, 8, 9, 255, 4099, 100_003, 3_000_017] {
            let (ct, rt) = flush_mix(&mut rng, dtype, n);
            let want = kbench_adversarial::flush_count(&ct, &rt).expect("a float dtype");
            assert!(n < 100 || (want.zeroed > 0 && want.zeroed < want.subnormal));
            let Some(dc) = dc else { continue };
            let (cb, rb) = (dc.gpu.upload(ct.data()), dc.gpu.upload(rt.data()));
            let (cb, rb) = (cb.expect("uploading"), rb.expect("uploading"));
            let got = dc
                .flush_count(&dev(&ct, &cb), &dev(&rt, &rb))
                .expect("the flush count ran");
            assert_eq!(got, Some(want), "{dtype} n={n}");
        }
    }
}

#[test]
fn flush_count_is_none_for_integers_and_mismatches() {
    let dc = gpu_or_skip("flush_count_is_none_for_integers_and_mismatches");
    let i = ints(Dtype::I32, &[4], &[0, 1, 2, 3]);
    let f = floats(Dtype::F32, &[4], &[0.0, 1e-40, 2.0, 3.0]);
    let g = floats(Dtype::F32, &[2, 2], &[0.0, 1e-40, 2.0, 3.0]);
    let h = floats(Dtype::F16, &[4], &[0.0, 1e-6, 2.0, 3.0]);
    let empty = floats(Dtype::F32, &[0, 3], &[]);
    let zero = FlushCount {
        subnormal: 0,
        zeroed: 0,
    };
    let cases = [
        (&i, &i, None),
        (&f, &g, None),
        (&h, &f, None),
        (
            &f,
            &f,
            Some(FlushCount {
                subnormal: 1,
                zeroed: 0,
            }),
        ),
        (&empty, &empty, Some(zero)),
    ];
    for (c, r, want) in cases {
        assert_eq!(kbench_adversarial::flush_count(c, r), want);
        let Some(dc) = dc else { continue };
        // An empty tensor still gets a (one-byte) buffer.
        let up = |t: &HostTensor| {
            dc.gpu
                .upload(if t.data().is_empty() { &[0] } else { t.data() })
        };
        let (cb, rb) = (up(c).expect("uploading"), up(r).expect("uploading"));
        let got = dc.flush_count(&dev(c, &cb), &dev(r, &rb)).expect("ran");
        assert_eq!(got, want, "{:?} {:?}", c.dtype(), r.shape());
    }
}
