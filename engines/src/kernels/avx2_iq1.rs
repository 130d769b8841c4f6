//! IQ1_S and IQ1_M weights · Q8_K activations on the 256-bit levels ([`SubBlocks`] of
//! [`avx2_iq`](super::avx2_iq)): per 32 values four 8-value codewords of −1, 0 and 1 fetched with one u64 load
//! each (as ggml's AVX2 `ggml_vec_dot_iq1_*_q8_K` fetches them), taken to eighths and shifted by ±1/8 in two
//! byte operations (levels `8v ± 1`, never 0, so that they are their own signs), then their magnitudes (at most
//! 9) meet the signed activations in `vpmaddubsw` and the odd scales in `vpmaddwd`. The levels carry a factor 8.

use std::arch::x86_64::*;

use tgi_formats::quant::iq::IQ1S_WORDS;

use super::avx2::{dispatch, f16_at, Avx2};
use super::avx2_iq::{per_16, per_32, superblocks_n, words8, SubBlocks};

dispatch!(
    "avx2,fma,f16c", Avx2, Iq1SBlock;
    /// IQ1_S weights · Q8_K activations.
    iq1_s => superblocks_n
);
dispatch!(
    "avx2,fma,f16c", Avx2, Iq1MBlock;
    /// IQ1_M weights · Q8_K activations.
    iq1_m => superblocks_n
);

/// The levels `8v + shift` of four codewords `v` (bytes −1, 0, 1) under per-byte shifts (±1): their
/// magnitudes and themselves as the signs.
#[inline(always)]
unsafe fn shifted(words: __m256i, shift: __m256i) -> (__m256i, __m256i) {
    let l = _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), words), shift);
    (_mm256_abs_epi8(l), l)
}

/// IQ1_S's 50-byte super-blocks (`d`, `qs[32]`, `u16 qh[8]`): per 32 values a u16 of four 3-bit codeword
/// index extensions, a 3-bit scale and the sign of the shift.
pub(super) struct Iq1SBlock;

impl SubBlocks for Iq1SBlock {
    const BYTES: usize = 50;
    const DOT_SCALE: f32 = 0.125;
    #[inline(always)]
    unsafe fn sub_block(wb: *const u8, ib: usize) -> (__m256i, __m256i, __m256i) {
        let h = (wb.add(34 + 2 * ib) as *const u16).read_unaligned() as usize;
        let v =
            words8(&IQ1S_WORDS, std::array::from_fn(|l| *wb.add(2 + 4 * ib + l) as usize | (h >> (3 * l) & 7) << 8));
        let shift = _mm256_set1_epi8(if h & 0x8000 != 0 { -1 } else { 1 });
        let (q, sign) = shifted(v, shift);
        (q, sign, per_32(2 * (h >> 12 & 7) as i16 + 1))
    }
}

/// IQ1_M's 56-byte super-blocks (`qs[32]`, `qh[16]`, `scales[8]`, the fp16 `d` spread over the top nibbles of
/// the scales): per 8 values a nibble of `qh` with a 3-bit codeword index extension and the sign of its own
/// shift; per 16 values a 3-bit scale.
pub(super) struct Iq1MBlock;

impl SubBlocks for Iq1MBlock {
    const BYTES: usize = 56;
    const DOT_SCALE: f32 = 0.125;
    #[inline(always)]
    unsafe fn d(wb: *const u8) -> f32 {
        let sc: [u16; 4] = std::array::from_fn(|i| (wb.add(48 + 2 * i) as *const u16).read_unaligned());
        let bits = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000);
        f16_at(bits.to_le_bytes().as_ptr())
    }
    #[inline(always)]
    unsafe fn sub_block(wb: *const u8, ib: usize) -> (__m256i, __m256i, __m256i) {
        let qh = (wb.add(32 + 2 * ib) as *const u16).read_unaligned();
        let idx = std::array::from_fn(|l| *wb.add(4 * ib + l) as usize | (qh as usize >> (4 * l) & 7) << 8);
        // Codeword `l`'s shift is −1/8 where bit `4l + 3` of the two `qh` bytes is set.
        let bit = _mm256_set_epi64x(0x8000, 0x0800, 0x0080, 0x0008);
        let neg = _mm256_cmpeq_epi64(_mm256_and_si256(_mm256_set1_epi64x(qh as i64), bit), bit);
        let (q, sign) = shifted(words8(&IQ1S_WORDS, idx), _mm256_or_si256(neg, _mm256_set1_epi8(1)));
        let s = (wb.add(48 + 2 * (ib / 2)) as *const u16).read_unaligned() >> (6 * (ib % 2));
        (q, sign, per_16(2 * (s & 7) as i16 + 1, 2 * (s >> 3 & 7) as i16 + 1))
    }
}
