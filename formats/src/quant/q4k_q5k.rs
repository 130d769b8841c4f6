//! Q4_K and Q5_K: 256-element super-blocks of 8 sub-blocks of 32, asymmetric 4/5-bit levels with
//! a 6-bit scale and min per sub-block (`quantize_row_q4_K_ref`, `quantize_row_q5_K_ref` and
//! their `dequantize_row_*`).
//!
//! Layouts: Q4_K (144 bytes) `half d; half dmin; u8 scales[12]; u8 qs[128]`;
//! Q5_K (176 bytes) `half d; half dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]`.

use super::num::{arr, arr_mut, get_scale_min_k4, load_fp16, nearest_int, store_fp16};
use super::search::make_qkx2_quants;

/// Elements per super-block.
const QK_K: usize = 256;

/// The reference search of Q4_K and Q5_K: per sub-block `make_qkx2_quants` weighted by
/// `av_x + |x|`, scales and mins quantized to 6 bits against their maxima, then [`write_head`].
/// `nmax` is 15 or 31; `rmin`/`nstep` are the search parameters of the type.
fn quantize_levels(x: &[f32; QK_K], nmax: i32, rmin: f32, nstep: i32, head: &mut [u8; 16], l: &mut [u8; QK_K]) {
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    for j in 0..8 {
        let xs: &[f32; 32] = arr(&x[32 * j..32 * j + 32]);
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let weights: [f32; 32] = std::array::from_fn(|i| av_x + xs[i].abs());
        let ls: &mut [u8; 32] = arr_mut(&mut l[32 * j..32 * j + 32]);
        let (scale, min) = make_qkx2_quants::<32, false>(nmax, xs, &weights, ls, rmin, 0.1, nstep);
        scales[j] = scale;
        mins[j] = min;
        if scale > max_scale {
            max_scale = scale;
        }
        if min > max_min {
            max_min = min;
        }
    }

    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let ls: [u8; 8] = std::array::from_fn(|j| (nearest_int(inv_scale * scales[j]) as u8).min(63));
    let lm: [u8; 8] = std::array::from_fn(|j| (nearest_int(inv_min * mins[j]) as u8).min(63));
    write_head(x, nmax, &ls, &lm, max_scale / 63.0, max_min / 63.0, head, l);
}

