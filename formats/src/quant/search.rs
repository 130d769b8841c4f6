//! The scale searches shared by the k-quants (`make_qkx2_quants`, `make_qx_quants`,
//! `make_q3_quants` in ggml's `src/ggml-quants.c`), restricted to the variants the reference
//! quantizers call without an importance matrix.
//!
//! Sums are accumulated sequentially in index order and every product is written in the C
//! evaluation order (`w*l*x` is `(w*l)*x`), so the results are bit-identical to ggml's.

use super::num::nearest_int;

/// `GROUP_MAX_EPS`: groups whose largest magnitude is below this are treated as all zero.
pub(crate) const GROUP_MAX_EPS: f32 = 1e-15;

/// Weighted least-squares search for an asymmetric grid `x ≈ scale * L - the_min` with
/// `L` in `0..=nmax` (`make_qkx2_quants`). Returns `(scale, the_min)` and fills `l`.
///
/// `use_mad` selects absolute instead of squared error, as Q2_K asks for.
#[allow(clippy::too_many_arguments)]
pub(crate) fn make_qkx2_quants<const N: usize>(
    nmax: i32,
    x: &[f32; N],
    weights: &[f32; N],
    l: &mut [u8; N],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..N {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.fill(0);
        return (0.0, -min);
    }
    let err = |d: f32| if use_mad { d.abs() } else { d * d };
    let nmax_f = nmax as f32;
    let range = max - min;
    let iscale = nmax_f / range;
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..N {
        let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l[i] = q as u8;
        let diff = scale * q as f32 + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    let mut laux = [0u8; N];
    for is in 0..=nstep {
        let iscale = (rmin + rdelta * is as f32 + nmax_f) / range;
        let mut sum_l = 0.0f32;
        let mut sum_l2 = 0.0f32;
        let mut sum_xl = 0.0f32;
        for i in 0..N {
            let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = q as u8;
            let wl = weights[i] * q as f32;
            sum_l += wl;
            sum_l2 += wl * q as f32;
            sum_xl += wl * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..N {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                *l = laux;
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Signed value with the largest magnitude (first one wins ties) and that magnitude.
#[inline(always)]
fn signed_absmax<const N: usize>(x: &[f32; N]) -> (f32, f32) {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    (max, amax)
}

/// Symmetric grid search `x ≈ scale * (L - nmax)`, `L` in `0..2*nmax`, weighted by `x²`
/// (`make_qx_quants` with `rmse_type = 1` and no importance weights, as Q6_K uses it).
/// Returns the scale and fills `l` (all zeros for an all-zero group).
pub(crate) fn make_qx_quants<const N: usize>(nmax: i32, x: &[f32; N], l: &mut [u8; N]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let nmax_f = nmax as f32;
    // One pass at a given inverse scale: the clamped levels and the two weighted sums.
    let pass = |iscale: f32, levels: &mut [i32; N]| {
        let mut sumlx = 0.0f32;
        let mut suml2 = 0.0f32;
        for i in 0..N {
            let q = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
            levels[i] = q;
            let w = x[i] * x[i];
            sumlx += w * x[i] * q as f32;
            suml2 += w * q as f32 * q as f32;
        }
        (sumlx, suml2)
    };
    let mut levels = [0i32; N];
    let (sumlx, suml2) = pass(-nmax_f / max, &mut levels);
    for (l, &q) in l.iter_mut().zip(&levels) {
        *l = (q + nmax) as u8;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        let iscale = -(nmax_f + 0.1 * is as f32) / max;
        let (sumlx, suml2) = pass(iscale, &mut levels);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (l, &q) in l.iter_mut().zip(&levels) {
                *l = (q + nmax) as u8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Symmetric search with iterative per-element refinement (`make_q3_quants` with
/// `do_rmse = true`, as Q3_K uses it). Returns the scale and fills `l` with `level + nmax`
/// (all zeros for an all-zero group).
pub(crate) fn make_q3_quants<const N: usize>(nmax: i32, x: &[f32; N], l: &mut [i8; N]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for i in 0..N {
        let q = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        l[i] = q as i8;
        let w = x[i] * x[i];
        sumlx += w * x[i] * q as f32;
        suml2 += w * q as f32 * q as f32;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for i in 0..N {
            let w = x[i] * x[i];
            let li = l[i] as f32;
            let mut slx = sumlx - w * x[i] * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = nearest_int(x[i] * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != l[i] as i32 {
                    let nl = new_l as f32;
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l[i] = new_l as i8;
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
    for v in l.iter_mut() {
        *v += nmax as i8;
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
    fn qkx2_constant_and_zero_groups() {
        let x = [0.0f32; 32];
        let w = [1.0f32; 32];
        let mut l = [9u8; 32];
        assert_eq!(make_qkx2_quants(15, &x, &w, &mut l, -1.0, 0.1, 20, false), (0.0, -0.0));
        assert_eq!(l, [0; 32]);
        // A constant negative group: min = max, the min carries everything.
        let x = [-2.5f32; 32];
        let (scale, the_min) = make_qkx2_quants(15, &x, &w, &mut l, -1.0, 0.1, 20, false);
        assert_eq!((scale, the_min), (0.0, 2.5));
        // A constant positive group: min is clamped to 0, so it is all scale.
        let x = [3.0f32; 32];
        let (scale, the_min) = make_qkx2_quants(15, &x, &w, &mut l, -1.0, 0.1, 20, false);
        assert_eq!(the_min, -0.0);
        assert!((scale * l[0] as f32 - 3.0).abs() < 1e-5, "{scale} {}", l[0]);
    }

    #[test]
    fn qkx2_fits_a_ramp_exactly() {
        let x: [f32; 32] = std::array::from_fn(|i| (i % 16) as f32 * 0.5 - 1.0);
        let w = [1.0f32; 32];
        let mut l = [0u8; 32];
        let (scale, the_min) = make_qkx2_quants(15, &x, &w, &mut l, -1.0, 0.1, 20, false);
        for i in 0..32 {
            assert!((scale * l[i] as f32 - the_min - x[i]).abs() < 1e-5);
        }
    }

    #[test]
    fn qx_levels_are_symmetric_grid() {
        let x: [f32; 16] = std::array::from_fn(|i| (i as f32 - 7.5) * 0.25);
        let mut l = [0u8; 16];
        let scale = make_qx_quants(32, &x, &mut l);
        assert!(scale != 0.0);
        for i in 0..16 {
            assert!(l[i] < 64);
            assert!((scale * (l[i] as f32 - 32.0) - x[i]).abs() < 0.05, "{i}");
        }
        let mut l = [5u8; 16];
        assert_eq!(make_qx_quants(32, &[1e-16f32; 16], &mut l), 0.0);
        assert_eq!(l, [0; 16]);
    }

    #[test]
    fn q3_levels_in_range() {
        let x: [f32; 16] = std::array::from_fn(|i| ((i * 37 % 16) as f32 - 8.0) * 0.3);
        let mut l = [0i8; 16];
        let scale = make_q3_quants(4, &x, &mut l);
        let mut err = 0.0f32;
        let mut norm = 0.0f32;
        for i in 0..16 {
            assert!((0..8).contains(&l[i]));
            err += (scale * (l[i] as f32 - 4.0) - x[i]).powi(2);
            norm += x[i] * x[i];
        }
        // 16 distinct values on 8 levels: about a quarter of the signal is lost.
        assert!((err / norm).sqrt() < 0.3, "{}", (err / norm).sqrt());
    }
}
