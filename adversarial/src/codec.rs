//! Little-endian element decoding, a block at a time: f64 and f32 with `from_le_bytes`,
//! f16 and bf16 through `half`.

use half::{f16, slice::HalfFloatSliceExt};

/// Elements decoded and checked together on the scan's fast path.
pub(crate) const BLOCK: usize = 64;

/// Little-endian values of one float dtype, a block of `BLOCK` at a time, read as f64
/// (exactly: every f16, bf16 and f32 value is an f64 value).
pub(crate) trait FloatCodec {
    const SIZE: usize;
    /// A block ready for reading values out of.
    type Block<'a>;
    /// `bytes` holds exactly `BLOCK` values.
    fn load(bytes: &[u8]) -> Self::Block<'_>;
    fn get(block: &Self::Block<'_>, i: usize) -> f64;
}

/// Dtypes whose values are all f32 values.
pub(crate) trait NarrowCodec: FloatCodec {
    /// At most 11 significant bits (f16, bf16).
    const NARROW_MANTISSA: bool;
    fn get32(block: &Self::Block<'_>, i: usize) -> f32;
}

/// `FloatCodec::get` of the narrow codecs.
macro_rules! narrow_codec_items {
    () => {
        #[inline(always)]
        fn get(block: &Self::Block<'_>, i: usize) -> f64 {
            f64::from(Self::get32(block, i))
        }
    };
}

pub(crate) struct F64Codec;
pub(crate) struct F32Codec;
pub(crate) struct F16Codec;
pub(crate) struct Bf16Codec;

impl FloatCodec for F64Codec {
    const SIZE: usize = 8;
    type Block<'a> = &'a [u8; 8 * BLOCK];
    #[inline(always)]
    fn load(bytes: &[u8]) -> Self::Block<'_> {
        bytes.try_into().expect("one block of f64")
    }
    #[inline(always)]
    fn get(block: &Self::Block<'_>, i: usize) -> f64 {
        let b = &block[8 * i..8 * i + 8];
        f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    }
}

impl FloatCodec for F32Codec {
    const SIZE: usize = 4;
    type Block<'a> = &'a [u8; 4 * BLOCK];
    #[inline(always)]
    fn load(bytes: &[u8]) -> Self::Block<'_> {
        bytes.try_into().expect("one block of f32")
    }
    narrow_codec_items!();
}

impl NarrowCodec for F32Codec {
    const NARROW_MANTISSA: bool = false;
    #[inline(always)]
    fn get32(block: &Self::Block<'_>, i: usize) -> f32 {
        let b = &block[4 * i..4 * i + 4];
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
}

impl FloatCodec for Bf16Codec {
    const SIZE: usize = 2;
    type Block<'a> = &'a [u8; 2 * BLOCK];
    #[inline(always)]
    fn load(bytes: &[u8]) -> Self::Block<'_> {
        bytes.try_into().expect("one block of bf16")
    }
    narrow_codec_items!();
}

impl NarrowCodec for Bf16Codec {
    const NARROW_MANTISSA: bool = true;
    /// bf16 is the upper half of an f32, so widening is a shift. (`half`'s `to_f32` does
    /// the same and also quiets signalling NaNs, a difference the comparison cannot see; the
    /// tests check both agree on every bit pattern.)
    #[inline(always)]
    fn get32(block: &Self::Block<'_>, i: usize) -> f32 {
        let bits = u16::from_le_bytes([block[2 * i], block[2 * i + 1]]);
        f32::from_bits(u32::from(bits) << 16)
    }
}

impl FloatCodec for F16Codec {
    const SIZE: usize = 2;
    type Block<'a> = [f32; BLOCK];
    #[inline(always)]
    fn load(bytes: &[u8]) -> Self::Block<'_> {
        let bytes: &[u8; 2 * BLOCK] = bytes.try_into().expect("one block of f16");
        let mut h = [f16::ZERO; BLOCK];
        for (i, o) in h.iter_mut().enumerate() {
            *o = f16::from_bits(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]));
        }
        // The slice conversion uses F16C where the CPU has it (runtime detection in `half`).
        let mut f = [0.0f32; BLOCK];
        h.convert_to_f32_slice(&mut f);
        f
    }
    narrow_codec_items!();
}

impl NarrowCodec for F16Codec {
    const NARROW_MANTISSA: bool = true;
    #[inline(always)]
    fn get32(block: &Self::Block<'_>, i: usize) -> f32 {
        block[i]
    }
}

/// Decodes up to `BLOCK` values (a whole block, or the tail of a chunk) into f64.
pub(crate) fn decode_partial<C: FloatCodec>(bytes: &[u8], out: &mut [f64; BLOCK]) {
    let mut padded = [0u8; BLOCK * 8];
    padded[..bytes.len()].copy_from_slice(bytes);
    let block = C::load(&padded[..BLOCK * C::SIZE]);
    for (i, o) in out.iter_mut().enumerate() {
        *o = C::get(&block, i);
    }
}

pub(crate) fn decode_partial_f64(bytes: &[u8], out: &mut [f64; BLOCK]) {
    decode_partial::<F64Codec>(bytes, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every 16-bit pattern decodes to what `half` says (NaN to some NaN).
    #[test]
    fn narrow_codecs_agree_with_half_on_every_pattern() {
        let bytes: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
        for block in bytes.chunks_exact(2 * BLOCK) {
            let (b16, f16b) = (Bf16Codec::load(block), F16Codec::load(block));
            for i in 0..BLOCK {
                let bits = u16::from_le_bytes([block[2 * i], block[2 * i + 1]]);
                let (want_b, got_b) = (
                    half::bf16::from_bits(bits).to_f32(),
                    Bf16Codec::get32(&b16, i),
                );
                assert!(
                    want_b.to_bits() == got_b.to_bits() || (want_b.is_nan() && got_b.is_nan()),
                    "bf16 {bits:#06x}"
                );
                let (want_h, got_h) = (
                    half::f16::from_bits(bits).to_f32(),
                    F16Codec::get32(&f16b, i),
                );
                assert!(
                    want_h.to_bits() == got_h.to_bits() || (want_h.is_nan() && got_h.is_nan()),
                    "f16 {bits:#06x}"
                );
            }
        }
    }
}
