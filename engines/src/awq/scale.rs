//! The scale search (AutoAWQ `_search_best_scale`): per-channel activation and weight magnitudes, the
//! 20-point grid of exponents, and the pseudo-quantized weights `Q(W * s) / s` each candidate is measured with.

use rayon::prelude::*;
use tgi_formats::awq::fake_quantize_group;

/// Points of the exponent grid (`ratio = k / 20`, k = 0..19).
pub(crate) const N_GRID: usize = 20;

/// AutoAWQ's `w_mean`: `|W| / (max |W| in its group + 1e-6)` averaged over the rows of all `weights`
/// (each `[out, in]`), per input channel.
pub(crate) fn weight_mean(weights: &[&[f32]], in_features: usize, group_size: usize) -> Vec<f32> {
    let mut sum = vec![0f64; in_features];
    let mut rows = 0usize;
    for w in weights {
        for row in w.chunks_exact(in_features) {
            for (g, chunk) in row.chunks_exact(group_size).enumerate() {
                let max = chunk.iter().fold(0f32, |m, x| m.max(x.abs())) + 1e-6;
                for (j, x) in chunk.iter().enumerate() {
                    sum[g * group_size + j] += f64::from(x.abs() / max);
                }
            }
            rows += 1;
        }
    }
    sum.into_iter().map(|s| (s / rows as f64) as f32).collect()
}

/// The duo-scaling candidate for `ratio`: `(x_mean^r / (w_mean^(1-r) + 1e-4)).max(1e-4)`, normalised by
/// `sqrt(max * min)`; non-finite values become 1.
pub(crate) fn candidate(x_mean: &[f32], w_mean: &[f32], ratio: f32) -> Vec<f32> {
    let s: Vec<f32> =
        x_mean.iter().zip(w_mean).map(|(x, w)| (x.powf(ratio) / (w.powf(1.0 - ratio) + 1e-4)).max(1e-4)).collect();
    let (lo, hi) = s.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), &v| (l.min(v), h.max(v)));
    let norm = (hi * lo).sqrt();
    s.into_iter().map(|v| v / norm).map(|v| if v.is_finite() { v } else { 1.0 }).collect()
}

/// `Q(W * s) / s` for a weight `[out, in]`, with `Q` the per-group round-to-nearest the file stores.
pub(crate) fn fake_quant_scaled(w: &[f32], s: &[f32], group_size: usize, zero_point: bool) -> Vec<f32> {
    let mut out = w.to_vec();
    out.par_chunks_mut(s.len()).for_each(|row| {
        row.iter_mut().zip(s).for_each(|(w, s)| *w *= s);
        row.chunks_mut(group_size).for_each(|g| fake_quantize_group(g, zero_point));
        row.iter_mut().zip(s).for_each(|(w, s)| *w /= s);
    });
    out
}

/// The outcome of one group's grid search.
pub(crate) struct ScaleChoice {
    /// The chosen scales (one per input channel).
    pub scales: Vec<f32>,
    /// The chosen exponent; `None` when no candidate beat the unscaled weights.
    pub ratio: Option<f32>,
    /// The loss with the chosen scales.
    pub loss: f32,
    /// The loss of the unscaled weights (plain round-to-nearest).
    pub rtn_loss: f32,
}

/// Grid search over the exponent: `loss(s)` is the module's output error with its linears replaced by
/// `Q(W * s) / s`; the first candidate with the lowest loss wins (AutoAWQ's strict `<`). Unlike AutoAWQ, the
/// unscaled weights (plain round-to-nearest, measured first) stay when no candidate is strictly better: with
/// duo scaling even ratio 0 rescales (by `1 / w_mean`), so AutoAWQ's grid alone can lose to RTN.
pub(crate) fn search<E>(
    x_mean: &[f32],
    w_mean: &[f32],
    mut loss: impl FnMut(&[f32]) -> Result<f32, E>,
) -> Result<ScaleChoice, E> {
    let ones = vec![1.0; x_mean.len()];
    let rtn = loss(&ones)?;
    let mut best = ScaleChoice { scales: ones, ratio: None, loss: rtn, rtn_loss: rtn };
    for k in 0..N_GRID {
        let ratio = k as f32 / N_GRID as f32;
        let s = candidate(x_mean, w_mean, ratio);
        let l = loss(&s)?;
        // NaN never compares lower, and a NaN RTN loss gives way to any finite one
        if l < best.loss || (best.loss.is_nan() && l.is_finite()) {
            best = ScaleChoice { scales: s, ratio: Some(ratio), loss: l, rtn_loss: rtn };
        }
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weight_mean_normalises_by_group_max() {
        // two rows, in = 4, groups of 2
        let w = [1.0, -2.0, 4.0, 2.0, 2.0, 2.0, -1.0, 0.0];
        let m = weight_mean(&[&w], 4, 2);
        let e = |a: f32, b: f32| a / (b + 1e-6);
        let want = [(e(1.0, 2.0) + e(2.0, 2.0)) / 2.0, (1.0 + 1.0) / 2.0, (1.0 + 1.0) / 2.0, (0.5 + 0.0) / 2.0];
        for (a, b) in m.iter().zip(want) {
            assert!((a - b).abs() < 1e-5, "{m:?}");
        }
    }

    #[test]
    fn candidate_is_normalised_and_ratio_zero_follows_weights() {
        let x = [1.0, 4.0, 9.0];
        let w = [0.5, 0.25, 1.0];
        let s = candidate(&x, &w, 0.0);
        let (lo, hi) = s.iter().fold((f32::MAX, 0f32), |(l, h), &v| (l.min(v), h.max(v)));
        assert!((lo * hi - 1.0).abs() < 1e-5);
        assert!(s[1] > s[0] && s[0] > s[2]);
        let s = candidate(&x, &w, 0.5);
        assert!(s.iter().all(|v| v.is_finite() && *v > 0.0));
    }

    #[test]
    fn unit_scales_are_plain_round_to_nearest() {
        let w: Vec<f32> = (0..64).map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.01).collect();
        let mut want = w.clone();
        want.chunks_mut(16).for_each(|g| fake_quantize_group(g, true));
        assert_eq!(fake_quant_scaled(&w, &[1.0; 32], 16, true), want);
    }

    #[test]
    fn search_keeps_the_first_lowest_loss() {
        let x = [1.0, 2.0];
        let w = [1.0, 1.0];
        let mut k = 0;
        let c = search::<()>(&x, &w, |_| {
            k += 1;
            Ok(if k == 5 || k == 8 { 0.5 } else { 1.0 })
        })
        .unwrap();
        assert_eq!((c.ratio, c.loss), (Some(3.0 / 20.0), 0.5));
        // nothing beats the unscaled weights (measured first): they stay
        let c = search::<()>(&x, &w, |s| Ok(if s == [1.0, 1.0] { 0.5 } else { 0.7 })).unwrap();
        assert_eq!((c.ratio, c.scales), (None, vec![1.0, 1.0]));
    }
}
