//! The ternary types TQ1_0 and TQ2_0 (BitNet b1.58, TriLMs): each value is -1, 0 or 1 times the block's f16
//! scale, the largest magnitude of its 256 values (`quantize_row_tq{1,2}_0_ref` / `dequantize_row_tq{1,2}_0` in
//! ggml's `src/ggml-quants.c`; ggml ignores an importance matrix for both).
//!
//! - TQ1_0 (54 bytes): `qs[48]` with five trits per byte, `qh[4]` with four, then `d`. A byte holds its trits
//!   as the fixed-point fraction `ceil(t · 256 / 243)` of the base-3 number `t` they spell (first trit most
//!   significant), so trit `n` is the top of `3 · (byte · 3ⁿ mod 256)`, read without a division.
//!   Bytes 0..32 hold values `m + 32n` (n = 0..5, the first 160), bytes 32..48 values `160 + m + 16n`, and
//!   `qh[j]` values `240 + j + 4n` (n = 0..4).
//! - TQ2_0 (66 bytes): `qs[64]`, value `0, 1, 2` (for -1, 0, 1) in bit pair `l` of byte `32h + m` for value
//!   `128h + 32l + m`; then `d`.

use super::num::{c_max, load_fp16, store_fp16};

/// Values per ternary block.
pub const QK_TQ: usize = 256;
/// Bytes of one TQ1_0 block.
pub const TQ1_0_BYTES: usize = 54;
/// Bytes of one TQ2_0 block.
pub const TQ2_0_BYTES: usize = 66;

/// The largest magnitude of the block (C `MAX`, so a NaN is forgotten at the next value) and its inverse
/// (`d ? 1/d : 0`).
fn scale(x: &[f32; QK_TQ]) -> (f32, f32) {
    let amax = x.iter().fold(0.0f32, |m, v| c_max(m, v.abs()));
    (amax, if amax != 0.0 { 1.0 / amax } else { 0.0 })
}

/// `lroundf(v) + 1` truncated to C `int`, as x86-64 computes it (half away from zero; `LONG_MIN` for NaN and
/// values out of range): 0, 1, 2 for -1, 0, 1.
#[inline(always)]
fn trit(v: f32) -> i32 {
    let r = if v.is_finite() && v.abs() < 9.2e18 { v.round() as i64 } else { i64::MIN };
    r.wrapping_add(1) as i32
}

/// `ceil(q · 256 / 243)` in a byte, as ggml stores a packed base-3 number.
#[inline(always)]
fn to_fraction(q: u8) -> u8 {
    (q as u32 * 256).div_ceil(243) as u8
}

/// Packs the trits of `x[start + stride·n]` (n < count, the first most significant) into one byte.
#[inline(always)]
fn pack(x: &[f32; QK_TQ], id: f32, start: usize, stride: usize, count: usize) -> u8 {
    (0..count).fold(0u8, |q, n| q.wrapping_mul(3).wrapping_add(trit(x[start + stride * n] * id) as u8))
}

/// Encodes one TQ1_0 block.
pub(crate) fn quantize_tq1_0(x: &[f32; QK_TQ], y: &mut [u8; TQ1_0_BYTES]) {
    let (d, id) = scale(x);
    store_fp16(&mut y[52..54], d);
    for (m, q) in y[..32].iter_mut().enumerate() {
        *q = to_fraction(pack(x, id, m, 32, 5));
    }
    for (m, q) in y[32..48].iter_mut().enumerate() {
        *q = to_fraction(pack(x, id, 160 + m, 16, 5));
    }
    for (j, q) in y[48..52].iter_mut().enumerate() {
        // The fifth trit is zero: the four stored ones start at the most significant.
        *q = to_fraction(pack(x, id, 240 + j, 4, 4).wrapping_mul(3));
    }
}

