//! The IQ1_M encoder, as ggml's `quantize_row_iq1_m_impl` writes it through `quantize_iq1_m` (what
//! `ggml_quantize_chunk`, hence llama-quantize, calls; ggml takes an importance matrix when given,
//! llama-quantize insists on one): per 16 values, IQ1_S's exhaustive split of the sorted values into
//! the levels -1, 0, 1, with a shift sign (±1/8) chosen per 8 values, then the codewords of those
//! levels (or their best neighbours), one 3-bit scale per 16 values, and the fp16 super-block scale
//! refitted to the whole block and spread over the top nibbles of the four u16 scale words.

use super::encode1::{add_sums, codewords, max_abs, sorted_order, split_levels, weights, X_M, X_P};
use super::grid::{iq1, Grid};
use super::QK_K;
use crate::quant::num::{c_max, fp16_bits, nearest_int};

/// Values per sub-block.
const QB: usize = 16;

/// ggml's `GROUP_MAX_EPS_IQ1_M`: sub-blocks whose largest magnitude is below it are skipped.
const GROUP_MAX_EPS_IQ1_M: f32 = 1e-7;

/// The `qh` bits of the shift signs (ggml's `masks`): bit 3 for the first 8 values, bit 7 for the second.
const MASKS: [u8; 4] = [0x00, 0x80, 0x08, 0x88];

/// One searched sub-block: its scale, shift signs (bit 1: the first 8 values' shift is negative,
/// bit 0: the second's) and codewords. Skipped sub-blocks are the default.
#[derive(Default, Clone, Copy)]
struct Sub {
    scale: f32,
    shifts: usize,
    idx: [u16; 2],
}

impl Sub {
    /// The level values of each 8-value half.
    fn values(&self) -> [[f32; 3]; 2] {
        let xx = |minus: bool| if minus { X_M } else { X_P };
        [xx(self.shifts >= 2), xx(self.shifts % 2 == 1)]
    }
}

/// Prefix sums over the sorted values, kept per 8-value half: entry `j` sums the first `j` values
/// in sorted order that lie in that half.
type Prefix = [[f32; QB + 1]; 2];

/// The best split of the sorted values into three levels and the shift signs of the halves:
/// `(scale, i1, i2, shifts)`, or None. The sums are ggml's, which collapse each half's three runs to
/// `T·v₂ − S(i1) − S(i2)` since the levels are one apart.
fn best_split(px: &Prefix, pw: &Prefix) -> Option<(f32, usize, usize, usize)> {
    let (txs, tws) = ([px[0][QB], px[1][QB]], [pw[0][QB], pw[1][QB]]);
    let (p2, m2) = (X_P[2], X_M[2]);
    let cp1 = X_P[0] * X_P[0] - X_P[1] * X_P[1];
    let cp2 = X_P[1] * X_P[1] - X_P[2] * X_P[2];
    let cm1 = X_M[0] * X_M[0] - X_M[1] * X_M[1];
    let cm2 = X_M[1] * X_M[1] - X_M[2] * X_M[2];
    let (mut best_score, mut best) = (-f32::MAX, None);
    for i1 in 0..=QB {
        for i2 in i1..=QB {
            let (mut qx_p, mut qx_m, mut q2_p, mut q2_m) = ([0.0f32; 2], [0.0f32; 2], [0.0f32; 2], [0.0f32; 2]);
            for h in 0..2 {
                let sx = px[h][i1] + px[h][i2];
                qx_p[h] = txs[h] * p2 - sx;
                qx_m[h] = txs[h] * m2 - sx;
                q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
                q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
            }
            let sumqx = [qx_p[0] + qx_p[1], qx_p[0] + qx_m[1], qx_m[0] + qx_p[1], qx_m[0] + qx_m[1]];
            let sumq2 = [q2_p[0] + q2_p[1], q2_p[0] + q2_m[1], q2_m[0] + q2_p[1], q2_m[0] + q2_m[1]];
            for (k, (&sumqx, &sumq2)) in sumqx.iter().zip(&sumq2).enumerate() {
                if sumq2 > 0.0 && sumqx * sumqx > best_score * sumq2 {
                    let scale = sumqx / sumq2;
                    best_score = scale * sumqx;
                    best = Some((scale, i1, i2, k));
                }
            }
        }
    }
    best
}

