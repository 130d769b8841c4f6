//! The two inner loops of host attention, over f32 rows of the query heads that share one KV head: the queries
//! against a tile of keys, and weighted sums of a tile of values. 512-bit loops where the CPU has AVX-512
//! ([`simd_avx512`](super::simd_avx512): each key or value loaded once for up to four heads), AVX2 + FMA where it
//! has those (a head at a time), portable code otherwise; chosen once.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// The implementation the loops run: AVX2 + FMA when `avx2` is set, 512-bit when `avx512` is set too, which only
/// [`RowOps::detect`] does, on a CPU that has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RowOps {
    avx2: bool,
    avx512: bool,
}

impl RowOps {
    /// The fastest implementation this CPU supports.
    pub(super) fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
            RowOps { avx2, avx512: avx2 && is_x86_feature_detected!("avx512f") }
        }
        #[cfg(not(target_arch = "x86_64"))]
        RowOps { avx2: false, avx512: false }
    }

    /// The portable implementation (the reference in tests).
    #[cfg(test)]
    pub(super) fn scalar() -> Self {
        RowOps { avx2: false, avx512: false }
    }

    /// The AVX2 + FMA implementation where the CPU has it (tested beside the 512-bit one).
    #[cfg(test)]
    pub(super) fn avx2_only() -> Self {
        RowOps { avx512: false, ..RowOps::detect() }
    }

    /// Whether the AVX2 + FMA loops run.
    pub(super) fn avx2(self) -> bool {
        self.avx2
    }

    /// `out[i · stride + k] = qs[i] · keys[k]` for the `qs.len() / hd` queries and `keys.len() / hd` keys, rows
    /// of `hd` values.
    pub(super) fn dots(self, qs: &[f32], hd: usize, keys: &[f32], out: &mut [f32], stride: usize) {
        let (m, n) = (qs.len() / hd, keys.len() / hd);
        assert!(qs.len() == m * hd && keys.len() == n * hd, "whole rows of {hd}");
        assert!(m == 0 || out.len() >= (m - 1) * stride + n, "out must hold {m} rows of {n} at a stride of {stride}");
        #[cfg(target_arch = "x86_64")]
        if self.avx512 {
            // SAFETY: `avx512` is only set by `detect`, on a CPU with AVX-512 F; the shapes are checked above.
            return unsafe { super::simd_avx512::dots(qs, hd, keys, out, stride) };
        }
        for (i, q) in qs.chunks_exact(hd).enumerate() {
            let out = &mut out[i * stride..i * stride + n];
            #[cfg(target_arch = "x86_64")]
            if self.avx2 {
                // SAFETY: `avx2` is only set by `detect`, so the CPU has AVX2 and FMA; `keys` holds `n` rows.
                unsafe { dots_avx2(q, keys, out) };
                continue;
            }
            for (o, k) in out.iter_mut().zip(keys.chunks_exact(hd)) {
                *o = dot(q, k);
            }
        }
    }

    /// `o[i] += Σ_k w[i · n + k] · vals[k]` for the `o.len() / hd` heads' rows of `hd` values in `o` and the
    /// `n = vals.len() / hd` value rows, each element summed over the rows in order.
    pub(super) fn accumulate(self, o: &mut [f32], hd: usize, w: &[f32], vals: &[f32]) {
        let (m, n) = (o.len() / hd, vals.len() / hd);
        assert!(o.len() == m * hd && vals.len() == n * hd && w.len() == m * n, "whole rows of {hd}, {m} x {n} weights");
        #[cfg(target_arch = "x86_64")]
        if self.avx512 {
            // SAFETY: as in `dots`.
            return unsafe { super::simd_avx512::accumulate(o, hd, w, vals) };
        }
        for (o, w) in o.chunks_exact_mut(hd).zip(w.chunks_exact(n.max(1))) {
            #[cfg(target_arch = "x86_64")]
            if self.avx2 {
                // SAFETY: as in `dots`.
                unsafe { accumulate_avx2(o, w, vals) };
                continue;
            }
            for (&w, v) in w.iter().zip(vals.chunks_exact(hd)) {
                for (o, &x) in o.iter_mut().zip(v) {
                    *o += w * x;
                }
            }
        }
    }
}

/// f32 dot product in eight lanes (vectorizes without fast-math).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, ar) = a.as_chunks::<8>();
    let (bc, br) = b.as_chunks::<8>();
    for (x, y) in ac.iter().zip(bc) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let tail: f32 = ar.iter().zip(br).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// The lane sums of four vectors, in order.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
fn hsum4(a: [__m256; 4]) -> __m128 {
    let s = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1))
}

/// [`RowOps::dots`] with AVX2 + FMA: four keys at a time against each 8-value piece of the query.
///
/// Safety: the CPU has AVX2 and FMA; `keys` holds `out.len()` rows of `q.len()` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dots_avx2(q: &[f32], keys: &[f32], out: &mut [f32]) {
    let hd = q.len();
    let body = hd / 8 * 8;
    let (qp, kp) = (q.as_ptr(), keys.as_ptr());
    let tail = |k: usize| -> f32 { (body..hd).map(|c| q[c] * keys[k * hd + c]).sum() };
    let mut k = 0;
    while k + 4 <= out.len() {
        let mut acc = [_mm256_setzero_ps(); 4];
        for c in (0..body).step_by(8) {
            let qv = _mm256_loadu_ps(qp.add(c));
            for (t, acc) in acc.iter_mut().enumerate() {
                *acc = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp.add((k + t) * hd + c)), *acc);
            }
        }
        let mut s = [0f32; 4];
        _mm_storeu_ps(s.as_mut_ptr(), hsum4(acc));
        for (t, s) in s.iter().enumerate() {
            out[k + t] = s + tail(k + t);
        }
        k += 4;
    }
    for (k, o) in out.iter_mut().enumerate().skip(k) {
        let mut acc = _mm256_setzero_ps();
        for c in (0..body).step_by(8) {
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(c)), _mm256_loadu_ps(kp.add(k * hd + c)), acc);
        }
        let z = _mm256_setzero_ps();
        *o = _mm_cvtss_f32(hsum4([acc, z, z, z])) + tail(k);
    }
}

