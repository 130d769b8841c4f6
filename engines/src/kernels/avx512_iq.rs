//! 512-bit AVX-512 VNNI dot products of the i-quants IQ3_S, IQ3_XXS, IQ2_S and IQ4_XS against Q8_K
//! activations, two 32-value sub-blocks per register. The sign bits are the write mask of a masked `vpsubb` that
//! negates the activations (the 64 stored bits of IQ3_S and IQ2_S are one `__mmask64`; IQ3_XXS's seven stored bits
//! per 8 values are completed with their parity, as ggml's `ksigns_iq2xs` table does; IQ4_XS's are the levels' own
//! signs), the levels meet them unsigned in `vpmaddubsw`, and `vpdpwssd` adds the pair sums times the sub-blocks'
//! scales. IQ3_S and IQ3_XXS fetch their sixteen 4-level codewords per 64 values one by one into a register, IQ2_S
//! its eight 8-level ones (Zen 4 runs 16 loads and inserts faster than one 16-lane gather: IQ3_S decode 249 -> 213
//! µs for 2048×2048 in `cargo bench --bench kernels`); IQ4_XS looks its nibbles up in the 16-level table with `vpshufb`.
//!
//! The integer sums per super-block are the scalar kernel's; only the order of the f32 accumulation differs.

use std::arch::x86_64::*;

use tgi_formats::quant::iq::{IQ2S_WORDS, IQ3S_WORDS, IQ3XXS_WORDS};
use tgi_formats::quant::IQ4_NL_VALUES;
use tgi_formats::GgmlType;

use super::act::Q8_K_BYTES;
use super::avx2::{dispatch, f16_at, RowDot};
use super::avx2_iq::parity_signs;
use super::avx2_iq3::IQ3_S_BYTES;

dispatch!(
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c", Iq3S;
    /// IQ3_S weights · Q8_K activations.
    iq3_s => superblocks_n
);
dispatch!(
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c", Iq3Xxs;
    /// IQ3_XXS weights · Q8_K activations.
    iq3_xxs => superblocks_n
);
dispatch!(
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c", Iq2S;
    /// IQ2_S weights · Q8_K activations.
    iq2_s => superblocks_n
);
dispatch!(
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c", Iq4Xs;
    /// IQ4_XS weights · Q8_K activations.
    iq4_xs => superblocks_n
);

/// The 512-bit kernel for `ty`, if it has one.
pub(super) fn row_dot(ty: GgmlType) -> Option<RowDot> {
    match ty {
        GgmlType::IQ3_S => Some(iq3_s),
        GgmlType::IQ3_XXS => Some(iq3_xxs),
        GgmlType::IQ2_S => Some(iq2_s),
        GgmlType::IQ4_XS => Some(iq4_xs),
        _ => None,
    }
}

/// One i-quant's super-block as four pairs of 32-value sub-blocks.
pub(super) trait Pairs {
    /// Bytes per super-block (the f16 scale `d` first).
    const BYTES: usize;
    /// The factor every `d · scale · level` carries, where the levels are stored scaled up.
    const DOT_SCALE: f32 = 1.0;
    /// Pair `p` (values `64p..64p + 64`) of the super-block at `wb`: the unsigned levels, the mask of the values
    /// whose sign is minus, and the i16 scale of each pair of values.
    unsafe fn pair(wb: *const u8, p: usize) -> (__m512i, __mmask64, __m512i);
}

