//! Weights repacked once at load into a row-interleaved layout: 16 weight rows side by side, so that on the
//! AVX-512 VNNI level one 512-bit `vpdpbusd` multiplies four columns of 16 rows against four broadcast activation
//! bytes, and the scales of 16 outputs apply in one vector operation. The AVX2 levels (AVX2, AVX-VNNI) run the
//! same layout as two halves of 8 rows with `vpmaddubsw`, their high bits kept as byte slices instead of masks
//! (Q6_K's are byte slices on every level). The same kernel serves prefill (activation rows in tiles, each weight
//! block unpacked once per tile) and decode (one row). F16 and BF16 weights are panels of 16 rows' values column
//! after column, widened to f32 in registers and multiplied by broadcast activations with FMAs: 512-bit ones two
//! groups (32 rows) at a time, 256-bit ones (the AVX2 levels) a group in two halves; where the CPU has AVX512_BF16,
//! prefill's many rows meet them in bf16 through `vdpbf16ps` instead (`avx512_bf16`), twice the products per
//! instruction.
//!
//! Every bit of the stored blocks is kept, so [`Interleaved::unpack`] gives the stored bytes back; `layout`
//! documents where each goes. The weights meet the activations' i8 quants as unsigned bytes in `vpdpbusd`, with
//! the legacy types' signed offset taken out of each block's integer sum (IQ4_NL's nibbles looked up as their
//! level plus 128; Q4_1's and Q5_1's unsigned quants go in as stored, their min meeting ggml's scaled sum of the
//! activations), so that the integer sums equal ggml's
//! exactly and only the order of the f32 accumulation differs from the row kernels.

/// `[$body for $i in 0..$n]`, each element from a zeroed `$zero`, built by a loop in the caller's body so that the
/// SIMD intrinsics in `$body` compile with the caller's target features: a closure given to `std::array::from_fn`
/// does not inherit them, and calls every intrinsic out of line (2.5x slower decode on Gemma 3 270M, AVX2).
#[cfg(target_arch = "x86_64")]
macro_rules! simd_array {
    ($n:expr, $zero:expr, |$i:ident| $body:expr) => {{
        let mut out = [$zero; $n];
        for ($i, o) in out.iter_mut().enumerate() {
            *o = $body;
        }
        out
    }};
}

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_bf16;
mod layout;
#[cfg(test)]
mod tests;

use std::time::{Duration, Instant};

use rayon::prelude::*;
use tgi_formats::GgmlType;

use super::act::{VecType, Q8_K_BYTES};
use super::{trivial_product, with_quantized, Backend, SyncPtr, WeightView};
use layout::Bits;

/// Weight rows interleaved in one group.
pub const ROWS: usize = 16;
/// Stored bytes packed between two calls of [`Interleaved::pack`]'s `done`.
const STRETCH: usize = 4 << 20;
/// Bytes of one legacy activation block: f32 scale, i32 sum of the quants (for Q4_1 and Q5_1 the f32 scaled sum),
/// 32 i8 quants.
const X_LEGACY_BYTES: usize = 40;
/// Activation rows from which F16/BF16 panels are multiplied in bf16 where the CPU has AVX512_BF16 (prefill; decode
/// and small batches keep the f32 FMA kernel).
const BF16_DOT_ROWS: usize = 32;
/// Most groups of F16/BF16 panels one call of the bf16 kernel passes each tile of activations over (8 KiB each per
/// stretch of columns, in L2).
const BF16_DOT_SPAN: usize = 32;

/// IQ4_NL's levels plus 128, the unsigned weight bytes the AVX-512 kernel looks its nibbles up as.
#[cfg(target_arch = "x86_64")]
const IQ4_NL_UNSIGNED: [u8; 16] = {
    let mut out = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        out[i] = (tgi_formats::quant::IQ4_NL_VALUES[i] as i32 + Kind::IQ4_NL.offset()) as u8;
        i += 1;
    }
    out
};

/// The packed types (named as GGML names them).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Q8_0,
    Q4_0,
    Q5_0,
    Q4_1,
    Q5_1,
    IQ4_NL,
    Q4_K,
    Q5_K,
    Q6_K,
    F16,
    BF16,
}

