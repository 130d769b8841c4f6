//! AVX2 dot products of the i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ1_S, IQ1_M) against Q8_K
//! activations. As in ggml's x86 kernels the codebook lookups are scalar; here each weight super-block is
//! unpacked once to signed i8 levels (`tgi_formats::quant::iq`) and then multiplied against up to 4 activation
//! rows with `vpsignb` / `vpmaddubsw` / `vpmaddwd` (the odd multipliers per 16 values as the i16 factors).
//! The integer sums and the f32 steps are the scalar kernel's, so both give the same bits.
//!
//! IQ3_S ([`avx2_iq3s`](super::avx2_iq3s)) and IQ4_XS ([`avx2_iq4`](super::avx2_iq4)) decode each 32-value
//! sub-block straight from the bytes instead, through [`SubBlocks`] and the one kernel [`superblocks_n`] on
//! every 256-bit level.

use std::arch::x86_64::*;

use tgi_formats::quant::iq::{IqBlock, IqCodec};
use tgi_formats::GgmlType;

use super::act::Q8_K_BYTES;
use super::avx2::{f16_at, hsum_ps, load, Mac, RowDot};
use super::scalar::iq_codec;

/// The AVX2 kernel for i-quant `ty`.
pub(super) fn row_dot(ty: GgmlType) -> RowDot {
    match ty {
        GgmlType::IQ2_XXS => iq::<16>,
        GgmlType::IQ2_XS => iq::<17>,
        GgmlType::IQ3_XXS => iq::<18>,
        GgmlType::IQ1_S => iq::<19>,
        GgmlType::IQ2_S => iq::<22>,
        GgmlType::IQ1_M => iq::<29>,
        _ => unreachable!("{ty} is not an i-quant"),
    }
}

/// I-quant weights (ggml type id `ID`) · Q8_K activations, for 1..=4 activation rows (see [`RowDot`]).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq<const ID: u32>(w: &[u8], x: &[u8], xs: usize, nx: usize, cols: usize, out: &mut [f32]) {
    debug_assert!((1..=4).contains(&nx) && out.len() >= nx && x.len() >= nx * xs);
    let c = iq_codec::<ID>();
    match nx {
        1 => iq_n::<1>(&c, w, x.as_ptr(), xs, cols, out),
        2 => iq_n::<2>(&c, w, x.as_ptr(), xs, cols, out),
        3 => iq_n::<3>(&c, w, x.as_ptr(), xs, cols, out),
        _ => iq_n::<4>(&c, w, x.as_ptr(), xs, cols, out),
    }
}

/// Sum of the 8 i32 lanes.
#[inline(always)]
unsafe fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01));
    _mm_cvtsi128_si32(s)
}

/// The kernel for `N` activation rows: per super-block, unpack, then per 32 values
/// `Σ ls · |q| · (x · sign q)` (pairs of products stay under 2 · 62 · 127, inside i16).
#[inline(always)]
unsafe fn iq_n<const N: usize>(c: &IqCodec, w: &[u8], x: *const u8, xs: usize, cols: usize, out: &mut [f32]) {
    let mut b = IqBlock::default();
    let mut acc = [0.0f32; N];
    for (blk, wb) in w.chunks_exact(c.block_bytes).take(cols / 256).enumerate() {
        c.unpack(wb, &mut b);
        let mut sumi = [_mm256_setzero_si256(); N];
        for k in 0..8 {
            let q = load(b.q.as_ptr().add(32 * k) as *const u8);
            let aq = _mm256_sign_epi8(q, q);
            let s = _mm256_set_m128i(_mm_set1_epi16(b.ls[2 * k + 1] as i16), _mm_set1_epi16(b.ls[2 * k] as i16));
            for (j, sumi) in sumi.iter_mut().enumerate() {
                let xq = load(x.add(j * xs + Q8_K_BYTES * blk + 4 + 32 * k));
                let p = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(xq, q));
                *sumi = _mm256_add_epi32(*sumi, _mm256_madd_epi16(p, s));
            }
        }
        for (j, acc) in acc.iter_mut().enumerate() {
            let xd = (x.add(j * xs + Q8_K_BYTES * blk) as *const f32).read_unaligned();
            *acc += b.d * xd * hsum_epi32(sumi[j]) as f32;
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        *o = a * c.dot_scale;
    }
}

/// An i-quant super-block of 256 values as eight 32-value sub-blocks that decode straight from its bytes.
pub(super) trait SubBlocks {
    /// Bytes per super-block (the f16 scale `d` first).
    const BYTES: usize;
    /// Sub-block `ib` (values `32ib..32ib + 32`) of the super-block at `wb`: the levels' magnitudes (unsigned
    /// bytes), per byte the sign the activation takes (`vpsignb`), and the sub-block's i16 scale.
    unsafe fn sub_block(wb: *const u8, ib: usize) -> (__m256i, __m256i, i16);
}

/// The kernel of every [`SubBlocks`] type on the level `M`, for `N` activation rows: per super-block and
/// sub-block, the magnitudes against each row's signed activations in `vpmaddubsw`, the pair sums times the
/// scale into i32 lanes, then the super-block's lanes times `d` and the row's Q8_K scale into f32 lanes. The
/// integer sums are the scalar kernel's; only the order of the f32 accumulation differs.
#[inline(always)]
pub(super) unsafe fn superblocks_n<M: Mac, T: SubBlocks, const N: usize>(
    w: *const u8,
    x: *const u8,
    xs: usize,
    cols: usize,
    out: &mut [f32],
) {
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..cols / 256 {
        let wb = w.add(T::BYTES * b);
        let xb = x.add(Q8_K_BYTES * b);
        let mut sumi = [_mm256_setzero_si256(); N];
        for ib in 0..8 {
            let (q, sign, s) = T::sub_block(wb, ib);
            let s = _mm256_set1_epi16(s);
            for (j, sumi) in sumi.iter_mut().enumerate() {
                let xq = load(xb.add(j * xs + 4 + 32 * ib));
                *sumi = M::dpwssd(*sumi, _mm256_maddubs_epi16(q, _mm256_sign_epi8(xq, sign)), s);
            }
        }
        let dw = f16_at(wb);
        for (j, acc) in acc.iter_mut().enumerate() {
            let xd = (xb.add(j * xs) as *const f32).read_unaligned();
            *acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * xd), _mm256_cvtepi32_ps(sumi[j]), *acc);
        }
    }
    for j in 0..N {
        out[j] = hsum_ps(acc[j]);
    }
}
