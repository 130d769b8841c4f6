//! Q2_K: 256-element super-blocks of 16 sub-blocks, 2-bit levels with a 4-bit scale and min per
//! sub-block (`quantize_row_q2_K_ref` / `dequantize_row_q2_K`; the importance-matrix search is in
//! `weighted_k.rs`).
//!
//! Layout (84 bytes): `u8 scales[16]` (scale in the low, min in the high nibble); `u8 qs[64]`;
//! `half d`; `half dmin`.

use super::num::{arr, arr_mut, load_fp16, nearest_int, store_fp16};
use super::search::make_qkx2_quants;

/// Elements per super-block.
const QK_K: usize = 256;

/// Writes four 2-bit levels per byte: element `128h + 32s + l` goes to `qs[32h + l]`, bits `2s`.
#[inline(always)]
pub(crate) fn pack_2bit(l: &[u8; QK_K], qs: &mut [u8]) {
    for h in 0..2 {
        let j = 128 * h;
        for i in 0..32 {
            qs[32 * h + i] = l[j + i] | (l[j + i + 32] << 2) | (l[j + i + 64] << 4) | (l[j + i + 96] << 6);
        }
    }
}

/// Encodes one Q2_K super-block.
pub(crate) fn quantize_q2_k(x: &[f32; QK_K], y: &mut [u8; 84]) {
    let mut l = [0u8; QK_K];
    let mut scales = [0f32; 16];
    let mut mins = [0f32; 16];
    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    for j in 0..16 {
        let xs: &[f32; 16] = arr(&x[16 * j..16 * j + 16]);
        let weights: [f32; 16] = std::array::from_fn(|i| xs[i].abs());
        let ls: &mut [u8; 16] = arr_mut(&mut l[16 * j..16 * j + 16]);
        let (scale, min) = make_qkx2_quants::<16, true>(3, xs, &weights, ls, -0.5, 0.1, 15);
        scales[j] = scale;
        mins[j] = min;
        if scale > max_scale {
            max_scale = scale;
        }
        if min > max_min {
            max_min = min;
        }
    }

    let mut sc = [0u8; 16];
    let d = if max_scale > 0.0 {
        let iscale = 15.0 / max_scale;
        for j in 0..16 {
            sc[j] = nearest_int(iscale * scales[j]) as u8;
        }
        max_scale / 15.0
    } else {
        0.0
    };
    let dmin = if max_min > 0.0 {
        let iscale = 15.0 / max_min;
        for j in 0..16 {
            sc[j] = (sc[j] as i32 | (nearest_int(iscale * mins[j]) << 4)) as u8;
        }
        max_min / 15.0
    } else {
        0.0
    };
    write_q2_k(x, &sc, d, dmin, &mut l, y);
}

/// The part every Q2_K encoder shares once the scales are chosen: the packed 4-bit scales and mins
/// `sc`, `d` and `dmin` stored as fp16, `l` re-quantized with the stored values (a sub-block whose
/// scale is zero keeps the search's levels) and packed.
pub(crate) fn write_q2_k(x: &[f32; QK_K], sc: &[u8; 16], d: f32, dmin: f32, l: &mut [u8; QK_K], y: &mut [u8; 84]) {
    let (head, rest) = y.split_at_mut(16);
    let (qs, dd) = rest.split_at_mut(64);
    head.copy_from_slice(sc);
    let d = store_fp16(&mut dd[0..2], d);
    let dmin = store_fp16(&mut dd[2..4], dmin);
    for ((&s, ls), xs) in sc.iter().zip(l.chunks_exact_mut(16)).zip(x.chunks_exact(16)) {
        let dl = d * (s & 0xF) as f32;
        if dl == 0.0 {
            continue;
        }
        let ml = dmin * (s >> 4) as f32;
        for (l, &v) in ls.iter_mut().zip(xs) {
            *l = nearest_int((v + ml) / dl).clamp(0, 3) as u8;
        }
    }
    pack_2bit(l, qs);
}

/// Decodes one Q2_K super-block.
pub(crate) fn dequantize_q2_k(y: &[u8; 84], x: &mut [f32; QK_K]) {
    let d = load_fp16(&y[80..82]);
    let min = load_fp16(&y[82..84]);
    for (e, v) in x.iter_mut().enumerate() {
        let (h, s, i) = (e / 128, (e / 32) % 4, e % 32);
        let sc = y[e / 16];
        let q = (y[16 + 32 * h + i] >> (2 * s)) & 3;
        let dl = d * (sc & 0xF) as f32;
        let ml = min * (sc >> 4) as f32;
        *v = dl * q as f32 - ml;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_block_is_all_zero() {
        let mut y = [0xAAu8; 84];
        quantize_q2_k(&[0.0; QK_K], &mut y);
        assert_eq!(y, [0u8; 84]);
    }

    #[test]
    fn levels_land_where_the_decoder_reads_them() {
        // Sub-block j holds the constant level pattern of element e: q = e/32 % 4 with a
        // common scale, so decode(encode) reproduces x exactly.
        let x: [f32; QK_K] = std::array::from_fn(|e| ((e / 32) % 4) as f32);
        let mut y = [0u8; 84];
        quantize_q2_k(&x, &mut y);
        let mut back = [0f32; QK_K];
        dequantize_q2_k(&y, &mut back);
        for e in 0..QK_K {
            assert!((back[e] - x[e]).abs() < 1e-2, "{e}: {} vs {}", back[e], x[e]);
        }
    }
}
