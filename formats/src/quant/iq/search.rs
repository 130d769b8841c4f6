//! The sub-block search shared by the IQ2 and IQ3 encoders (`quantize_row_iq2_*_impl`,
//! `quantize_row_iq3_*_impl` of ggml): the signs are split off, a range of candidate scales is
//! tried, each rounding the magnitudes to the nearest codewords of the grid (or the best
//! neighbour of an off-grid point), and the best least-squares fit is kept and refitted.

use super::grid::Grid;
use crate::quant::num::{arr, arr_mut, c_max, nearest_int};
use crate::quant::qp::make_qp_quants;

/// The most values of one sub-block (one scale).
const MAX_QB: usize = 32;

/// Where the candidate scales start.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Start {
    /// At the largest magnitude (`scale = max / nmax`).
    Max,
    /// At `make_qp_quants`' fit of the magnitudes (IQ2_XXS).
    Qp,
}

/// Which codewords the refit at the best scale redoes.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Refit {
    /// The off-grid ones, when there are any.
    OffGrid,
    /// All of them, when any is off the grid (or no candidate was kept).
    AnyOff,
    /// All of them, always.
    Always,
}

/// What differs between the searches of the i-quant types.
pub(super) struct Params {
    /// Seven stored signs per 8 values (an even count of minus signs) rather than eight.
    pub parity: bool,
    /// Sub-blocks whose largest magnitude is below this (or zero) are skipped.
    pub eps: f32,
    /// The candidate inverse scales are `(nmax + k · step) / max` for `k` in `-steps..=steps`.
    pub steps: i32,
    /// The candidate step.
    pub step: f32,
    /// Where the candidates start.
    pub start: Start,
    /// What the refit redoes.
    pub refit: Refit,
}

/// One searched sub-block: its scale, codewords and sign bytes.
pub(super) struct Sub {
    /// The least-squares scale (non-negative).
    pub scale: f32,
    /// The codeword of each `W` values.
    pub idx: [u16; MAX_QB / 4],
    /// The sign bits of each 8 values (seven with parity).
    pub signs: [u8; MAX_QB / 8],
}

