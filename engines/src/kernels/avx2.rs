//! AVX2 + FMA + F16C dot products: one weight row against `N` (1..=4) encoded activation rows,
//! so that each weight block is loaded and unpacked once per group of activations.
//!
//! Integer sums per (super-)block are exact, as in ggml; only the order of the f32
//! accumulation of scaled block sums differs from the scalar path. The integer kernels are generic over
//! [`Mac`], the multiply-accumulate steps that the VNNI levels (`super::vnni`) fuse; each level's entry
//! points enable its features, and the kernels are inlined into them.

use std::arch::x86_64::*;

use tgi_formats::GgmlType;

use super::act::{Q8_0_BYTES, Q8_K_BYTES};

/// Signature shared by every row kernel: weight row `w`, `nx` (1..=4) activation rows of `xs`
/// bytes each starting at `x`, `cols` values per row, results into `out[..nx]`.
///
/// Safety: the CPU has AVX2, FMA and F16C; `w` holds one encoded weight row of `cols` values
/// and `x` at least `nx` encoded activation rows of `cols` values, `xs` bytes apart.
pub type RowDot = unsafe fn(w: &[u8], x: &[u8], xs: usize, nx: usize, cols: usize, out: &mut [f32]);

/// Horizontal sum of 8 f32 lanes.
#[inline(always)]
pub(super) unsafe fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// A little-endian f16 at `p` as f32. (The small helpers are `inline(always)` without target features so
/// that they inline into every level's kernels.)
#[inline(always)]
pub(super) unsafe fn f16_at(p: *const u8) -> f32 {
    let bits = (p as *const u16).read_unaligned();
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// 32 bytes at `p`.
#[inline(always)]
pub(super) unsafe fn load(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

/// Expands 16 bytes of nibbles to 32 bytes: low nibbles first, then high nibbles.
#[inline(always)]
pub(super) unsafe fn nibbles32(p: *const u8) -> __m256i {
    let q = _mm_loadu_si128(p as *const __m128i);
    let both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// The integer multiply-accumulate steps of one x86 level (AVX2 spells them as two instructions, the VNNI
/// levels as one). Implementations are `#[inline(always)]` and only called from kernels inlined into an entry
/// point that enables the level's features.
pub(super) trait Mac {
    /// `acc` plus, per i32 lane, the sum of the two i16 products of `a` and `b`.
    unsafe fn dpwssd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i;
    /// `acc` plus, per i32 lane, the sum of the four u8 × i8 products of `a` and `b` (exact here: every caller
    /// keeps each pair of products inside i16, where AVX2's saturating `maddubs` agrees).
    unsafe fn dpbusd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i;

    /// Two sub-blocks' i16 scales (`sa`, `sb`: each i16 lane the scale) in the form [`Mac::scaled_pair`] takes.
    type Scales: Copy;
    /// Prepares [`Mac::Scales`] once per weight row and pair of sub-blocks.
    unsafe fn scales(sa: __m256i, sb: __m256i) -> Self::Scales;
    /// `acc` plus two 32-value sub-blocks (u8 weights `wa`/`wb` · i8 activations `xa`/`xb`) times their scales,
    /// spread over the i32 lanes. Exact while every four adjacent products sum inside i16 and every pair
    /// inside i16 too (weights of at most 6 bits against 8-bit activations).
    unsafe fn scaled_pair(acc: __m256i, wa: __m256i, xa: __m256i, wb: __m256i, xb: __m256i, s: Self::Scales)
        -> __m256i;
}

/// [`Mac::scaled_pair`] for the VNNI levels, over their `dpbusd` and `dpwssd`: each sub-block's four-product
/// sums (which fit i16) packed side by side into i16 lanes, then one `dpwssd` against the matching scales.
#[inline(always)]
pub(super) unsafe fn packed_pair<M: Mac>(
    acc: __m256i,
    wa: __m256i,
    xa: __m256i,
    wb: __m256i,
    xb: __m256i,
    s: __m256i,
) -> __m256i {
    let zero = _mm256_setzero_si256();
    M::dpwssd(acc, _mm256_packs_epi32(M::dpbusd(zero, wa, xa), M::dpbusd(zero, wb, xb)), s)
}

/// The scales of [`packed_pair`]: `packs_epi32` puts four lanes of `a` then four of `b` in each 128-bit half.
#[inline(always)]
pub(super) unsafe fn packed_scales(sa: __m256i, sb: __m256i) -> __m256i {
    _mm256_unpacklo_epi64(sa, sb)
}

/// AVX2's `vpmaddwd`/`vpmaddubsw` followed by an add.
pub(super) struct Avx2;

impl Mac for Avx2 {
    #[inline(always)]
    unsafe fn dpwssd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
    }
    #[inline(always)]
    unsafe fn dpbusd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)))
    }
    type Scales = (__m256i, __m256i);
    #[inline(always)]
    unsafe fn scales(sa: __m256i, sb: __m256i) -> Self::Scales {
        (sa, sb)
    }
    #[inline(always)]
    unsafe fn scaled_pair(
        acc: __m256i,
        wa: __m256i,
        xa: __m256i,
        wb: __m256i,
        xb: __m256i,
        s: Self::Scales,
    ) -> __m256i {
        let acc = Self::dpwssd(acc, _mm256_maddubs_epi16(wa, xa), s.0);
        Self::dpwssd(acc, _mm256_maddubs_epi16(wb, xb), s.1)
    }
}

