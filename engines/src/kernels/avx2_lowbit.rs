//! AVX2 + FMA + F16C dot products for the legacy types with an offset or a fifth bit (Q4_1, Q5_0,
//! Q5_1) and the low-bit k-quants (Q2_K, Q3_K), with [`avx2`](super::avx2)'s interface: one weight
//! row against 1..=4 activation rows, each weight block unpacked once per group.
//!
//! Integer sums per (sub-)block are exact, as in ggml's AVX2 `ggml_vec_dot_*`; only the order of the
//! f32 accumulation of the scaled block sums differs from the scalar path.

use std::arch::x86_64::*;

use super::act::{Q8_1_BYTES, Q8_K_BYTES};
use super::avx2::{dispatch, f16_at, hsum_ps, legacy_n, load, nibbles32, Avx2, LegacyBlock, Mac};

dispatch!(
    "avx2,fma,f16c",;
    /// Q4_1 weights · Q8_1 activations.
    q4_1 => q4_1_n
);
dispatch!(
    "avx2,fma,f16c", Avx2;
    /// Q5_0 weights · Q8_0 activations.
    q5_0 => q5_0_n
);
dispatch!(
    "avx2,fma,f16c",;
    /// Q5_1 weights · Q8_1 activations.
    q5_1 => q5_1_n
);
dispatch!(
    "avx2,fma,f16c",;
    /// Q2_K weights · Q8_K activations.
    q2_k => q2_k_n
);
dispatch!(
    "avx2,fma,f16c",;
    /// Q3_K weights · Q8_K activations.
    q3_k => q3_k_n
);

/// The 32 bits of the little-endian u32 at `p` as 32 bytes: 0xFF where bit `i` is set, else 0.
#[inline(always)]
unsafe fn bits32(p: *const u8) -> __m256i {
    let v = _mm256_set1_epi32((p as *const u32).read_unaligned() as i32);
    // Byte i of the result takes source byte i / 8 ...
    let spread = _mm256_shuffle_epi8(
        v,
        _mm256_set_epi64x(0x0303_0303_0303_0303, 0x0202_0202_0202_0202, 0x0101_0101_0101_0101, 0),
    );
    // ... and keeps bit i % 8: all ones after setting every other bit.
    let others = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
    _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi64x(-1))
}

