//! The IQ2_XXS, IQ2_XS and IQ2_S encoders, as ggml's `quantize_row_iq2_{xxs,xs,s}_impl` write them
//! through `quantize_iq2_*` (what `ggml_quantize_chunk`, hence llama-quantize, calls): per 32
//! (IQ2_XXS) or 16 values, a search for the 8-value codewords nearest the magnitudes, then one
//! 4-bit scale per sub-block under an fp16 super-block scale. IQ2_XXS and IQ2_XS need an
//! importance matrix (ggml asserts one); IQ2_S takes one when given.

use super::grid::{iq2_s, iq2_xs, iq2_xxs, Grid};
use super::search::{scale_code, search, sum_squares, Params, Refit, Start, Sub};
use super::QK_K;
use crate::quant::num::{c_max, store_fp16};

/// The IQ2_XXS search: 32-value sub-blocks, seven stored signs per 8 values, scales from
/// `make_qp_quants` in steps -6..=6, every codeword refitted.
const XXS: Params = Params { parity: true, eps: 1e-15, steps: 6, step: 0.1, start: Start::Qp, refit: Refit::Always };

/// The IQ2_XS search: 16-value sub-blocks, seven stored signs per 8 values, scale steps -9..=9.
const XS: Params = Params { parity: true, eps: 1e-15, steps: 9, step: 0.1, start: Start::Max, refit: Refit::OffGrid };

/// The IQ2_S search: 16-value sub-blocks, eight stored signs per 8 values, scale steps -9..=9,
/// sub-blocks below ggml's `GROUP_MAX_EPS_IQ2_S` skipped.
const S: Params = Params { parity: false, eps: 1e-8, steps: 9, step: 0.1, start: Start::Max, refit: Refit::OffGrid };

/// Searches the `QK_K / qb` sub-blocks of `qb` values of a super-block (`None` for the skipped
/// ones) and returns them with the largest scale. The weights are `qw · √(σ² + x²)` with
/// `σ² = k · Σx² / 256`, or `σ²/4 + x²` without an importance matrix.
fn search_all<const NB: usize>(
    p: &Params,
    g: &Grid<8>,
    k: f32,
    x: &[f32; QK_K],
    qw: Option<&[f32; QK_K]>,
) -> ([Option<Sub>; NB], f32) {
    let qb = QK_K / NB;
    let sigma2 = k * sum_squares(x) / QK_K as f32;
    let mut max_scale = 0.0f32;
    let subs = std::array::from_fn(|ib| {
        let r = qb * ib..qb * (ib + 1);
        let xb = &x[r.clone()];
        let mut weight = [0.0f32; QK_K / 8];
        for (i, (w, &x)) in weight.iter_mut().zip(xb).enumerate() {
            *w = match qw {
                Some(qw) => qw[r.start + i] * (sigma2 + x * x).sqrt(),
                None => 0.25 * sigma2 + x * x,
            };
        }
        let sub = search(p, g, xb, &weight[..qb]);
        if let Some(s) = &sub {
            max_scale = c_max(max_scale, s.scale);
        }
        sub
    });
    (subs, max_scale)
}

/// Packs the 4-bit scales of 16 sub-blocks, two per byte, under the super-block scale `1 / id`.
fn pack_scales(id: f32, subs: &[Option<Sub>; 16], y: &mut [u8]) {
    for (y, pair) in y.iter_mut().zip(subs.chunks_exact(2)) {
        let code = |s: &Option<Sub>| scale_code(id, s.as_ref().map_or(0.0, |s| s.scale));
        *y = code(&pair[0]) | (code(&pair[1]) << 4);
    }
}

/// Encodes one IQ2_XXS super-block (66 bytes: `d`, then per 32 values a u32 of four codeword
/// indices and a u32 of four 7-bit sign indices and a 4-bit scale), weighing the search by `qw`.
pub(crate) fn quantize_iq2_xxs(x: &[f32; QK_K], qw: &[f32; QK_K], y: &mut [u8; 66]) {
    y.fill(0);
    let (subs, max_scale) = search_all::<8>(&XXS, iq2_xxs(), 1.0, x, Some(qw));
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / 31.0;
    store_fp16(&mut y[0..2], d);
    let id = 1.0 / d;
    for (ib, sub) in subs.iter().enumerate() {
        let (mut grid, mut aux, scale) = (0u32, 0u32, sub.as_ref().map_or(0.0, |s| s.scale));
        if let Some(s) = sub {
            for k in 0..4 {
                grid |= u32::from(s.idx[k]) << (8 * k);
                aux |= u32::from(s.signs[k]) << (7 * k);
            }
        }
        aux |= u32::from(scale_code(id, scale)) << 28;
        y[2 + 8 * ib..6 + 8 * ib].copy_from_slice(&grid.to_le_bytes());
        y[6 + 8 * ib..10 + 8 * ib].copy_from_slice(&aux.to_le_bytes());
    }
}

/// Encodes one IQ2_XS super-block (74 bytes: `d`, per 8 values a u16 of a 9-bit codeword index
/// and 7 sign bits, sixteen 4-bit scales), weighing the search by `qw`.
pub(crate) fn quantize_iq2_xs(x: &[f32; QK_K], qw: &[f32; QK_K], y: &mut [u8; 74]) {
    y.fill(0);
    let (subs, max_scale) = search_all::<16>(&XS, iq2_xs(), 1.0, x, Some(qw));
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / 31.0;
    store_fp16(&mut y[0..2], d);
    let id = 1.0 / d;
    for (ib, s) in subs.iter().enumerate() {
        let Some(s) = s else { continue };
        for k in 0..2 {
            let q = s.idx[k] | u16::from(s.signs[k]) << 9;
            let o = 2 + 4 * ib + 2 * k;
            y[o..o + 2].copy_from_slice(&q.to_le_bytes());
        }
    }
    pack_scales(id, &subs, &mut y[66..74]);
}

/// Encodes one IQ2_S super-block (82 bytes: `d`, 32 low index bytes, 32 sign bytes, 8 bytes of
/// the two high index bits, sixteen 4-bit scales), weighing the search by `qw` when given.
pub(crate) fn quantize_iq2_s(x: &[f32; QK_K], qw: Option<&[f32; QK_K]>, y: &mut [u8; 82]) {
    y.fill(0);
    let (subs, max_scale) = search_all::<16>(&S, iq2_s(), 2.0, x, qw);
    for (ib, s) in subs.iter().enumerate() {
        let Some(s) = s else { continue };
        for k in 0..2 {
            let (i8, j) = (2 * ib + k, s.idx[k]);
            y[2 + i8] = j as u8;
            y[34 + i8] = s.signs[k];
            y[66 + i8 / 4] |= ((j >> 8) as u8) << (2 * (i8 % 4));
        }
    }
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / 31.0;
    store_fp16(&mut y[0..2], d * 0.9875);
    pack_scales(1.0 / d, &subs, &mut y[74..82]);
}
