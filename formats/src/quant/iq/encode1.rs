//! The IQ1_S encoder, as ggml's `quantize_row_iq1_s_impl` writes it through `quantize_iq1_s` (what
//! `ggml_quantize_chunk`, hence llama-quantize, calls; ggml asserts an importance matrix): per 32
//! values, an exhaustive search of the two boundaries that split the sorted values into the levels
//! -1, 0, 1 (shifted by ±1/8), then the 8-value codewords of those levels (or their best neighbours),
//! one 3-bit scale and shift sign per 32 values under an fp16 super-block scale.

use super::grid::{iq1, Grid};
use super::search::sum_squares;
use super::QK_K;
use crate::quant::num::{c_max, nearest_int, store_fp16};

/// Values per sub-block.
const QB: usize = 32;

/// ggml's `GROUP_MAX_EPS_IQ1_S`: sub-blocks whose largest magnitude is below it are skipped.
const GROUP_MAX_EPS_IQ1_S: f32 = 1e-12;

/// ggml's `IQ1S_DELTA`.
const DELTA: f32 = 0.125;

/// The level values with a positive shift.
const X_P: [f32; 3] = [-1.0 + DELTA, DELTA, 1.0 + DELTA];

/// The level values with a negative shift.
const X_M: [f32; 3] = [-1.0 - DELTA, -DELTA, 1.0 - DELTA];

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

/// Searches one 32-value sub-block with weights `weight`; None when ggml skips it.
fn search(g: &Grid<8>, xb: &[f32], weight: &[f32; QB]) -> Option<Sub> {
    let max = xb[1..].iter().fold(xb[0].abs(), |m, &x| c_max(m, x.abs()));
    if max < GROUP_MAX_EPS_IQ1_S {
        return None;
    }
    // glibc's qsort of (value, index) pairs by value is a merge sort: stable.
    let mut order: [usize; QB] = std::array::from_fn(|j| j);
    order.sort_by(|&a, &b| xb[a].partial_cmp(&xb[b]).unwrap_or(std::cmp::Ordering::Equal));
    let (mut sumx, mut sumw) = ([0.0f32; QB + 1], [0.0f32; QB + 1]);
    for (j, &i) in order.iter().enumerate() {
        sumx[j + 1] = sumx[j] + weight[i] * xb[i];
        sumw[j + 1] = sumw[j] + weight[i];
    }
    let (mut scale, i1, i2, mut shift) = best_split(&sumx, &sumw)?;
    let mut l = [0i8; QB];
    for (j, &i) in order.iter().enumerate() {
        l[i] = if j < i1 {
            0
        } else if j < i2 {
            1
        } else {
            2
        };
    }
    if scale < 0.0 {
        l.iter_mut().for_each(|l| *l = 2 - *l);
        (scale, shift) = (-scale, -shift);
    }
    let xx = if shift == 1 { X_P } else { X_M };
    let value = |l: i8| xx[l as usize];
    let mut idx = [0u16; QB / 8];
    let mut all_on_grid = true;
    for (k, idx) in idx.iter_mut().enumerate() {
        let r = 8 * k..8 * k + 8;
        let u = g.point(&l[r.clone()]);
        *idx = match g.at(u) {
            Some(j) => j,
            None => {
                all_on_grid = false;
                let j = g.best_neighbour_by(u, &xb[r.clone()], &weight[r.clone()], scale, value);
                l[r].copy_from_slice(g.levels(j));
                j
            }
        };
    }
    if !all_on_grid {
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for ((&w, &x), &l) in weight.iter().zip(xb).zip(&l) {
            let q = value(l);
            sumqx += w * q * x;
            sumq2 += w * q * q;
        }
        if sumqx > 0.0 && sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    Some(Sub { scale, shift, idx })
}

/// Encodes one IQ1_S super-block (50 bytes: `d`, 32 low index bytes, then per 32 values a u16 of
/// four 3-bit high index parts, a 3-bit scale and the shift sign), weighing the search by `qw`.
pub(crate) fn quantize_iq1_s(x: &[f32; QK_K], qw: &[f32; QK_K], y: &mut [u8; 50]) {
    y.fill(0);
    let g = iq1();
    let sigma2 = 2.0 * sum_squares(x) / QK_K as f32;
    let mut max_scale = 0.0f32;
    let subs: [Option<Sub>; QK_K / QB] = std::array::from_fn(|ib| {
        let xb = &x[QB * ib..QB * (ib + 1)];
        let weight = std::array::from_fn(|i| qw[QB * ib + i] * (sigma2 + xb[i] * xb[i]).sqrt());
        let sub = search(g, xb, &weight);
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