/// Defines a [`RowDot`] entry point `$name` enabling `$feat` that runs `$kernel` (generic over the types `$ty`, if
/// any: a level's [`Mac`], a block layout, or both) for 1..=4 activation rows.
macro_rules! dispatch {
    ($feat:literal, $($ty:ty),*; $(#[$m:meta])* $name:ident => $kernel:ident) => {
        $(#[$m])*
        #[target_feature(enable = $feat)]
        pub unsafe fn $name(w: &[u8], x: &[u8], xs: usize, nx: usize, cols: usize, out: &mut [f32]) {
            debug_assert!((1..=4).contains(&nx) && out.len() >= nx && x.len() >= nx * xs);
            match nx {
                1 => $kernel::<$($ty,)* 1>(w.as_ptr(), x.as_ptr(), xs, cols, out),
                2 => $kernel::<$($ty,)* 2>(w.as_ptr(), x.as_ptr(), xs, cols, out),
                3 => $kernel::<$($ty,)* 3>(w.as_ptr(), x.as_ptr(), xs, cols, out),
                _ => $kernel::<$($ty,)* 4>(w.as_ptr(), x.as_ptr(), xs, cols, out),
            }
        }
    };
}
pub(super) use dispatch;

/// The AVX2 kernel for `ty` (every type has one).
pub(super) fn row_dot(ty: GgmlType) -> RowDot {
    use super::avx2_lowbit as low;
    match ty {
        GgmlType::Q8_0 => q8_0,
        GgmlType::Q4_0 => q4_0,
        GgmlType::Q4_1 => low::q4_1,
        GgmlType::Q5_0 => low::q5_0,
        GgmlType::Q5_1 => low::q5_1,
        GgmlType::Q2_K => low::q2_k,
        GgmlType::Q3_K => low::q3_k,
        GgmlType::Q4_K => q4_k,
        GgmlType::Q5_K => q5_k,
        GgmlType::Q6_K => q6_k,
        GgmlType::IQ4_NL => super::avx2_iq4::iq4_nl,
        GgmlType::TQ1_0 => super::avx2_ternary::tq1_0,
        GgmlType::TQ2_0 => super::avx2_ternary::tq2_0,
        GgmlType::F32 => f32w,
        GgmlType::F16 => f16w,
        GgmlType::BF16 => bf16w,
        GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ2_S
        | GgmlType::IQ3_XXS
        | GgmlType::IQ3_S
        | GgmlType::IQ1_S
        | GgmlType::IQ1_M
        | GgmlType::IQ4_XS => super::avx2_iq::row_dot(ty),
    }
}

dispatch!(
    "avx2,fma,f16c", Avx2;
    /// Q8_0 weights · Q8_0 activations.
    q8_0 => q8_0_n
);
dispatch!(
    "avx2,fma,f16c", Avx2;
    /// Q4_0 weights · Q8_0 activations.
    q4_0 => q4_0_n
);
dispatch!(
    "avx2,fma,f16c", Avx2;
    /// Q4_K weights · Q8_K activations.
    q4_k => q4_k_n
);
dispatch!(
    "avx2,fma,f16c", Avx2;
    /// Q5_K weights · Q8_K activations.
    q5_k => q5_k_n
);
dispatch!(
    "avx2,fma,f16c", Avx2;
    /// Q6_K weights · Q8_K activations.
    q6_k => q6_k_n
);
dispatch!(
    "avx2,fma,f16c",;
    /// f32 weights · f32 activations.
    f32w => f32_n
);
dispatch!(
    "avx2,fma,f16c",;
    /// f16 weights · f16-rounded activations.
    f16w => f16_n
);
dispatch!(
    "avx2,fma,f16c",;
    /// bf16 weights · bf16-rounded activations.
    bf16w => bf16_n
);

/// A legacy block layout whose 32 values unpack to signed bytes against Q8_0 activations (Q8_0, Q4_0, Q5_0).
pub(super) trait LegacyBlock {
    /// Bytes per block (an f16 scale first).
    const BYTES: usize;
    /// The 32 values of the block at `wb` as signed bytes.
    unsafe fn unpack(wb: *const u8) -> __m256i;
}

/// Q8_0's 34-byte blocks.
struct Q8_0Block;

impl LegacyBlock for Q8_0Block {
    const BYTES: usize = 34;
    #[inline(always)]
    unsafe fn unpack(wb: *const u8) -> __m256i {
        load(wb.add(2))
    }
}

/// Q4_0's 18-byte blocks: nibbles less 8.
struct Q4_0Block;

impl LegacyBlock for Q4_0Block {
    const BYTES: usize = 18;
    #[inline(always)]
    unsafe fn unpack(wb: *const u8) -> __m256i {
        _mm256_sub_epi8(nibbles32(wb.add(2)), _mm256_set1_epi8(8))
    }
}

/// Blocks of layout `B` against Q8_0 activations on the level `M`. No closures here: the kernel is inlined
/// into each level's entry point whole.
#[inline(always)]
pub(super) unsafe fn legacy_n<M: Mac, B: LegacyBlock, const N: usize>(
    w: *const u8,
    x: *const u8,
    xs: usize,
    cols: usize,
    out: &mut [f32],
) {
    // Two accumulators per activation row (even and odd blocks) to hide the FMA latency.
    let mut acc0 = [_mm256_setzero_ps(); N];
    let mut acc1 = [_mm256_setzero_ps(); N];
    let nb = cols / 32;
    let mut b = 0;
    while b + 2 <= nb {
        legacy_block::<M, B, N>(w, x, xs, b, &mut acc0);
        legacy_block::<M, B, N>(w, x, xs, b + 1, &mut acc1);
        b += 2;
    }
    if b < nb {
        legacy_block::<M, B, N>(w, x, xs, b, &mut acc0);
    }
    for j in 0..N {
        out[j] = hsum_ps(_mm256_add_ps(acc0[j], acc1[j]));
    }
}

/// Block `b` of a [`legacy_n`] row against the `N` activation rows, into `acc`.
#[inline(always)]
unsafe fn legacy_block<M: Mac, B: LegacyBlock, const N: usize>(
    w: *const u8,
    x: *const u8,
    xs: usize,
    b: usize,
    acc: &mut [__m256; N],
) {
    let wb = w.add(B::BYTES * b);
    let wq = B::unpack(wb);
    let dw = f16_at(wb);
    let aw = _mm256_sign_epi8(wq, wq);
    for (j, acc) in acc.iter_mut().enumerate() {
        let xb = x.add(j * xs + Q8_0_BYTES * b);
        let xq = load(xb.add(2));
        let p = M::dpbusd(_mm256_setzero_si256(), aw, _mm256_sign_epi8(xq, wq));
        let d = _mm256_set1_ps(dw * f16_at(xb));
        *acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), *acc);
    }
}

