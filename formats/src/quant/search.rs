//! The scale searches shared by the k-quants (`make_qkx2_quants`, `make_qx_quants`,
//! `make_q3_quants` in ggml's `src/ggml-quants.c`), in the variants the quantizers call. With
//! explicit weights `make_qkx2_quants` is also ggml's `make_qkx3_quants` (the two differ only when
//! `make_qkx3_quants` is given no weights), and `make_qx_quants` takes the weights the caller
//! chooses (`x²` without an importance matrix, as `rmse_type = 1` does).
//!
//! Sums are accumulated sequentially in index order and every product is written in the C
//! evaluation order (`w*l*x` is `(w*l)*x`), so the results are bit-identical to ggml's.

use super::num::nearest_int;

/// `GROUP_MAX_EPS`: groups whose largest magnitude is below this are treated as all zero.
pub(crate) const GROUP_MAX_EPS: f32 = 1e-15;

/// Inverse scales evaluated together by the searches. Each lane accumulates its own sums
/// sequentially in index order, exactly as one pass of the C loop would; running several passes
/// side by side only buys instruction-level parallelism (and SIMD where the compiler finds it).
const LANES: usize = 4;

/// Weighted least-squares search for an asymmetric grid `x ≈ scale * L - the_min` with
/// `L` in `0..=nmax` (`make_qkx2_quants`). Returns `(scale, the_min)` and fills `l`.
///
/// `MAD` selects absolute instead of squared error, as Q2_K asks for.
pub(crate) fn make_qkx2_quants<const N: usize, const MAD: bool>(
    nmax: i32,
    x: &[f32; N],
    weights: &[f32; N],
    l: &mut [u8; N],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
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
    let err = |d: f32| if MAD { d.abs() } else { d * d };
    let nmax_f = nmax as f32;
    let iscale = nmax_f / (max - min);
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

    // ggml tries is = 0..=nstep one after the other, and each accepted step moves `min` (the
    // grid is re-centred on the best offset so far). Here LANES consecutive steps are evaluated
    // with the current `min`; they are then accepted in order, and the batch restarts right after
    // any step that changed `min`, so every step sees exactly the `min` it sees in ggml.
    let mut is = 0;
    while is <= nstep {
        let base = min;
        let iscale: [f32; LANES] =
            std::array::from_fn(|k| (rmin + rdelta * (is + k as i32) as f32 + nmax_f) / (max - base));
        // Levels of element i for every lane side by side (as f32: exact small integers).
        let mut laux = [[0f32; LANES]; N];
        let mut sum_l = [0f32; LANES];
        let mut sum_l2 = [0f32; LANES];
        let mut sum_xl = [0f32; LANES];
        for i in 0..N {
            let (xi, w) = (x[i], weights[i]);
            let dx = xi - base;
            for k in 0..LANES {
                let q = nearest_int(iscale[k] * dx).clamp(0, nmax) as f32;
                laux[i][k] = q;
                let wl = w * q;
                sum_l[k] += wl;
                sum_l2[k] += wl * q;
                sum_xl[k] += wl * xi;
            }
        }
        let mut this_scale = [0f32; LANES];
        let mut this_min = [0f32; LANES];
        let mut det = [0f32; LANES];
        for k in 0..LANES {
            det[k] = sum_w * sum_l2[k] - sum_l[k] * sum_l[k];
            this_scale[k] = (sum_w * sum_xl[k] - sum_x * sum_l[k]) / det[k];
            this_min[k] = (sum_l2[k] * sum_x - sum_l[k] * sum_xl[k]) / det[k];
            if this_min[k] > 0.0 {
                this_min[k] = 0.0;
                this_scale[k] = sum_xl[k] / sum_l2[k];
            }
        }
        // Errors of every lane (only used where det > 0, as in ggml).
        let mut cur_error = [0f32; LANES];
        for i in 0..N {
            for k in 0..LANES {
                let diff = this_scale[k] * laux[i][k] + this_min[k] - x[i];
                cur_error[k] += weights[i] * err(diff);
            }
        }
        let mut next = is + LANES as i32;
        for k in 0..LANES {
            let step = is + k as i32;
            if step > nstep {
                break;
            }
            if det[k] > 0.0 && cur_error[k] < best_error {
                for (l, q) in l.iter_mut().zip(&laux) {
                    *l = q[k] as u8;
                }
                best_error = cur_error[k];
                scale = this_scale[k];
                let moved = this_min[k].to_bits() != min.to_bits();
                min = this_min[k];
                if moved {
                    next = step + 1;
                    break;
                }
            }
        }
        is = next;
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

/// Number of inverse scales `make_qx_quants` tries: the initial one and `is = -9..=9`, `is != 0`.
const QX_STEPS: usize = 19;

/// Symmetric grid search `x ≈ scale * (L - nmax)`, `L` in `0..2*nmax`, weighted by `weights`
/// (`make_qx_quants` with `rmse_type = 1`: pass `x²` for no importance matrix, as Q6_K does).
/// Returns the scale and fills `l` (all zeros for an all-zero group).
pub(crate) fn make_qx_quants<const N: usize>(nmax: i32, x: &[f32; N], weights: &[f32; N], l: &mut [u8; N]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let nmax_f = nmax as f32;
    // The steps are independent of each other: evaluate all of them (padded to whole batches),
    // then pick in ggml's order.
    const PADDED: usize = QX_STEPS.div_ceil(LANES) * LANES;
    let iscale: [f32; PADDED] = std::array::from_fn(|k| match k {
        0 => -nmax_f / max,
        1..=9 => -(nmax_f + 0.1 * (k as i32 - 10) as f32) / max,
        10..QX_STEPS => -(nmax_f + 0.1 * (k as i32 - 9) as f32) / max,
        _ => 0.0,
    });
    let mut sumlx = [0f32; PADDED];
    let mut suml2 = [0f32; PADDED];
    for (&xi, &w) in x.iter().zip(weights) {
        let wx = w * xi;
        for k in 0..PADDED {
            let q = nearest_int(iscale[k] * xi).clamp(-nmax, nmax - 1) as f32;
            sumlx[k] += wx * q;
            suml2[k] += w * q * q;
        }
    }
    let mut chosen = 0;
    let mut scale = if suml2[0] != 0.0 { sumlx[0] / suml2[0] } else { 0.0 };
    let mut best = scale * sumlx[0];
    for k in 1..QX_STEPS {
        if suml2[k] > 0.0 && sumlx[k] * sumlx[k] > best * suml2[k] {
            chosen = k;
            scale = sumlx[k] / suml2[k];
            best = scale * sumlx[k];
        }
    }
    for (l, &xi) in l.iter_mut().zip(x) {
        *l = (nearest_int(iscale[chosen] * xi).clamp(-nmax, nmax - 1) + nmax) as u8;
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

/// `x²` element by element: `make_qx_quants`'s weights without an importance matrix.
#[inline(always)]
pub(crate) fn squares<const N: usize>(x: &[f32; N]) -> [f32; N] {
    std::array::from_fn(|i| x[i] * x[i])
}

#[cfg(test)]
mod tests;
