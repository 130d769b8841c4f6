//! The 32-element block encoders llama-quantize uses with an importance matrix
//! (`quantize_row_q4_0_impl`, `_q4_1_impl`, `_q5_0_impl`, `_q5_1_impl` in ggml's
//! `src/ggml-quants.c`): each value's search weight is its importance times `sqrt(sigma2 + x²)`,
//! `sigma2` the mean square of the whole row; Q4_0/Q5_0 search a symmetric scale
//! (`make_qx_quants`), Q4_1/Q5_1 a scale and min (`make_qkx3_quants`). Q8_0 ignores the matrix.

use super::legacy::{pack_q5, QK};
use super::num::store_fp16;
use super::search::{make_qkx2_quants, make_qx_quants};

/// The row's `sigma2`: `sum(x²) / n`, summed in order over the whole row.
pub(crate) fn row_sigma2(row: &[f32]) -> f32 {
    let mut sum = 0.0f32;
    for &v in row {
        sum += v * v;
    }
    sum / row.len() as f32
}

/// The search weights of one block.
#[inline(always)]
fn weights(x: &[f32; QK], qw: &[f32; QK], sigma2: f32) -> [f32; QK] {
    std::array::from_fn(|i| qw[i] * (sigma2 + x[i] * x[i]).sqrt())
}

/// Packs 4-bit levels: the first half of the block in the low nibbles.
#[inline(always)]
fn pack_q4(l: &[u8; QK], qs: &mut [u8]) {
    for j in 0..QK / 2 {
        qs[j] = l[j] | (l[j + QK / 2] << 4);
    }
}

/// Encodes one Q4_0 block with importance `qw` in a row of mean square `sigma2`.
pub(crate) fn quantize_q4_0(x: &[f32; QK], qw: &[f32; QK], sigma2: f32, y: &mut [u8; 18]) {
    let mut l = [0u8; QK];
    let d = make_qx_quants(8, x, &weights(x, qw, sigma2), &mut l);
    store_fp16(&mut y[0..2], d);
    pack_q4(&l, &mut y[2..]);
}

/// Encodes one Q5_0 block with importance `qw` in a row of mean square `sigma2`.
pub(crate) fn quantize_q5_0(x: &[f32; QK], qw: &[f32; QK], sigma2: f32, y: &mut [u8; 22]) {
    let mut l = [0u8; QK];
    let d = make_qx_quants(16, x, &weights(x, qw, sigma2), &mut l);
    store_fp16(&mut y[0..2], d);
    let (qh, qs) = y[2..].split_at_mut(4);
    pack_q5(&l, qh, qs);
}

/// The scale-and-min search of Q4_1/Q5_1: stores `d` and `m` and returns the levels.
#[inline(always)]
fn scale_min_levels(x: &[f32; QK], qw: &[f32; QK], sigma2: f32, nmax: i32, head: &mut [u8]) -> [u8; QK] {
    let mut l = [0u8; QK];
    let (d, the_min) = make_qkx2_quants::<QK, false>(nmax, x, &weights(x, qw, sigma2), &mut l, -0.9, 0.05, 36);
    store_fp16(&mut head[0..2], d);
    store_fp16(&mut head[2..4], -the_min);
    l
}

/// Encodes one Q4_1 block with importance `qw` in a row of mean square `sigma2`.
pub(crate) fn quantize_q4_1(x: &[f32; QK], qw: &[f32; QK], sigma2: f32, y: &mut [u8; 20]) {
    let l = scale_min_levels(x, qw, sigma2, 15, &mut y[0..4]);
    pack_q4(&l, &mut y[4..]);
}

/// Encodes one Q5_1 block with importance `qw` in a row of mean square `sigma2`.
pub(crate) fn quantize_q5_1(x: &[f32; QK], qw: &[f32; QK], sigma2: f32, y: &mut [u8; 24]) {
    let l = scale_min_levels(x, qw, sigma2, 31, &mut y[0..4]);
    let (qh, qs) = y[4..].split_at_mut(4);
    pack_q5(&l, qh, qs);
}
