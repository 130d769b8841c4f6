//! `make_qp_quants` of ggml's `src/ggml-quants.c`: the weighted search for one positive scale of a
//! group of non-negative values on the grid `0..=nmax`, which the k-quants use with an importance
//! matrix to quantize their sub-block scales and mins.
//!
//! Levels are kept as C keeps them: `L` is `uint8_t`, so a negative level (from a negative input)
//! wraps, and later steps read the wrapped value where ggml reads `L[i]`.

use super::num::{c_max, nearest_int};
use super::search::GROUP_MAX_EPS;

/// Fits `x ≈ scale * L`, `L` in `0..=nmax`, minimising the `weights`-weighted squared error: nine
/// candidate inverse scales, then up to five passes of per-element refinement. Returns the scale
/// and fills `l` (all zeros for a group whose maximum is below `GROUP_MAX_EPS`).
pub(crate) fn make_qp_quants<const N: usize>(nmax: i32, x: &[f32; N], l: &mut [u8; N], weights: &[f32; N]) -> f32 {
    let mut max = 0.0f32;
    for &v in x {
        max = c_max(max, v);
    }
    if max < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let nmax_f = nmax as f32;
    let mut iscale = nmax_f / max;
    for (l, &v) in l.iter_mut().zip(x) {
        *l = nearest_int(iscale * v) as u8;
    }
    let scale = 1.0 / iscale;
    let mut best_mse = 0.0f32;
    for i in 0..N {
        let diff = x[i] - scale * l[i] as f32;
        best_mse += weights[i] * diff * diff;
    }
    for is in -4..=4 {
        if is == 0 {
            continue;
        }
        let iscale_is = (0.1 * is as f32 + nmax_f) / max;
        let scale_is = 1.0 / iscale_is;
        let mut mse = 0.0f32;
        for i in 0..N {
            let q = nearest_int(iscale_is * x[i]).min(nmax);
            let diff = x[i] - scale_is * q as f32;
            mse += weights[i] * diff * diff;
        }
        if mse < best_mse {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for i in 0..N {
        let q = nearest_int(iscale * x[i]).min(nmax);
        l[i] = q as u8;
        let (w, q) = (weights[i], q as f32);
        sumlx += w * x[i] * q;
        suml2 += w * q * q;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for i in 0..N {
            let (w, li) = (weights[i], l[i] as f32);
            let mut slx = sumlx - w * x[i] * li;
            let mut sl2 = suml2 - w * li * li;
            if slx > 0.0 && sl2 > 0.0 {
                let new_l = nearest_int(x[i] * sl2 / slx).min(nmax);
                if new_l != l[i] as i32 {
                    let q = new_l as f32;
                    slx += w * x[i] * q;
                    sl2 += w * q * q;
                    if slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l[i] = new_l as u8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_grid_is_found() {
        let x: [f32; 8] = std::array::from_fn(|i| (i * 9 % 64) as f32 * 0.01);
        let mut l = [0u8; 8];
        let scale = make_qp_quants(63, &x, &mut l, &[1.0; 8]);
        for i in 0..8 {
            assert!(l[i] <= 63);
            assert!((scale * l[i] as f32 - x[i]).abs() < 1e-4, "{i}: {scale} * {} vs {}", l[i], x[i]);
        }
    }

    #[test]
    fn zero_and_tiny_groups() {
        let mut l = [7u8; 8];
        assert_eq!(make_qp_quants(15, &[0.0; 8], &mut l, &[1.0; 8]), 0.0);
        assert_eq!(l, [0; 8]);
        assert_eq!(make_qp_quants(15, &[1e-16; 8], &mut l, &[1.0; 8]), 0.0);
    }

    #[test]
    fn zero_weights_give_a_finite_scale() {
        let x: [f32; 8] = std::array::from_fn(|i| i as f32 + 0.5);
        let mut l = [0u8; 8];
        let scale = make_qp_quants(63, &x, &mut l, &[0.0; 8]);
        assert_eq!(scale, 0.0);
        assert!(l.iter().all(|&q| q <= 63));
    }

    #[test]
    fn negative_values_wrap_as_in_c() {
        // A negative value rounds to a negative level, stored as uint8_t: the result stays finite.
        let x = [1.0f32, -0.5, 0.25, 0.75, 0.0, 0.5, -1.0, 0.125];
        let mut l = [0u8; 8];
        let scale = make_qp_quants(15, &x, &mut l, &[1.0; 8]);
        assert!(scale.is_finite());
    }
}