/// [`RowOps::accumulate`] with AVX2 + FMA: 32 (then 8) elements of `o` held in registers over all the rows.
///
/// Safety: the CPU has AVX2 and FMA; `vals` holds `w.len()` rows of `o.len()` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn accumulate_avx2(o: &mut [f32], w: &[f32], vals: &[f32]) {
    let hd = o.len();
    let (op, vp) = (o.as_mut_ptr(), vals.as_ptr());
    let mut c = 0;
    while c + 32 <= hd {
        let mut acc: [__m256; 4] = std::array::from_fn(|t| _mm256_loadu_ps(op.add(c + 8 * t)));
        for (k, &w) in w.iter().enumerate() {
            let wv = _mm256_set1_ps(w);
            for (t, acc) in acc.iter_mut().enumerate() {
                *acc = _mm256_fmadd_ps(wv, _mm256_loadu_ps(vp.add(k * hd + c + 8 * t)), *acc);
            }
        }
        for (t, acc) in acc.iter().enumerate() {
            _mm256_storeu_ps(op.add(c + 8 * t), *acc);
        }
        c += 32;
    }
    while c + 8 <= hd {
        let mut acc = _mm256_loadu_ps(op.add(c));
        for (k, &w) in w.iter().enumerate() {
            acc = _mm256_fmadd_ps(_mm256_set1_ps(w), _mm256_loadu_ps(vp.add(k * hd + c)), acc);
        }
        _mm256_storeu_ps(op.add(c), acc);
        c += 8;
    }
    for (k, &w) in w.iter().enumerate() {
        for (o, &x) in o[c..].iter_mut().zip(&vals[k * hd + c..(k + 1) * hd]) {
            *o += w * x;
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Deterministic values in [-1, 1), a different sequence per seed.
    pub(crate) fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0).collect()
    }

    /// Every width (whole 32s and 16s, whole 8s, a tail), every tile length and 1..=5 heads, on every
    /// implementation this CPU has, against the portable loops and f64.
    #[test]
    fn simd_row_ops_match_the_portable_ones() {
        let portable = RowOps::scalar();
        for fast in [RowOps::detect(), RowOps::avx2_only()] {
            for hd in [1, 5, 8, 13, 16, 32, 40, 64, 72, 128, 256] {
                for n in 0..=17 {
                    for m in 1..=5 {
                        check(fast, portable, hd, n, m);
                    }
                }
            }
        }
    }

    /// One shape of [`simd_row_ops_match_the_portable_ones`]: `m` heads of `hd` against `n` rows.
    fn check(fast: RowOps, portable: RowOps, hd: usize, n: usize, m: usize) {
        let (qs, keys) = (values(m * hd, 1), values(n * hd, 2 + n as u32));
        let stride = n + 3;
        let (mut a, mut b) = (vec![f32::NAN; m * stride], vec![f32::NAN; m * stride]);
        fast.dots(&qs, hd, &keys, &mut a, stride);
        portable.dots(&qs, hd, &keys, &mut b, stride);
        for (i, k) in (0..m).flat_map(|i| (0..n).map(move |k| (i, k))) {
            let (a, b) = (a[i * stride + k], b[i * stride + k]);
            let exact: f64 = (0..hd).map(|c| qs[i * hd + c] as f64 * keys[k * hd + c] as f64).sum();
            assert!(
                (a as f64 - exact).abs() <= 1e-5 * hd as f64,
                "dots hd={hd} n={n} m={m} ({i}, {k}): {a} vs {exact}"
            );
            assert!((a - b).abs() <= 1e-5 * hd as f32, "dots hd={hd} n={n} m={m} ({i}, {k}): {a} vs {b}");
        }
        // A score does not depend on how the keys are split between calls (runs of cached rows), nor on the heads
        // beside it: one key and one head at a time gives the same bits.
        for (i, k) in (0..m).flat_map(|i| (0..n).map(move |k| (i, k))) {
            let mut one = [0f32];
            fast.dots(&qs[i * hd..(i + 1) * hd], hd, &keys[k * hd..(k + 1) * hd], &mut one, 1);
            assert_eq!(one[0].to_bits(), a[i * stride + k].to_bits(), "dots hd={hd} n={n} m={m} ({i}, {k}) alone");
        }
        // The stride's gaps are left alone.
        assert!((0..m).all(|i| a[i * stride + n..(i + 1) * stride].iter().all(|x| x.is_nan())));
        let w = values(m * n, 3);
        let (mut a, mut b) = (values(m * hd, 4), values(m * hd, 4));
        fast.accumulate(&mut a, hd, &w, &keys);
        portable.accumulate(&mut b, hd, &w, &keys);
        let start = values(m * hd, 4);
        for (e, (&a, &b)) in a.iter().zip(&b).enumerate() {
            let (i, c) = (e / hd, e % hd);
            let exact = start[e] as f64 + (0..n).map(|k| w[i * n + k] as f64 * keys[k * hd + c] as f64).sum::<f64>();
            assert!((a as f64 - exact).abs() <= 1e-5 * (n + 1) as f64, "acc hd={hd} n={n} m={m} {e}: {a} vs {exact}");
            assert!((a - b).abs() <= 1e-5 * (n + 1) as f32, "acc hd={hd} n={n} m={m} {e}: {a} vs {b}");
        }
    }
}