impl Kind {
    fn of(ty: GgmlType) -> Option<Kind> {
        Some(match ty {
            GgmlType::Q8_0 => Kind::Q8_0,
            GgmlType::Q4_0 => Kind::Q4_0,
            GgmlType::Q5_0 => Kind::Q5_0,
            GgmlType::Q4_1 => Kind::Q4_1,
            GgmlType::Q5_1 => Kind::Q5_1,
            GgmlType::IQ4_NL => Kind::IQ4_NL,
            GgmlType::Q4_K => Kind::Q4_K,
            GgmlType::Q5_K => Kind::Q5_K,
            GgmlType::Q6_K => Kind::Q6_K,
            GgmlType::F16 => Kind::F16,
            GgmlType::BF16 => Kind::BF16,
            _ => return None,
        })
    }

    /// Whether the type is a 256-value K-quant (else a 32-value legacy type).
    const fn is_k(self) -> bool {
        matches!(self, Kind::Q4_K | Kind::Q5_K | Kind::Q6_K)
    }

    /// Whether the type is a legacy one with a min beside its scale (`d·q + m`, Q4_1 and Q5_1).
    const fn has_min(self) -> bool {
        matches!(self, Kind::Q4_1 | Kind::Q5_1)
    }

    /// Where a legacy group block's quants start: after the 16 rows' f16 scales, and their f16 mins if it has them.
    const fn quants_at(self) -> usize {
        if self.has_min() {
            64
        } else {
            32
        }
    }

    /// Bytes of a stored legacy block before its quants (Q5_0's and Q5_1's high bits first): the f16 scale, and
    /// the f16 min if it has one.
    const fn head(self) -> usize {
        if self.has_min() {
            4
        } else {
            2
        }
    }

    /// Whether the type is F16 or BF16 (multiplied in f32, not in integers).
    const fn is_float(self) -> bool {
        matches!(self, Kind::F16 | Kind::BF16)
    }

    /// Groups one AVX-512 kernel call multiplies: two for the floats (32 rows against each broadcast activation), else
    /// one.
    const fn groups_per_call(self) -> usize {
        if self.is_float() {
            2
        } else {
            1
        }
    }

    /// Values per block (for the floats, the columns of one packed panel block).
    const fn values(self) -> usize {
        if self.is_k() {
            256
        } else {
            32
        }
    }

    /// Bytes of one stored block.
    const fn block_bytes(self) -> usize {
        match self {
            Kind::Q8_0 => 34,
            Kind::Q4_0 | Kind::IQ4_NL => 18,
            Kind::Q5_0 => 22,
            Kind::Q4_1 => 20,
            Kind::Q5_1 => 24,
            Kind::Q4_K => 144,
            Kind::Q5_K => 176,
            Kind::Q6_K => 210,
            Kind::F16 | Kind::BF16 => 64,
        }
    }

    /// Bytes of one group's block (see `layout`).
    const fn group_block_bytes(self) -> usize {
        match self {
            Kind::Q4_K => layout::K_QUANTS + 4 * 8 * 64,
            Kind::Q5_K => layout::K_QUANTS + 4 * 8 * 64 + 8 * 8 * 8,
            _ => ROWS * self.block_bytes(),
        }
    }

    /// What is added to a legacy type's signed quant (IQ4_NL's level) to make it the unsigned weight byte.
    const fn offset(self) -> i32 {
        match self {
            Kind::Q8_0 | Kind::IQ4_NL => 128,
            Kind::Q4_0 => 8,
            Kind::Q5_0 => 16,
            Kind::Q4_1 | Kind::Q5_1 | Kind::Q4_K | Kind::Q5_K | Kind::Q6_K | Kind::F16 | Kind::BF16 => 0,
        }
    }

    /// Bytes of one quantized activation block.
    const fn x_block_bytes(self) -> usize {
        if self.is_float() {
            4 * 32
        } else if self.is_k() {
            Q8_K_BYTES
        } else {
            X_LEGACY_BYTES
        }
    }