/// Q8_0 weights on the level `M`.
#[inline(always)]
pub(super) unsafe fn q8_0_n<M: Mac, const N: usize>(
    w: *const u8,
    x: *const u8,
    xs: usize,
    cols: usize,
    out: &mut [f32],
) {
    legacy_n::<M, Q8_0Block, N>(w, x, xs, cols, out)
}

/// Q4_0 weights on the level `M`.
#[inline(always)]
pub(super) unsafe fn q4_0_n<M: Mac, const N: usize>(
    w: *const u8,
    x: *const u8,
    xs: usize,
    cols: usize,
    out: &mut [f32],
) {
    legacy_n::<M, Q4_0Block, N>(w, x, xs, cols, out)
}

/// The 16 bytes `[scales 0..8, mins 0..8]` of a Q4_K/Q5_K 12-byte scale block.
#[inline(always)]
unsafe fn k4_scales(p: *const u8) -> [u32; 4] {
    const M6: u32 = 0x3f3f_3f3f;
    const M4: u32 = 0x0f0f_0f0f;
    const M2: u32 = 0x0303_0303;
    let u0 = (p as *const u32).read_unaligned();
    let u1 = (p.add(4) as *const u32).read_unaligned();
    let u2 = (p.add(8) as *const u32).read_unaligned();
    [u0 & M6, (u2 & M4) | (((u0 >> 6) & M2) << 4), u1 & M6, ((u2 >> 4) & M4) | (((u1 >> 6) & M2) << 4)]
}

