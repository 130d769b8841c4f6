//! IQ2_XXS, IQ2_XS and IQ2_S weights · Q8_K activations on the 256-bit levels ([`SubBlocks`] of
//! [`avx2_iq`](super::avx2_iq)), as ggml's AVX2 `ggml_vec_dot_iq2_*_q8_K` computes them: per 32 values four
//! 8-value codewords of the levels 8, 25 and 43 fetched with one u64 load each, the signs spread to byte masks
//! for `vpsignb`, the levels against the signed activations in `vpmaddubsw` (pairs of products at most
//! 2 · 43 · 128, inside i16) and the odd scales (per 32 or per 16 values) in `vpmaddwd`. The levels carry a
//! factor 8.

use std::arch::x86_64::*;

use tgi_formats::quant::iq::{IQ2S_WORDS, IQ2XS_WORDS, IQ2XXS_WORDS};

use super::avx2::{dispatch, Avx2};
use super::avx2_iq::{parity_signs, per_16, per_32, sign_bytes, superblocks_n, words8, SubBlocks};

dispatch!(
    "avx2,fma,f16c", Avx2, Iq2XxsBlock;
    /// IQ2_XXS weights · Q8_K activations.
    iq2_xxs => superblocks_n
);
dispatch!(
    "avx2,fma,f16c", Avx2, Iq2XsBlock;
    /// IQ2_XS weights · Q8_K activations.
    iq2_xs => superblocks_n
);
dispatch!(
    "avx2,fma,f16c", Avx2, Iq2SBlock;
    /// IQ2_S weights · Q8_K activations.
    iq2_s => superblocks_n
);

/// The multipliers of a byte of two 4-bit scales (the low nibble for the first 16 values).
#[inline(always)]
unsafe fn split_scales(sc: u8) -> __m256i {
    per_16(2 * (sc & 0xF) as i16 + 1, 2 * (sc >> 4) as i16 + 1)
}

/// IQ2_XXS's 66-byte super-blocks (`d`, `u16 qs[32]`): per 32 values four 8-bit codeword indices, then a u32
/// of four 7-bit indices of ggml's even-parity sign bytes and an odd 4-bit scale.
pub(super) struct Iq2XxsBlock;

impl SubBlocks for Iq2XxsBlock {
    const BYTES: usize = 66;
    const DOT_SCALE: f32 = 0.125;
    #[inline(always)]
    unsafe fn sub_block(wb: *const u8, ib: usize) -> (__m256i, __m256i, __m256i) {
        let o = wb.add(2 + 8 * ib);
        let q = words8(&IQ2XXS_WORDS, std::array::from_fn(|l| *o.add(l) as usize));
        let aux = (o.add(4) as *const u32).read_unaligned();
        (q, sign_bytes(parity_signs(aux)), per_32(2 * (aux >> 28) as i16 + 1))
    }
}

/// IQ2_XS's 74-byte super-blocks (`d`, `u16 qs[32]`, `scales[8]`): per 8 values a u16 of a 9-bit codeword
/// index and a 7-bit sign index; per 16 values a 4-bit scale.
pub(super) struct Iq2XsBlock;

impl SubBlocks for Iq2XsBlock {
    const BYTES: usize = 74;
    const DOT_SCALE: f32 = 0.125;
    #[inline(always)]
    unsafe fn sub_block(wb: *const u8, ib: usize) -> (__m256i, __m256i, __m256i) {
        let v: [u16; 4] = std::array::from_fn(|l| (wb.add(2 + 2 * (4 * ib + l)) as *const u16).read_unaligned());
        let q = words8(&IQ2XS_WORDS, v.map(|v| (v & 511) as usize));
        let bits = parity_signs((0..4).fold(0, |a, l| a | (v[l] as u32 >> 9) << (7 * l)));
        (q, sign_bytes(bits), split_scales(*wb.add(66 + ib)))
    }
}

/// IQ2_S's 82-byte super-blocks (`d`, `qs[32]`, `signs[32]`, `qh[8]`, `scales[8]`): per 8 values a 10-bit
/// codeword index (8 bits in `qs`, 2 in `qh`) and a byte of stored signs; per 16 values a 4-bit scale.
pub(super) struct Iq2SBlock;

impl SubBlocks for Iq2SBlock {
    const BYTES: usize = 82;
    const DOT_SCALE: f32 = 0.125;
    #[inline(always)]
    unsafe fn sub_block(wb: *const u8, ib: usize) -> (__m256i, __m256i, __m256i) {
        let h = *wb.add(66 + ib) as usize;
        let q =
            words8(&IQ2S_WORDS, std::array::from_fn(|l| *wb.add(2 + 4 * ib + l) as usize | (h << (8 - 2 * l) & 0x300)));
        let bits = (wb.add(34 + 4 * ib) as *const u32).read_unaligned();
        (q, sign_bytes(bits), split_scales(*wb.add(74 + ib)))
    }
}
