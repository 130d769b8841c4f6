//! bitsandbytes 4-bit weights (NF4, FP4): `y = x · Wᵀ` straight from the packed codes.
//!
//! Storage (bitsandbytes' layout): the weight `[rows, cols]` flattened row-major, element `2t` in the high
//! nibble and `2t + 1` in the low nibble of byte `t`; one f32 absmax per `blocksize` consecutive elements of
//! the flattened weight (blocks may straddle rows); value = `code[q] · absmax`.
//!
//! Arithmetic, as llama.cpp does for its non-uniform IQ4_NL code: the 16 code values are mapped to int8
//! (`round(code · 127 / max|code|)`), activations are quantized to int8 per 32 values (scale `amax/127`,
//! ggml's Q8_0 rounding), and each group of 32 is an exact integer dot product scaled by `absmax · d_x`.
//! Activation groups are stored odd elements first (`x1 x3 … x31 x0 x2 … x30`), so the low and high nibbles
//! of 16 weight bytes line up with them without shuffling.
//!
//! Rows whose length is not a multiple of 32 (tiny models; rows may then start mid-byte) take an exact f32
//! path instead: each value decoded as `code[q] · absmax` and multiplied with the unquantized activations.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(test)]
mod tests;

use rayon::prelude::*;

use super::act::q8_block32;
use super::{tiled_rows, with_quantized, Backend};

/// Values per activation group (one f32 scale each).
const GROUP: usize = 32;
/// Bytes of one activation group: f32 scale, then 32 int8.
const XG_BYTES: usize = 4 + GROUP;

/// A bitsandbytes 4-bit weight matrix as stored.
#[derive(Clone, Copy, Debug)]
pub struct Bnb4View<'a> {
    /// Output features (matrix rows).
    pub rows: usize,
    /// Inputs per row (matrix columns).
    pub cols: usize,
    /// log2 of the elements per absmax block.
    block_shift: u32,
    /// `rows · cols / 2` bytes of packed codes.
    pub packed: &'a [u8],
    /// One scale per block of the flattened weight.
    pub absmax: &'a [f32],
    /// The 16 code values.
    code: [f32; 16],
    /// The code as int8 (`round(code · 127 / max|code|)`).
    code_i8: [i8; 16],
    /// `max|code| / 127`: undoes the int8 code scaling.
    code_scale: f32,
}

impl<'a> Bnb4View<'a> {
    /// Checks the pieces against each other: `blocksize` a power of two of at least 32 (every bitsandbytes
    /// block size is), and the buffers exactly the sizes the shape implies.
    pub fn new(
        rows: usize,
        cols: usize,
        blocksize: usize,
        packed: &'a [u8],
        absmax: &'a [f32],
        code: &[f32; 16],
    ) -> Result<Self, String> {
        if blocksize < GROUP || !blocksize.is_power_of_two() {
            return Err(format!("4-bit weight: block size {blocksize} is not a power of two of at least {GROUP}"));
        }
        let n = rows.checked_mul(cols).ok_or_else(|| format!("4-bit weight: {rows}×{cols} values overflow"))?;
        if packed.len() != n.div_ceil(2) {
            let need = n.div_ceil(2);
            return Err(format!(
                "4-bit weight: {rows}×{cols} values take {need} bytes, the buffer has {}",
                packed.len()
            ));
        }
        if absmax.len() != n.div_ceil(blocksize) {
            return Err(format!(
                "4-bit weight: {rows}×{cols} values in blocks of {blocksize} need {} absmax values, found {}",
                n.div_ceil(blocksize),
                absmax.len()
            ));
        }
        let max = code.iter().fold(0f32, |m, c| m.max(c.abs()));
        if !max.is_finite() {
            return Err("4-bit weight: the code table is not finite".into());
        }
        let (code_i8, code_scale) =
            if max == 0.0 { ([0i8; 16], 0.0) } else { (code.map(|c| (c * 127.0 / max).round() as i8), max / 127.0) };
        Ok(Bnb4View {
            rows,
            cols,
            block_shift: blocksize.trailing_zeros(),
            packed,
            absmax,
            code: *code,
            code_i8,
            code_scale,
        })
    }

    /// The absmax of the block holding flattened element `e`.
    #[inline(always)]
    fn absmax_at(&self, e: usize) -> f32 {
        self.absmax[e >> self.block_shift]
    }

    /// Dequantizes the whole matrix to f32 (`rows · cols` values), exactly: `code[q] · absmax`.
    pub fn dequantize(&self, out: &mut [f32]) {
        for (e, o) in out[..self.rows * self.cols].iter_mut().enumerate() {
            *o = self.code[self.nibble(e) as usize] * self.absmax_at(e);
        }
    }