/// Q4_K (and, with `HIGH`, Q5_K) super-blocks against Q8_K.
#[inline(always)]
unsafe fn k4_n<M: Mac, const N: usize, const HIGH: bool>(
    w: *const u8,
    x: *const u8,
    xs: usize,
    cols: usize,
    out: &mut [f32],
) {
    let (bytes, qs_off) = if HIGH { (176, 48) } else { (144, 16) };
    let m4 = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..cols / 256 {
        let y = w.add(bytes * b);
        let d = f16_at(y);
        let dmin = f16_at(y.add(2));
        let sm = k4_scales(y.add(4));
        let sm = _mm_loadu_si128(sm.as_ptr() as *const __m128i);
        // Each sub-block scale s as the i32 s·0x10001 (two i16 lanes of s), spilled so that the
        // chunk loop broadcasts them with plain loads instead of shuffles.
        let s32 = _mm256_cvtepu8_epi32(sm);
        let mut sc = [0u32; 8];
        _mm256_storeu_si256(sc.as_mut_ptr() as *mut __m256i, _mm256_or_si256(s32, _mm256_slli_epi32(s32, 16)));
        // [m0, m0, m1, m1, ..., m7, m7] as i16, one per bsum.
        let mins = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));
        let mut sumi = [_mm256_setzero_si256(); N];
        for (j, acc) in acc.iter_mut().enumerate() {
            let xb = x.add(j * xs + Q8_K_BYTES * b);
            let xd = (xb as *const f32).read_unaligned();
            let prod = _mm256_madd_epi16(load(xb.add(260)), mins);
            *acc = _mm256_fnmadd_ps(_mm256_set1_ps(xd * dmin), _mm256_cvtepi32_ps(prod), *acc);
        }
        let mut hb = if HIGH { load(y.add(16)) } else { _mm256_setzero_si256() };
        for c in 0..4 {
            let q = load(y.add(qs_off + 32 * c));
            let mut lo = _mm256_and_si256(q, m4);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if HIGH {
                let hl = _mm256_slli_epi16(_mm256_and_si256(hb, one), 4);
                let hh = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), one), 4);
                lo = _mm256_or_si256(lo, hl);
                hi = _mm256_or_si256(hi, hh);
                hb = _mm256_srli_epi16(hb, 2);
            }
            let s = M::scales(_mm256_set1_epi32(sc[2 * c] as i32), _mm256_set1_epi32(sc[2 * c + 1] as i32));
            for (j, sumi) in sumi.iter_mut().enumerate() {
                let xq = x.add(j * xs + Q8_K_BYTES * b + 4 + 64 * c);
                *sumi = M::scaled_pair(*sumi, lo, load(xq), hi, load(xq.add(32)), s);
            }
        }
        for j in 0..N {
            let xd = (x.add(j * xs + Q8_K_BYTES * b) as *const f32).read_unaligned();
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(xd * d), _mm256_cvtepi32_ps(sumi[j]), acc[j]);
        }
    }
    for j in 0..N {
        out[j] = hsum_ps(acc[j]);
    }
}