/// The kernel of every type here, for `N` activation rows: per super-block and pair of sub-blocks, `T::pair`'s
/// levels against each row's activations (negated under the mask), the pair sums times the scales into i32
/// lanes, then the super-block's lanes times `d` and the row's Q8_K scale into f32 lanes.
#[inline(always)]
unsafe fn superblocks_n<T: Pairs, const N: usize>(w: *const u8, x: *const u8, xs: usize, cols: usize, out: &mut [f32]) {
    let mut acc = [_mm512_setzero_ps(); N];
    for b in 0..cols / 256 {
        let wb = w.add(T::BYTES * b);
        let xb = x.add(Q8_K_BYTES * b);
        let mut sumi = [_mm512_setzero_si512(); N];
        for p in 0..4 {
            let (q, neg, s) = T::pair(wb, p);
            for (j, sumi) in sumi.iter_mut().enumerate() {
                let xq = _mm512_loadu_si512(xb.add(j * xs + 4 + 64 * p).cast());
                let xq = _mm512_mask_sub_epi8(xq, neg, _mm512_setzero_si512(), xq);
                *sumi = _mm512_dpwssd_epi32(*sumi, _mm512_maddubs_epi16(q, xq), s);
            }
        }
        let dw = f16_at(wb);
        for (j, acc) in acc.iter_mut().enumerate() {
            let xd = (xb.add(j * xs) as *const f32).read_unaligned();
            *acc = _mm512_fmadd_ps(_mm512_set1_ps(dw * xd), _mm512_cvtepi32_ps(sumi[j]), *acc);
        }
    }
    for j in 0..N {
        out[j] = _mm512_reduce_add_ps(acc[j]) * T::DOT_SCALE;
    }
}

/// The i16 scales of a pair of sub-blocks: `a` in the low 256 bits, `b` in the high ones.
#[inline(always)]
unsafe fn pair_scales(a: i16, b: i16) -> __m512i {
    _mm512_mask_set1_epi16(_mm512_set1_epi16(a), 0xFFFF_0000, b)
}

/// The odd multiplier `2s + 1` of a 4-bit scale.
#[inline(always)]
fn odd(s: u32) -> i16 {
    2 * s as i16 + 1
}

/// A little-endian u16, u32 or u64 at `p`.
#[inline(always)]
unsafe fn read<V>(p: *const u8) -> V {
    (p as *const V).read_unaligned()
}

/// IQ3_S (110 bytes: `d`, `qs[64]`, `qh[8]`, `signs[32]`, `scales[4]`): the sixteen 9-bit indices of a pair (the
/// ninth bits rotated from the pair's two `qh` bytes to bit 8), the 64 stored sign bits, a 4-bit scale per 32.
pub(super) struct Iq3S;

impl Pairs for Iq3S {
    const BYTES: usize = IQ3_S_BYTES;
    #[inline(always)]
    unsafe fn pair(wb: *const u8, p: usize) -> (__m512i, __mmask64, __m512i) {
        // Codeword l of the first sub-block takes bit l of the pair's u16, of the second bit 8 + l.
        let h = read::<u16>(wb.add(66 + 2 * p)) as usize;
        let qs = wb.add(2 + 16 * p);
        let word = |l: usize| IQ3S_WORDS[*qs.add(l) as usize | ((h >> l) & 1) << 8] as i32;
        let q = words16(word);
        let sc = *wb.add(106 + p) as u32;
        (q, read(wb.add(74 + 8 * p)), pair_scales(odd(sc & 0xF), odd(sc >> 4)))
    }
}

/// The 16 codewords `word(0..16)` as the lanes of a vector, loaded one by one (Zen 4's 16-lane gather is slower
/// than 16 loads and inserts).
#[inline(always)]
unsafe fn words16(word: impl Fn(usize) -> i32) -> __m512i {
    _mm512_set_epi32(
        word(15),
        word(14),
        word(13),
        word(12),
        word(11),
        word(10),
        word(9),
        word(8),
        word(7),
        word(6),
        word(5),
        word(4),
        word(3),
        word(2),
        word(1),
        word(0),
    )
}

/// IQ3_XXS (98 bytes: `d`, `qs[64]`, then per 32 values a u32 of four 7-bit sign fields and a 4-bit scale).
pub(super) struct Iq3Xxs;

