//! The grouped attention loops of [`RowOps`](super::simd::RowOps) in 512-bit registers, for the query heads that
//! share one KV head: each key or value vector loaded once serves up to four heads. Scores come from 4×4 tiles of
//! (query, key) dot products reduced four at a time; weighted sums keep 32 columns of four heads' outputs in
//! registers over all the rows. Head widths that are not a multiple of 16 take masked loads.

use std::arch::x86_64::*;

/// The mask of the first `n` (at most 16) lanes.
#[inline(always)]
fn lanes(n: usize) -> __mmask16 {
    if n >= 16 {
        !0
    } else {
        (1u16 << n) - 1
    }
}

/// The lane sums of four vectors, in order.
#[inline(always)]
unsafe fn hsum4(a: [__m512; 4]) -> __m128 {
    let half = |v: __m512| {
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
        _mm256_add_ps(_mm512_castps512_ps256(v), hi)
    };
    let s = _mm256_hadd_ps(_mm256_hadd_ps(half(a[0]), half(a[1])), _mm256_hadd_ps(half(a[2]), half(a[3])));
    _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s))
}

/// `out[i * stride + k] = qs[i] · keys[k]` for the `M` queries at `q` and the `K` (4 or 1) keys at `k`, rows of
/// `hd` values; each score's arithmetic is the same whatever the tile.
#[inline(always)]
unsafe fn dot_tile<const M: usize, const K: usize>(
    q: *const f32,
    k: *const f32,
    hd: usize,
    out: *mut f32,
    stride: usize,
) {
    let mut acc = [[_mm512_setzero_ps(); K]; M];
    for c in (0..hd).step_by(16) {
        let m = lanes(hd - c);
        let kv: [__m512; K] = std::array::from_fn(|t| _mm512_maskz_loadu_ps(m, k.add(t * hd + c)));
        for (i, acc) in acc.iter_mut().enumerate() {
            let qv = _mm512_maskz_loadu_ps(m, q.add(i * hd + c));
            for (acc, &kv) in acc.iter_mut().zip(&kv) {
                *acc = _mm512_fmadd_ps(qv, kv, *acc);
            }
        }
    }
    for (i, acc) in acc.iter().enumerate() {
        if K == 4 {
            _mm_storeu_ps(out.add(i * stride), hsum4([acc[0], acc[1], acc[2], acc[3]]));
        } else {
            // The same sums in the same order as a key of a full tile: a query's scores do not depend on where
            // the runs of cached rows split its keys.
            let z = _mm512_setzero_ps();
            *out.add(i * stride) = _mm_cvtss_f32(hsum4([acc[0], z, z, z]));
        }
    }
}

/// The queries at `q` (`M` of them) against all `n` keys: four at a time, then one by one.
#[inline(always)]
unsafe fn dot_rows<const M: usize>(q: *const f32, keys: &[f32], hd: usize, n: usize, out: *mut f32, stride: usize) {
    let k = keys.as_ptr();
    let mut j = 0;
    while j + 4 <= n {
        dot_tile::<M, 4>(q, k.add(j * hd), hd, out.add(j), stride);
        j += 4;
    }
    for j in j..n {
        dot_tile::<M, 1>(q, k.add(j * hd), hd, out.add(j), stride);
    }
}

/// [`RowOps::dots`](super::simd::RowOps::dots) in 512-bit registers.
///
/// Safety: the CPU has AVX-512 F; `qs` holds whole rows of `hd`, `keys` `n` such rows, and `out` at least
/// `(qs.len() / hd - 1) · stride + n` values.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn dots(qs: &[f32], hd: usize, keys: &[f32], out: &mut [f32], stride: usize) {
    let (m, n) = (qs.len() / hd, keys.len() / hd);
    let (q, o) = (qs.as_ptr(), out.as_mut_ptr());
    for i in (0..m).step_by(4) {
        let (q, o) = (q.add(i * hd), o.add(i * stride));
        match m - i {
            1 => dot_rows::<1>(q, keys, hd, n, o, stride),
            2 => dot_rows::<2>(q, keys, hd, n, o, stride),
            3 => dot_rows::<3>(q, keys, hd, n, o, stride),
            _ => dot_rows::<4>(q, keys, hd, n, o, stride),
        }
    }
}

/// `o[i] += Σ_k w[i · n + k] · vals[k]` over 32 columns from `c` for the `M` heads at `o`.
#[inline(always)]
unsafe fn accumulate_tile<const M: usize>(o: *mut f32, hd: usize, c: usize, w: *const f32, n: usize, vals: *const f32) {
    let m = [lanes(hd - c), lanes(hd.saturating_sub(c + 16))];
    let mut acc: [[__m512; 2]; M] =
        std::array::from_fn(|i| std::array::from_fn(|h| _mm512_maskz_loadu_ps(m[h], o.add(i * hd + c + 16 * h))));
    for k in 0..n {
        let v: [__m512; 2] = std::array::from_fn(|h| _mm512_maskz_loadu_ps(m[h], vals.add(k * hd + c + 16 * h)));
        for (i, acc) in acc.iter_mut().enumerate() {
            let wv = _mm512_set1_ps(*w.add(i * n + k));
            acc[0] = _mm512_fmadd_ps(wv, v[0], acc[0]);
            acc[1] = _mm512_fmadd_ps(wv, v[1], acc[1]);
        }
    }
    for (i, acc) in acc.iter().enumerate() {
        for h in 0..2 {
            _mm512_mask_storeu_ps(o.add(i * hd + c + 16 * h), m[h], acc[h]);
        }
    }
}

/// [`RowOps::accumulate`](super::simd::RowOps::accumulate) in 512-bit registers.
///
/// Safety: the CPU has AVX-512 F; `o` holds whole rows of `hd`, `w` `o.len() / hd` rows of `vals.len() / hd`.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn accumulate(o: &mut [f32], hd: usize, w: &[f32], vals: &[f32]) {
    let (m, n) = (o.len() / hd, vals.len() / hd);
    for i in (0..m).step_by(4) {
        let (o, w) = (o.as_mut_ptr().add(i * hd), w.as_ptr().add(i * n));
        for c in (0..hd).step_by(32) {
            match m - i {
                1 => accumulate_tile::<1>(o, hd, c, w, n, vals.as_ptr()),
                2 => accumulate_tile::<2>(o, hd, c, w, n, vals.as_ptr()),
                3 => accumulate_tile::<3>(o, hd, c, w, n, vals.as_ptr()),
                _ => accumulate_tile::<4>(o, hd, c, w, n, vals.as_ptr()),
            }
        }
    }
}
