//! AWQ 4-bit weights (AutoAWQ's GEMM checkpoints): `y = x · Wᵀ` from the packed codes, with
//! `W[o, i] = (q[o, i] - z[o, g]) · s[o, g]` for input group `g = i / group`.
//!
//! The checkpoint packs codes along output channels (`qweight [in, out/8]`, eight codes per word in
//! AutoAWQ's nibble order), which suits a GPU GEMM, not a row-by-row dot product. [`AwqMatrix::from_gemm`]
//! repacks once at load to rows of the weight: per output row, per 64 inputs, 32 bytes whose byte `t` holds
//! input `t` in its low nibble and input `t + 32` in its high nibble (Q4_K's arrangement: one 32-byte load,
//! two masks, two blocks of 32 codes); beside them one f16 scale and one u8 zero per (row, group). That is
//! 4 bits per weight plus 3 bytes per group, about the checkpoint's size.
//!
//! Arithmetic: activations are quantized to int8 with one scale `d` per weight group (ggml's Q8_0 rounding
//! over the group; Q4_K's own activations share one scale per 256 values), and with it `e = d · S`, `S` the
//! sum of the group's int8 values. Then `Σ_i W[o, i] x_i = Σ_g s·d·(Σ q·x8) − Σ_g (s·z)·e`: per group an
//! integer dot product of the unsigned codes (0..15) with the signed activations, exactly what `maddubs`
//! multiplies, and one scaled accumulation; the zero-point term is a dot product over groups, 8 at a time
//! (scales and zeros are stored per row padded to a multiple of 8 groups, with zeros).

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(test)]
mod tests;

use half::f16;
use rayon::prelude::*;
use tgi_formats::awq::AWQ_ORDER;

use super::act::q8_into;
use super::{tiled_rows, with_quantized, Backend};

/// Inputs per block of int8 products (one `maddubs`); two blocks share 32 bytes of codes.
const BLOCK: usize = 32;
/// Groups handled together for the scales and the zero-point term (one AVX2 register of f32).
const LANES: usize = 8;

/// An AWQ weight matrix in the layout the kernels read (see the module docs).
#[derive(Clone, Debug)]
pub struct AwqMatrix {
    /// Output features (matrix rows).
    rows: usize,
    /// Inputs per row (matrix columns).
    cols: usize,
    /// Inputs per quantization group (a multiple of 32).
    group: usize,
    /// `rows · row_bytes()` bytes of codes, row by row.
    packed: Vec<u8>,
    /// `[rows, padded_groups()]` scales.
    scales: Vec<f16>,
    /// `[rows, padded_groups()]` zero points.
    zeros: Vec<u8>,
}

/// The little-endian 32-bit word `k` of `b`.
#[inline(always)]
fn word(b: &[u8], k: usize) -> u32 {
    u32::from_le_bytes(b[4 * k..4 * k + 4].try_into().expect("4 bytes"))
}