/// Q4_K weights on the level `M`.
#[inline(always)]
pub(super) unsafe fn q4_k_n<M: Mac, const N: usize>(
    w: *const u8,
    x: *const u8,
    xs: usize,
    cols: usize,
    out: &mut [f32],
) {
    k4_n::<M, N, false>(w, x, xs, cols, out)
}

/// Q5_K weights on the level `M`.
#[inline(always)]
pub(super) unsafe fn q5_k_n<M: Mac, const N: usize>(
    w: *const u8,
    x: *const u8,
    xs: usize,
    cols: usize,
    out: &mut [f32],
) {
    k4_n::<M, N, true>(w, x, xs, cols, out)
}

/// Q6_K super-blocks against Q8_K on the level `M`: unsigned 6-bit quants times q8, minus 32·Σ scale·bsum.
#[inline(always)]
pub(super) unsafe fn q6_k_n<M: Mac, const N: usize>(
    w: *const u8,
    x: *const u8,
    xs: usize,
    cols: usize,
    out: &mut [f32],
) {
    let m4 = _mm256_set1_epi8(0x0F);
    let m3 = _mm256_set1_epi8(0x03);
    let m30 = _mm256_set1_epi8(0x30);
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..cols / 256 {
        let y = w.add(210 * b);
        let d = f16_at(y.add(208));
        let sc8 = _mm_loadu_si128(y.add(192) as *const __m128i);
        let sc16 = _mm256_cvtepi8_epi16(sc8);
        let mut sumi = [_mm256_setzero_si256(); N];
        for (j, sumi) in sumi.iter_mut().enumerate() {
            let bs = load(x.add(j * xs + Q8_K_BYTES * b + 260));
            *sumi = _mm256_sub_epi32(*sumi, _mm256_slli_epi32(_mm256_madd_epi16(sc16, bs), 5));
        }
        for h in 0..2 {
            let ql0 = load(y.add(64 * h));
            let ql1 = load(y.add(64 * h + 32));
            let qh = load(y.add(128 + 32 * h));
            let q = [
                _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4)),
                _mm256_or_si256(
                    _mm256_and_si256(ql1, m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4),
                ),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30)),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                    _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30),
                ),
            ];
            let half = if h == 0 { _mm256_castsi256_si128(sc16) } else { _mm256_extracti128_si256(sc16, 1) };
            let scales = _mm256_broadcastsi128_si256(half);
            for k in [0, 2] {
                let s = M::scales(q6_chunk_scales(scales, k as i16), q6_chunk_scales(scales, k as i16 + 1));
                for (j, sumi) in sumi.iter_mut().enumerate() {
                    let xq = x.add(j * xs + Q8_K_BYTES * b + 4 + 128 * h + 32 * k);
                    *sumi = M::scaled_pair(*sumi, q[k], load(xq), q[k + 1], load(xq.add(32)), s);
                }
            }
        }
        for j in 0..N {
            let xd = (x.add(j * xs + Q8_K_BYTES * b) as *const f32).read_unaligned();
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(xd * d), _mm256_cvtepi32_ps(sumi[j]), acc[j]);
        }
    }
    for j in 0..N {
        out[j] = hsum_ps(acc[j]);
    }
}

