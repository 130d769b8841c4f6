//! Activation quantizers: each weight type's "vec_dot_type" as ggml's x86 CPU backend computes it.
//!
//! Layouts (little-endian, unaligned, one activation row after the other):
//! - Q8_0: per 32 values `f16 d; i8 q[32]` (34 bytes).
//! - Q8_1: per 32 values `f16 d; f16 s; i8 q[32]` (36 bytes), `s = d·Σq`.
//! - Q8_K: per 256 values `f32 d; i8 q[256]; i16 bsums[16]` (292 bytes).
//! - F32/F16/BF16: f32 values (for F16/BF16 rounded through that format, so that an f32 product
//!   with the f16/bf16 weights equals ggml's f16·f16 / bf16·bf16 product).

use half::f16;
use tgi_formats::quant::{bf16_to_fp32, fp32_to_bf16};
use tgi_formats::GgmlType;

/// Bytes of one Q8_0 block.
pub const Q8_0_BYTES: usize = 34;
/// Bytes of one Q8_1 block.
pub const Q8_1_BYTES: usize = 36;
/// Bytes of one Q8_K block.
pub const Q8_K_BYTES: usize = 292;

/// The encoding activations are converted to before the dot products with a weight type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VecType {
    /// Blocks of 32: f16 scale, 32 i8.
    Q8_0,
    /// Blocks of 32: f16 scale, f16 scaled sum, 32 i8.
    Q8_1,
    /// Blocks of 256: f32 scale, 256 i8, 16 i16 sums.
    Q8K,
    /// f32 as given.
    F32,
    /// f32 rounded through f16.
    F16,
    /// f32 rounded through bf16.
    BF16,
}

impl VecType {
    /// The activation encoding ggml pairs with weight type `ty`.
    pub fn for_weight(ty: GgmlType) -> VecType {
        match ty {
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL => VecType::Q8_0,
            GgmlType::Q4_1 | GgmlType::Q5_1 => VecType::Q8_1,
            GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => VecType::Q8K,
            GgmlType::IQ4_XS
            | GgmlType::IQ2_XXS
            | GgmlType::IQ2_XS
            | GgmlType::IQ2_S
            | GgmlType::IQ3_XXS
            | GgmlType::IQ3_S
            | GgmlType::IQ1_S
            | GgmlType::IQ1_M
            | GgmlType::TQ1_0
            | GgmlType::TQ2_0 => VecType::Q8K,
            GgmlType::F32 => VecType::F32,
            GgmlType::F16 => VecType::F16,
            GgmlType::BF16 => VecType::BF16,
        }
    }

    /// Bytes one activation row of `cols` values takes (`cols` a multiple of the block size).
    pub fn row_bytes(self, cols: usize) -> usize {
        match self {
            VecType::Q8_0 => cols / 32 * Q8_0_BYTES,
            VecType::Q8_1 => cols / 32 * Q8_1_BYTES,
            VecType::Q8K => cols / 256 * Q8_K_BYTES,
            VecType::F32 | VecType::F16 | VecType::BF16 => cols * 4,
        }
    }

    /// Encodes one row `x` into `dst` (exactly `row_bytes(x.len())` bytes).
    pub fn quantize_row(self, x: &[f32], dst: &mut [u8]) {
        debug_assert_eq!(dst.len(), self.row_bytes(x.len()));
        match self {
            VecType::Q8_0 => {
                for (x, y) in x.chunks_exact(32).zip(dst.chunks_exact_mut(Q8_0_BYTES)) {
                    quantize_q8_0_block(x, y);
                }
            }
            VecType::Q8_1 => {
                for (x, y) in x.chunks_exact(32).zip(dst.chunks_exact_mut(Q8_1_BYTES)) {
                    quantize_q8_1_block(x, y);
                }
            }
            VecType::Q8K => {
                for (x, y) in x.chunks_exact(256).zip(dst.chunks_exact_mut(Q8_K_BYTES)) {
                    quantize_q8_k_block(x, y);
                }
            }
            VecType::F32 => {
                for (&v, d) in x.iter().zip(dst.chunks_exact_mut(4)) {
                    d.copy_from_slice(&v.to_le_bytes());
                }
            }
            VecType::F16 => {
                for (&v, d) in x.iter().zip(dst.chunks_exact_mut(4)) {
                    d.copy_from_slice(&f16::from_f32(v).to_f32().to_le_bytes());
                }
            }
            VecType::BF16 => {
                for (&v, d) in x.iter().zip(dst.chunks_exact_mut(4)) {
                    d.copy_from_slice(&bf16_to_fp32(fp32_to_bf16(v)).to_le_bytes());
                }
            }
        }
    }
}

/// Quantizes 32 values to i8 as ggml's AVX2 `quantize_row_q8_0` does: `d = amax/127`,
/// `q = round_half_even(x · 127/amax)`. Returns the (unrounded) scale and the quants.
#[inline]
pub(crate) fn q8_block32(x: &[f32]) -> (f32, [i8; 32]) {
    let mut q = [0u8; 32];
    let d = q8_into(x, &mut q);
    (d, q.map(|b| b as i8))
}

/// [`q8_block32`]'s rounding for any number of values under one scale: the i8 quants of `x` into `q` (as
/// bytes), returning the scale `d = amax/127`.
#[inline]
pub(crate) fn q8_into(x: &[f32], q: &mut [u8]) -> f32 {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    for (q, &v) in q.iter_mut().zip(x) {
        *q = nearest_int(v * id) as i8 as u8;
    }
    amax / 127.0
}

/// Encodes one Q8_0 activation block (34 bytes).
fn quantize_q8_0_block(x: &[f32], y: &mut [u8]) {
    let (d, q) = q8_block32(x);
    y[0..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    for (b, &q) in y[2..34].iter_mut().zip(&q) {
        *b = q as u8;
    }
}

/// Encodes one Q8_1 activation block (36 bytes).
fn quantize_q8_1_block(x: &[f32], y: &mut [u8]) {
    let (d, q) = q8_block32(x);
    let sum: i32 = q.iter().map(|&q| q as i32).sum();
    y[0..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    y[2..4].copy_from_slice(&f16::from_f32(d * sum as f32).to_le_bytes());
    for (b, &q) in y[4..36].iter_mut().zip(&q) {
        *b = q as u8;
    }
}

/// ggml's `nearest_int` (round half to even via the 1.5·2^23 trick).
#[inline(always)]
fn nearest_int(f: f32) -> i32 {
    let bits = (f + 12_582_912.0f32).to_bits();
    (bits & 0x007f_ffff) as i32 - 0x0040_0000
}

/// Encodes one Q8_K activation block (292 bytes) as `quantize_row_q8_K_ref` does
/// (bsums of an all-zero block are written as zero).
pub fn quantize_q8_k_block(x: &[f32], y: &mut [u8]) {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        y[..Q8_K_BYTES].fill(0);
        return;
    }
    let iscale = -127.0f32 / max;
    let mut q = [0i8; 256];
    for (q, &v) in q.iter_mut().zip(x) {
        *q = nearest_int(iscale * v).min(127) as i8;
    }
    y[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    for (b, &q) in y[4..260].iter_mut().zip(&q) {
        *b = q as u8;
    }
    for (j, s) in y[260..292].chunks_exact_mut(2).enumerate() {
        let sum: i32 = q[16 * j..16 * j + 16].iter().map(|&q| q as i32).sum();
        s.copy_from_slice(&(sum as i16).to_le_bytes());
    }
}
