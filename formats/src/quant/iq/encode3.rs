//! The IQ3_XXS and IQ3_S encoders, as ggml's `quantize_row_iq3_xxs_impl` / `quantize_row_iq3_s_impl`
//! write them through `quantize_iq3_xxs` / `quantize_iq3_s` (what `ggml_quantize_chunk`, hence
//! llama-quantize, calls, with or without an importance matrix): per 32 values, a search over 31
//! (IQ3_XXS) or 19 (IQ3_S) scales for the codewords nearest the magnitudes, then one 4-bit scale
//! per 32 values under an fp16 super-block scale.

use super::grid3::{iq3_s, iq3_xxs, point, Grid3};
use super::QK_K;
use crate::quant::iq4::block_weights;
use crate::quant::num::{c_max, nearest_int, store_fp16};

/// Values per sub-block (one scale).
const QB: usize = 32;

/// Sub-blocks per super-block.
const NB: usize = QK_K / QB;

/// ggml's `GROUP_MAX_EPS_IQ3_XXS`: IQ3_XXS sub-blocks whose largest magnitude is below it are skipped.
const GROUP_MAX_EPS_IQ3_XXS: f32 = 1e-8;

/// What differs between the two IQ3 searches.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// Seven stored signs per 8 values (an even count of minus signs), scale steps -15..=15.
    Xxs,
    /// Eight stored signs per 8 values, scale steps -9..=9.
    S,
}

/// One searched sub-block: its scale, codewords and sign bytes.
struct Sub {
    scale: f32,
    idx: [u16; QB / 4],
    signs: [u8; QB / 8],
}

/// `sigma2` of a super-block as the IQ3 encoders form it: `2 · Σx² / 256`, summed in order.
fn sigma2(x: &[f32]) -> f32 {
    let mut sum = 0.0f32;
    for &v in x {
        sum += v * v;
    }
    2.0 * sum / QK_K as f32
}

