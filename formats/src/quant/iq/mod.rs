//! The importance-matrix ("i-quant") types IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M
//! (also written, by [`encode1`], [`encode1m`], [`encode2`] and [`encode3`]). Each 256-value super-block unpacks to one [`IqBlock`] of small integers (signed
//! codebook levels and odd sub-block multipliers), from which [`dequantize`] gives ggml's
//! `dequantize_row_*` values bit for bit and the engine's kernels take their integer dot products
//! (`ggml_vec_dot_*_q8_K`).

pub(super) mod encode1;
pub(super) mod encode1m;
pub(super) mod encode2;
pub(super) mod encode3;
mod grid;
mod grids;
mod iq1;
mod iq2;
mod iq3;
mod search;
mod unpack;

pub use iq1::IQ1S_WORDS;
pub use iq2::{IQ2S_WORDS, IQ2XS_WORDS, IQ2XXS_WORDS};
pub use iq3::{IQ3S_WORDS, IQ3XXS_WORDS};

use super::num::fp16_value;
use crate::GgmlType;

/// Values per super-block.
pub const QK_K: usize = 256;

/// One super-block as integers: value `e` is `d · ls[e / 16] · q[e] · dot_scale` of its
/// [`IqCodec`] (up to the f32 rounding of that product).
#[derive(Clone, Debug)]
pub struct IqBlock {
    /// The super-block scale (fp16) as f32.
    pub d: f32,
    /// Per 16 values, the odd sub-block multiplier `2s + 1` (1..=31).
    pub ls: [u8; 16],
    /// The signed levels: codebook entry times sign (IQ1: 8 × (entry ± 1/8), so that all are integers).
    pub q: [i8; QK_K],
}

impl Default for IqBlock {
    fn default() -> Self {
        IqBlock { d: 0.0, ls: [0; 16], q: [0; QK_K] }
    }
}

/// How a sub-block's f32 step is formed from `d` and `ls = 2s + 1`, as each `dequantize_row_*` does.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// `d · (0.5 + s) · k` times the level.
    HalfOdd(f32),
    /// `d · ls` times the level.
    Odd,
    /// `d · ls` times (the level / 8).
    OddEighths,
}

/// A super-block unpacker.
type Unpack = fn(&[u8], &mut IqBlock);

/// The codec of one i-quant type.
#[derive(Clone, Copy, Debug)]
pub struct IqCodec {
    /// Bytes per super-block.
    pub block_bytes: usize,
    /// The factor every `d · ls · q` carries (0.125, 0.25 or 1).
    pub dot_scale: f32,
    unpack: Unpack,
    step: Step,
}

impl IqCodec {
    /// The codec of `ty`, if it is an i-quant type tgi reads.
    pub fn of(ty: GgmlType) -> Option<IqCodec> {
        let (unpack, dot_scale, step): (Unpack, f32, Step) = match ty {
            GgmlType::IQ2_XXS => (iq2::unpack_iq2_xxs, 0.125, Step::HalfOdd(0.25)),
            GgmlType::IQ2_XS => (iq2::unpack_iq2_xs, 0.125, Step::HalfOdd(0.25)),
            GgmlType::IQ2_S => (iq2::unpack_iq2_s, 0.125, Step::HalfOdd(0.25)),
            GgmlType::IQ3_XXS => (iq3::unpack_iq3_xxs, 0.25, Step::HalfOdd(0.5)),
            GgmlType::IQ3_S => (iq3::unpack_iq3_s, 1.0, Step::Odd),
            GgmlType::IQ1_S => (iq1::unpack_iq1_s, 0.125, Step::OddEighths),
            GgmlType::IQ1_M => (iq1::unpack_iq1_m, 0.125, Step::OddEighths),
            _ => return None,
        };
        Some(IqCodec { block_bytes: ty.type_size(), dot_scale, unpack, step })
    }

    /// Unpacks one super-block (`block_bytes` bytes) into `out`.
    #[inline]
    pub fn unpack(&self, block: &[u8], out: &mut IqBlock) {
        (self.unpack)(&block[..self.block_bytes], out)
    }

    /// Decodes whole super-blocks of `src` into `dst` (256 values each), as ggml's `dequantize_row_*`.
    pub(crate) fn dequantize(&self, src: &[u8], dst: &mut [f32]) {
        let mut b = IqBlock::default();
        for (block, y) in src.chunks_exact(self.block_bytes).zip(dst.chunks_exact_mut(QK_K)) {
            self.unpack(block, &mut b);
            for ((y, q), &ls) in y.chunks_exact_mut(16).zip(b.q.chunks_exact(16)).zip(&b.ls) {
                match self.step {
                    Step::HalfOdd(k) => {
                        let db = b.d * (0.5 + (ls >> 1) as f32) * k;
                        y.iter_mut().zip(q).for_each(|(y, &q)| *y = db * q as f32);
                    }
                    Step::Odd => {
                        let db = b.d * ls as f32;
                        y.iter_mut().zip(q).for_each(|(y, &q)| *y = db * q as f32);
                    }
                    Step::OddEighths => {
                        let dl = b.d * ls as f32;
                        y.iter_mut().zip(q).for_each(|(y, &q)| *y = dl * (q as f32 * 0.125));
                    }
                }
            }
        }
    }
}

/// Reads a little-endian u16 at `o`.
#[inline(always)]
fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

/// Reads a little-endian u32 at `o`.
#[inline(always)]
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

/// Writes the 8 levels of codeword `c` into `q`, negated where bit `j` of `signs` is set.
#[inline(always)]
fn signed<const W: usize>(c: &[i8; W], signs: u8, q: &mut [i8]) {
    for (j, (q, &v)) in q.iter_mut().zip(c).enumerate() {
        *q = if signs >> j & 1 != 0 { -v } else { v };
    }
}

/// The `K` codewords of an 8-level grid, each as the little-endian bytes of one u64.
const fn words8<const K: usize>(grid: &[[i8; 8]; K]) -> [u64; K] {
    let mut words = [0u64; K];
    let mut k = 0;
    while k < K {
        let mut j = 0;
        while j < 8 {
            words[k] |= (grid[k][j] as u8 as u64) << (8 * j);
            j += 1;
        }
        k += 1;
    }
    words
}

/// The fp16 super-block scale at the start of a block, as f32.
#[inline(always)]
fn fp16_d(block: &[u8]) -> f32 {
    fp16_value(u16_at(block, 0))
}

#[cfg(test)]
mod tests;