/// Searches one 16-value sub-block with weights `weight`; None when ggml skips it.
fn search(g: &Grid<8>, xb: &[f32], weight: &[f32]) -> Option<Sub> {
    if max_abs(xb) < GROUP_MAX_EPS_IQ1_M {
        return None;
    }
    let order = sorted_order::<QB>(xb);
    let (mut px, mut pw) = ([[0.0f32; QB + 1]; 2], [[0.0f32; QB + 1]; 2]);
    for (j, &i) in order.iter().enumerate() {
        let h = usize::from(i >= QB / 2);
        px[h][j + 1] = px[h][j] + weight[i] * xb[i];
        px[1 - h][j + 1] = px[1 - h][j];
        pw[h][j + 1] = pw[h][j] + weight[i];
        pw[1 - h][j + 1] = pw[1 - h][j];
    }
    let (mut scale, i1, i2, mut shifts) = best_split(&px, &pw)?;
    let mut l = split_levels(&order, i1, i2);
    if scale < 0.0 {
        l.iter_mut().for_each(|l| *l = 2 - *l);
        (scale, shifts) = (-scale, 3 - shifts);
    }
    let mut sub = Sub { scale, shifts, idx: [0; 2] };
    (sub.idx, sub.scale) = codewords(g, &l, xb, weight, scale, sub.values());
    Some(sub)
}

/// Encodes one IQ1_M super-block (56 bytes: 32 low index bytes, per 8 values a nibble of `qh` with
/// the 3 high index bits and the shift sign, then four u16 of 3-bit sub-block scales whose top
/// nibbles hold the fp16 super-block scale), weighing the search by `qw` (by `x²` without one).
pub(crate) fn quantize_iq1_m(x: &[f32; QK_K], qw: Option<&[f32; QK_K]>, y: &mut [u8; 56]) {
    y.fill(0);
    let g = iq1();
    let weight = weights(x, qw);
    let mut max_scale = 0.0f32;
    let subs: [Sub; QK_K / QB] = std::array::from_fn(|ib| {
        let r = QB * ib..QB * (ib + 1);
        let sub = search(g, &x[r.clone()], &weight[r]);
        if let Some(s) = &sub {
            max_scale = c_max(max_scale, s.scale);
        }
        sub.unwrap_or_default()
    });
    for (ib, s) in subs.iter().enumerate() {
        y[2 * ib] = s.idx[0] as u8;
        y[2 * ib + 1] = s.idx[1] as u8;
        y[32 + ib] = (s.idx[0] >> 8) as u8 | ((s.idx[1] >> 8) << 4) as u8;
    }
    if max_scale == 0.0 {
        return;
    }
    // The sub-block scales under d = max / 15, then d refitted to the whole block with them.
    let mut d = max_scale / 15.0;
    let id = 1.0 / d;
    let mut sc = [0u16; 4];
    let mut sums = (0.0f32, 0.0f32);
    for (ib, s) in subs.iter().enumerate() {
        let l = nearest_int(0.5 * (id * s.scale - 1.0)).clamp(0, 7);
        sc[ib / 4] |= (l as u16) << (3 * (ib % 4));
        y[32 + ib] |= MASKS[s.shifts];
        for (k, (&j, xx)) in s.idx.iter().zip(s.values()).enumerate() {
            let r = QB * ib + 8 * k..QB * ib + 8 * k + 8;
            add_sums(g, j, xx, (2 * l + 1) as f32, &weight[r.clone()], &x[r], &mut sums);
        }
    }
    if sums.1 > 0.0 {
        d = sums.0 / sums.1;
    }
    let bits = fp16_bits(d * 1.1125);
    for (k, (sc, y)) in sc.iter_mut().zip(y[48..].chunks_exact_mut(2)).enumerate() {
        *sc |= (bits >> (4 * k) & 0xF) << 12;
        y.copy_from_slice(&sc.to_le_bytes());
    }
}
