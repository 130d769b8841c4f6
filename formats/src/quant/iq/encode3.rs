//! The IQ3_XXS and IQ3_S encoders, as ggml's `quantize_row_iq3_xxs_impl` / `quantize_row_iq3_s_impl`
//! write them through `quantize_iq3_xxs` / `quantize_iq3_s` (what `ggml_quantize_chunk`, hence
//! llama-quantize, calls, with or without an importance matrix): per 32 values, a search over 31
//! (IQ3_XXS) or 19 (IQ3_S) scales for the codewords nearest the magnitudes, then one 4-bit scale
//! per 32 values under an fp16 super-block scale.

use super::grid::{iq3_s, iq3_xxs, Grid};
use super::search::{scale_code, search, sum_squares, Params, Refit, Start, Sub};
use super::QK_K;
use crate::quant::iq4::block_weights;
use crate::quant::num::{c_max, store_fp16};

/// Values per sub-block (one scale).
const QB: usize = 32;

/// Sub-blocks per super-block.
const NB: usize = QK_K / QB;

/// The IQ3_XXS search: seven stored signs per 8 values, scale steps -15..=15, sub-blocks below
/// ggml's `GROUP_MAX_EPS_IQ3_XXS` skipped, off-grid codewords refitted.
const XXS: Params = Params { parity: true, eps: 1e-8, steps: 15, step: 0.2, start: Start::Max, refit: Refit::OffGrid };

/// The IQ3_S search: eight stored signs per 8 values, scale steps -9..=9, zero sub-blocks
/// skipped, all codewords refitted when any is off the grid.
const S: Params = Params { parity: false, eps: 0.0, steps: 9, step: 0.2, start: Start::Max, refit: Refit::AnyOff };

/// Searches the eight sub-blocks of a super-block, weighing by `qw` when given (`None` for the
/// skipped ones), and returns them with the largest scale.
fn search_all(p: &Params, g: &Grid<4>, x: &[f32; QK_K], qw: Option<&[f32; QK_K]>) -> ([Option<Sub>; NB], f32) {
    let s2 = 2.0 * sum_squares(x) / QK_K as f32;
    let mut max_scale = 0.0f32;
    let subs = std::array::from_fn(|ib| {
        let xb = &x[QB * ib..QB * (ib + 1)];
        let weight = block_weights(xb, qw.map(|w| &w[QB * ib..QB * (ib + 1)]), s2);
        let sub = search(p, g, xb, &weight);
        if let Some(s) = &sub {
            max_scale = c_max(max_scale, s.scale);
        }
        sub
    });
    (subs, max_scale)
}

/// Encodes one IQ3_XXS super-block (98 bytes: `d`, 64 codeword indices, eight u32 of four 7-bit
/// sign indices and a 4-bit scale), weighing the search by `qw` when given.
pub(crate) fn quantize_iq3_xxs(x: &[f32; QK_K], qw: Option<&[f32; QK_K]>, y: &mut [u8; 98]) {
    y.fill(0);
    let (subs, max_scale) = search_all(&XXS, iq3_xxs(), x, qw);
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
    let (subs, max_scale) = search_all(&S, iq3_s(), x, qw);
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
