//! IQ2_XXS (66 bytes: `d`, `u16 qs[32]`), IQ2_XS (74: `d`, `u16 qs[32]`, `scales[8]`) and IQ2_S
//! (82: `d`, `qs[32]`, `signs[32]`, `qh[8]`, `scales[8]`): 8-value codewords of the levels 8, 25, 43.

use super::grids::{IQ2S, IQ2XS, IQ2XXS};
use super::unpack::KSIGNS;
use super::{fp16_d, signed, u16_at, u32_at, words8, IqBlock};

/// ggml's `iq2xxs_grid` as it stores it: each codeword's eight levels (8, 25 or 43) in the little-endian bytes
/// of one u64, for kernels that fetch a codeword with one load.
pub static IQ2XXS_WORDS: [u64; 256] = words8(&IQ2XXS);

/// ggml's `iq2xs_grid`, one u64 per codeword as [`IQ2XXS_WORDS`].
pub static IQ2XS_WORDS: [u64; 512] = words8(&IQ2XS);

/// ggml's `iq2s_grid`, one u64 per codeword as [`IQ2XXS_WORDS`].
pub static IQ2S_WORDS: [u64; 1024] = words8(&IQ2S);

/// Unpacks an IQ2_XXS super-block: per 32 values, four 8-bit codeword indices, then four 7-bit sign
/// indices and a 4-bit scale in one u32.
pub(super) fn unpack_iq2_xxs(y: &[u8], out: &mut IqBlock) {
    out.d = fp16_d(y);
    for ib in 0..8 {
        let o = 2 + 8 * ib;
        let aux = u32_at(y, o + 4);
        let ls = 2 * (aux >> 28) as u8 + 1;
        out.ls[2 * ib..2 * ib + 2].fill(ls);
        for l in 0..4 {
            let signs = KSIGNS[(aux >> (7 * l)) as usize & 127];
            signed(&IQ2XXS[y[o + l] as usize], signs, &mut out.q[32 * ib + 8 * l..]);
        }
    }
}

/// The two 4-bit scales of 32 values, as the multipliers of their two halves.
#[inline(always)]
fn split_scales(sc: u8, ls: &mut [u8]) {
    ls[0] = 2 * (sc & 0xF) + 1;
    ls[1] = 2 * (sc >> 4) + 1;
}

/// Unpacks an IQ2_XS super-block: per 8 values a u16 of a 9-bit codeword and a 7-bit sign index.
pub(super) fn unpack_iq2_xs(y: &[u8], out: &mut IqBlock) {
    out.d = fp16_d(y);
    for ib in 0..8 {
        split_scales(y[66 + ib], &mut out.ls[2 * ib..]);
        for l in 0..4 {
            let v = u16_at(y, 2 + 2 * (4 * ib + l));
            signed(&IQ2XS[(v & 511) as usize], KSIGNS[(v >> 9) as usize], &mut out.q[32 * ib + 8 * l..]);
        }
    }
}

/// Unpacks an IQ2_S super-block: per 8 values a 10-bit codeword (8 bits in `qs`, 2 in `qh`) and a
/// byte of explicit signs.
pub(super) fn unpack_iq2_s(y: &[u8], out: &mut IqBlock) {
    out.d = fp16_d(y);
    let (qs, signs, qh) = (&y[2..34], &y[34..66], &y[66..74]);
    for ib in 0..8 {
        split_scales(y[74 + ib], &mut out.ls[2 * ib..]);
        for l in 0..4 {
            let idx = qs[4 * ib + l] as usize | ((qh[ib] as usize) << (8 - 2 * l) & 0x300);
            signed(&IQ2S[idx], signs[4 * ib + l], &mut out.q[32 * ib + 8 * l..]);
        }
    }
}
