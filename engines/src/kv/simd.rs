//! The two inner loops of host attention, over f32 rows of one head: a query against a tile of keys, and a
//! weighted sum of a tile of values. AVX2 + FMA when the CPU has them (chosen once), portable code otherwise.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// The implementation the loops run: AVX2 + FMA when `avx2` is set, which only [`RowOps::detect`] does, on a CPU
/// that has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RowOps {
    avx2: bool,
}

impl RowOps {
    /// The fastest implementation this CPU supports.
    pub(super) fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        return RowOps { avx2: is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") };
        #[cfg(not(target_arch = "x86_64"))]
        RowOps { avx2: false }
    }

    /// The portable implementation (the reference in tests).
    #[cfg(test)]
    pub(super) fn scalar() -> Self {
        RowOps { avx2: false }
    }

    /// Whether the AVX2 + FMA loops run.
    pub(super) fn avx2(self) -> bool {
        self.avx2
    }

    /// `out[k] = q · keys[k]` for the `out.len()` keys of `q.len()` values each in `keys`.
    pub(super) fn dots(self, q: &[f32], keys: &[f32], out: &mut [f32]) {
        assert_eq!(keys.len(), out.len() * q.len(), "keys must be out.len() rows of q.len()");
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `avx2` is only set by `detect`, so the CPU has AVX2 and FMA; the shapes are checked above.
            return unsafe { dots_avx2(q, keys, out) };
        }
        for (o, k) in out.iter_mut().zip(keys.chunks_exact(q.len())) {
            *o = dot(q, k);
        }
    }

    /// `o += Σ_k w[k] · vals[k]` for the `w.len()` value rows of `o.len()` values each in `vals`, each
    /// element summed over the rows in order.
    pub(super) fn accumulate(self, o: &mut [f32], w: &[f32], vals: &[f32]) {
        assert_eq!(vals.len(), w.len() * o.len(), "vals must be w.len() rows of o.len()");
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: as in `dots`.
            return unsafe { accumulate_avx2(o, w, vals) };
        }
        for (&w, v) in w.iter().zip(vals.chunks_exact(o.len())) {
            for (o, &x) in o.iter_mut().zip(v) {
                *o += w * x;
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

    /// Every width (whole 32s, whole 8s, a tail) and every tile length against the portable loops and f64.
    #[test]
    fn simd_row_ops_match_the_portable_ones() {
        let (fast, portable) = (RowOps::detect(), RowOps::scalar());
        for hd in [1, 5, 8, 13, 32, 40, 64, 72, 128] {
            for n in 0..=17 {
                let (q, keys) = (values(hd, 1), values(n * hd, 2 + n as u32));
                let (mut a, mut b) = (vec![0f32; n], vec![0f32; n]);
                fast.dots(&q, &keys, &mut a);
                portable.dots(&q, &keys, &mut b);
                for (k, (&a, &b)) in a.iter().zip(&b).enumerate() {
                    let exact: f64 = (0..hd).map(|c| q[c] as f64 * keys[k * hd + c] as f64).sum();
                    assert!((a as f64 - exact).abs() <= 1e-5 * hd as f64, "dots hd={hd} n={n} k={k}: {a} vs {exact}");
                    assert!((a - b).abs() <= 1e-5 * hd as f32, "dots hd={hd} n={n} k={k}: {a} vs {b}");
                }
                let w = values(n, 3);
                let (mut a, mut b) = (values(hd, 4), values(hd, 4));
                fast.accumulate(&mut a, &w, &keys);
                portable.accumulate(&mut b, &w, &keys);
                for (c, (&a, &b)) in a.iter().zip(&b).enumerate() {
                    let exact =
                        values(hd, 4)[c] as f64 + (0..n).map(|k| w[k] as f64 * keys[k * hd + c] as f64).sum::<f64>();
                    assert!(
                        (a as f64 - exact).abs() <= 1e-5 * (n + 1) as f64,
                        "acc hd={hd} n={n} c={c}: {a} vs {exact}"
                    );
                    assert!((a - b).abs() <= 1e-5 * (n + 1) as f32, "acc hd={hd} n={n} c={c}: {a} vs {b}");
                }
            }
        }
    }
}
