//! Portable dot products of one weight row with one encoded activation row, following
//! ggml's generic `ggml_vec_dot_*` (integer sums per block, scaled in f32).

use half::f16;
use tgi_formats::quant::iq::{IqBlock, IqCodec};
use tgi_formats::quant::ternary::{tq1_0_levels, tq2_0_levels, QK_TQ, TQ1_0_BYTES, TQ2_0_BYTES};
use tgi_formats::quant::{iq4_xs_block_scale, IQ4_NL_VALUES};
use tgi_formats::GgmlType;

use super::act::{Q8_0_BYTES, Q8_1_BYTES, Q8_K_BYTES};

/// Reads a little-endian f16 at `o` as f32.
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], o: usize) -> f32 {
    f16::from_le_bytes([b[o], b[o + 1]]).to_f32()
}

/// Reads a little-endian f32 at `o`.
#[inline(always)]
pub(crate) fn f32_at(b: &[u8], o: usize) -> f32 {
    f32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

/// Reads a little-endian i16 at `o`.
#[inline(always)]
fn i16_at(b: &[u8], o: usize) -> i32 {
    i16::from_le_bytes([b[o], b[o + 1]]) as i32
}

/// Unpacks the 8 six-bit scales and 8 six-bit mins of a Q4_K/Q5_K super-block.
#[inline(always)]
pub(crate) fn k4_scales_mins(q: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..4 {
        sc[j] = q[j] & 63;
        m[j] = q[j + 4] & 63;
        sc[j + 4] = (q[j + 8] & 0xF) | ((q[j] >> 6) << 4);
        m[j + 4] = (q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4);
    }
    (sc, m)
}

/// The i8 quants of a Q8 activation block starting at byte `o`.
#[inline(always)]
fn q8(x: &[u8], o: usize, i: usize) -> i32 {
    x[o + i] as i8 as i32
}

/// F32/F16/BF16-rounded activations (f32 bytes) against f32 weights.
pub fn dot_f32(w: &[u8], x: &[u8], cols: usize) -> f32 {
    (0..cols).map(|c| f32_at(w, 4 * c) * f32_at(x, 4 * c)).sum()
}

/// f16 weights against f16-rounded activations.
pub fn dot_f16(w: &[u8], x: &[u8], cols: usize) -> f32 {
    (0..cols).map(|c| f16_at(w, 2 * c) * f32_at(x, 4 * c)).sum()
}

/// bf16 weights against bf16-rounded activations.
pub fn dot_bf16(w: &[u8], x: &[u8], cols: usize) -> f32 {
    (0..cols)
        .map(|c| f32::from_bits((u16::from_le_bytes([w[2 * c], w[2 * c + 1]]) as u32) << 16) * f32_at(x, 4 * c))
        .sum()
}

/// Q8_0 weights · Q8_0 activations.
pub fn dot_q8_0(w: &[u8], x: &[u8], cols: usize) -> f32 {
    let mut sum = 0.0f32;
    for b in 0..cols / 32 {
        let (wo, xo) = (34 * b, Q8_0_BYTES * b);
        let s: i32 = (0..32).map(|i| (w[wo + 2 + i] as i8 as i32) * q8(x, xo + 2, i)).sum();
        sum += s as f32 * (f16_at(w, wo) * f16_at(x, xo));
    }
    sum
}

/// Q4_0 weights · Q8_0 activations.
pub fn dot_q4_0(w: &[u8], x: &[u8], cols: usize) -> f32 {
    let mut sum = 0.0f32;
    for b in 0..cols / 32 {
        let (wo, xo) = (18 * b, Q8_0_BYTES * b);
        let mut s = 0i32;
        for j in 0..16 {
            let q = w[wo + 2 + j];
            s += ((q & 0xF) as i32 - 8) * q8(x, xo + 2, j) + ((q >> 4) as i32 - 8) * q8(x, xo + 2, j + 16);
        }
        sum += s as f32 * (f16_at(w, wo) * f16_at(x, xo));
    }
    sum
}

/// Q4_1 weights · Q8_1 activations.
pub fn dot_q4_1(w: &[u8], x: &[u8], cols: usize) -> f32 {
    let mut sum = 0.0f32;
    for b in 0..cols / 32 {
        let (wo, xo) = (20 * b, Q8_1_BYTES * b);
        let mut s = 0i32;
        for j in 0..16 {
            let q = w[wo + 4 + j];
            s += (q & 0xF) as i32 * q8(x, xo + 4, j) + (q >> 4) as i32 * q8(x, xo + 4, j + 16);
        }
        sum += (f16_at(w, wo) * f16_at(x, xo)) * s as f32 + f16_at(w, wo + 2) * f16_at(x, xo + 2);
    }
    sum
}

/// The 5-bit values of a Q5_0/Q5_1 block (`qh` little-endian u32 then 16 nibble bytes).
#[inline(always)]
fn q5_values(qh: &[u8], qs: &[u8]) -> [i32; 32] {
    let h = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut q = [0i32; 32];
    for j in 0..16 {
        q[j] = ((qs[j] & 0xF) as u32 | (((h >> j) & 1) << 4)) as i32;
        q[j + 16] = ((qs[j] >> 4) as u32 | (((h >> (j + 16)) & 1) << 4)) as i32;
    }
    q
}

/// Q5_0 weights · Q8_0 activations.
pub fn dot_q5_0(w: &[u8], x: &[u8], cols: usize) -> f32 {
    let mut sum = 0.0f32;
    for b in 0..cols / 32 {
        let (wo, xo) = (22 * b, Q8_0_BYTES * b);
        let q = q5_values(&w[wo + 2..wo + 6], &w[wo + 6..wo + 22]);
        let s: i32 = (0..32).map(|i| (q[i] - 16) * q8(x, xo + 2, i)).sum();
        sum += s as f32 * (f16_at(w, wo) * f16_at(x, xo));
    }
    sum
}

/// Q5_1 weights · Q8_1 activations.
pub fn dot_q5_1(w: &[u8], x: &[u8], cols: usize) -> f32 {
    let mut sum = 0.0f32;
    for b in 0..cols / 32 {
        let (wo, xo) = (24 * b, Q8_1_BYTES * b);
        let q = q5_values(&w[wo + 4..wo + 8], &w[wo + 8..wo + 24]);
        let s: i32 = (0..32).map(|i| q[i] * q8(x, xo + 4, i)).sum();
        sum += (f16_at(w, wo) * f16_at(x, xo)) * s as f32 + f16_at(w, wo + 2) * f16_at(x, xo + 2);
    }
    sum
}

/// Q8_K block `b` of `x`: (d, byte offset of the quants, byte offset of the bsums).
#[inline(always)]
fn q8k(x: &[u8], b: usize) -> (f32, usize, usize) {
    let o = Q8_K_BYTES * b;
    (f32_at(x, o), o + 4, o + 260)
}

/// Q2_K weights · Q8_K activations.
pub fn dot_q2_k(w: &[u8], x: &[u8], cols: usize) -> f32 {
    let mut sum = 0.0f32;
    for b in 0..cols / 256 {
        let y = &w[84 * b..84 * b + 84];
        let (xd, qo, so) = q8k(x, b);
        let mut isum = 0i32;
        let msum: i32 = y[..16].iter().enumerate().map(|(g, &s)| (s >> 4) as i32 * i16_at(x, so + 2 * g)).sum();
        for e in 0..256 {
            let (h, s, i) = (e / 128, (e / 32) % 4, e % 32);
            let q = ((y[16 + 32 * h + i] >> (2 * s)) & 3) as i32;
            isum += (y[e / 16] & 0xF) as i32 * q * q8(x, qo, e);
        }
        sum += xd * f16_at(y, 80) * isum as f32 - xd * f16_at(y, 82) * msum as f32;
    }
    sum
}

/// Q3_K weights · Q8_K activations.
pub fn dot_q3_k(w: &[u8], x: &[u8], cols: usize) -> f32 {
    let mut sum = 0.0f32;
    for b in 0..cols / 256 {
        let y = &w[110 * b..110 * b + 110];
        let (hmask, qs, sc) = (&y[0..32], &y[32..96], &y[96..108]);
        let (xd, qo, _) = q8k(x, b);
        let mut isum = 0i32;
        for e in 0..256 {
            let (h, s, i, j) = (e / 128, (e / 32) % 4, e % 32, e / 16);
            let low = if j < 8 { sc[j] & 0xF } else { sc[j - 8] >> 4 };
            let high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
            let scale = (low | (high << 4)) as i32 - 32;
            let q = ((qs[32 * h + i] >> (2 * s)) & 3) as i32;
            let off = if hmask[i] & (1 << (e / 32)) != 0 { 0 } else { 4 };
            isum += scale * (q - off) * q8(x, qo, e);
        }
        sum += f16_at(y, 108) * xd * isum as f32;
    }
    sum
}

/// Q4_K weights · Q8_K activations.
pub fn dot_q4_k(w: &[u8], x: &[u8], cols: usize) -> f32 {
    let mut sum = 0.0f32;
    for b in 0..cols / 256 {
        let y = &w[144 * b..144 * b + 144];
        let (xd, qo, so) = q8k(x, b);
        let (sc, m) = k4_scales_mins(&y[4..16]);
        let qs = &y[16..];
        let mut isum = 0i32;
        let msum: i32 =
            m.iter().enumerate().map(|(j, &m)| m as i32 * (i16_at(x, so + 4 * j) + i16_at(x, so + 4 * j + 2))).sum();
        for c in 0..4 {
            let (mut s1, mut s2) = (0i32, 0i32);
            for i in 0..32 {
                let q = qs[32 * c + i];
                s1 += (q & 0xF) as i32 * q8(x, qo, 64 * c + i);
                s2 += (q >> 4) as i32 * q8(x, qo, 64 * c + 32 + i);
            }
            isum += sc[2 * c] as i32 * s1 + sc[2 * c + 1] as i32 * s2;
        }
        sum += xd * f16_at(y, 0) * isum as f32 - xd * f16_at(y, 2) * msum as f32;
    }
    sum
}

/// Q5_K weights · Q8_K activations.
pub fn dot_q5_k(w: &[u8], x: &[u8], cols: usize) -> f32 {
    let mut sum = 0.0f32;
    for b in 0..cols / 256 {
        let y = &w[176 * b..176 * b + 176];
        let (xd, qo, so) = q8k(x, b);
        let (sc, m) = k4_scales_mins(&y[4..16]);
        let (qh, qs) = (&y[16..48], &y[48..]);
        let mut isum = 0i32;
        let msum: i32 =
            m.iter().enumerate().map(|(j, &m)| m as i32 * (i16_at(x, so + 4 * j) + i16_at(x, so + 4 * j + 2))).sum();
        for c in 0..4 {
            let (mut s1, mut s2) = (0i32, 0i32);
            for i in 0..32 {
                let q = qs[32 * c + i];
                let h1 = ((qh[i] >> (2 * c)) & 1) << 4;
                let h2 = ((qh[i] >> (2 * c + 1)) & 1) << 4;
                s1 += ((q & 0xF) | h1) as i32 * q8(x, qo, 64 * c + i);
                s2 += ((q >> 4) | h2) as i32 * q8(x, qo, 64 * c + 32 + i);
            }
            isum += sc[2 * c] as i32 * s1 + sc[2 * c + 1] as i32 * s2;
        }
        sum += xd * f16_at(y, 0) * isum as f32 - xd * f16_at(y, 2) * msum as f32;
    }
    sum
}

/// Q6_K weights · Q8_K activations.
pub fn dot_q6_k(w: &[u8], x: &[u8], cols: usize) -> f32 {
    let mut sum = 0.0f32;
    for b in 0..cols / 256 {
        let y = &w[210 * b..210 * b + 210];
        let (xd, qo, _) = q8k(x, b);
        let mut isum = 0i32;
        for h in 0..2 {
            let (ql, qh, sc) = (&y[64 * h..], &y[128 + 32 * h..], &y[192 + 8 * h..]);
            for i in 0..32 {
                let q = [
                    (ql[i] & 0xF) | ((qh[i] & 3) << 4),
                    (ql[i + 32] & 0xF) | (((qh[i] >> 2) & 3) << 4),
                    (ql[i] >> 4) | (((qh[i] >> 4) & 3) << 4),
                    (ql[i + 32] >> 4) | (((qh[i] >> 6) & 3) << 4),
                ];
                for (k, &q) in q.iter().enumerate() {
                    let e = 32 * k + i;
                    isum += (sc[e / 16] as i8 as i32) * (q as i32 - 32) * q8(x, qo, 128 * h + e);
                }
            }
        }
        sum += f16_at(y, 208) * xd * isum as f32;
    }
    sum
}

/// The integer sum of a 16-byte IQ4 nibble block (ggml's layout: the first 16 values in the low nibbles)
/// through the IQ4_NL level table against 32 i8 activations at byte `o` of `x`.
#[inline(always)]
fn iq4_block_sum(qs: &[u8], x: &[u8], o: usize) -> i32 {
    let (mut s1, mut s2) = (0i32, 0i32);
    for j in 0..16 {
        s1 += q8(x, o, j) * IQ4_NL_VALUES[usize::from(qs[j] & 0xF)] as i32;
        s2 += q8(x, o, j + 16) * IQ4_NL_VALUES[usize::from(qs[j] >> 4)] as i32;
    }
    s1 + s2
}

/// IQ4_NL weights · Q8_0 activations.
pub fn dot_iq4_nl(w: &[u8], x: &[u8], cols: usize) -> f32 {
    let mut sum = 0.0f32;
    for b in 0..cols / 32 {
        let (wo, xo) = (18 * b, Q8_0_BYTES * b);
        let d = f16_at(x, xo) * f16_at(w, wo);
        sum += d * iq4_block_sum(&w[wo + 2..wo + 18], x, xo + 2) as f32;
    }
    sum
}

/// IQ4_XS weights · Q8_K activations.
pub fn dot_iq4_xs(w: &[u8], x: &[u8], cols: usize) -> f32 {
    let mut sum = 0.0f32;
    for b in 0..cols / 256 {
        let y = &w[136 * b..136 * b + 136];
        let (xd, qo, _) = q8k(x, b);
        let d4d8 = f16_at(y, 0) * xd;
        let scales_h = u16::from_le_bytes([y[2], y[3]]);
        for ib in 0..8 {
            let dl = d4d8 * iq4_xs_block_scale(scales_h, &y[4..8], ib) as f32;
            sum += dl * iq4_block_sum(&y[8 + 16 * ib..24 + 16 * ib], x, qo + 32 * ib) as f32;
        }
    }
    sum
}

/// The codec of the i-quant whose ggml type id is `ID` (the kernels are generic over the id so that each
/// type gets its own function pointer).
#[inline(always)]
pub(super) fn iq_codec<const ID: u32>() -> IqCodec {
    GgmlType::from_id(ID).and_then(IqCodec::of).expect("an i-quant type id")
}

/// I-quant weights (ggml type id `ID`) · Q8_K activations: each super-block unpacked to its integer levels
/// and odd multipliers, then ggml's integer sums per 16 values (IQ1's ±1/8 shifts are folded into the levels,
/// in eighths).
pub fn dot_iq<const ID: u32>(w: &[u8], x: &[u8], cols: usize) -> f32 {
    let c = iq_codec::<ID>();
    let mut b = IqBlock::default();
    let mut sum = 0.0f32;
    for (i, wb) in w.chunks_exact(c.block_bytes).take(cols / 256).enumerate() {
        c.unpack(wb, &mut b);
        let (xd, qo, _) = q8k(x, i);
        let mut isum = 0i32;
        for (g, (q, &ls)) in b.q.chunks_exact(16).zip(&b.ls).enumerate() {
            let s: i32 = q.iter().enumerate().map(|(k, &q)| q as i32 * q8(x, qo, 16 * g + k)).sum();
            isum += ls as i32 * s;
        }
        sum += b.d * xd * isum as f32;
    }
    sum * c.dot_scale
}

/// Ternary weights (`B`-byte blocks whose f16 scale is the last two bytes, `levels` their 0/1/2 levels) · Q8_K
/// activations: `Σ (level - 1) · q` per block, times both scales (ggml's `ggml_vec_dot_tq{1,2}_0_q8_K_generic`).
#[inline(always)]
fn dot_ternary<const B: usize>(w: &[u8], x: &[u8], cols: usize, levels: fn(&[u8; B]) -> [u8; QK_TQ]) -> f32 {
    let mut sum = 0.0f32;
    for (b, wb) in w.chunks_exact(B).take(cols / QK_TQ).enumerate() {
        let t = levels(wb.try_into().expect("a whole block"));
        let (xd, qo, _) = q8k(x, b);
        let isum: i32 = t.iter().enumerate().map(|(e, &t)| (t as i32 - 1) * q8(x, qo, e)).sum();
        sum += isum as f32 * (f16_at(wb, B - 2) * xd);
    }
    sum
}

/// TQ1_0 weights · Q8_K activations.
pub fn dot_tq1_0(w: &[u8], x: &[u8], cols: usize) -> f32 {
    dot_ternary::<TQ1_0_BYTES>(w, x, cols, tq1_0_levels)
}

/// TQ2_0 weights · Q8_K activations.
pub fn dot_tq2_0(w: &[u8], x: &[u8], cols: usize) -> f32 {
    dot_ternary::<TQ2_0_BYTES>(w, x, cols, tq2_0_levels)
}
