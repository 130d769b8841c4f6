//! Q6_K: 256-element super-blocks of 16 sub-blocks of 16, signed 6-bit levels with a signed
//! 8-bit scale per sub-block (`quantize_row_q6_K_ref`, `quantize_row_q6_K_impl` with an importance
//! matrix, and `dequantize_row_q6_K`).
//!
//! Layout (210 bytes): `u8 ql[128]; u8 qh[64]; i8 scales[16]; half d` (`d` is last).

use super::num::{arr, arr_mut, load_fp16, nearest_int, store_fp16};
use super::search::{make_qx_quants, squares, GROUP_MAX_EPS};

/// Elements per super-block.
const QK_K: usize = 256;

/// Encodes one Q6_K super-block.
pub(crate) fn quantize_q6_k(x: &[f32; QK_K], y: &mut [u8; 210]) {
    encode(x, y, |xs, _| squares(xs));
}

/// Encodes one Q6_K super-block with the importance `qw` of its values: the sub-block searches
/// weigh each value by its importance alone (`quantize_row_q6_K_impl`).
pub(crate) fn quantize_q6_k_weighted(x: &[f32; QK_K], qw: &[f32; QK_K], y: &mut [u8; 210]) {
    encode(x, y, |_, ib| *arr(&qw[16 * ib..16 * ib + 16]));
}

/// The encoder both variants share; `weights(sub-block values, sub-block index)` gives the search weights.
#[inline(always)]
fn encode(x: &[f32; QK_K], y: &mut [u8; 210], weights: impl Fn(&[f32; 16], usize) -> [f32; 16]) {
    let mut l = [0u8; QK_K];
    let mut scales = [0f32; 16];
    let mut max_scale = 0.0f32;
    let mut max_abs_scale = 0.0f32;
    for ib in 0..16 {
        let xs: &[f32; 16] = arr(&x[16 * ib..16 * ib + 16]);
        let scale = make_qx_quants(32, xs, &weights(xs, ib), arr_mut(&mut l[16 * ib..16 * ib + 16]));
        scales[ib] = scale;
        if scale.abs() > max_abs_scale {
            max_abs_scale = scale.abs();
            max_scale = scale;
        }
    }
    if max_abs_scale < GROUP_MAX_EPS {
        y.fill(0);
        return;
    }

    let (ql, rest) = y.split_at_mut(128);
    let (qh, rest) = rest.split_at_mut(64);
    let (sc, dd) = rest.split_at_mut(16);
    let iscale = -128.0 / max_scale;
    let d = store_fp16(dd, 1.0 / iscale);
    for (s, &scale) in sc.iter_mut().zip(&scales) {
        *s = nearest_int(iscale * scale).min(127) as u8;
    }
    for ((&s, ls), xs) in sc.iter().zip(l.chunks_exact_mut(16)).zip(x.chunks_exact(16)) {
        let dl = d * (s as i8) as f32;
        if dl == 0.0 {
            continue;
        }
        for (l, &v) in ls.iter_mut().zip(xs) {
            *l = (nearest_int(v / dl).clamp(-32, 31) + 32) as u8;
        }
    }

    for h in 0..2 {
        let (j, ql, qh) = (128 * h, &mut ql[64 * h..], &mut qh[32 * h..]);
        for i in 0..32 {
            let (q1, q2, q3, q4) = (l[j + i], l[j + i + 32], l[j + i + 64], l[j + i + 96]);
            ql[i] = (q1 & 0xF) | ((q3 & 0xF) << 4);
            ql[i + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4);
            qh[i] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
        }
    }
}

/// Decodes one Q6_K super-block.
pub(crate) fn dequantize_q6_k(y: &[u8; 210], x: &mut [f32; QK_K]) {
    let d = load_fp16(&y[208..210]);
    for h in 0..2 {
        let ql = &y[64 * h..64 * h + 64];
        let qh = &y[128 + 32 * h..128 + 32 * h + 32];
        let sc = &y[192 + 8 * h..192 + 8 * h + 8];
        let out = &mut x[128 * h..128 * h + 128];
        for i in 0..32 {
            let is = i / 16;
            let q1 = ((ql[i] & 0xF) | ((qh[i] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[i + 32] & 0xF) | (((qh[i] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[i] >> 4) | (((qh[i] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[i + 32] >> 4) | (((qh[i] >> 6) & 3) << 4)) as i32 - 32;
            out[i] = d * (sc[is] as i8) as f32 * q1 as f32;
            out[i + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            out[i + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            out[i + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_block_is_zero() {
        let mut y = [0xAAu8; 210];
        quantize_q6_k(&[1e-17; QK_K], &mut y);
        assert_eq!(y, [0u8; 210]);
    }

    #[test]
    fn exact_grid_survives() {
        // Levels -32..31 in steps of 1/16; every sub-block holds -2 so its search lands on 1/16.
        let x: [f32; QK_K] =
            std::array::from_fn(|e| if e % 16 == 0 { -2.0 } else { ((e * 11 % 64) as f32 - 32.0) * 0.0625 });
        let mut y = [0u8; 210];
        quantize_q6_k(&x, &mut y);
        let mut back = [0f32; QK_K];
        dequantize_q6_k(&y, &mut back);
        for e in 0..QK_K {
            assert_eq!(back[e], x[e], "{e}");
        }
    }
}