/// Blocks of 32 unsigned values with a scale `d` and an offset `m` (f16 at bytes 0 and 2) against Q8_1:
/// `d·dx·Σ q·qx + m·sx` per block (`unpack` turns the block at `wb` into the 32 values).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn offset_n<const N: usize>(
    w: *const u8,
    x: *const u8,
    xs: usize,
    cols: usize,
    out: &mut [f32],
    wbytes: usize,
    unpack: impl Fn(*const u8) -> __m256i,
) {
    let ones = _mm256_set1_epi16(1);
    // Two accumulators per activation row (even and odd blocks) to hide the FMA and add latencies.
    let mut acc = [[_mm256_setzero_ps(); N]; 2];
    let mut offsets = [[0.0f32; N]; 2];
    for b in 0..cols / 32 {
        let (acc, offsets) = (&mut acc[b % 2], &mut offsets[b % 2]);
        let wb = w.add(wbytes * b);
        let wq = unpack(wb);
        let (dw, mw) = (f16_at(wb), f16_at(wb.add(2)));
        for j in 0..N {
            let xb = x.add(j * xs + Q8_1_BYTES * b);
            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(wq, load(xb.add(4))), ones);
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * f16_at(xb)), _mm256_cvtepi32_ps(p), acc[j]);
            offsets[j] += mw * f16_at(xb.add(2));
        }
    }
    for j in 0..N {
        out[j] = hsum_ps(_mm256_add_ps(acc[0][j], acc[1][j])) + (offsets[0][j] + offsets[1][j]);
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_1_n<const N: usize>(w: *const u8, x: *const u8, xs: usize, cols: usize, out: &mut [f32]) {
    offset_n::<N>(w, x, xs, cols, out, 20, |p| unsafe { nibbles32(p.add(4)) })
}

/// Q5_0's 22-byte blocks as signed bytes.
struct Q5_0Block;

impl LegacyBlock for Q5_0Block {
    const BYTES: usize = 22;
    #[inline(always)]
    unsafe fn unpack(p: *const u8) -> __m256i {
        // nibble | bit << 4, minus 16: the nibble with 0xF0 or'ed in where the fifth bit is clear.
        _mm256_or_si256(nibbles32(p.add(6)), _mm256_andnot_si256(bits32(p.add(2)), _mm256_set1_epi8(0xF0u8 as i8)))
    }
}

/// Q5_0 weights on the level `M`.
#[inline(always)]
pub(super) unsafe fn q5_0_n<M: Mac, const N: usize>(
    w: *const u8,
    x: *const u8,
    xs: usize,
    cols: usize,
    out: &mut [f32],
) {
    legacy_n::<M, Q5_0Block, N>(w, x, xs, cols, out)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_1_n<const N: usize>(w: *const u8, x: *const u8, xs: usize, cols: usize, out: &mut [f32]) {
    offset_n::<N>(w, x, xs, cols, out, 24, |p| unsafe {
        _mm256_or_si256(nibbles32(p.add(8)), _mm256_and_si256(bits32(p.add(4)), _mm256_set1_epi8(0x10)))
    })
}

/// The i16 sub-block scales of one 128-value half (8 scales, the same in both 128-bit lanes) spread for
/// its 32-value chunk `k`: scale `2k` in the low lane's 8 i16, scale `2k + 1` in the high lane's.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn chunk_scales(scales: __m256i, k: usize) -> __m256i {
    let k = k as i16;
    let mask = _mm256_set_m128i(
        _mm_set1_epi16((4 * k + 2) | ((4 * k + 3) << 8)),
        _mm_set1_epi16((4 * k) | ((4 * k + 1) << 8)),
    );
    _mm256_shuffle_epi8(scales, mask)
}

/// The 16 i8 scales at `s` as i16, split into the two halves of 8 (each in both 128-bit lanes).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn half_scales(s: __m128i) -> [__m256i; 2] {
    let s16 = _mm256_cvtepi8_epi16(s);
    let (lo, hi) = (_mm256_castsi256_si128(s16), _mm256_extracti128_si256(s16, 1));
    [_mm256_set_m128i(lo, lo), _mm256_set_m128i(hi, hi)]
}

/// The Q8_K activation block `b` of row `j`.
#[inline(always)]
unsafe fn q8k_block(x: *const u8, xs: usize, j: usize, b: usize) -> *const u8 {
    x.add(j * xs + Q8_K_BYTES * b)
}

/// Q2_K super-blocks against Q8_K: 2-bit quants times a 4-bit scale per 16 values, minus
/// `dmin·Σ min·bsum` with a 4-bit min per 16 values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2_k_n<const N: usize>(w: *const u8, x: *const u8, xs: usize, cols: usize, out: &mut [f32]) {
    let m3 = _mm256_set1_epi8(3);
    let m4 = _mm_set1_epi8(0x0F);
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..cols / 256 {
        let y = w.add(84 * b);
        let (d, dmin) = (f16_at(y.add(80)), f16_at(y.add(82)));
        let sm = _mm_loadu_si128(y as *const __m128i);
        let scales = half_scales(_mm_and_si128(sm, m4));
        let mins = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), m4));
        let mut sumi = [_mm256_setzero_si256(); N];
        for (j, acc) in acc.iter_mut().enumerate() {
            let xb = q8k_block(x, xs, j, b);
            let prod = _mm256_madd_epi16(mins, load(xb.add(260)));
            let xd = (xb as *const f32).read_unaligned();
            *acc = _mm256_fnmadd_ps(_mm256_set1_ps(xd * dmin), _mm256_cvtepi32_ps(prod), *acc);
        }
        for (h, &scales) in scales.iter().enumerate() {
            let bits = load(y.add(16 + 32 * h));
            for k in 0..4 {
                let q = _mm256_and_si256(srl16(bits, 2 * k as i32), m3);
                let s = chunk_scales(scales, k);
                for (j, sumi) in sumi.iter_mut().enumerate() {
                    let xq = q8k_block(x, xs, j, b).add(4 + 128 * h + 32 * k);
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, load(xq)), s);
                    *sumi = _mm256_add_epi32(*sumi, p);
                }
            }
        }
        for j in 0..N {
            let xd = (q8k_block(x, xs, j, b) as *const f32).read_unaligned();
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(xd * d), _mm256_cvtepi32_ps(sumi[j]), acc[j]);
        }
    }
    for j in 0..N {
        out[j] = hsum_ps(acc[j]);
    }
}

