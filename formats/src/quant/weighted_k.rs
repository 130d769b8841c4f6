//! The k-quant encoders llama-quantize uses with an importance matrix (`quantize_row_q2_K_impl` ..
//! `quantize_row_q5_K_impl` in ggml's `src/ggml-quants.c`; Q6_K's is in `q6k.rs`): each value's
//! search weight is its importance times `sqrt(sigma2 + x²)`, `sigma2` the super-block's mean square
//! (twice it for Q3_K..Q5_K), and the sub-block scales (and mins) are themselves quantized by a
//! weighted search (`make_qp_quants`, `make_qx_quants`) instead of against their maximum.

use super::num::{arr, arr_mut};
use super::q2k::write_q2_k;
use super::q3k::write_q3_k;
use super::q4k_q5k::{pack_q4_k, pack_q5_k, write_head};
use super::qp::make_qp_quants;
use super::search::{make_qkx2_quants, make_qx_quants};

/// Elements per super-block.
const QK_K: usize = 256;

/// `sum(x²)` over a super-block, summed in order.
#[inline(always)]
fn sum_squares(x: &[f32; QK_K]) -> f32 {
    let mut sum = 0.0f32;
    for &v in x {
        sum += v * v;
    }
    sum
}

/// The search weights of `N` values: `qw[i] * sqrt(sigma2 + x[i]²)`, and their sum.
#[inline(always)]
fn weights<const N: usize>(x: &[f32], qw: &[f32], sigma2: f32) -> ([f32; N], f32) {
    let w: [f32; N] = std::array::from_fn(|i| qw[i] * (sigma2 + x[i] * x[i]).sqrt());
    let mut sum = 0.0f32;
    for &v in &w {
        sum += v;
    }
    (w, sum)
}

/// Encodes one Q2_K super-block with importance `qw`.
pub(crate) fn quantize_q2_k(x: &[f32; QK_K], qw: &[f32; QK_K], y: &mut [u8; 84]) {
    let sigma2 = sum_squares(x) / QK_K as f32;
    let mut l = [0u8; QK_K];
    let mut scales = [0f32; 16];
    let mut mins = [0f32; 16];
    let mut sw = [0f32; 16];
    for j in 0..16 {
        let r = 16 * j..16 * j + 16;
        let (w, sum) = weights::<16>(&x[r.clone()], &qw[r.clone()], sigma2);
        sw[j] = sum;
        let (scale, min) = make_qkx2_quants::<16, false>(3, arr(&x[r.clone()]), &w, arr_mut(&mut l[r]), -0.9, 0.05, 36);
        scales[j] = scale;
        mins[j] = min;
    }
    let (mut ls, mut lm) = ([0u8; 16], [0u8; 16]);
    let dm = make_qp_quants(15, &scales, &mut ls, &sw);
    let mm = make_qp_quants(15, &mins, &mut lm, &sw);
    let sc: [u8; 16] = std::array::from_fn(|j| ls[j] | (lm[j] << 4));
    write_q2_k(x, &sc, dm, mm, &mut l, y);
}

/// Encodes one Q3_K super-block with importance `qw`.
pub(crate) fn quantize_q3_k(x: &[f32; QK_K], qw: &[f32; QK_K], y: &mut [u8; 110]) {
    let sigma2 = 2.0 * sum_squares(x) / QK_K as f32;
    let mut levels = [0u8; QK_K];
    let mut scales = [0f32; 16];
    let mut sw = [0f32; 16];
    for j in 0..16 {
        let r = 16 * j..16 * j + 16;
        let (w, sum) = weights::<16>(&x[r.clone()], &qw[r.clone()], sigma2);
        sw[j] = sum;
        scales[j] = make_qx_quants(4, arr(&x[r.clone()]), &w, arr_mut(&mut levels[r]));
    }
    let mut ls = [0u8; 16];
    let d = make_qx_quants(32, &scales, &sw, &mut ls);
    let mut l: [i8; QK_K] = std::array::from_fn(|i| levels[i] as i8);
    write_q3_k(x, &ls, d, &mut l, y);
}

/// The search Q4_K and Q5_K share: per sub-block `make_qkx3_quants` with the importance weights,
/// scales and mins through `make_qp_quants` (clamped to 63 for Q5_K only, as ggml does), then the
/// common head. Returns the levels.
fn quantize_levels(x: &[f32; QK_K], qw: &[f32; QK_K], nmax: i32, clamp: bool, head: &mut [u8; 16]) -> [u8; QK_K] {
    let sigma2 = 2.0 * sum_squares(x) / QK_K as f32;
    let mut l = [0u8; QK_K];
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let mut sw = [0f32; 8];
    for j in 0..8 {
        let r = 32 * j..32 * j + 32;
        let (w, sum) = weights::<32>(&x[r.clone()], &qw[r.clone()], sigma2);
        sw[j] = sum;
        let (scale, min) =
            make_qkx2_quants::<32, false>(nmax, arr(&x[r.clone()]), &w, arr_mut(&mut l[r]), -0.9, 0.05, 36);
        scales[j] = scale;
        mins[j] = min;
    }
    let (mut ls, mut lm) = ([0u8; 8], [0u8; 8]);
    let d = make_qp_quants(63, &scales, &mut ls, &sw);
    let m = make_qp_quants(63, &mins, &mut lm, &sw);
    if clamp {
        ls.iter_mut().chain(lm.iter_mut()).for_each(|v| *v = (*v).min(63));
    }
    write_head(x, nmax, &ls, &lm, d, m, head, &mut l);
    l
}

/// Encodes one Q4_K super-block with importance `qw`.
pub(crate) fn quantize_q4_k(x: &[f32; QK_K], qw: &[f32; QK_K], y: &mut [u8; 144]) {
    let l = quantize_levels(x, qw, 15, false, arr_mut(&mut y[0..16]));
    pack_q4_k(&l, y);
}

/// Encodes one Q5_K super-block with importance `qw`.
pub(crate) fn quantize_q5_k(x: &[f32; QK_K], qw: &[f32; QK_K], y: &mut [u8; 176]) {
    let l = quantize_levels(x, qw, 31, true, arr_mut(&mut y[0..16]));
    pack_q5_k(&l, y);
}
