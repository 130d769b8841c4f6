//! The 32-element "legacy" block types Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0
//! (`quantize_row_*_ref` / `dequantize_row_*` in ggml's `src/ggml-quants.c`).

use super::num::{c_max, load_fp16, store_fp16, trunc_to_int};

/// Elements per legacy block.
pub(crate) const QK: usize = 32;

/// Signed value with the largest magnitude (first one wins ties), as Q4_0/Q5_0 pick it.
#[inline(always)]
fn signed_absmax(x: &[f32; QK]) -> f32 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// Minimum and maximum starting from `FLT_MAX` / `-FLT_MAX`, as Q4_1/Q5_1 compute them.
#[inline(always)]
fn min_max(x: &[f32; QK]) -> (f32, f32) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// `1/d`, or 0 when `d` is zero (C: `d ? 1.0f/d : 0.0f`).
#[inline(always)]
fn inverse(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// Encodes one Q8_0 block: `half d; i8 qs[32]`.
pub(crate) fn quantize_q8_0(x: &[f32; QK], y: &mut [u8; 34]) {
    let mut amax = 0.0f32;
    for &v in x {
        amax = c_max(amax, v.abs());
    }
    let d = amax / 127.0;
    let id = inverse(d);
    store_fp16(&mut y[0..2], d);
    for (q, &v) in y[2..].iter_mut().zip(x) {
        *q = trunc_to_int((v * id).round()) as u8;
    }
}

/// Decodes one Q8_0 block.
pub(crate) fn dequantize_q8_0(y: &[u8; 34], x: &mut [f32; QK]) {
    let d = load_fp16(&y[0..2]);
    for (v, &q) in x.iter_mut().zip(&y[2..]) {
        *v = (q as i8) as f32 * d;
    }
}

/// Encodes one Q4_0 block: `half d; u8 qs[16]` (low nibbles = first half of the block).
pub(crate) fn quantize_q4_0(x: &[f32; QK], y: &mut [u8; 18]) {
    let max = signed_absmax(x);
    let d = max / -8.0;
    let id = inverse(d);
    store_fp16(&mut y[0..2], d);
    for j in 0..QK / 2 {
        let q0 = (trunc_to_int(x[j] * id + 8.5) as i8).min(15) as u8;
        let q1 = (trunc_to_int(x[j + QK / 2] * id + 8.5) as i8).min(15) as u8;
        y[2 + j] = q0 | (q1 << 4);
    }
}

/// Decodes one Q4_0 block.
pub(crate) fn dequantize_q4_0(y: &[u8; 18], x: &mut [f32; QK]) {
    let d = load_fp16(&y[0..2]);
    for j in 0..QK / 2 {
        let q = y[2 + j];
        x[j] = ((q & 0xF) as i32 - 8) as f32 * d;
        x[j + QK / 2] = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

/// Encodes one Q4_1 block: `half d; half m; u8 qs[16]`.
pub(crate) fn quantize_q4_1(x: &[f32; QK], y: &mut [u8; 20]) {
    let (min, max) = min_max(x);
    let d = (max - min) / 15.0;
    let id = inverse(d);
    store_fp16(&mut y[0..2], d);
    store_fp16(&mut y[2..4], min);
    for j in 0..QK / 2 {
        let q0 = (trunc_to_int((x[j] - min) * id + 0.5) as i8).min(15) as u8;
        let q1 = (trunc_to_int((x[j + QK / 2] - min) * id + 0.5) as i8).min(15) as u8;
        y[4 + j] = q0 | (q1 << 4);
    }
}

/// Decodes one Q4_1 block.
pub(crate) fn dequantize_q4_1(y: &[u8; 20], x: &mut [f32; QK]) {
    let d = load_fp16(&y[0..2]);
    let m = load_fp16(&y[2..4]);
    for j in 0..QK / 2 {
        let q = y[4 + j];
        x[j] = (q & 0xF) as f32 * d + m;
        x[j + QK / 2] = (q >> 4) as f32 * d + m;
    }
}

/// Packs 5-bit values: low nibbles into `qs`, fifth bits into the little-endian u32 `qh`.
#[inline(always)]
pub(crate) fn pack_q5(q: &[u8; QK], qh: &mut [u8], qs: &mut [u8]) {
    let mut h = 0u32;
    for j in 0..QK / 2 {
        let (q0, q1) = (q[j], q[j + QK / 2]);
        qs[j] = (q0 & 0x0F) | ((q1 & 0x0F) << 4);
        h |= (((q0 & 0x10) >> 4) as u32) << j;
        h |= (((q1 & 0x10) >> 4) as u32) << (j + QK / 2);
    }
    qh.copy_from_slice(&h.to_le_bytes());
}

/// Unpacks the 5-bit values of a Q5_0/Q5_1 block.
#[inline(always)]
fn unpack_q5(qh: &[u8], qs: &[u8]) -> [u8; QK] {
    let h = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut q = [0u8; QK];
    for j in 0..QK / 2 {
        q[j] = (qs[j] & 0x0F) | ((((h >> j) << 4) & 0x10) as u8);
        q[j + QK / 2] = (qs[j] >> 4) | (((h >> (j + 12)) & 0x10) as u8);
    }
    q
}

/// Encodes one Q5_0 block: `half d; u8 qh[4]; u8 qs[16]`.
pub(crate) fn quantize_q5_0(x: &[f32; QK], y: &mut [u8; 22]) {
    let max = signed_absmax(x);
    let d = max / -16.0;
    let id = inverse(d);
    store_fp16(&mut y[0..2], d);
    let mut q = [0u8; QK];
    for (q, &v) in q.iter_mut().zip(x) {
        *q = (trunc_to_int(v * id + 16.5) as i8).min(31) as u8;
    }
    let (qh, qs) = y[2..].split_at_mut(4);
    pack_q5(&q, qh, qs);
}

/// Decodes one Q5_0 block.
pub(crate) fn dequantize_q5_0(y: &[u8; 22], x: &mut [f32; QK]) {
    let d = load_fp16(&y[0..2]);
    let q = unpack_q5(&y[2..6], &y[6..]);
    for (v, &q) in x.iter_mut().zip(&q) {
        *v = (q as i32 - 16) as f32 * d;
    }
}

/// Encodes one Q5_1 block: `half d; half m; u8 qh[4]; u8 qs[16]`.
pub(crate) fn quantize_q5_1(x: &[f32; QK], y: &mut [u8; 24]) {
    let (min, max) = min_max(x);
    let d = (max - min) / 31.0;
    let id = inverse(d);
    store_fp16(&mut y[0..2], d);
    store_fp16(&mut y[2..4], min);
    let mut q = [0u8; QK];
    for (q, &v) in q.iter_mut().zip(x) {
        // No clamp here in ggml: (uint8_t)(x0 + 0.5f).
        *q = trunc_to_int((v - min) * id + 0.5) as u8;
    }
    let (qh, qs) = y[4..].split_at_mut(4);
    pack_q5(&q, qh, qs);
}

/// Decodes one Q5_1 block.
pub(crate) fn dequantize_q5_1(y: &[u8; 24], x: &mut [f32; QK]) {
    let d = load_fp16(&y[0..2]);
    let m = load_fp16(&y[2..4]);
    let q = unpack_q5(&y[4..8], &y[8..]);
    for (v, &q) in x.iter_mut().zip(&q) {
        *v = q as f32 * d + m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp() -> [f32; QK] {
        std::array::from_fn(|i| i as f32 - 12.0)
    }

    #[test]
    fn q8_0_known_block() {
        let x = ramp(); // amax 19 at the last element
        let mut y = [0u8; 34];
        quantize_q8_0(&x, &mut y);
        let d = load_fp16(&y[0..2]);
        assert_eq!(d, half::f16::from_f32(19.0 / 127.0).to_f32());
        assert_eq!(y[2 + 31] as i8, 127);
        assert_eq!(y[2] as i8, -80); // roundf(-12 * 127/19) = roundf(-80.21)
        assert_eq!(y[2 + 12], 0);
    }

    #[test]
    fn q4_0_known_block() {
        let x = ramp();
        let mut y = [0u8; 18];
        quantize_q4_0(&x, &mut y);
        // max = 19 (largest |x|), d = -19/8, x*id + 8.5 for x = 19 -> 0.5 -> q = 0
        assert_eq!(load_fp16(&y[0..2]), half::f16::from_f32(-19.0 / 8.0).to_f32());
        assert_eq!(y[2 + 15] >> 4, 0);
        let mut back = [0f32; QK];
        dequantize_q4_0(&y, &mut back);
        for (a, b) in x.iter().zip(&back) {
            assert!((a - b).abs() <= 19.0 / 8.0 / 2.0 + 1e-3, "{a} {b}");
        }
    }

    #[test]
    fn negative_zero_minimum_is_kept_like_ggml() {
        // ggml scans with `v < min` from FLT_MAX, so the first of -0.0/+0.0 becomes the min.
        let mut x = [0.0f32; QK];
        x[0] = -0.0;
        x[7] = 1.0;
        let mut y4 = [0u8; 20];
        quantize_q4_1(&x, &mut y4);
        assert_eq!(&y4[2..4], &[0x00, 0x80]);
        let mut y5 = [0u8; 24];
        quantize_q5_1(&x, &mut y5);
        assert_eq!(&y5[2..4], &[0x00, 0x80]);
        x[0] = 0.0;
        x[1] = -0.0;
        quantize_q4_1(&x, &mut y4);
        assert_eq!(&y4[2..4], &[0x00, 0x00]);
    }

    #[test]
    fn q5_bits_round_trip() {
        let q: [u8; QK] = std::array::from_fn(|i| (i * 7 % 32) as u8);
        let mut qh = [0u8; 4];
        let mut qs = [0u8; 16];
        pack_q5(&q, &mut qh, &mut qs);
        assert_eq!(unpack_q5(&qh, &qs), q);
    }

    #[test]
    fn q4_1_and_q5_1_cover_the_range() {
        let x = ramp();
        let mut y4 = [0u8; 20];
        quantize_q4_1(&x, &mut y4);
        let mut back = [0f32; QK];
        dequantize_q4_1(&y4, &mut back);
        for (a, b) in x.iter().zip(&back) {
            assert!((a - b).abs() <= 31.0 / 15.0 / 2.0 + 0.02, "{a} {b}");
        }
        let mut y5 = [0u8; 24];
        quantize_q5_1(&x, &mut y5);
        dequantize_q5_1(&y5, &mut back);
        for (a, b) in x.iter().zip(&back) {
            assert!((a - b).abs() <= 0.51 + 0.02, "{a} {b}");
        }
    }
}