impl AwqMatrix {
    /// Repacks a layer stored as AutoAWQ's GEMM tensors (their little-endian bytes): `qweight` int32
    /// `[cols, rows/8]`, `qzeros` int32 `[cols/group, rows/8]`, `scales` f16 `[cols/group, rows]`, for `rows`
    /// outputs and `cols` inputs. `group` must be a multiple of 32 dividing `cols`, and `rows` a multiple of 8.
    pub fn from_gemm(
        rows: usize,
        cols: usize,
        group: usize,
        qweight: &[u8],
        qzeros: &[u8],
        scales: &[u8],
    ) -> Result<AwqMatrix, String> {
        if group == 0 || !group.is_multiple_of(BLOCK) {
            return Err(format!("AWQ group size {group} is not a multiple of {BLOCK}"));
        }
        if !cols.is_multiple_of(group) {
            return Err(format!("AWQ weight: {cols} inputs do not divide into groups of {group}"));
        }
        if !rows.is_multiple_of(8) {
            return Err(format!("AWQ weight: {rows} outputs are not a multiple of 8"));
        }
        let groups = cols / group;
        for (name, have, want) in [
            ("qweight", qweight.len(), cols * rows / 2),
            ("qzeros", qzeros.len(), groups * rows / 2),
            ("scales", scales.len(), groups * rows * 2),
        ] {
            if have != want {
                return Err(format!(
                    "AWQ weight {rows}×{cols} in groups of {group}: {name} has {have} bytes, expected {want}"
                ));
            }
        }
        let (words, row_bytes) = (rows / 8, row_bytes(cols));
        let mut packed = vec![0u8; rows * row_bytes];
        if row_bytes > 0 {
            // 64 output rows per task: for each block of 32 inputs and pack of 8 outputs, the 32 words of
            // qweight become the low or high nibbles of 32 contiguous bytes in each of the 8 rows.
            packed.par_chunks_mut(64 * row_bytes).enumerate().for_each(|(t, dst)| {
                let (o0, n) = (64 * t, dst.len() / row_bytes);
                let mut w = [0u32; BLOCK];
                for blk in 0..cols / BLOCK {
                    for c in o0 / 8..(o0 + n) / 8 {
                        for (k, w) in w.iter_mut().enumerate() {
                            *w = word(qweight, (BLOCK * blk + k) * words + c);
                        }
                        for (k, &j) in AWQ_ORDER.iter().enumerate() {
                            let at = (8 * c + j - o0) * row_bytes + 32 * (blk / 2);
                            let shift = 4 * (blk % 2);
                            for (d, &w) in dst[at..at + 32].iter_mut().zip(&w) {
                                *d |= (((w >> (4 * k)) & 15) as u8) << shift;
                            }
                        }
                    }
                }
            });
        }
        let pg = groups.div_ceil(LANES) * LANES;
        let mut s = vec![f16::ZERO; rows * pg];
        let mut z = vec![0u8; rows * pg];
        for g in 0..groups {
            for c in 0..words {
                let w = word(qzeros, g * words + c);
                for (k, &j) in AWQ_ORDER.iter().enumerate() {
                    z[(8 * c + j) * pg + g] = ((w >> (4 * k)) & 15) as u8;
                }
            }
            for o in 0..rows {
                let at = 2 * (g * rows + o);
                s[o * pg + g] = f16::from_le_bytes([scales[at], scales[at + 1]]);
            }
        }
        Ok(AwqMatrix { rows, cols, group, packed, scales: s, zeros: z })
    }

    /// Groups per row.
    fn groups(&self) -> usize {
        self.cols / self.group
    }

    /// Groups per row rounded up to whole [`LANES`].
    fn padded_groups(&self) -> usize {
        self.groups().div_ceil(LANES) * LANES
    }

    /// The code of weight `[r, c]`.
    #[inline(always)]
    fn code(&self, r: usize, c: usize) -> u8 {
        let b = self.packed[r * row_bytes(self.cols) + c / 64 * 32 + c % 32];
        if c % 64 < 32 {
            b & 15
        } else {
            b >> 4
        }
    }

    /// Dequantizes the whole matrix to f32 (`rows · cols` values, row-major), exactly as AutoAWQ does.
    pub fn dequantize(&self, out: &mut [f32]) {
        let pg = self.padded_groups();
        for (r, row) in out[..self.rows * self.cols].chunks_exact_mut(self.cols.max(1)).enumerate() {
            for (c, o) in row.iter_mut().enumerate() {
                let g = r * pg + c / self.group;
                *o = (f32::from(self.code(r, c)) - f32::from(self.zeros[g])) * self.scales[g].to_f32();
            }
        }
    }

    /// The buffers to pin in RAM: codes, scales (as bytes) and zeros.
    pub fn buffers(&self) -> [&[u8]; 3] {
        // SAFETY: f16 is a plain 2-byte value with no padding; the slice covers exactly the scales.
        let scales = unsafe { std::slice::from_raw_parts(self.scales.as_ptr().cast::<u8>(), 2 * self.scales.len()) };
        [&self.packed, scales, &self.zeros]
    }

    /// Bytes of one quantized activation row: `padded_groups()` f32 scales `d`, as many f32 `e`, `cols` int8.
    fn x_row_bytes(&self) -> usize {
        8 * self.padded_groups() + self.cols
    }
}

/// Bytes of codes per row of `cols` inputs (whole 32-byte pairs of blocks).
fn row_bytes(cols: usize) -> usize {
    cols.div_ceil(64) * 32
}

/// The 32 codes of block `b` (inputs `32b..32b + 32`) of a row of packed codes.
#[inline(always)]
fn block_codes(row: &[u8], b: usize) -> impl Iterator<Item = u8> + '_ {
    let shift = 4 * (b % 2);
    row[32 * (b / 2)..32 * (b / 2) + 32].iter().map(move |&v| (v >> shift) & 15)
}

