//! IQ3_XXS (98 bytes: `d`, `qs[64]`, `u32 scales_and_signs[8]`) and IQ3_S (110: `d`, `qs[64]`,
//! `qh[8]`, `signs[32]`, `scales[4]`): 4-value codewords of eight levels.

use super::grids::{IQ3S, IQ3XXS};
use super::unpack::KSIGNS;
use super::{fp16_d, signed, u32_at, IqBlock};

/// ggml's `iq3xxs_grid` as it stores it: each codeword's four levels (4, 12, ..., 52, 62) in the little-endian
/// bytes of one u32, for kernels that fetch a codeword with one load.
pub static IQ3XXS_WORDS: [u32; 256] = words(&IQ3XXS);

/// ggml's `iq3s_grid` as it stores it: each codeword's four levels (odd, 1..=15) in the little-endian
/// bytes of one u32, for kernels that fetch a codeword with one load.
pub static IQ3S_WORDS: [u32; 512] = words(&IQ3S);

/// The `K` codewords of a 4-level grid, each as the little-endian bytes of one u32.
const fn words<const K: usize>(grid: &[[i8; 4]; K]) -> [u32; K] {
    let mut words = [0u32; K];
    let mut k = 0;
    while k < K {
        let c = grid[k];
        words[k] = u32::from_le_bytes([c[0] as u8, c[1] as u8, c[2] as u8, c[3] as u8]);
        k += 1;
    }
    words
}

/// Writes two 4-value codewords as 8 values under one byte of signs.
#[inline(always)]
fn pair(a: &[i8; 4], b: &[i8; 4], signs: u8, q: &mut [i8]) {
    signed(a, signs, &mut q[..4]);
    signed(b, signs >> 4, &mut q[4..8]);
}

/// Unpacks an IQ3_XXS super-block: 8-bit codeword indices; per 32 values a u32 of four 7-bit sign
/// indices and a 4-bit scale.
pub(super) fn unpack_iq3_xxs(y: &[u8], out: &mut IqBlock) {
    out.d = fp16_d(y);
    let qs = &y[2..66];
    for ib in 0..8 {
        let aux = u32_at(y, 66 + 4 * ib);
        let ls = 2 * (aux >> 28) as u8 + 1;
        out.ls[2 * ib..2 * ib + 2].fill(ls);
        for l in 0..4 {
            let signs = KSIGNS[(aux >> (7 * l)) as usize & 127];
            let (a, b) = (qs[8 * ib + 2 * l] as usize, qs[8 * ib + 2 * l + 1] as usize);
            pair(&IQ3XXS[a], &IQ3XXS[b], signs, &mut out.q[32 * ib + 8 * l..]);
        }
    }
}

/// Unpacks an IQ3_S super-block: 9-bit codeword indices (8 bits in `qs`, the ninth in `qh`),
/// explicit signs, a 4-bit scale per 32 values.
pub(super) fn unpack_iq3_s(y: &[u8], out: &mut IqBlock) {
    out.d = fp16_d(y);
    let (qs, qh, signs, scales) = (&y[2..66], &y[66..74], &y[74..106], &y[106..110]);
    for ib in 0..8 {
        let ls = 2 * ((scales[ib / 2] >> (4 * (ib % 2))) & 0xF) + 1;
        out.ls[2 * ib..2 * ib + 2].fill(ls);
        let h = qh[ib] as usize;
        for l in 0..4 {
            let a = qs[8 * ib + 2 * l] as usize | ((h << (8 - 2 * l)) & 256);
            let b = qs[8 * ib + 2 * l + 1] as usize | ((h << (7 - 2 * l)) & 256);
            pair(&IQ3S[a], &IQ3S[b], signs[4 * ib + l], &mut out.q[32 * ib + 8 * l..]);
        }
    }
}