/// Q6_K chunk `k` of a half (its 32 values span sub-blocks 2k, low 128 bits, and 2k + 1, high): the two
/// scales as i16 lanes, from the half's eight i16 scales in both 128-bit lanes of `scales`.
#[inline(always)]
unsafe fn q6_chunk_scales(scales: __m256i, k: i16) -> __m256i {
    let mask = _mm256_set_m128i(
        _mm_set1_epi16((4 * k + 2) | ((4 * k + 3) << 8)),
        _mm_set1_epi16((4 * k) | ((4 * k + 1) << 8)),
    );
    _mm256_shuffle_epi8(scales, mask)
}

/// Float weights (8 per step, widened by `load8`; `scalar` for the tail) against f32 activations.
#[inline]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn float_n<const N: usize>(
    w: *const u8,
    x: *const u8,
    xs: usize,
    cols: usize,
    out: &mut [f32],
    wsize: usize,
    load8: impl Fn(*const u8) -> __m256,
    scalar: impl Fn(*const u8) -> f32,
) {
    let mut acc0 = [_mm256_setzero_ps(); N];
    let mut acc1 = [_mm256_setzero_ps(); N];
    let mut c = 0;
    while c + 16 <= cols {
        let w0 = load8(w.add(wsize * c));
        let w1 = load8(w.add(wsize * (c + 8)));
        for j in 0..N {
            let xp = x.add(j * xs + 4 * c) as *const f32;
            acc0[j] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xp), acc0[j]);
            acc1[j] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xp.add(8)), acc1[j]);
        }
        c += 16;
    }
    if c + 8 <= cols {
        let w0 = load8(w.add(wsize * c));
        for (j, acc) in acc0.iter_mut().enumerate() {
            let xp = x.add(j * xs + 4 * c) as *const f32;
            *acc = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xp), *acc);
        }
        c += 8;
    }
    for j in 0..N {
        let mut s = hsum_ps(_mm256_add_ps(acc0[j], acc1[j]));
        for t in c..cols {
            s += scalar(w.add(wsize * t)) * (x.add(j * xs + 4 * t) as *const f32).read_unaligned();
        }
        out[j] = s;
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f32_n<const N: usize>(w: *const u8, x: *const u8, xs: usize, cols: usize, out: &mut [f32]) {
    float_n::<N>(
        w,
        x,
        xs,
        cols,
        out,
        4,
        |p| unsafe { _mm256_loadu_ps(p as *const f32) },
        |p| unsafe { (p as *const f32).read_unaligned() },
    )
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_n<const N: usize>(w: *const u8, x: *const u8, xs: usize, cols: usize, out: &mut [f32]) {
    float_n::<N>(
        w,
        x,
        xs,
        cols,
        out,
        2,
        |p| unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) },
        |p| unsafe { f16_at(p) },
    )
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bf16_n<const N: usize>(w: *const u8, x: *const u8, xs: usize, cols: usize, out: &mut [f32]) {
    float_n::<N>(
        w,
        x,
        xs,
        cols,
        out,
        2,
        |p| unsafe {
            let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i));
            _mm256_castsi256_ps(_mm256_slli_epi32(h, 16))
        },
        |p| unsafe { f32::from_bits(((p as *const u16).read_unaligned() as u32) << 16) },
    )
}
