//! IQ3_S and IQ3_XXS weights · Q8_K activations on the 256-bit levels ([`SubBlocks`] of
//! [`avx2_iq`](super::avx2_iq)), as ggml's AVX2 `ggml_vec_dot_iq3_*_q8_K` computes them: per 32 values eight
//! 4-value codewords fetched with one u32 load each (faster than `vpgatherdd`), the signs spread to byte masks
//! and applied to the activations with `vpsignb`, then the unsigned levels (at most 62) meet the signed
//! activations in `vpmaddubsw` (pairs of products at most 2 · 62 · 128, inside i16) and the sub-block's odd
//! scale in `vpmaddwd`.

use std::arch::x86_64::*;

use tgi_formats::quant::iq::{IQ3S_WORDS, IQ3XXS_WORDS};

use super::avx2::{dispatch, Avx2};
use super::avx2_iq::{parity_signs, per_32, sign_bytes, superblocks_n, SubBlocks};

dispatch!(
    "avx2,fma,f16c", Avx2, Iq3SBlock;
    /// IQ3_S weights · Q8_K activations.
    iq3_s => superblocks_n
);
dispatch!(
    "avx2,fma,f16c", Avx2, Iq3XxsBlock;
    /// IQ3_XXS weights · Q8_K activations.
    iq3_xxs => superblocks_n
);

/// Bytes of one IQ3_S super-block: `d`, `qs[64]`, `qh[8]`, `signs[32]`, `scales[4]`.
pub(super) const IQ3_S_BYTES: usize = 110;

/// Eight 4-value codewords of a u32 table as the 32 bytes of one vector.
#[inline(always)]
unsafe fn words4(table: &[u32], idx: [u32; 8]) -> __m256i {
    let g = |k: usize| *table.get_unchecked(idx[k] as usize) as i32;
    _mm256_set_epi32(g(7), g(6), g(5), g(4), g(3), g(2), g(1), g(0))
}

/// The eight codewords of IQ3_S sub-block `ib` of the super-block at `wb`: the low index bytes widened, the
/// ninth bits moved from `qh[ib]` (bit `l` for codeword `l`) to bit 8, then one table load per codeword.
#[inline(always)]
unsafe fn iq3_s_codewords(wb: *const u8, ib: usize) -> __m256i {
    let lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(wb.add(2 + 8 * ib) as *const __m128i));
    let h = _mm256_set1_epi32(*wb.add(66 + ib) as i32);
    let hi = _mm256_and_si256(_mm256_sllv_epi32(h, _mm256_set_epi32(1, 2, 3, 4, 5, 6, 7, 8)), _mm256_set1_epi32(256));
    let mut idx = [0u32; 8];
    _mm256_storeu_si256(idx.as_mut_ptr() as *mut __m256i, _mm256_or_si256(lo, hi));
    words4(&IQ3S_WORDS, idx)
}

/// IQ3_S's super-blocks: a codeword per 4 values, a stored sign per value, an odd 4-bit scale per 32.
pub(super) struct Iq3SBlock;

impl SubBlocks for Iq3SBlock {
    const BYTES: usize = IQ3_S_BYTES;
    #[inline(always)]
    unsafe fn sub_block(wb: *const u8, ib: usize) -> (__m256i, __m256i, __m256i) {
        let bits = (wb.add(74 + 4 * ib) as *const u32).read_unaligned();
        let s = (*wb.add(106 + ib / 2) >> (4 * (ib % 2))) & 0xF;
        (iq3_s_codewords(wb, ib), sign_bytes(bits), per_32(2 * s as i16 + 1))
    }
}

/// IQ3_XXS's 98-byte super-blocks (`d`, `qs[64]`, `u32 scales_and_signs[8]`): an 8-bit codeword index per 4
/// values; per 32 values four 7-bit indices of ggml's even-parity sign bytes and an odd 4-bit scale, the
/// levels carrying a factor 4.
pub(super) struct Iq3XxsBlock;

impl SubBlocks for Iq3XxsBlock {
    const BYTES: usize = 98;
    const DOT_SCALE: f32 = 0.25;
    #[inline(always)]
    unsafe fn sub_block(wb: *const u8, ib: usize) -> (__m256i, __m256i, __m256i) {
        let qs = wb.add(2 + 8 * ib);
        let q = words4(&IQ3XXS_WORDS, std::array::from_fn(|k| *qs.add(k) as u32));
        let aux = (wb.add(66 + 4 * ib) as *const u32).read_unaligned();
        (q, sign_bytes(parity_signs(aux)), per_32(2 * (aux >> 28) as i16 + 1))
    }
}