    /// Quantizes one activation row: ggml's Q8_K for the K-quants; for the legacy types ggml's Q8_0 (the same
    /// f16-rounded scale and quants) laid out as f32 scale, i32 sum of the quants, 32 quants, where the types with a
    /// min (ggml's Q8_1) have ggml's f16-rounded scaled sum `d·Σq` as an f32 instead of the integer sum; for the
    /// floats the values rounded to the weights' precision (ggml's f16 · f16 products), as little-endian f32.
    fn quantize_x(self, x: &[f32], dst: &mut [u8]) {
        if self.is_float() {
            return round_to_weights(self == Kind::BF16, x, dst);
        }
        if self.is_k() {
            return VecType::Q8K.quantize_row(x, dst);
        }
        for (x, out) in x.chunks_exact(32).zip(dst.chunks_exact_mut(X_LEGACY_BYTES)) {
            let (d, q) = super::act::q8_block32(x);
            let sum: i32 = q.iter().map(|&q| q as i32).sum();
            out[0..4].copy_from_slice(&half::f16::from_f32(d).to_f32().to_le_bytes());
            if self.has_min() {
                out[4..8].copy_from_slice(&half::f16::from_f32(d * sum as f32).to_f32().to_le_bytes());
            } else {
                out[4..8].copy_from_slice(&sum.to_le_bytes());
            }
            for (o, &q) in out[8..].iter_mut().zip(&q) {
                *o = q as u8;
            }
        }
    }
}