/// The weighted sums `(Σ w·x·q, Σ w·q²)` with `q = 2l + 1`.
fn sums(weight: &[f32; QB], xval: &[f32; QB], l: &[i8; QB]) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
    for ((&w, &x), &l) in weight.iter().zip(xval).zip(l) {
        let q = f32::from(2 * l + 1);
        sumqx += w * x * q;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// The levels nearest `id · xval` of four values, as a lattice point (also written to `l`).
fn round_levels(id: f32, xval: &[f32], l: &mut [i8]) -> usize {
    for (l, &x) in l.iter_mut().zip(xval) {
        *l = nearest_int(0.5 * (id * x - 1.0)).clamp(0, 7) as i8;
    }
    point(l)
}

/// The codeword for four values at inverse scale `id`: the lattice point's own, or its best
/// neighbour at `scale`; writes its levels to `l` and returns it with whether it was on the grid.
fn codeword(g: &Grid3, id: f32, scale: f32, xval: &[f32], waux: &[f32], l: &mut [i8]) -> (u16, bool) {
    let u = round_levels(id, xval, l);
    match g.at(u) {
        Some(j) => (j, true),
        None => {
            let j = g.best_neighbour(u, xval, waux, scale);
            l.copy_from_slice(g.levels(j));
            (j, false)
        }
    }
}

/// Searches one 32-value sub-block with search weights `weight`; None when ggml skips it as zero.
fn search(kind: Kind, g: &Grid3, xb: &[f32], weight: &[f32; QB]) -> Option<Sub> {
    let waux: [f32; QB] = std::array::from_fn(|i| weight[i].sqrt());
    let mut xval = [0.0f32; QB];
    let mut signs = [0u8; QB / 8];
    for (k, s) in signs.iter_mut().enumerate() {
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
        if kind == Kind::Xxs {
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
    let max = xval[1..].iter().fold(xval[0], |m, &x| c_max(m, x));
    let skip = match kind {
        Kind::Xxs => max < GROUP_MAX_EPS_IQ3_XXS,
        Kind::S => max == 0.0,
    };
    if skip {
        return None;
    }
    let steps = if kind == Kind::Xxs { 15 } else { 9 };
    let (mut l, mut idx, mut on_grid) = ([0i8; QB], [0u16; QB / 4], [kind == Kind::Xxs; QB / 4]);
    let mut best = 0.0f32;
    let mut scale = max / 15.0;
    for is in -steps..=steps {
        let id = (15.0 + is as f32 * 0.2) / max;
        let this_scale = 1.0 / id;
        let (mut laux, mut idx_aux, mut on_aux) = ([0i8; QB], [0u16; QB / 4], [true; QB / 4]);
        for k in 0..QB / 4 {
            let r = 4 * k..4 * k + 4;
            (idx_aux[k], on_aux[k]) = codeword(g, id, this_scale, &xval[r.clone()], &waux[r.clone()], &mut laux[r]);
        }
        let (sumqx, sumq2) = sums(weight, &xval, &laux);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            (l, idx, on_grid) = (laux, idx_aux, on_aux);
        }
    }
    if on_grid.contains(&false) && scale > 0.0 {
        let id = 1.0 / scale;
        for k in 0..QB / 4 {
            // IQ3_XXS keeps the codewords already on the grid; IQ3_S redoes them all.
            if kind == Kind::Xxs && on_grid[k] {
                continue;
            }
            let r = 4 * k..4 * k + 4;
            idx[k] = codeword(g, id, scale, &xval[r.clone()], &waux[r.clone()], &mut l[r]).0;
        }
        let (sumqx, sumq2) = sums(weight, &xval, &l);
        if sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    if scale < 0.0 {
        scale = -scale;
        let mask = if kind == Kind::Xxs { 127 } else { 255 };
        signs.iter_mut().for_each(|s| *s = !*s & mask);
    }
    Some(Sub { scale, idx, signs })
}

/// Searches the eight sub-blocks of a super-block, weighing by `qw` when given (`None` for the
/// skipped ones), and returns them with the largest scale.
fn search_all(kind: Kind, g: &Grid3, x: &[f32; QK_K], qw: Option<&[f32; QK_K]>) -> ([Option<Sub>; NB], f32) {
    let s2 = sigma2(x);
    let mut max_scale = 0.0f32;
    let subs = std::array::from_fn(|ib| {
        let xb = &x[QB * ib..QB * (ib + 1)];
        let weight = block_weights(xb, qw.map(|w| &w[QB * ib..QB * (ib + 1)]), s2);
        let sub = search(kind, g, xb, &weight);
        if let Some(s) = &sub {
            max_scale = c_max(max_scale, s.scale);
        }
        sub
    });
    (subs, max_scale)
}

/// The 4-bit scale of sub-block scale `scale` under the super-block scale `1 / id`.
fn scale_code(id: f32, scale: f32) -> u8 {
    nearest_int(0.5 * (id * scale - 1.0)).clamp(0, 15) as u8
}

/// Encodes one IQ3_XXS super-block (98 bytes: `d`, 64 codeword indices, eight u32 of four 7-bit
/// sign indices and a 4-bit scale), weighing the search by `qw` when given.
pub(crate) fn quantize_iq3_xxs(x: &[f32; QK_K], qw: Option<&[f32; QK_K]>, y: &mut [u8; 98]) {
    y.fill(0);
    let (subs, max_scale) = search_all(Kind::Xxs, iq3_xxs(), x, qw);
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / 31.0;
    store_fp16(&mut y[0..2], d * 1.0125);
    let id = 1.0 / d;
    for (ib, sub) in subs.iter().enumerate() {
        let (mut aux, scale) = match sub {
            Some(s) => {
                for (q, &j) in y[2 + 8 * ib..].iter_mut().zip(&s.idx) {
                    *q = j as u8;
                }
                let signs = s.signs.iter().enumerate().fold(0u32, |a, (k, &b)| a | u32::from(b) << (7 * k));
                (signs, s.scale)
            }
            None => (0, 0.0),
        };
        aux |= u32::from(scale_code(id, scale)) << 28;
        y[66 + 4 * ib..70 + 4 * ib].copy_from_slice(&aux.to_le_bytes());
    }
}

/// Encodes one IQ3_S super-block (110 bytes: `d`, 64 low index bytes, 8 bytes of ninth index
/// bits, 32 sign bytes, eight 4-bit scales), weighing the search by `qw` when given.
pub(crate) fn quantize_iq3_s(x: &[f32; QK_K], qw: Option<&[f32; QK_K]>, y: &mut [u8; 110]) {
    y.fill(0);
    let (subs, max_scale) = search_all(Kind::S, iq3_s(), x, qw);
    // ggml advances its codeword and sign cursors only past the sub-blocks it did not skip.
    let (mut qs, mut signs) = (2, 74);
    for (ib, s) in subs.iter().enumerate() {
        let Some(s) = s else { continue };
        for (k, &j) in s.idx.iter().enumerate() {
            y[qs + k] = j as u8;
            y[66 + ib] |= ((j >> 8) as u8) << k;
        }
        y[signs..signs + QB / 8].copy_from_slice(&s.signs);
        (qs, signs) = (qs + QB / 4, signs + QB / 8);
    }
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / 31.0;
    store_fp16(&mut y[0..2], d * 1.033);
    let id = 1.0 / d;
    for (ib, pair) in subs.chunks_exact(2).enumerate() {
        let code = |s: &Option<Sub>| scale_code(id, s.as_ref().map_or(0.0, |s| s.scale));
        y[106 + ib] = code(&pair[0]) | (code(&pair[1]) << 4);
    }
}
