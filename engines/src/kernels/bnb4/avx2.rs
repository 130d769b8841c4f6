//! AVX2 row kernel for 4-bit bitsandbytes weights: 16 packed bytes become 32 int8 codes through one
//! `pshufb` table lookup, then `maddubs` dot products with up to 4 activation rows (see the parent module).

use std::arch::x86_64::*;

use super::{Bnb4View, GROUP, XG_BYTES};
use crate::kernels::avx2::{hsum_ps, nibbles32};

/// Row `r` of `w` against `nx` (1..=4) activation rows of `xs` bytes at `x`, results into `out[..nx]`.
///
/// Safety: the CPU has AVX2 and FMA; `r < w.rows`; `x` holds `nx` quantized rows `xs` bytes apart.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn row_dot(w: &Bnb4View<'_>, r: usize, x: &[u8], xs: usize, nx: usize, out: &mut [f32; 4]) {
    match nx {
        1 => row_n::<1>(w, r, x.as_ptr(), xs, out),
        2 => row_n::<2>(w, r, x.as_ptr(), xs, out),
        3 => row_n::<3>(w, r, x.as_ptr(), xs, out),
        _ => row_n::<4>(w, r, x.as_ptr(), xs, out),
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row_n<const N: usize>(w: &Bnb4View<'_>, r: usize, x: *const u8, xs: usize, out: &mut [f32; 4]) {
    let first = r * w.cols;
    let packed = w.packed.as_ptr().add(first / 2);
    let lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(w.code_i8.as_ptr() as *const __m128i));
    let ones = _mm256_set1_epi16(1);
    // Two accumulators per activation row (even and odd groups) to hide the FMA latency.
    let mut acc0 = [_mm256_setzero_ps(); N];
    let mut acc1 = [_mm256_setzero_ps(); N];
    let group = |g: usize, acc: &mut [__m256; N]| unsafe {
        // Low nibbles (odd elements) in the low half, high nibbles (even elements) in the high half.
        let wq = _mm256_shuffle_epi8(lut, nibbles32(packed.add(g * GROUP / 2)));
        let aw = _mm256_sign_epi8(wq, wq);
        let a = w.absmax_at(first + g * GROUP);
        for (j, acc) in acc.iter_mut().enumerate() {
            let xg = x.add(j * xs + g * XG_BYTES);
            let xq = _mm256_loadu_si256(xg.add(4) as *const __m256i);
            let p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xq, wq));
            let p = _mm256_madd_epi16(p, ones);
            let d = _mm256_set1_ps(a * (xg as *const f32).read_unaligned());
            *acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), *acc);
        }
    };
    let ng = w.cols / GROUP;
    let mut g = 0;
    while g + 2 <= ng {
        group(g, &mut acc0);
        group(g + 1, &mut acc1);
        g += 2;
    }
    if g < ng {
        group(g, &mut acc0);
    }
    for j in 0..N {
        out[j] = hsum_ps(_mm256_add_ps(acc0[j], acc1[j])) * w.code_scale;
    }
}