/// Encodes one TQ2_0 block.
pub(crate) fn quantize_tq2_0(x: &[f32; QK_TQ], y: &mut [u8; TQ2_0_BYTES]) {
    let (d, id) = scale(x);
    store_fp16(&mut y[64..66], d);
    for h in 0..2 {
        for m in 0..32 {
            y[32 * h + m] =
                (0..4).fold(0u8, |q, l| q.wrapping_add(((trit(x[128 * h + 32 * l + m] * id) & 3) << (2 * l)) as u8));
        }
    }
}

/// Trit `n` (0, 1 or 2) of a TQ1_0 byte.
#[inline(always)]
pub fn tq1_trit(byte: u8, n: usize) -> u8 {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    ((byte.wrapping_mul(POW3[n]) as u16 * 3) >> 8) as u8
}

/// The 256 unsigned levels (0, 1, 2 for -1, 0, 1) of a TQ1_0 block, in value order.
pub fn tq1_0_levels(y: &[u8; TQ1_0_BYTES]) -> [u8; QK_TQ] {
    let mut t = [0u8; QK_TQ];
    for n in 0..5 {
        for m in 0..32 {
            t[32 * n + m] = tq1_trit(y[m], n);
        }
        for m in 0..16 {
            t[160 + 16 * n + m] = tq1_trit(y[32 + m], n);
        }
    }
    for n in 0..4 {
        for j in 0..4 {
            t[240 + 4 * n + j] = tq1_trit(y[48 + j], n);
        }
    }
    t
}

/// The 256 unsigned levels (0, 1, 2 for -1, 0, 1; 3 where a writer other than ggml stored it) of a TQ2_0
/// block, in value order.
pub fn tq2_0_levels(y: &[u8; TQ2_0_BYTES]) -> [u8; QK_TQ] {
    let mut t = [0u8; QK_TQ];
    for (e, t) in t.iter_mut().enumerate() {
        let (h, l, m) = (e / 128, (e / 32) % 4, e % 32);
        *t = (y[32 * h + m] >> (2 * l)) & 3;
    }
    t
}

/// `(level - 1) · d` for every value.
fn decode(levels: &[u8; QK_TQ], d: f32, out: &mut [f32; QK_TQ]) {
    for (o, &t) in out.iter_mut().zip(levels) {
        *o = (t as i32 - 1) as f32 * d;
    }
}

/// Decodes one TQ1_0 block.
pub(crate) fn dequantize_tq1_0(y: &[u8; TQ1_0_BYTES], out: &mut [f32; QK_TQ]) {
    decode(&tq1_0_levels(y), load_fp16(&y[52..54]), out);
}

/// Decodes one TQ2_0 block.
pub(crate) fn dequantize_tq2_0(y: &[u8; TQ2_0_BYTES], out: &mut [f32; QK_TQ]) {
    decode(&tq2_0_levels(y), load_fp16(&y[64..66]), out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ternary_round_trips_levels_and_scale() {
        // Values exactly -d, 0, d in a pattern, so both types decode them back.
        let x: [f32; QK_TQ] = std::array::from_fn(|i| [-0.5f32, 0.0, 0.5][(i * 7 + i / 3) % 3]);
        let mut out = [0f32; QK_TQ];
        let mut b1 = [0u8; TQ1_0_BYTES];
        quantize_tq1_0(&x, &mut b1);
        dequantize_tq1_0(&b1, &mut out);
        assert_eq!(out, x);
        let mut b2 = [0u8; TQ2_0_BYTES];
        quantize_tq2_0(&x, &mut b2);
        dequantize_tq2_0(&b2, &mut out);
        assert_eq!(out, x);
    }

    #[test]
    fn ternary_trits_of_every_packed_number() {
        // Every base-3 number of five trits comes back trit by trit, first most significant.
        for v in 0..243u32 {
            let q = to_fraction(v as u8);
            let mut r = v;
            for n in (0..5).rev() {
                assert_eq!(tq1_trit(q, n) as u32, r % 3, "{v} trit {n}");
                r /= 3;
            }
        }
        // ggml rounds half away from zero: 0.5 of the scale is 1, -0.5 is -1.
        assert_eq!((trit(0.5), trit(-0.5), trit(0.49), trit(f32::NAN)), (2, 0, 1, 1));
    }
}