impl Pairs for Iq3Xxs {
    const BYTES: usize = 98;
    const DOT_SCALE: f32 = 0.25;
    #[inline(always)]
    unsafe fn pair(wb: *const u8, p: usize) -> (__m512i, __mmask64, __m512i) {
        let qs = wb.add(2 + 16 * p);
        let word = |l: usize| IQ3XXS_WORDS[*qs.add(l) as usize] as i32;
        let q = words16(word);
        let a0: u32 = read(wb.add(66 + 8 * p));
        let a1: u32 = read(wb.add(70 + 8 * p));
        (q, parity_signs(a0) as u64 | ((parity_signs(a1) as u64) << 32), pair_scales(odd(a0 >> 28), odd(a1 >> 28)))
    }
}

/// IQ2_S (82 bytes: `d`, `qs[32]`, `signs[32]`, `qh[8]`, `scales[8]`): the eight 10-bit indices of a pair (the
/// two high bits of codeword `l` of a sub-block at bits `2l`, `2l + 1` of its `qh` byte, rotated to bits 8 and
/// 9), the 64 stored sign bits, a 4-bit scale per 16 values.
pub(super) struct Iq2S;

impl Pairs for Iq2S {
    const BYTES: usize = 82;
    const DOT_SCALE: f32 = 0.125;
    #[inline(always)]
    unsafe fn pair(wb: *const u8, p: usize) -> (__m512i, __mmask64, __m512i) {
        // Codeword l's two high bits are bits 2l, 2l + 1 of the pair's u16.
        let h = read::<u16>(wb.add(66 + 2 * p)) as usize;
        let qs = wb.add(2 + 8 * p);
        let word = |l: usize| IQ2S_WORDS[*qs.add(l) as usize | ((h >> (2 * l)) & 3) << 8] as i64;
        let q = _mm512_set_epi64(word(7), word(6), word(5), word(4), word(3), word(2), word(1), word(0));
        let (s0, s1) = (*wb.add(74 + 2 * p) as u32, *wb.add(75 + 2 * p) as u32);
        let s = _mm512_mask_set1_epi16(_mm512_set1_epi16(odd(s0 & 0xF)), 0xFFFF_FF00, odd(s0 >> 4));
        let s = _mm512_mask_set1_epi16(s, 0xFFFF_0000, odd(s1 & 0xF));
        let s = _mm512_mask_set1_epi16(s, 0xFF00_0000, odd(s1 >> 4));
        (q, read(wb.add(34 + 8 * p)), s)
    }
}

/// IQ4_XS (136 bytes: `d`, `scales_h`, `scales_l[4]`, `qs[128]`): a pair's 32 nibble bytes spread to the 128-bit
/// lanes as (low, high) nibbles of the first block then of the second, looked up; the levels' magnitudes with
/// their signs as the mask; the blocks' 6-bit scales less 32.
pub(super) struct Iq4Xs;

impl Pairs for Iq4Xs {
    const BYTES: usize = 136;
    #[inline(always)]
    unsafe fn pair(wb: *const u8, p: usize) -> (__m512i, __mmask64, __m512i) {
        let table = _mm512_broadcast_i32x4(_mm_loadu_si128(IQ4_NL_VALUES.as_ptr().cast()));
        let raw = _mm256_loadu_si256(wb.add(8 + 32 * p).cast());
        let both = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(raw), _mm256_srli_epi16(raw, 4));
        let nibbles = _mm512_and_si512(_mm512_shuffle_i64x2::<0b11_01_10_00>(both, both), _mm512_set1_epi8(0x0F));
        let wq = _mm512_shuffle_epi8(table, nibbles);
        let (scales_h, scales_l) = (read::<u16>(wb.add(2)) as u32, read::<u32>(wb.add(4)));
        let scale = |ib: usize| (((scales_l >> (4 * ib)) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4)) as i16 - 32;
        (_mm512_abs_epi8(wq), _mm512_movepi8_mask(wq), pair_scales(scale(2 * p), scale(2 * p + 1)))
    }
}
