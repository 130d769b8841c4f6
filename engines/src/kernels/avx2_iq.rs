//! AVX2 dot products of the i-quants against Q8_K activations: every type is a [`SubBlocks`], whose eight
//! 32-value sub-blocks decode straight from the super-block's bytes into SIMD registers (the codewords fetched
//! with one table load each, as ggml's x86 kernels fetch them), and the one kernel [`superblocks_n`] multiplies
//! them on every 256-bit level ([`Mac`]). The types live beside it: IQ1_S and IQ1_M in
//! [`avx2_iq1`](super::avx2_iq1), the IQ2s in [`avx2_iq2`](super::avx2_iq2), the IQ3s in
//! [`avx2_iq3`](super::avx2_iq3), IQ4_XS in [`avx2_iq4`](super::avx2_iq4).

use std::arch::x86_64::*;

use tgi_formats::GgmlType;

use super::act::Q8_K_BYTES;
use super::avx2::{f16_at, hsum_ps, load, Mac, RowDot};

/// The AVX2 kernel for i-quant `ty` (IQ4_NL, Q8_0's block size, is [`avx2_iq4`](super::avx2_iq4)'s).
pub(super) fn row_dot(ty: GgmlType) -> RowDot {
    use super::{avx2_iq1 as iq1, avx2_iq2 as iq2, avx2_iq3 as iq3};
    match ty {
        GgmlType::IQ2_XXS => iq2::iq2_xxs,
        GgmlType::IQ2_XS => iq2::iq2_xs,
        GgmlType::IQ2_S => iq2::iq2_s,
        GgmlType::IQ3_XXS => iq3::iq3_xxs,
        GgmlType::IQ3_S => iq3::iq3_s,
        GgmlType::IQ1_S => iq1::iq1_s,
        GgmlType::IQ1_M => iq1::iq1_m,
        GgmlType::IQ4_XS => super::avx2_iq4::iq4_xs,
        _ => unreachable!("{ty} is not an i-quant of 256-value super-blocks"),
    }
}

/// An i-quant super-block of 256 values as eight 32-value sub-blocks that decode straight from its bytes.
pub(super) trait SubBlocks {
    /// Bytes per super-block.
    const BYTES: usize;
    /// The factor every `d · scale · level` carries, where the levels are stored scaled up (a power of two).
    const DOT_SCALE: f32 = 1.0;
    /// The super-block scale `d` of the super-block at `wb` (by default the f16 that starts it).
    #[inline(always)]
    unsafe fn d(wb: *const u8) -> f32 {
        f16_at(wb)
    }
    /// Sub-block `ib` (values `32ib..32ib + 32`) of the super-block at `wb`: the levels' magnitudes (unsigned
    /// bytes), per byte the sign the activation takes (`vpsignb`: ±1, never 0), and the i16 multipliers of the
    /// 16 pair sums `vpmaddubsw` makes of them ([`per_32`] or [`per_16`]).
    unsafe fn sub_block(wb: *const u8, ib: usize) -> (__m256i, __m256i, __m256i);
}

/// The multipliers of a sub-block with one scale `s`.
#[inline(always)]
pub(super) unsafe fn per_32(s: i16) -> __m256i {
    _mm256_set1_epi16(s)
}

/// The multipliers of a sub-block whose first 16 values take scale `lo` and last 16 `hi`.
#[inline(always)]
pub(super) unsafe fn per_16(lo: i16, hi: i16) -> __m256i {
    _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo))
}

/// Per byte of 32 values, -1 where bit `k` of `bits` is set for value `k`, else 1 (for `vpsignb`).
#[inline(always)]
pub(super) unsafe fn sign_bytes(bits: u32) -> __m256i {
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(bits as i32),
        _mm256_set_epi64x(0x0303_0303_0303_0303, 0x0202_0202_0202_0202, 0x0101_0101_0101_0101, 0),
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    _mm256_or_si256(set, _mm256_set1_epi8(1))
}

/// The 32 sign bits of four 8-value groups from a word of four 7-bit fields (ggml's `ksigns_iq2xs` indices, lowest
/// first): each field completed with an eighth bit making the count of minus signs even.
#[inline(always)]
pub(super) fn parity_signs(a: u32) -> u32 {
    let v = (a & 0x7F) | ((a << 1) & 0x7F00) | ((a << 2) & 0x7F_0000) | ((a << 3) & 0x7F00_0000);
    let t = v ^ (v >> 4);
    let t = t ^ (t >> 2);
    let t = t ^ (t >> 1);
    v | ((t & 0x0101_0101) << 7)
}

/// Four 8-value codewords of a u64 table, fetched with one load each, as the 32 bytes of one vector.
#[inline(always)]
pub(super) unsafe fn words8(table: &[u64], idx: [usize; 4]) -> __m256i {
    let g = |l: usize| *table.get_unchecked(idx[l]) as i64;
    _mm256_set_epi64x(g(3), g(2), g(1), g(0))
}

/// The kernel of every [`SubBlocks`] type on the level `M`, for `N` activation rows: per super-block and
/// sub-block, the magnitudes against each row's signed activations in `vpmaddubsw`, the pair sums times the
/// multipliers into i32 lanes, then the super-block's lanes times `d` and the row's Q8_K scale into f32 lanes.
/// The integer sums are the scalar kernel's; only the order of the f32 accumulation differs.
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
            for (j, sumi) in sumi.iter_mut().enumerate() {
                let xq = load(xb.add(j * xs + 4 + 32 * ib));
                *sumi = M::dpwssd(*sumi, _mm256_maddubs_epi16(q, _mm256_sign_epi8(xq, sign)), s);
            }
        }
        let dw = T::d(wb);
        for (j, acc) in acc.iter_mut().enumerate() {
            let xd = (xb.add(j * xs) as *const f32).read_unaligned();
            *acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * xd), _mm256_cvtepi32_ps(sumi[j]), *acc);
        }
    }
    for j in 0..N {
        out[j] = hsum_ps(acc[j]) * T::DOT_SCALE;
    }
}
