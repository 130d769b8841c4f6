//! The clipping search (AutoAWQ `_search_best_clip`): per output row and quantization group, the largest
//! magnitude kept, chosen among `max|w| * (1 - i/20)` for i = 0..9 by the error of the group's partial dot
//! products with sampled input tokens.

use candle_core::Tensor;
use gemm::{gemm, Parallelism};
use rayon::prelude::*;
use tgi_formats::awq::fake_quantize_group;

/// Grid points of the shrink factor.
const N_GRID: usize = 20;
/// Shrink steps searched (`i / N_GRID < 0.5`, AutoAWQ's `max_shrink`).
const SHRINK_STEPS: usize = N_GRID / 2;
/// Tokens the clip search samples from the calibration set (evenly strided).
pub(crate) const CLIP_TOKENS: usize = 512;
/// Output rows searched at once (AutoAWQ's batch of 256, bounding memory).
const ROW_BATCH: usize = 256;

/// Stride of the tokens the clip search uses among `n_tokens` (`max(1, n_tokens / 512)`).
pub(crate) fn token_stride(n_tokens: usize) -> usize {
    (n_tokens / CLIP_TOKENS).max(1)
}

/// The best clipping bound per (row, group) of `w` (`[out, in]`), row-major `[out, in / group]`, for inputs
/// `x` (`[tokens, in]`).
pub(crate) fn search_clip(
    w: &[f32],
    in_features: usize,
    x: &Tensor,
    group_size: usize,
    zero_point: bool,
) -> candle_core::Result<Vec<f32>> {
    let groups = in_features / group_size;
    let (tokens, _) = x.dims2()?;
    let x = x.flatten_all()?.to_vec1::<f32>()?;
    let mut best = Vec::with_capacity(w.len() / group_size);
    for rows in w.chunks(ROW_BATCH * in_features) {
        let n = rows.len() / in_features;
        let org_max: Vec<f32> =
            rows.chunks_exact(group_size).map(|g| g.iter().fold(0f32, |m, x| m.max(x.abs()))).collect();
        let mut bound = org_max.clone();
        let mut min_err = vec![f32::INFINITY; org_max.len()];
        for i in 0..SHRINK_STEPS {
            let shrink = 1.0 - i as f32 / N_GRID as f32;
            let mut diff = rows.to_vec();
            diff.par_chunks_mut(group_size).zip(&org_max).for_each(|(g, &m)| {
                let max = m * shrink;
                let orig = g.to_vec();
                g.iter_mut().for_each(|w| *w = w.clamp(-max, max));
                fake_quantize_group(g, zero_point);
                g.iter_mut().zip(orig).for_each(|(q, w)| *q -= w);
            });
            let err = GroupProducts { x: &x, tokens, in_features, group_size }.mean_squares(&diff, n);
            for (g, row) in err.iter().enumerate() {
                for (o, &e) in row.iter().enumerate() {
                    let k = o * groups + g;
                    if e < min_err[k] {
                        min_err[k] = e;
                        bound[k] = org_max[k] * shrink;
                    }
                }
            }
        }
        best.extend(bound);
    }
    Ok(best)
}

/// Sampled inputs `[tokens, in]` and their split into quantization groups.
struct GroupProducts<'a> {
    x: &'a [f32],
    tokens: usize,
    in_features: usize,
    group_size: usize,
}

impl GroupProducts<'_> {
    /// Per group, per row of `d` (`[n, in]`): the mean over tokens of the squared partial dot product of the
    /// group's inputs with the row's group, `[groups][n]`. One GEMM per group (`[tokens, group] x [group, n]`),
    /// the groups spread over the pool; the squares are summed in token order.
    fn mean_squares(&self, d: &[f32], n: usize) -> Vec<Vec<f32>> {
        let (t, inf, gs) = (self.tokens, self.in_features, self.group_size);
        (0..inf / gs)
            .into_par_iter()
            .map_init(
                || vec![0f32; t * n],
                |prod, g| {
                    // SAFETY: dst is prod[r * n + o] (t × n); lhs is x[r * inf + g * gs + k] and rhs
                    // d[o * inf + g * gs + k] for r < t, o < n, k < gs, all inside their slices.
                    unsafe {
                        gemm(
                            t,
                            n,
                            gs,
                            prod.as_mut_ptr(),
                            1,
                            n as isize,
                            false,
                            self.x.as_ptr().add(g * gs),
                            1,
                            inf as isize,
                            d.as_ptr().add(g * gs),
                            inf as isize,
                            1,
                            0.0,
                            1.0,
                            false,
                            false,
                            false,
                            Parallelism::None,
                        )
                    };
                    let mut sum = vec![0f32; n];
                    for row in prod.chunks_exact(n) {
                        sum.iter_mut().zip(row).for_each(|(s, e)| *s += e * e);
                    }
                    sum.into_iter().map(|s| s / t as f32).collect()
                },
            )
            .collect()
    }
}

/// Clamps each (row, group) of `w` to `±bound`.
pub(crate) fn apply_clip(w: &mut [f32], bound: &[f32], group_size: usize) {
    w.par_chunks_mut(group_size).zip(bound).for_each(|(g, &b)| g.iter_mut().for_each(|w| *w = w.clamp(-b, b)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn an_outlier_is_clipped_when_inputs_ignore_it() {
        // one row, one group of 8: a large outlier at channel 0 whose input is always 0
        let mut w = vec![10.0, 0.11, -0.23, 0.35, -0.41, 0.52, -0.61, 0.7];
        let x: Vec<f32> =
            (0..16 * 8).map(|i| if i % 8 == 0 { 0.0 } else { ((i * 7 % 11) as f32 - 5.0) / 5.0 }).collect();
        let x = Tensor::from_vec(x, (16, 8), &Device::Cpu).unwrap();
        let b = search_clip(&w, 8, &x, 8, true).unwrap();
        assert!(b[0] < 10.0, "{b:?}");
        apply_clip(&mut w, &b, 8);
        assert_eq!(w[0], b[0]);
        assert_eq!(w[1], 0.11);
    }

    #[test]
    fn no_shrink_wins_when_every_weight_matters() {
        // the full range puts every weight exactly on a code, so clipping only adds error
        let w: Vec<f32> = (0..16).map(|i| (i as f32 - 8.0) * 0.125).collect();
        let x = Tensor::ones((4, 16), candle_core::DType::F32, &Device::Cpu).unwrap();
        let b = search_clip(&w, 16, &x, 16, true).unwrap();
        assert_eq!(b, vec![1.0]);
    }

    #[test]
    fn stride_samples_about_512_tokens() {
        assert_eq!(token_stride(100), 1);
        assert_eq!(token_stride(65536), 128);
    }
}
