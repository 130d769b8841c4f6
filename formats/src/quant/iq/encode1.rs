//! The IQ1_S encoder, as ggml's `quantize_row_iq1_s_impl` writes it through `quantize_iq1_s` (what
//! `ggml_quantize_chunk`, hence llama-quantize, calls; ggml asserts an importance matrix): per 32
//! values, an exhaustive search of the two boundaries that split the sorted values into the levels
//! -1, 0, 1 (shifted by ±1/8), then the 8-value codewords of those levels (or their best neighbours),
//! one 3-bit scale and shift sign per 32 values under an fp16 super-block scale. The levels, the
//! weights, the sorted order and the codeword step are shared with [`super::encode1m`] (IQ1_M).

use super::grid::{iq1, Grid};
use super::search::sum_squares;
use super::QK_K;
use crate::quant::num::{c_max, nearest_int, store_fp16};

/// Values per sub-block.
const QB: usize = 32;

/// ggml's `GROUP_MAX_EPS_IQ1_S`: sub-blocks whose largest magnitude is below it are skipped.
const GROUP_MAX_EPS_IQ1_S: f32 = 1e-12;

/// ggml's `IQ1S_DELTA` (and `IQ1M_DELTA`, the same).
const DELTA: f32 = 0.125;

/// The level values with a positive shift.
pub(super) const X_P: [f32; 3] = [-1.0 + DELTA, DELTA, 1.0 + DELTA];

/// The level values with a negative shift.
pub(super) const X_M: [f32; 3] = [-1.0 - DELTA, -DELTA, 1.0 - DELTA];

/// One searched sub-block: its scale, shift (±1) and codewords.
struct Sub {
    scale: f32,
    shift: i8,
    idx: [u16; QB / 8],
}

/// `Σ f(run sum, value)` over the three runs `[0, i1)`, `[i1, i2)`, `[i2, QB)` of the prefix sums `s`.
fn runs(s: &[f32; QB + 1], i1: usize, i2: usize, v: [f32; 3], f: impl Fn(f32, f32) -> f32) -> f32 {
    f(s[i1] - s[0], v[0]) + f(s[i2] - s[i1], v[1]) + f(s[QB] - s[i2], v[2])
}

/// The best split of the sorted values into three levels: `(scale, i1, i2, shift)`, or None.
fn best_split(sumx: &[f32; QB + 1], sumw: &[f32; QB + 1]) -> Option<(f32, usize, usize, i8)> {
    let (mut best_score, mut best) = (-f32::MAX, None);
    for i1 in 0..=QB {
        for i2 in i1..=QB {
            for (v, shift) in [(X_P, 1), (X_M, -1)] {
                let sumqx = runs(sumx, i1, i2, v, |s, v| s * v);
                let sumq2 = runs(sumw, i1, i2, v, |s, v| s * v * v);
                if sumq2 > 0.0 && sumqx * sumqx > best_score * sumq2 {
                    let scale = sumqx / sumq2;
                    best_score = scale * sumqx;
                    best = Some((scale, i1, i2, shift));
                }
            }
        }
    }
    best
}

/// The largest magnitude of `xb`, as ggml's `MAX(max, fabsf(x))` loop finds it.
pub(super) fn max_abs(xb: &[f32]) -> f32 {
    xb[1..].iter().fold(xb[0].abs(), |m, &x| c_max(m, x.abs()))
}

/// The indices of the `N` values of `xb` in ascending order of value, as ggml's `qsort` of (value,
/// index) pairs leaves them: glibc's qsort is a merge sort, hence stable.
pub(super) fn sorted_order<const N: usize>(xb: &[f32]) -> [usize; N] {
    let mut order: [usize; N] = std::array::from_fn(|j| j);
    order.sort_by(|&a, &b| xb[a].partial_cmp(&xb[b]).unwrap_or(std::cmp::Ordering::Equal));
    order
}

/// The levels of sub-block values ranked by `order`: 0 below rank `i1`, 1 below `i2`, 2 above.
pub(super) fn split_levels<const N: usize>(order: &[usize; N], i1: usize, i2: usize) -> [i8; N] {
    let mut l = [0i8; N];
    for (j, &i) in order.iter().enumerate() {
        l[i] = if j < i1 {
            0
        } else if j < i2 {
            1
        } else {
            2
        };
    }
    l
}