    /// The 4-bit code of flattened element `e`.
    #[inline(always)]
    fn nibble(&self, e: usize) -> u8 {
        let b = self.packed[e / 2];
        if e.is_multiple_of(2) {
            b >> 4
        } else {
            b & 15
        }
    }
}

/// Quantizes one activation row into groups of [`XG_BYTES`] (odd elements first in each group).
fn quantize_x(x: &[f32], dst: &mut [u8]) {
    for (x, g) in x.chunks_exact(GROUP).zip(dst.chunks_exact_mut(XG_BYTES)) {
        let (d, q) = q8_block32(x);
        g[..4].copy_from_slice(&d.to_le_bytes());
        for t in 0..GROUP / 2 {
            g[4 + t] = q[2 * t + 1] as u8;
            g[4 + GROUP / 2 + t] = q[2 * t] as u8;
        }
    }
}

/// Row `r` of `w` against one quantized activation row, portable code (and the test oracle).
fn dot_scalar(w: &Bnb4View<'_>, r: usize, xq: &[u8]) -> f32 {
    let first = r * w.cols;
    let packed = &w.packed[first / 2..(first + w.cols) / 2];
    let mut acc = 0f32;
    for (g, (wb, xg)) in packed.chunks_exact(GROUP / 2).zip(xq.chunks_exact(XG_BYTES)).enumerate() {
        let d = f32::from_le_bytes(xg[..4].try_into().expect("4 bytes"));
        let mut s = 0i32;
        for (t, &b) in wb.iter().enumerate() {
            s += w.code_i8[(b & 15) as usize] as i32 * xg[4 + t] as i8 as i32;
            s += w.code_i8[(b >> 4) as usize] as i32 * xg[4 + GROUP / 2 + t] as i8 as i32;
        }
        acc += w.absmax_at(first + g * GROUP) * d * s as f32;
    }
    acc * w.code_scale
}

/// Row `r` of `w` against the f32 activation row `x`, each weight decoded exactly (any row length).
fn dot_f32(w: &Bnb4View<'_>, r: usize, x: &[f32]) -> f32 {
    let first = r * w.cols;
    x.iter().enumerate().map(|(c, &v)| v * w.code[w.nibble(first + c) as usize] * w.absmax_at(first + c)).sum()
}

/// y[i, r] = Σ_c x[i, c] · W[r, c] for i in 0..n: `x` is n×cols row-major f32, `y` is n×rows (overwritten).
/// Runs on the current rayon pool.
pub fn matmul(w: Bnb4View<'_>, x: &[f32], n: usize, y: &mut [f32]) {
    matmul_with(super::backend(), w, x, n, y)
}

/// [`matmul`] on a chosen backend (panics if the CPU lacks it).
pub fn matmul_with(backend: Backend, w: Bnb4View<'_>, x: &[f32], n: usize, y: &mut [f32]) {
    let (rows, cols) = (w.rows, w.cols);
    if super::trivial_product(rows, cols, x, n, y) {
        return;
    }
    if !cols.is_multiple_of(GROUP) {
        y.par_chunks_mut(rows).zip(x.par_chunks(cols)).for_each(|(y, x)| {
            for (r, y) in y.iter_mut().enumerate() {
                *y = dot_f32(&w, r, x);
            }
        });
        return;
    }
    backend.assert_supported();

    let xs = cols / GROUP * XG_BYTES;
    with_quantized(x, n, cols, xs, quantize_x, |xq| {
        tiled_rows(rows, n, y, |r, i, nx, out| row_dot(backend, &w, r, &xq[i * xs..], xs, nx, out))
    });
}

/// Row `r` against `nx` (1..=4) quantized activation rows `xs` bytes apart.
#[inline]
fn row_dot(backend: Backend, w: &Bnb4View<'_>, r: usize, x: &[u8], xs: usize, nx: usize, out: &mut [f32; 4]) {
    assert!((1..=4).contains(&nx) && x.len() >= (nx - 1) * xs + w.cols / GROUP * XG_BYTES);
    #[cfg(target_arch = "x86_64")]
    if backend.has_avx2() {
        // SAFETY: `matmul_with` checked the CPU features; `r < rows` and `x` holds `nx` rows (asserted).
        unsafe { avx2::row_dot(w, r, x, xs, nx, out) };
        return;
    }
    let _ = backend;
    for (j, o) in out[..nx].iter_mut().enumerate() {
        *o = dot_scalar(w, r, &x[j * xs..]);
    }
}