/// The part every Q4_K/Q5_K encoder shares once the scales are chosen: the 6-bit scales `ls` and
/// mins `lm` packed into `head[4..16]`, `d` and `dmin` stored as fp16 in `head[0..4]`, and `l`
/// re-quantized with the stored values (a sub-block whose scale is zero keeps the search's levels).
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_head(
    x: &[f32; QK_K],
    nmax: i32,
    ls: &[u8; 8],
    lm: &[u8; 8],
    d: f32,
    dmin: f32,
    head: &mut [u8; 16],
    l: &mut [u8; QK_K],
) {
    let (dd, sc) = head.split_at_mut(4);
    let sc: &mut [u8; 12] = arr_mut(sc);
    for j in 0..8 {
        let (ls, lm) = (ls[j], lm[j]);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    let d = store_fp16(&mut dd[0..2], d);
    let dmin = store_fp16(&mut dd[2..4], dmin);

    for j in 0..8 {
        let (s, m) = get_scale_min_k4(j, sc);
        let dl = d * s as f32;
        if dl == 0.0 {
            continue;
        }
        let dm = dmin * m as f32;
        for i in 32 * j..32 * j + 32 {
            l[i] = nearest_int((x[i] + dm) / dl).clamp(0, nmax) as u8;
        }
    }
}

/// Per-sub-block `(d * scale, dmin * min)` of a Q4_K/Q5_K header.
#[inline(always)]
fn sub_block_factors(head: &[u8]) -> [(f32, f32); 8] {
    let d = load_fp16(&head[0..2]);
    let dmin = load_fp16(&head[2..4]);
    let sc: &[u8; 12] = arr(&head[4..16]);
    std::array::from_fn(|j| {
        let (s, m) = get_scale_min_k4(j, sc);
        (d * s as f32, dmin * m as f32)
    })
}

/// Encodes one Q4_K super-block.
pub(crate) fn quantize_q4_k(x: &[f32; QK_K], y: &mut [u8; 144]) {
    let mut l = [0u8; QK_K];
    quantize_levels(x, 15, -1.0, 20, arr_mut(&mut y[0..16]), &mut l);
    pack_q4_k(&l, y);
}

/// Writes the 4-bit levels `l` into a Q4_K block (after its 16-byte head).
pub(crate) fn pack_q4_k(l: &[u8; QK_K], y: &mut [u8; 144]) {
    let qs = &mut y[16..];
    for c in 0..4 {
        for i in 0..32 {
            qs[32 * c + i] = l[64 * c + i] | (l[64 * c + 32 + i] << 4);
        }
    }
}

/// Decodes one Q4_K super-block.
pub(crate) fn dequantize_q4_k(y: &[u8; 144], x: &mut [f32; QK_K]) {
    let f = sub_block_factors(&y[0..16]);
    let qs = &y[16..];
    for c in 0..4 {
        let ((d1, m1), (d2, m2)) = (f[2 * c], f[2 * c + 1]);
        for i in 0..32 {
            let q = qs[32 * c + i];
            x[64 * c + i] = d1 * (q & 0xF) as f32 - m1;
            x[64 * c + 32 + i] = d2 * (q >> 4) as f32 - m2;
        }
    }
}

/// Encodes one Q5_K super-block.
pub(crate) fn quantize_q5_k(x: &[f32; QK_K], y: &mut [u8; 176]) {
    let mut l = [0u8; QK_K];
    quantize_levels(x, 31, -0.5, 15, arr_mut(&mut y[0..16]), &mut l);
    pack_q5_k(&l, y);
}

/// Writes the 5-bit levels `l` into a Q5_K block (after its 16-byte head).
pub(crate) fn pack_q5_k(l: &[u8; QK_K], y: &mut [u8; 176]) {
    let (qh, qs) = y[16..].split_at_mut(32);
    qh.fill(0);
    for c in 0..4 {
        for i in 0..32 {
            let (l1, l2) = (l[64 * c + i], l[64 * c + 32 + i]);
            qh[i] |= ((l1 > 15) as u8) << (2 * c);
            qh[i] |= ((l2 > 15) as u8) << (2 * c + 1);
            qs[32 * c + i] = (l1 & 0xF) | ((l2 & 0xF) << 4);
        }
    }
}

/// Decodes one Q5_K super-block.
pub(crate) fn dequantize_q5_k(y: &[u8; 176], x: &mut [f32; QK_K]) {
    let f = sub_block_factors(&y[0..16]);
    let (qh, qs) = (&y[16..48], &y[48..]);
    for c in 0..4 {
        let ((d1, m1), (d2, m2)) = (f[2 * c], f[2 * c + 1]);
        for i in 0..32 {
            let q = qs[32 * c + i];
            let h1 = if qh[i] & (1 << (2 * c)) != 0 { 16 } else { 0 };
            let h2 = if qh[i] & (2 << (2 * c)) != 0 { 16 } else { 0 };
            x[64 * c + i] = d1 * ((q & 0xF) + h1) as f32 - m1;
            x[64 * c + 32 + i] = d2 * ((q >> 4) + h2) as f32 - m2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_blocks() {
        let mut y4 = [0xAAu8; 144];
        quantize_q4_k(&[0.0; QK_K], &mut y4);
        assert!(y4.iter().all(|&b| b == 0));
        let mut y5 = [0xAAu8; 176];
        quantize_q5_k(&[0.0; QK_K], &mut y5);
        assert!(y5.iter().all(|&b| b == 0));
    }

    #[test]
    fn exact_grid_survives() {
        // Every sub-block is an exact 4-bit (5-bit) grid with a shared step and offset.
        let x4: [f32; QK_K] = std::array::from_fn(|e| (e * 7 % 16) as f32 * 0.25 - 1.0);
        let mut y4 = [0u8; 144];
        quantize_q4_k(&x4, &mut y4);
        let mut back = [0f32; QK_K];
        dequantize_q4_k(&y4, &mut back);
        for e in 0..QK_K {
            assert!((back[e] - x4[e]).abs() < 2e-3, "q4 {e}: {} vs {}", back[e], x4[e]);
        }
        let x5: [f32; QK_K] = std::array::from_fn(|e| (e * 7 % 32) as f32 * 0.125 - 1.0);
        let mut y5 = [0u8; 176];
        quantize_q5_k(&x5, &mut y5);
        dequantize_q5_k(&y5, &mut back);
        for e in 0..QK_K {
            assert!((back[e] - x5[e]).abs() < 2e-3, "q5 {e}: {} vs {}", back[e], x5[e]);
        }
    }
}
