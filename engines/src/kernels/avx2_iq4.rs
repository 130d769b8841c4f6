//! AVX2 + FMA + F16C dot products for the 4-bit non-linear types (IQ4_NL against Q8_0 activations, IQ4_XS
//! against Q8_K), with [`avx2`](super::avx2)'s interface, generic over its [`Mac`] so that the VNNI levels
//! reuse them: IQ4_NL as a [`LegacyBlock`], IQ4_XS as [`SubBlocks`]. The nibbles index the 16-level table with
//! one in-lane byte shuffle; the signed levels meet the activations through `vpsignb` as ggml's AVX2
//! `ggml_vec_dot_iq4_*` does.
//!
//! Integer sums per (sub-)block are exact; only the order of the f32 accumulation of the scaled block sums
//! differs from the scalar path.

use std::arch::x86_64::*;

use tgi_formats::quant::IQ4_NL_VALUES;

use super::avx2::{dispatch, legacy_n, nibbles32, Avx2, LegacyBlock, Mac};
use super::avx2_iq::{per_32, superblocks_n, SubBlocks};

dispatch!(
    "avx2,fma,f16c", Avx2;
    /// IQ4_NL weights · Q8_0 activations.
    iq4_nl => iq4_nl_n
);
dispatch!(
    "avx2,fma,f16c", Avx2, Iq4XsBlock;
    /// IQ4_XS weights · Q8_K activations.
    iq4_xs => superblocks_n
);

/// The 16 levels in both 128-bit lanes, for `vpshufb`.
#[inline(always)]
unsafe fn levels() -> __m256i {
    _mm256_broadcastsi128_si256(_mm_loadu_si128(IQ4_NL_VALUES.as_ptr() as *const __m128i))
}

/// The 32 signed levels of a 16-byte nibble block at `p` (low nibbles first, as ggml stores them).
#[inline(always)]
unsafe fn unpack32(table: __m256i, p: *const u8) -> __m256i {
    _mm256_shuffle_epi8(table, nibbles32(p))
}

/// IQ4_NL's 18-byte blocks: an f16 scale, then nibbles through the level table.
struct Iq4NlBlock;

impl LegacyBlock for Iq4NlBlock {
    const BYTES: usize = 18;
    #[inline(always)]
    unsafe fn unpack(wb: *const u8) -> __m256i {
        unpack32(levels(), wb.add(2))
    }
}

/// IQ4_NL weights on the level `M`.
#[inline(always)]
pub(super) unsafe fn iq4_nl_n<M: Mac, const N: usize>(
    w: *const u8,
    x: *const u8,
    xs: usize,
    cols: usize,
    out: &mut [f32],
) {
    legacy_n::<M, Iq4NlBlock, N>(w, x, xs, cols, out)
}

/// IQ4_XS's 136-byte super-blocks (`d`, `scales_h`, `scales_l[4]`, `qs[128]`): nibbles through the level
/// table, whose magnitudes meet the activations under the levels' signs (pairs of products at most 2·127·127,
/// inside i16), and a 6-bit scale less 32 per 32 values.
pub(super) struct Iq4XsBlock;

impl SubBlocks for Iq4XsBlock {
    const BYTES: usize = 136;
    #[inline(always)]
    unsafe fn sub_block(wb: *const u8, ib: usize) -> (__m256i, __m256i, __m256i) {
        let scales_h = (wb.add(2) as *const u16).read_unaligned() as u32;
        let scales_l = (wb.add(4) as *const u32).read_unaligned();
        let wq = unpack32(levels(), wb.add(8 + 16 * ib));
        let aw = _mm256_sign_epi8(wq, wq);
        let ls = ((scales_l >> (4 * ib)) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
        (aw, wq, per_32(ls as i16 - 32))
    }
}
