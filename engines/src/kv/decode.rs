//! Block-quantized cache rows (ggml's q8_0, q4_0, q4_1, q5_0, q5_1 and iq4_nl blocks of 32 values) read back as
//! f32: AVX2 where the CPU has it, ggml's reference decoders (`tgi_formats::quant::dequantize_row`) otherwise.
//! Both give the same floats: `(q - offset)·d`, `q·d + m`, or `level[q]·d`, each product and sum rounded once.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use tgi_formats::quant::{dequantize_row, IQ4_NL_VALUES};
use tgi_formats::GgmlType;

use super::simd::RowOps;

/// Values per block.
pub(super) const BLOCK: usize = 32;

impl RowOps {
    /// Decodes whole blocks of `ty` from `src` into `out` (`out.len() / 32` blocks).
    pub(super) fn decode(self, ty: GgmlType, src: &[u8], out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if self.avx2()
            && matches!(
                ty,
                GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::IQ4_NL
            )
        {
            assert_eq!(src.len() * BLOCK, out.len() * ty.type_size(), "whole {ty} blocks");
            // SAFETY: `avx2` is only set on a CPU that has AVX2; the lengths match whole blocks (checked above).
            return unsafe { decode_avx2(ty, src, out) };
        }
        dequantize_row(ty, src, out).expect("whole blocks of a cache type");
    }
}

/// [`RowOps::decode`] with AVX2: each block's 32 codes widened to four vectors of eight i32, then converted;
/// iq4_nl's nibbles are first looked up in its 16 levels (`_mm_shuffle_epi8`).
///
/// Safety: the CPU has AVX2; `src` holds `out.len() / 32` blocks of `ty`, a legacy type or iq4_nl.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn decode_avx2(ty: GgmlType, src: &[u8], out: &mut [f32]) {
    let half = |b: &[u8], at: usize| half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32();
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (b, o) in src.chunks_exact(ty.type_size()).zip(out.chunks_exact_mut(BLOCK)) {
        let p = b.as_ptr();
        // The codes, their offset, and the block's minimum (q4_1, q5_1).
        let (codes, offset, min) = match ty {
            GgmlType::Q8_0 => {
                let codes = std::array::from_fn(|t| _mm256_cvtepi8_epi32(_mm_loadl_epi64(p.add(2 + 8 * t).cast())));
                (codes, 0, None)
            }
            GgmlType::Q4_0 => (nibbles(p.add(2)), 8, None),
            GgmlType::Q4_1 => (nibbles(p.add(4)), 0, Some(half(b, 2))),
            GgmlType::Q5_0 | GgmlType::Q5_1 => {
                let at = if ty == GgmlType::Q5_0 { 2 } else { 4 };
                let qh = _mm256_set1_epi32(i32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]));
                let mut codes = nibbles(p.add(at + 4));
                for (t, c) in codes.iter_mut().enumerate() {
                    // Bit e of qh is the fifth bit of value e.
                    let shift = _mm256_add_epi32(lanes, _mm256_set1_epi32(8 * t as i32));
                    let high = _mm256_and_si256(_mm256_srlv_epi32(qh, shift), _mm256_set1_epi32(1));
                    *c = _mm256_or_si256(*c, _mm256_slli_epi32(high, 4));
                }
                if ty == GgmlType::Q5_0 {
                    (codes, 16, None)
                } else {
                    (codes, 0, Some(half(b, 2)))
                }
            }
            GgmlType::IQ4_NL => (levels(p.add(2)), 0, None),
            _ => unreachable!("{ty} is not a cache block type"),
        };
        let d = _mm256_set1_ps(half(b, 0));
        for (t, c) in codes.into_iter().enumerate() {
            let v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(c, _mm256_set1_epi32(offset))), d);
            let v = match min {
                Some(m) => _mm256_add_ps(v, _mm256_set1_ps(m)),
                None => v,
            };
            _mm256_storeu_ps(o.as_mut_ptr().add(8 * t), v);
        }
    }
}

/// The low and high nibbles of 16 packed bytes at `p` (values 0..16 and 16..32 of a block), one per byte.
///
/// Safety: the CPU has AVX2; `p` points at 16 readable bytes.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn nibble_bytes(p: *const u8) -> (__m128i, __m128i) {
    let bytes = _mm_loadu_si128(p.cast());
    let mask = _mm_set1_epi8(0x0F);
    (_mm_and_si128(bytes, mask), _mm_and_si128(_mm_srli_epi16(bytes, 4), mask))
}

/// The 32 four-bit codes of 16 packed bytes at `p` as four vectors of eight i32.
///
/// Safety: the CPU has AVX2; `p` points at 16 readable bytes.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn nibbles(p: *const u8) -> [__m256i; 4] {
    let (lo, hi) = nibble_bytes(p);
    [
        _mm256_cvtepu8_epi32(lo),
        _mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)),
        _mm256_cvtepu8_epi32(hi),
        _mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)),
    ]
}

/// The 32 iq4_nl levels of 16 packed bytes at `p`: each nibble looked up in [`IQ4_NL_VALUES`] (one
/// `_mm_shuffle_epi8` per half), as four vectors of eight i32.
///
/// Safety: the CPU has AVX2; `p` points at 16 readable bytes.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn levels(p: *const u8) -> [__m256i; 4] {
    let table = _mm_loadu_si128(IQ4_NL_VALUES.as_ptr().cast());
    let (lo, hi) = nibble_bytes(p);
    let (lo, hi) = (_mm_shuffle_epi8(table, lo), _mm_shuffle_epi8(table, hi));
    [
        _mm256_cvtepi8_epi32(lo),
        _mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)),
        _mm256_cvtepi8_epi32(hi),
        _mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)),
    ]
}

#[cfg(test)]
mod tests {
    use tgi_formats::quant::quantize_row;

    use super::*;
    use crate::kv::simd::tests::values;

    /// Every type's SIMD decoder gives ggml's reference decoder's floats bit for bit, over blocks with varied
    /// scales, minimums and every code (iq4_nl: every one of its 16 levels, checked below).
    #[test]
    fn simd_decoders_match_the_reference_ones() {
        let x: Vec<f32> = values(32 * 40, 3).iter().enumerate().map(|(i, v)| v * (1 + i / 32) as f32 - 0.3).collect();
        for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL] {
            let mut bytes = vec![0u8; x.len() / BLOCK * ty.type_size()];
            quantize_row(ty, &x, &mut bytes).unwrap();
            if ty == GgmlType::IQ4_NL {
                let mut seen: Vec<u8> =
                    bytes.chunks_exact(18).flat_map(|b| b[2..].iter().flat_map(|q| [q & 15, q >> 4])).collect();
                seen.sort_unstable();
                seen.dedup();
                assert_eq!(seen.len(), 16, "every iq4_nl level appears");
            }
            let (mut fast, mut reference) = (vec![0f32; x.len()], vec![0f32; x.len()]);
            RowOps::detect().decode(ty, &bytes, &mut fast);
            RowOps::scalar().decode(ty, &bytes, &mut reference);
            assert_eq!(fast, reference, "{ty}");
        }
    }
}
