//! Q3_K: 256-element super-blocks of 16 sub-blocks, signed 3-bit levels with a 6-bit scale per
//! sub-block (`quantize_row_q3_K_ref` / `dequantize_row_q3_K`; the importance-matrix search is in
//! `weighted_k.rs`).
//!
//! Layout (110 bytes): `u8 hmask[32]` (high bit of element `e` in `hmask[e % 32]`, bit `e / 32`);
//! `u8 qs[64]` (low 2 bits, packed like Q2_K); `u8 scales[12]` (16 six-bit scales, offset 32);
//! `half d`.

use super::num::{arr, arr_mut, load_fp16, nearest_int, store_fp16};
use super::q2k::pack_2bit;
use super::search::make_q3_quants;

/// Elements per super-block.
const QK_K: usize = 256;

/// The 6-bit scale of sub-block `j` (0..16), without the offset of 32.
#[inline(always)]
fn scale_q3(j: usize, sc: &[u8]) -> i32 {
    let low = if j < 8 { sc[j] & 0xF } else { sc[j - 8] >> 4 };
    let high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
    (low | (high << 4)) as i32
}

/// Encodes one Q3_K super-block.
pub(crate) fn quantize_q3_k(x: &[f32; QK_K], y: &mut [u8; 110]) {
    let mut l = [0i8; QK_K];
    let mut scales = [0f32; 16];
    let mut max_scale = 0.0f32;
    let mut amax = 0.0f32;
    for j in 0..16 {
        let xs: &[f32; 16] = arr(&x[16 * j..16 * j + 16]);
        let scale = make_q3_quants(4, xs, arr_mut(&mut l[16 * j..16 * j + 16]));
        scales[j] = scale;
        if scale.abs() > amax {
            amax = scale.abs();
            max_scale = scale;
        }
    }

    let mut ls = [0u8; 16];
    let d = if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        for j in 0..16 {
            ls[j] = ((nearest_int(iscale * scales[j]) as i8).clamp(-32, 31) + 32) as u8;
        }
        1.0 / iscale
    } else {
        0.0
    };
    write_q3_k(x, &ls, d, &mut l, y);
}

/// The part every Q3_K encoder shares once the scales are chosen: the 6-bit scales `ls` (offset
/// by 32) packed, `d` stored as fp16, `l` (levels `0..8`) re-quantized with the stored values (a
/// sub-block whose scale is zero keeps the search's levels) and split into high-bit mask and low bits.
pub(crate) fn write_q3_k(x: &[f32; QK_K], ls: &[u8; 16], d: f32, l: &mut [i8; QK_K], y: &mut [u8; 110]) {
    let (hmask, rest) = y.split_at_mut(32);
    let (qs, rest) = rest.split_at_mut(64);
    let (sc, dd) = rest.split_at_mut(12);
    sc.fill(0);
    for (j, &v) in ls.iter().enumerate() {
        if j < 8 {
            sc[j] = v & 0xF;
        } else {
            sc[j - 8] |= (v & 0xF) << 4;
        }
        sc[j % 4 + 8] |= (v >> 4) << (2 * (j / 4));
    }
    let d = store_fp16(dd, d);

    for j in 0..16 {
        let dl = d * (scale_q3(j, sc) - 32) as f32;
        if dl == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            l[i] = (nearest_int(x[i] / dl).clamp(-4, 3) + 4) as i8;
        }
    }

    hmask.fill(0);
    let mut low = [0u8; QK_K];
    for (e, &v) in l.iter().enumerate() {
        let mut v = v;
        if v > 3 {
            hmask[e % 32] |= 1 << (e / 32);
            v -= 4;
        }
        low[e] = v as u8;
    }
    pack_2bit(&low, qs);
}

/// Decodes one Q3_K super-block.
pub(crate) fn dequantize_q3_k(y: &[u8; 110], x: &mut [f32; QK_K]) {
    let (hmask, qs, sc) = (&y[0..32], &y[32..96], &y[96..108]);
    let d = load_fp16(&y[108..110]);
    for (e, v) in x.iter_mut().enumerate() {
        let (h, s, i) = (e / 128, (e / 32) % 4, e % 32);
        let dl = d * (scale_q3(e / 16, sc) - 32) as f32;
        let q = ((qs[32 * h + i] >> (2 * s)) & 3) as i32;
        let offset = if hmask[i] & (1 << (e / 32)) != 0 { 0 } else { 4 };
        *v = dl * (q - offset) as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_block() {
        let mut y = [0xAAu8; 110];
        quantize_q3_k(&[0.0; QK_K], &mut y);
        assert!(y.iter().all(|&b| b == 0));
        let mut back = [1f32; QK_K];
        dequantize_q3_k(&y, &mut back);
        assert!(back.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn scales_pack_and_unpack() {
        // Exactly representable levels -4..3 with one common scale decode exactly.
        let x: [f32; QK_K] = std::array::from_fn(|e| ((e * 5 % 8) as f32 - 4.0) * 0.5);
        let mut y = [0u8; 110];
        quantize_q3_k(&x, &mut y);
        let mut back = [0f32; QK_K];
        dequantize_q3_k(&y, &mut back);
        for e in 0..QK_K {
            assert!((back[e] - x[e]).abs() < 1e-2, "{e}: {} vs {}", back[e], x[e]);
        }
    }
}