/// `x` rounded to f16 (bf16 with `bf`) precision and written as little-endian f32, a stretch at a time through
/// `half`'s slice conversions (F16C where the CPU has it).
fn round_to_weights(bf: bool, x: &[f32], dst: &mut [u8]) {
    use half::slice::HalfFloatSliceExt;
    const STRETCH: usize = 256;
    let (mut h, mut b, mut f) = ([half::f16::ZERO; STRETCH], [half::bf16::ZERO; STRETCH], [0f32; STRETCH]);
    for (x, dst) in x.chunks(STRETCH).zip(dst.chunks_mut(4 * STRETCH)) {
        let f = &mut f[..x.len()];
        if bf {
            b[..x.len()].convert_from_f32_slice(x);
            b[..x.len()].convert_to_f32_slice(f);
        } else {
            h[..x.len()].convert_from_f32_slice(x);
            h[..x.len()].convert_to_f32_slice(f);
        }
        for (&v, out) in f.iter().zip(dst.chunks_exact_mut(4)) {
            out.copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// A weight matrix in the interleaved layout (see the module documentation).
pub struct Interleaved {
    ty: GgmlType,
    kind: Kind,
    /// The level whose kernel runs it (AVX-512 VNNI, else an AVX2 one).
    backend: Backend,
    rows: usize,
    cols: usize,
    data: Vec<u8>,
    took: Duration,
    /// Whether many activation rows meet these F16/BF16 panels in bf16 (`vdpbf16ps`, see `avx512_bf16`).
    bf16_dot: bool,
}

impl Interleaved {
    /// `w` repacked for `backend`, if that level has an interleaved kernel for its type and shape (Q8_0, Q4_0,
    /// Q5_0, Q4_1, Q5_1, IQ4_NL, Q4_K, Q5_K, Q6_K, F16 and BF16 on every x86 level; rows a multiple of 16, columns
    /// of 32). `done` is called with each stretch of the stored bytes once it is packed (a few MiB at a time, in
    /// order, then all of it), so that the caller can let it go.
    pub fn pack(backend: Backend, w: WeightView<'_>, done: impl Fn(&[u8])) -> Option<Interleaved> {
        let kind = Kind::of(w.ty)?;
        let whole = w.rows.is_multiple_of(ROWS) && w.cols.is_multiple_of(kind.values());
        if backend == Backend::Scalar || !backend.supported() || w.rows == 0 || !whole {
            return None;
        }
        let bits = bits_of(backend);
        let start = Instant::now();
        let (nb, gb) = (w.cols / kind.values(), kind.group_block_bytes());
        let mut data = huge_zeroed(w.rows / ROWS * nb * gb);
        let wb = w.row_bytes();
        let batch = (STRETCH / (ROWS * wb)).max(1);
        for (i, stretch) in data.chunks_mut(batch * nb * gb).enumerate() {
            let first = i * batch;
            stretch.par_chunks_mut(nb * gb).enumerate().for_each(|(g, dst)| {
                let src = &w.data[(first + g) * ROWS * wb..(first + g + 1) * ROWS * wb];
                for (b, out) in dst.chunks_exact_mut(gb).enumerate() {
                    let blocks: [&[u8]; ROWS] =
                        std::array::from_fn(|r| &src[r * wb + b * kind.block_bytes()..][..kind.block_bytes()]);
                    layout::pack(kind, bits, &blocks, out);
                }
            });
            let groups = stretch.len() / (nb * gb);
            done(&w.data[first * ROWS * wb..(first + groups) * ROWS * wb]);
        }
        // The whole of it too, for the caller's pages that straddle two stretches.
        done(w.data);
        let packed = Interleaved {
            ty: w.ty,
            kind,
            backend,
            rows: w.rows,
            cols: w.cols,
            data,
            took: start.elapsed(),
            bf16_dot: false,
        };
        Some(if bf16_dot_pays() { packed.with_bf16_products() } else { packed })
    }

    /// The stored GGML bytes back, row after row.
    pub fn unpack(&self) -> Vec<u8> {
        let (nb, gb, bytes) = (self.cols / self.kind.values(), self.kind.group_block_bytes(), self.kind.block_bytes());
        let wb = nb * bytes;
        let mut out = vec![0u8; self.rows * wb];
        for (g, src) in self.data.chunks_exact(nb * gb).enumerate() {
            for (b, packed) in src.chunks_exact(gb).enumerate() {
                for r in 0..ROWS {
                    let at = (g * ROWS + r) * wb + b * bytes;
                    layout::unpack(self.kind, bits_of(self.backend), packed, r, &mut out[at..at + bytes]);
                }
            }
        }
        out
    }

    /// The weight type as stored.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// The packed bytes (as many as stored, but 3% more for Q4_K's and Q5_K's unpacked scales).
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// How long packing took.
    pub fn took(&self) -> Duration {
        self.took
    }

    /// The same weights multiplied in f32 FMAs at every batch size (F16 products exact, see [`Self::in_bf16`]).
    pub fn with_f32_products(mut self) -> Interleaved {
        self.bf16_dot = false;
        self
    }

    /// The same weights met in bf16 products from [`BF16_DOT_ROWS`] activation rows, where they are F16/BF16 panels
    /// on the AVX-512 level of a CPU with AVX512_BF16 (what [`Self::pack`] chooses only where that pays, see
    /// `bf16_dot_pays`); else unchanged.
    pub fn with_bf16_products(mut self) -> Interleaved {
        self.bf16_dot = self.kind.is_float() && self.backend == Backend::Avx512 && bf16_dot_available();
        self
    }

    /// Whether `n` activation rows meet these weights in bf16 products (F16/BF16 panels on a CPU where they pay,
    /// from [`BF16_DOT_ROWS`] rows): the activations, and F16 weights, rounded to bf16.
    pub fn in_bf16(&self, n: usize) -> bool {
        self.bf16_dot && n >= BF16_DOT_ROWS
    }

    /// y[i, r] = Σ_c x[i, c] · W[r, c] for i in 0..n (`x` n×cols, `y` n×rows), on the current rayon pool.
    pub fn matmul(&self, x: &[f32], n: usize, y: &mut [f32]) {
        if trivial_product(self.rows, self.cols, x, n, y) {
            return;
        }
        let kind = self.kind;
        let nb = self.cols / kind.values();
        let dot = self.in_bf16(n);
        let xs = nb * if dot { 64 } else { kind.x_block_bytes() };
        with_quantized(
            x,
            n,
            self.cols,
            xs,
            |x, d| {
                if dot {
                    // SAFETY: `bf16_dot` is only set where the CPU has AVX-512 F and BF16; `x` is whole blocks of 32
                    // and `d` 2 bytes per value.
                    #[cfg(target_arch = "x86_64")]
                    unsafe {
                        avx512_bf16::to_bf16(x, d)
                    };
                } else {
                    kind.quantize_x(x, d)
                }
            },
            |xq| {
                let groups = self.rows / ROWS;
                let gbytes = nb * kind.group_block_bytes();
                let wide = self.backend == Backend::Avx512;
                let chunk = groups
                    .div_ceil(rayon::current_num_threads().max(1) * 4)
                    .max(1)
                    .next_multiple_of(kind.groups_per_call());
                // The AVX2 and bf16 float kernels block a task's groups together (their stretch of weights in L2, each
                // tile of activations in L1); every other kernel takes one group (or a pair) at a time.
                let span = if dot {
                    chunk.min(BF16_DOT_SPAN)
                } else if kind.is_float() && !wide {
                    chunk
                } else {
                    kind.groups_per_call()
                };
                let yp = SyncPtr(y.as_mut_ptr());
                (0..groups.div_ceil(chunk)).into_par_iter().for_each(|t| {
                    let end = ((t + 1) * chunk).min(groups);
                    for g in (t * chunk..end).step_by(span) {
                        let w = &self.data[g * gbytes..(g + span).min(end) * gbytes];
                        // SAFETY: `pack` only builds this layout where the CPU runs `self.backend` (AVX-512 VNNI, or a
                        // level with AVX2, FMA and F16C) and sets `bf16_dot` only where it has AVX512_BF16 too; `w` is
                        // one or (floats) more groups of `nb` blocks, `xq` holds `n` rows of `xs` bytes, and `y` is
                        // n×rows with this task the only writer of those groups' columns (the groups are split between
                        // tasks).
                        #[cfg(target_arch = "x86_64")]
                        unsafe {
                            if dot {
                                avx512_bf16::groups(kind == Kind::BF16, w, xq, xs, n, nb, yp.at(g * ROWS), self.rows)
                            } else if wide {
                                avx512::group(kind, w, xq, xs, n, nb, yp.at(g * ROWS), self.rows)
                            } else {
                                avx2::group(kind, w, xq, xs, n, nb, yp.at(g * ROWS), self.rows)
                            }
                        };
                        #[cfg(not(target_arch = "x86_64"))]
                        let _ = (w, yp, wide, dot);
                    }
                });
            },
        );
    }
}

/// Whether the CPU has the bf16 dot products of `avx512_bf16`.
fn bf16_dot_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        avx512_bf16::available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether prefill's F16/BF16 panels are met in bf16 products by default: where the CPU has them and is AMD's.
/// Zen 4 and Zen 5 run `vdpbf16ps` at the FMAs' rate with twice their products (F16 prefill 1.64x llama.cpp's on
/// Zen 4, docs/engine.md); Intel's Xeon (family 6 model 207, AVX512_BF16) runs it at half that rate, so the f32
/// FMAs are faster there and exact for F16 (2048×640 F16 at 512 rows, 2 threads: 5.6 ms against 8.0 ms in bf16).
fn bf16_dot_pays() -> bool {
    bf16_dot_available() && is_amd()
}

/// Whether the CPU is AMD's (`AuthenticAMD` in CPUID leaf 0).
fn is_amd() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let id = std::arch::x86_64::__cpuid(0);
        [id.ebx, id.edx, id.ecx].map(u32::to_le_bytes).concat() == b"AuthenticAMD"
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `len` zero bytes, asked of the OS as transparent huge pages (`MADV_HUGEPAGE`, before any is touched) where it
/// has them: decode streams the packed weights once a token, and with 4 KiB pages every page is a TLB miss and a
/// restart of the hardware prefetcher (F16 TinyLlama decode read 27 GB/s of weights instead of the ~47 GB/s that
/// llama.cpp reads from the file's huge page-cache folios).
fn huge_zeroed(len: usize) -> Vec<u8> {
    // A zeroed Vec at or above the C allocator's mmap threshold (32 MiB, `model/host_heap.rs`: Gemma's output
    // layer) is a fresh anonymous map whose pages are first touched by the packing; a smaller one comes from the
    // heap, whose pages stay 4 KiB (backing those by huge pages did not speed decode up, docs/engine.md).
    let data = vec![0u8; len];
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let (lo, hi) = (data.as_ptr() as usize, data.as_ptr() as usize + len);
        let (start, end) = (lo.next_multiple_of(HUGE), hi / HUGE * HUGE);
        if end > start {
            // SAFETY: the range is whole pages inside `data`'s allocation; the advice only changes how the kernel
            // backs them (the contents stay zero), and a kernel without THP answers with an error that is ignored.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
    }
    data
}

/// How a level's kernels want Q5_0's, Q5_1's and Q5_K's high bits: AVX-512 as masks, the AVX2 levels as byte slices.
fn bits_of(backend: Backend) -> Bits {
    if backend == Backend::Avx512 {
        Bits::Masks
    } else {
        Bits::Slices
    }
}