/// Quantizes one activation row (see [`AwqMatrix::x_row_bytes`]), `pg` padded groups of `group` values.
fn quantize_x(x: &[f32], dst: &mut [u8], group: usize, pg: usize) {
    let (head, q) = dst.split_at_mut(8 * pg);
    let (ds, es) = head.split_at_mut(4 * pg);
    ds.fill(0);
    es.fill(0);
    for (g, (x, q)) in x.chunks_exact(group).zip(q.chunks_exact_mut(group)).enumerate() {
        let d = q8_into(x, q);
        let sum: i32 = q.iter().map(|&b| i32::from(b as i8)).sum();
        ds[4 * g..4 * g + 4].copy_from_slice(&d.to_le_bytes());
        es[4 * g..4 * g + 4].copy_from_slice(&(d * sum as f32).to_le_bytes());
    }
}

/// The little-endian f32 `k` of `b`.
#[inline(always)]
fn f32_at(b: &[u8], k: usize) -> f32 {
    f32::from_le_bytes(b[4 * k..4 * k + 4].try_into().expect("4 bytes"))
}

/// Row `r` of `m` against one quantized activation row, portable code (and the test oracle).
fn dot_scalar(m: &AwqMatrix, r: usize, xq: &[u8]) -> f32 {
    let pg = m.padded_groups();
    let rb = row_bytes(m.cols);
    let row = &m.packed[r * rb..(r + 1) * rb];
    let bpg = m.group / BLOCK;
    let (head, q) = xq.split_at(8 * pg);
    let (mut acc, mut corr) = (0f32, 0f32);
    for (g, xg) in q[..m.cols].chunks_exact(m.group).enumerate() {
        let mut dot = 0i32;
        for (k, xb) in xg.chunks_exact(BLOCK).enumerate() {
            dot += block_codes(row, g * bpg + k).zip(xb).map(|(q, &x)| i32::from(q) * i32::from(x as i8)).sum::<i32>();
        }
        let s = m.scales[r * pg + g].to_f32();
        acc += s * f32_at(head, g) * dot as f32;
        corr += s * f32::from(m.zeros[r * pg + g]) * f32_at(head, pg + g);
    }
    acc - corr
}

/// y[i, r] = Σ_c x[i, c] · W[r, c] for i in 0..n: `x` is n×cols row-major f32, `y` is n×rows (overwritten).
/// Runs on the current rayon pool.
pub fn matmul(m: &AwqMatrix, x: &[f32], n: usize, y: &mut [f32]) {
    matmul_with(super::backend(), m, x, n, y)
}

/// [`matmul`] on a chosen backend (panics if the CPU lacks it).
pub fn matmul_with(backend: Backend, m: &AwqMatrix, x: &[f32], n: usize, y: &mut [f32]) {
    let (rows, cols) = (m.rows, m.cols);
    if super::trivial_product(rows, cols, x, n, y) {
        return;
    }
    backend.assert_supported();
    let (xs, pg) = (m.x_row_bytes(), m.padded_groups());
    with_quantized(
        x,
        n,
        cols,
        xs,
        |s, d| quantize_x(s, d, m.group, pg),
        |xq| tiled_rows(rows, n, y, |r, i, nx, out| row_dot(backend, m, r, &xq[i * xs..], xs, nx, out)),
    );
}

/// Row `r` against `nx` (1..=4) quantized activation rows `xs` bytes apart.
#[inline]
fn row_dot(backend: Backend, m: &AwqMatrix, r: usize, x: &[u8], xs: usize, nx: usize, out: &mut [f32; 4]) {
    assert!((1..=4).contains(&nx) && r < m.rows && xs == m.x_row_bytes() && x.len() >= nx * xs);
    #[cfg(target_arch = "x86_64")]
    if backend.has_avx2() {
        // SAFETY: `matmul_with` checked the CPU features; `r < rows` and `x` holds `nx` rows (asserted).
        unsafe { avx2::row_dot(m, r, x, xs, nx, out) };
        return;
    }
    let _ = backend;
    for (j, o) in out[..nx].iter_mut().enumerate() {
        *o = dot_scalar(m, r, &x[j * xs..]);
    }
}
