//! IQ3_S weights · Q8_K activations on the 256-bit levels ([`SubBlocks`] of [`avx2_iq`](super::avx2_iq)), as
//! ggml's AVX2 `ggml_vec_dot_iq3_s_q8_K` computes it: per 32 values the eight 9-bit codeword indices in one
//! vector, the codewords fetched with one u32 load each (faster than `vpgatherdd`), the 32 stored sign bits spread
//! to byte masks and applied to the activations with `vpsignb`, then the unsigned levels (1..=15) meet the signed
//! activations in `vpmaddubsw` (pairs of products at most 2 · 15 · 128, inside i16) and the sub-block's odd scale
//! in `vpmaddwd`.

use std::arch::x86_64::*;

use tgi_formats::quant::iq::IQ3S_WORDS;

use super::avx2::{dispatch, Avx2};
use super::avx2_iq::{superblocks_n, SubBlocks};

dispatch!(
    "avx2,fma,f16c", Avx2, Iq3SBlock;
    /// IQ3_S weights · Q8_K activations.
    iq3_s => superblocks_n
);

/// Bytes of one IQ3_S super-block: `d`, `qs[64]`, `qh[8]`, `signs[32]`, `scales[4]`.
pub(super) const IQ3_S_BYTES: usize = 110;

/// The odd scale `2s + 1` of sub-block `ib` (32 values) of the super-block at `wb`.
#[inline(always)]
unsafe fn iq3_s_scale(wb: *const u8, ib: usize) -> i16 {
    let s = (*wb.add(106 + ib / 2) >> (4 * (ib % 2))) & 0xF;
    2 * s as i16 + 1
}

/// The eight codewords of sub-block `ib` of the super-block at `wb`: the low index bytes widened, the ninth bits
/// moved from `qh[ib]` (bit `l` for codeword `l`) to bit 8, then one table load per codeword.
#[inline(always)]
unsafe fn codewords(wb: *const u8, ib: usize) -> __m256i {
    let lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(wb.add(2 + 8 * ib) as *const __m128i));
    let h = _mm256_set1_epi32(*wb.add(66 + ib) as i32);
    let hi = _mm256_and_si256(_mm256_sllv_epi32(h, _mm256_set_epi32(1, 2, 3, 4, 5, 6, 7, 8)), _mm256_set1_epi32(256));
    let mut idx = [0u32; 8];
    _mm256_storeu_si256(idx.as_mut_ptr() as *mut __m256i, _mm256_or_si256(lo, hi));
    let g = |k: usize| *IQ3S_WORDS.get_unchecked(idx[k] as usize) as i32;
    _mm256_set_epi32(g(7), g(6), g(5), g(4), g(3), g(2), g(1), g(0))
}

/// Per byte of sub-block `ib`'s 32 values, -1 where its stored sign bit is set, else 1 (for `vpsignb`).
#[inline(always)]
unsafe fn signs(wb: *const u8, ib: usize) -> __m256i {
    let bits = (wb.add(74 + 4 * ib) as *const i32).read_unaligned();
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(bits),
        _mm256_set_epi64x(0x0303_0303_0303_0303, 0x0202_0202_0202_0202, 0x0101_0101_0101_0101, 0),
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    _mm256_or_si256(set, _mm256_set1_epi8(1))
}

/// IQ3_S's super-blocks: a codeword per 4 values, a stored sign per value, an odd 4-bit scale per 32.
pub(super) struct Iq3SBlock;

impl SubBlocks for Iq3SBlock {
    const BYTES: usize = IQ3_S_BYTES;
    #[inline(always)]
    unsafe fn sub_block(wb: *const u8, ib: usize) -> (__m256i, __m256i, i16) {
        (codewords(wb, ib), signs(wb, ib), iq3_s_scale(wb, ib))
    }
}