/// The codewords of the `G` groups of 8 levels `l` (group `k` with the level values `xx[k]`): each
/// group's own, or when it is off the grid the neighbour nearest its values at `scale` (ggml's
/// `iq1_find_best_neighbour2`); with the scale, refitted to all the codewords when a group was off
/// the grid and the fit is positive.
pub(super) fn codewords<const G: usize>(
    g: &Grid<8>,
    l: &[i8],
    xb: &[f32],
    weight: &[f32],
    scale: f32,
    xx: [[f32; 3]; G],
) -> ([u16; G], f32) {
    let mut all_on_grid = true;
    let idx = std::array::from_fn(|k| {
        let r = 8 * k..8 * k + 8;
        let u = g.point(&l[r.clone()]);
        g.at(u).unwrap_or_else(|| {
            all_on_grid = false;
            g.best_neighbour_by(u, &xb[r.clone()], &weight[r], scale, |l| xx[k][l as usize])
        })
    });
    if all_on_grid {
        return (idx, scale);
    }
    let mut sums = (0.0f32, 0.0f32);
    for (k, &j) in idx.iter().enumerate() {
        let r = 8 * k..8 * k + 8;
        add_sums(g, j, xx[k], 1.0, &weight[r.clone()], &xb[r], &mut sums);
    }
    let refit = if sums.0 > 0.0 && sums.1 > 0.0 { sums.0 / sums.1 } else { scale };
    (idx, refit)
}

/// Adds `Σ w·q·x` and `Σ w·q²` over the 8 values `xb` of codeword `j`, with `q = xx[level] · m`, to `sums`.
pub(super) fn add_sums(g: &Grid<8>, j: u16, xx: [f32; 3], m: f32, weight: &[f32], xb: &[f32], sums: &mut (f32, f32)) {
    for ((&l, &w), &x) in g.levels(j).iter().zip(weight).zip(xb) {
        let q = xx[l as usize] * m;
        sums.0 += w * q * x;
        sums.1 += w * q * q;
    }
}

/// The search weights of ggml's IQ1 encoders: `qw · √(σ² + x²)` with `σ² = 2 · Σx² / 256`, or `x²`
/// without an importance matrix.
pub(super) fn weights(x: &[f32; QK_K], qw: Option<&[f32; QK_K]>) -> [f32; QK_K] {
    let sigma2 = 2.0 * sum_squares(x) / QK_K as f32;
    std::array::from_fn(|i| match qw {
        Some(qw) => qw[i] * (sigma2 + x[i] * x[i]).sqrt(),
        None => x[i] * x[i],
    })
}

/// Searches one 32-value sub-block with weights `weight`; None when ggml skips it.
fn search(g: &Grid<8>, xb: &[f32], weight: &[f32]) -> Option<Sub> {
    if max_abs(xb) < GROUP_MAX_EPS_IQ1_S {
        return None;
    }
    let order = sorted_order::<QB>(xb);
    let (mut sumx, mut sumw) = ([0.0f32; QB + 1], [0.0f32; QB + 1]);
    for (j, &i) in order.iter().enumerate() {
        sumx[j + 1] = sumx[j] + weight[i] * xb[i];
        sumw[j + 1] = sumw[j] + weight[i];
    }
    let (mut scale, i1, i2, mut shift) = best_split(&sumx, &sumw)?;
    let mut l = split_levels(&order, i1, i2);
    if scale < 0.0 {
        l.iter_mut().for_each(|l| *l = 2 - *l);
        (scale, shift) = (-scale, -shift);
    }
    let xx = if shift == 1 { X_P } else { X_M };
    let (idx, scale) = codewords(g, &l, xb, weight, scale, [xx; QB / 8]);
    Some(Sub { scale, shift, idx })
}

/// Encodes one IQ1_S super-block (50 bytes: `d`, 32 low index bytes, then per 32 values a u16 of
/// four 3-bit high index parts, a 3-bit scale and the shift sign), weighing the search by `qw`.
pub(crate) fn quantize_iq1_s(x: &[f32; QK_K], qw: &[f32; QK_K], y: &mut [u8; 50]) {
    y.fill(0);
    let g = iq1();
    let weight = weights(x, Some(qw));
    let mut max_scale = 0.0f32;
    let subs: [Option<Sub>; QK_K / QB] = std::array::from_fn(|ib| {
        let r = QB * ib..QB * (ib + 1);
        let sub = search(g, &x[r.clone()], &weight[r]);
        if let Some(s) = &sub {
            max_scale = c_max(max_scale, s.scale);
        }
        sub
    });
    let mut qh = [0u16; QK_K / QB];
    for (ib, s) in subs.iter().enumerate() {
        let Some(s) = s else { continue };
        for (k, &j) in s.idx.iter().enumerate() {
            y[2 + 4 * ib + k] = j as u8;
            qh[ib] |= (j >> 8) << (3 * k);
        }
    }
    if max_scale != 0.0 {
        let d = max_scale / 15.0;
        store_fp16(&mut y[0..2], d * 1.125);
        let id = 1.0 / d;
        for (qh, s) in qh.iter_mut().zip(&subs) {
            let (scale, shift) = s.as_ref().map_or((0.0, 1), |s| (s.scale, s.shift));
            let mut l = nearest_int(0.5 * (id * scale - 1.0)).clamp(0, 7) as u16;
            if shift == -1 {
                l |= 8;
            }
            *qh |= l << 12;
        }
    }
    for (ib, h) in qh.iter().enumerate() {
        y[34 + 2 * ib..36 + 2 * ib].copy_from_slice(&h.to_le_bytes());
    }
}
