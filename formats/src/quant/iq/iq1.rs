//! IQ1_S (50 bytes: `d`, `qs[32]`, `u16 qh[8]`) and IQ1_M (56: `qs[32]`, `qh[16]`, `scales[8]`, the
//! fp16 `d` spread over the top nibbles of the scales): 8-value codewords of −1, 0, 1 shifted by
//! ±1/8, stored here as 8 × (level ± 1/8).

use super::grids::IQ1S;
use super::{fp16_d, fp16_value, u16_at, words8, IqBlock};

/// ggml's `iq1s_grid` as it stores it: each codeword's eight levels (−1, 0 or 1) in the little-endian bytes of
/// one u64, for kernels that fetch a codeword with one load.
pub static IQ1S_WORDS: [u64; 2048] = words8(&IQ1S);

/// Writes codeword `idx` shifted by `delta` (±1, in eighths) as eighths into `q[..8]`.
#[inline(always)]
fn shifted(idx: usize, delta: i8, q: &mut [i8]) {
    for (q, &v) in q[..8].iter_mut().zip(&IQ1S[idx]) {
        *q = 8 * v + delta;
    }
}

/// −1 where `bit` is set in `h`, else 1.
#[inline(always)]
fn delta(h: u16, bit: u16) -> i8 {
    if h & bit != 0 {
        -1
    } else {
        1
    }
}

/// Unpacks an IQ1_S super-block: per 32 values a u16 of four 3-bit codeword extensions, a 3-bit
/// scale and the sign of the shift.
pub(super) fn unpack_iq1_s(y: &[u8], out: &mut IqBlock) {
    out.d = fp16_d(y);
    for ib in 0..8 {
        let h = u16_at(y, 34 + 2 * ib);
        let ls = 2 * ((h >> 12) & 7) as u8 + 1;
        out.ls[2 * ib..2 * ib + 2].fill(ls);
        let dl = delta(h, 0x8000);
        for l in 0..4 {
            let idx = y[2 + 4 * ib + l] as usize | ((((h >> (3 * l)) & 7) as usize) << 8);
            shifted(idx, dl, &mut out.q[32 * ib + 8 * l..]);
        }
    }
}

/// Unpacks an IQ1_M super-block: per 8 values a nibble of `qh` with a 3-bit codeword extension and
/// the sign of its own shift; per 16 values a 3-bit scale.
pub(super) fn unpack_iq1_m(y: &[u8], out: &mut IqBlock) {
    let (qs, qh) = (&y[..32], &y[32..48]);
    let sc: [u16; 4] = std::array::from_fn(|i| u16_at(y, 48 + 2 * i));
    out.d = fp16_value((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
    for ib in 0..8 {
        let s = sc[ib / 2] >> (6 * (ib % 2));
        out.ls[2 * ib] = 2 * (s & 7) as u8 + 1;
        out.ls[2 * ib + 1] = 2 * ((s >> 3) & 7) as u8 + 1;
        for l in 0..4 {
            let h = qh[2 * ib + l / 2] as u16;
            let idx = qs[4 * ib + l] as usize | (((h << (8 - 4 * (l % 2))) & 0x700) as usize);
            shifted(idx, delta(h, 0x08 << (4 * (l % 2))), &mut out.q[32 * ib + 8 * l..]);
        }
    }
}