/// The weighted sums `(Σ w·x·q, Σ w·q²)` with `q = 2l + 1`.
fn sums(weight: &[f32], xval: &[f32], l: &[i8]) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
    for ((&w, &x), &l) in weight.iter().zip(xval).zip(l) {
        let q = f32::from(2 * l + 1);
        sumqx += w * x * q;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// The codeword for `W` values at inverse scale `id`: the lattice point's own, or its best
/// neighbour at `scale`; writes its levels to `l` and returns it with whether it was on the grid.
fn codeword<const W: usize>(g: &Grid<W>, id: f32, scale: f32, xval: &[f32], waux: &[f32], l: &mut [i8]) -> (u16, bool) {
    for (l, &x) in l.iter_mut().zip(xval) {
        *l = nearest_int(0.5 * (id * x - 1.0)).clamp(0, g.top()) as i8;
    }
    let u = g.point(l);
    match g.at(u) {
        Some(j) => (j, true),
        None => {
            let j = g.best_neighbour(u, xval, waux, scale);
            l.copy_from_slice(g.levels(j));
            (j, false)
        }
    }
}

/// Splits the signs off the values of `xb` into `xval` and the sign bytes, flipping the
/// least important value of each 8 with an odd count of minus signs when `parity` is set.
fn split_signs(parity: bool, xb: &[f32], weight: &[f32], xval: &mut [f32]) -> [u8; MAX_QB / 8] {
    let mut signs = [0u8; MAX_QB / 8];
    for (k, s) in signs.iter_mut().enumerate().take(xb.len() / 8) {
        let mut nflip = 0;
        for i in 8 * k..8 * k + 8 {
            if xb[i] >= 0.0 {
                xval[i] = xb[i];
            } else {
                xval[i] = -xb[i];
                nflip += 1;
                *s |= 1 << (i - 8 * k);
            }
        }
        if parity {
            if nflip % 2 == 1 {
                let mut imin = 8 * k;
                let mut min = weight[imin] * xb[imin] * xb[imin];
                for i in 8 * k + 1..8 * k + 8 {
                    let ax = weight[i] * xb[i] * xb[i];
                    if ax < min {
                        min = ax;
                        imin = i;
                    }
                }
                xval[imin] = -xval[imin];
                *s ^= 1 << (imin - 8 * k);
            }
            *s &= 127;
        }
    }
    signs
}

/// Searches one sub-block `xb` (at most 32 values, a multiple of 8) with search weights `weight`;
/// None when ggml skips it as zero.
pub(super) fn search<const W: usize>(p: &Params, g: &Grid<W>, xb: &[f32], weight: &[f32]) -> Option<Sub> {
    let qb = xb.len();
    let ng = qb / W;
    let mut waux = [0.0f32; MAX_QB];
    waux.iter_mut().zip(weight).for_each(|(a, w)| *a = w.sqrt());
    let mut xval = [0.0f32; MAX_QB];
    let mut signs = split_signs(p.parity, xb, weight, &mut xval);
    let xval = &xval[..qb];
    let max = xval[1..].iter().fold(xval[0], |m, &x| c_max(m, x));
    if max < p.eps || max == 0.0 {
        return None;
    }
    let nmax = f32::from(2 * g.top() as i16 + 1);
    let (base, mut scale) = match p.start {
        Start::Max => (max, max / nmax),
        Start::Qp => {
            let mut lq = [0u8; MAX_QB];
            let s = make_qp_quants(g.top() + 2, arr::<_, MAX_QB>(xval), arr_mut(&mut lq), arr(weight));
            let eff_max = s * (g.top() + 1) as f32;
            if eff_max <= 0.0 {
                return None;
            }
            (eff_max, s)
        }
    };
    let (mut l, mut idx) = ([0i8; MAX_QB], [0u16; MAX_QB / 4]);
    let mut on_grid = [p.refit == Refit::OffGrid; MAX_QB / 4];
    let mut best = 0.0f32;
    for is in -p.steps..=p.steps {
        let id = (nmax + is as f32 * p.step) / base;
        let this_scale = 1.0 / id;
        let (mut laux, mut idx_aux, mut on_aux) = ([0i8; MAX_QB], [0u16; MAX_QB / 4], [true; MAX_QB / 4]);
        for k in 0..ng {
            let r = W * k..W * k + W;
            (idx_aux[k], on_aux[k]) = codeword(g, id, this_scale, &xval[r.clone()], &waux[r.clone()], &mut laux[r]);
        }
        let (sumqx, sumq2) = sums(weight, xval, &laux[..qb]);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            (l, idx, on_grid) = (laux, idx_aux, on_aux);
        }
    }
    let refit = match p.refit {
        Refit::Always => true,
        Refit::OffGrid | Refit::AnyOff => on_grid[..ng].contains(&false),
    };
    if refit && scale > 0.0 {
        let id = 1.0 / scale;
        for k in 0..ng {
            if p.refit == Refit::OffGrid && on_grid[k] {
                continue;
            }
            let r = W * k..W * k + W;
            idx[k] = codeword(g, id, scale, &xval[r.clone()], &waux[r.clone()], &mut l[r]).0;
        }
        let (sumqx, sumq2) = sums(weight, xval, &l[..qb]);
        if sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    if scale < 0.0 {
        scale = -scale;
        let mask = if p.parity { 127 } else { 255 };
        signs[..qb / 8].iter_mut().for_each(|s| *s = !*s & mask);
    }
    Some(Sub { scale, idx, signs })
}

/// The 4-bit scale of sub-block scale `scale` under the super-block scale `1 / id`.
pub(super) fn scale_code(id: f32, scale: f32) -> u8 {
    nearest_int(0.5 * (id * scale - 1.0)).clamp(0, 15) as u8
}

/// `Σx²` of a super-block, summed in order.
pub(super) fn sum_squares(x: &[f32]) -> f32 {
    let mut sum = 0.0f32;
    for &v in x {
        sum += v * v;
    }
    sum
}