/// Every 16-bit lane of `v` shifted right by `count` bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn srl16(v: __m256i, count: i32) -> __m256i {
    _mm256_srl_epi16(v, _mm_cvtsi32_si128(count))
}

/// The 16 six-bit Q3_K scales packed in the 12 bytes at `p`, each minus 32, as i8.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q3_k_scales(p: *const u8) -> __m128i {
    const M4: u32 = 0x0f0f_0f0f;
    const M2: u32 = 0x0303_0303;
    let a0 = (p as *const u32).read_unaligned();
    let a1 = (p.add(4) as *const u32).read_unaligned();
    let a2 = (p.add(8) as *const u32).read_unaligned();
    let s = _mm_set_epi32(
        (((a1 >> 4) & M4) | (((a2 >> 6) & M2) << 4)) as i32,
        (((a0 >> 4) & M4) | (((a2 >> 4) & M2) << 4)) as i32,
        ((a1 & M4) | (((a2 >> 2) & M2) << 4)) as i32,
        ((a0 & M4) | ((a2 & M2) << 4)) as i32,
    );
    _mm_sub_epi8(s, _mm_set1_epi8(32))
}

/// Q3_K super-blocks against Q8_K: 2 low bits minus 4 where the high-mask bit is clear, times a
/// signed 6-bit scale per 16 values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q3_k_n<const N: usize>(w: *const u8, x: *const u8, xs: usize, cols: usize, out: &mut [f32]) {
    let m3 = _mm256_set1_epi8(3);
    let four = _mm256_set1_epi8(4);
    let zero = _mm256_setzero_si256();
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..cols / 256 {
        let y = w.add(110 * b);
        let d = f16_at(y.add(108));
        let scales = half_scales(q3_k_scales(y.add(96)));
        let hmask = load(y);
        let mut sumi = [_mm256_setzero_si256(); N];
        for (h, &scales) in scales.iter().enumerate() {
            let bits = load(y.add(32 + 32 * h));
            for k in 0..4 {
                let low = _mm256_and_si256(srl16(bits, 2 * k as i32), m3);
                let hbit = _mm256_and_si256(hmask, _mm256_set1_epi8((1u8 << (4 * h + k)) as i8));
                let q = _mm256_sub_epi8(low, _mm256_and_si256(_mm256_cmpeq_epi8(hbit, zero), four));
                // Signed quants (-4..=3) times signed activations: |q| · (qx with q's sign).
                let aq = _mm256_sign_epi8(q, q);
                let s = chunk_scales(scales, k);
                for (j, sumi) in sumi.iter_mut().enumerate() {
                    let xq = load(q8k_block(x, xs, j, b).add(4 + 128 * h + 32 * k));
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(xq, q)), s);
                    *sumi = _mm256_add_epi32(*sumi, p);
                }
            }
        }
        for j in 0..N {
            let xd = (q8k_block(x, xs, j, b) as *const f32).read_unaligned();
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(xd * d), _mm256_cvtepi32_ps(sumi[j]), acc[j]);
        }
    }
    for j in 0..N {
        out[j] = hsum_ps(acc[j]);
    }
}
