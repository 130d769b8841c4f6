//! AVX2 row kernel for AWQ weights: 32 packed bytes become two blocks of 32 unsigned codes (a mask and a
//! shift), multiplied with up to 4 activation rows by `maddubs`; a group's 16-bit pair sums are added up in
//! 16 bits (at most 8 blocks, `8 · 2 · 15 · 127` < 2¹⁵) before widening, and each group ends in one scaled
//! f32 accumulation; scales and the zero-point term are handled 8 groups at a time (see the parent module).

use std::arch::x86_64::*;

use super::{row_bytes, AwqMatrix, BLOCK, LANES};
use crate::kernels::avx2::hsum_ps;

/// Row `r` of `m` against `nx` (1..=4) activation rows of `xs` bytes at `x`, results into `out[..nx]`.
///
/// Safety: the CPU has AVX2, FMA and F16C; `r < m.rows`; `x` holds `nx` quantized rows `xs` bytes apart.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn row_dot(m: &AwqMatrix, r: usize, x: &[u8], xs: usize, nx: usize, out: &mut [f32; 4]) {
    match nx {
        1 => row_n::<1>(m, r, x.as_ptr(), xs, out),
        2 => row_n::<2>(m, r, x.as_ptr(), xs, out),
        3 => row_n::<3>(m, r, x.as_ptr(), xs, out),
        _ => row_n::<4>(m, r, x.as_ptr(), xs, out),
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row_n<const N: usize>(m: &AwqMatrix, r: usize, x: *const u8, xs: usize, out: &mut [f32; 4]) {
    let (groups, pg) = (m.groups(), m.padded_groups());
    let bpg = m.group / BLOCK;
    let w = m.packed.as_ptr().add(r * row_bytes(m.cols));
    let scales = m.scales.as_ptr().add(r * pg) as *const __m128i;
    let zeros = m.zeros.as_ptr().add(r * pg);
    let ones = _mm256_set1_epi16(1);
    let m4 = _mm256_set1_epi8(0x0F);
    let mut acc = [_mm256_setzero_ps(); N];
    let mut corr = [_mm256_setzero_ps(); N];
    // Per activation row: d (pg f32), e (pg f32), then the int8 values.
    let xd = |j: usize| x.add(j * xs) as *const f32;
    let xq = |j: usize, b: usize| x.add(j * xs + 8 * pg + BLOCK * b) as *const __m256i;
    let mut sd = [[0f32; LANES]; N];
    let paired = m.group.is_multiple_of(2 * BLOCK);
    for g in 0..groups {
        let lane = g % LANES;
        if lane == 0 {
            // Scales and zeros of the next 8 groups: s·d for the dot products, Σ (s·z)·e for the zero points.
            let s = _mm256_cvtph_ps(_mm_loadu_si128(scales.add(g / LANES)));
            let z = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(zeros.add(g) as *const __m128i)));
            let sz = _mm256_mul_ps(s, z);
            for j in 0..N {
                let d = _mm256_loadu_ps(xd(j).add(g));
                _mm256_storeu_ps(sd[j].as_mut_ptr(), _mm256_mul_ps(s, d));
                corr[j] = _mm256_fmadd_ps(sz, _mm256_loadu_ps(xd(j).add(pg + g)), corr[j]);
            }
        }
        let mut dot = [_mm256_setzero_si256(); N];
        let mut sum16 = [_mm256_setzero_si256(); N];
        let (mut b, end) = (g * bpg, (g + 1) * bpg);
        if paired {
            // Groups of whole pairs (64, 128, ...): a straight loop, widened every 4 pairs.
            let mut in16 = 0;
            while b < end {
                if in16 == 4 {
                    for j in 0..N {
                        dot[j] = _mm256_add_epi32(dot[j], _mm256_madd_epi16(sum16[j], ones));
                        sum16[j] = _mm256_setzero_si256();
                    }
                    in16 = 0;
                }
                let c = _mm256_loadu_si256(w.add(16 * b) as *const __m256i);
                let (lo, hi) = (_mm256_and_si256(c, m4), _mm256_and_si256(_mm256_srli_epi16(c, 4), m4));
                for (j, s) in sum16.iter_mut().enumerate() {
                    let p = _mm256_add_epi16(
                        _mm256_maddubs_epi16(lo, _mm256_loadu_si256(xq(j, b))),
                        _mm256_maddubs_epi16(hi, _mm256_loadu_si256(xq(j, b + 1))),
                    );
                    *s = _mm256_add_epi16(*s, p);
                }
                b += 2;
                in16 += 1;
            }
        } else {
            // Input block b = 2c + h of the row is nibble half h of the 32 bytes at 32c.
            let mut in16 = 0;
            while b < end {
                if in16 >= 7 {
                    for j in 0..N {
                        dot[j] = _mm256_add_epi32(dot[j], _mm256_madd_epi16(sum16[j], ones));
                        sum16[j] = _mm256_setzero_si256();
                    }
                    in16 = 0;
                }
                let c = _mm256_loadu_si256(w.add(16 * (b & !1)) as *const __m256i);
                if b % 2 == 0 && b + 1 < end {
                    let (lo, hi) = (_mm256_and_si256(c, m4), _mm256_and_si256(_mm256_srli_epi16(c, 4), m4));
                    for (j, s) in sum16.iter_mut().enumerate() {
                        let p = _mm256_add_epi16(
                            _mm256_maddubs_epi16(lo, _mm256_loadu_si256(xq(j, b))),
                            _mm256_maddubs_epi16(hi, _mm256_loadu_si256(xq(j, b + 1))),
                        );
                        *s = _mm256_add_epi16(*s, p);
                    }
                    b += 2;
                    in16 += 2;
                } else {
                    let q = if b % 2 == 0 { c } else { _mm256_srli_epi16(c, 4) };
                    let q = _mm256_and_si256(q, m4);
                    for (j, s) in sum16.iter_mut().enumerate() {
                        *s = _mm256_add_epi16(*s, _mm256_maddubs_epi16(q, _mm256_loadu_si256(xq(j, b))));
                    }
                    b += 1;
                    in16 += 1;
                }
            }
        }
        for j in 0..N {
            let t = _mm256_add_epi32(dot[j], _mm256_madd_epi16(sum16[j], ones));
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(sd[j][lane]), _mm256_cvtepi32_ps(t), acc[j]);
        }
    }
    for j in 0..N {
        out[j] = hsum_ps(_mm256_sub_ps(acc[j], corr[j]));
    }
}
