//! The Hadamard rotation of a quantized cache, as llama.cpp applies it (`attn_rot_k` / `attn_rot_v`, PR 21038):
//! queries and keys are multiplied by an orthonormal Walsh–Hadamard matrix before the keys are stored, which
//! leaves every q·k unchanged but spreads a few large channels of a key over the whole block, so the block's
//! scale is no longer set by one outlier; values are rotated before they are stored and the attention output is
//! rotated back (the matrix is its own inverse).
//!
//! llama.cpp's choices, kept here: rotation is on when the cache type is block-quantized (q8_0 included) and the
//! head width is a multiple of 64; queries and keys take the largest power-of-two transform that divides the head
//! width, values and the output one of 64, each over consecutive pieces of a head; `LLAMA_ATTN_ROT_DISABLE=1`
//! (here also `--no-kv-rotation`) turns it off. Only the host (CPU) path has quantized caches, so only it rotates.

use super::KvDType;

/// Smallest transform, and the one values use.
const MIN_SIZE: usize = 64;

/// The Walsh–Hadamard rotations one cache applies: the transform sizes over queries/keys and over values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvRotation {
    /// Transform size over queries and keys, when rotated.
    keys: Option<usize>,
    /// Transform size over values and the attention output, when rotated.
    values: Option<usize>,
}

impl KvRotation {
    /// No rotation.
    pub const OFF: KvRotation = KvRotation { keys: None, values: None };

    /// llama.cpp's rotation for a cache of `dtype` with heads of `head_dim` values: on for block-quantized
    /// types and head widths that are multiples of 64, unless `enabled` is false.
    pub fn new(dtype: KvDType, head_dim: usize, enabled: bool) -> Self {
        if !enabled || dtype.block_type().is_none() || head_dim == 0 || !head_dim.is_multiple_of(MIN_SIZE) {
            return KvRotation::OFF;
        }
        // The largest power of two dividing the head width (at least 64 here).
        let keys = 1 << head_dim.trailing_zeros();
        KvRotation { keys: Some(keys), values: Some(MIN_SIZE) }
    }

    /// Whether anything is rotated.
    pub fn is_on(self) -> bool {
        self.keys.is_some() || self.values.is_some()
    }

    /// The transform sizes over queries/keys and over values, when on.
    pub fn sizes(self) -> Option<(usize, usize)> {
        self.keys.zip(self.values)
    }

    /// Rotates query or key rows (any whole number of heads) in place.
    pub(super) fn keys(self, x: &mut [f32]) {
        if let Some(n) = self.keys {
            hadamard(x, n);
        }
    }

    /// Rotates value rows, or rotates the attention output back, in place.
    pub(super) fn values(self, x: &mut [f32]) {
        if let Some(n) = self.values {
            hadamard(x, n);
        }
    }
}

impl std::fmt::Display for KvRotation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.sizes() {
            Some((k, v)) => write!(f, "Hadamard rotation of Q/K ({k}) and V ({v})"),
            None => f.write_str("no rotation"),
        }
    }
}

/// The orthonormal Walsh–Hadamard transform of each consecutive `n` values of `x` (`n` a power of two dividing
/// `x.len()`): Sylvester's matrix, `H[i][j] = (-1)^popcount(i & j) / sqrt(n)`, the matrix llama.cpp builds;
/// symmetric and its own inverse. Computed by butterflies in n·log2(n) additions.
pub fn hadamard(x: &mut [f32], n: usize) {
    assert!(n.is_power_of_two() && x.len().is_multiple_of(n), "{} values are not pieces of {n}", x.len());
    let norm = 1.0 / (n as f32).sqrt();
    for piece in x.chunks_exact_mut(n) {
        let mut h = 1;
        while h < n {
            for pair in piece.chunks_exact_mut(2 * h) {
                let (a, b) = pair.split_at_mut(h);
                for (a, b) in a.iter_mut().zip(b) {
                    (*a, *b) = (*a + *b, *a - *b);
                }
            }
            h *= 2;
        }
        piece.iter_mut().for_each(|v| *v *= norm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::simd::tests::values;

    /// The butterflies compute llama.cpp's matrix (built as ggml_gen_hadamard does) times each piece.
    #[test]
    fn hadamard_is_llama_cpp_matrix() {
        for n in [1, 2, 8, 64, 128] {
            let mut m = vec![0f32; n * n];
            m[0] = 1.0 / (n as f32).sqrt();
            let mut s = 1;
            while s < n {
                for i in 0..s {
                    for j in 0..s {
                        let v = m[i * n + j];
                        (m[(i + s) * n + j], m[i * n + j + s], m[(i + s) * n + j + s]) = (v, v, -v);
                    }
                }
                s *= 2;
            }
            let x = values(3 * n, 5);
            let mut y = x.clone();
            hadamard(&mut y, n);
            for (p, (x, y)) in x.chunks(n).zip(y.chunks(n)).enumerate() {
                for (i, &y) in y.iter().enumerate() {
                    let want: f32 = (0..n).map(|j| m[i * n + j] * x[j]).sum();
                    assert!((y - want).abs() < 1e-5, "n={n} piece {p} [{i}]: {y} vs {want}");
                }
            }
        }
    }

    /// Orthonormal and its own inverse: dot products and norms survive, twice is the identity.
    #[test]
    fn hadamard_keeps_dot_products_and_inverts_itself() {
        let (q, k) = (values(256, 1), values(256, 2));
        let (mut hq, mut hk) = (q.clone(), k.clone());
        hadamard(&mut hq, 128);
        hadamard(&mut hk, 128);
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        assert!((dot(&q, &k) - dot(&hq, &hk)).abs() < 1e-4);
        hadamard(&mut hq, 128);
        for (a, b) in q.iter().zip(&hq) {
            assert!((a - b).abs() < 1e-6);
        }
    }

    /// On for the block types with 64-multiple heads, the largest power of two dividing the head for Q/K;
    /// off for float caches, other widths, or when turned off.
    #[test]
    fn rotation_follows_llama_cpp_rules() {
        let rot = |t, hd, on| KvRotation::new(t, hd, on).sizes();
        assert_eq!(rot(KvDType::Q4_0, 64, true), Some((64, 64)));
        assert_eq!(rot(KvDType::Q8_0, 128, true), Some((128, 64)));
        assert_eq!(rot(KvDType::Q5_1, 192, true), Some((64, 64)));
        assert_eq!(rot(KvDType::Q4_1, 256, true), Some((256, 64)));
        assert_eq!(rot(KvDType::IQ4_NL, 64, true), Some((64, 64)));
        assert_eq!(rot(KvDType::Q4_0, 96, true), None);
        assert_eq!(rot(KvDType::Q4_0, 64, false), None);
        assert_eq!(rot(KvDType::F16, 64, true), None);
        assert_eq!(KvRotation::new(KvDType::Q5_0, 128, true).to_string(), "Hadamard rotation of Q/K (128) and V (64)");
        assert!(!KvRotation::OFF.is_on());
    }
}
