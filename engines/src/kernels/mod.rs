//! CPU matrix kernels: `y = x · Wᵀ` for every GGML weight type, with ggml's CPU semantics
//! (activations quantized row by row to the weight type's "vec_dot_type", then integer dot
//! products per block), x86 fast paths (AVX2, AVX-VNNI, AVX-512 VNNI) chosen once at run time and a
//! portable scalar path for other CPUs (and as the test oracle).

/// `$f::<$pre.., N>($args..)` with the const `N` equal to `$t`, a number of activation rows from 1 to the tile
/// size (4, 6, 8 or 12), for the tiled kernels of every level (the interleaved GEMM, the i-quant GEMM).
macro_rules! with_rows {
    (4, $t:expr, $f:ident [$($pre:tt)*] $args:tt) => {
        match $t {
            1 => $f::<$($pre)* 1> $args,
            2 => $f::<$($pre)* 2> $args,
            3 => $f::<$($pre)* 3> $args,
            _ => $f::<$($pre)* 4> $args,
        }
    };
    (6, $t:expr, $f:ident [$($pre:tt)*] $args:tt) => {
        match $t {
            1..=4 => with_rows!(4, $t, $f [$($pre)*] $args),
            5 => $f::<$($pre)* 5> $args,
            _ => $f::<$($pre)* 6> $args,
        }
    };
    (8, $t:expr, $f:ident [$($pre:tt)*] $args:tt) => {
        match $t {
            1..=4 => with_rows!(4, $t, $f [$($pre)*] $args),
            5 => $f::<$($pre)* 5> $args,
            6 => $f::<$($pre)* 6> $args,
            7 => $f::<$($pre)* 7> $args,
            _ => $f::<$($pre)* 8> $args,
        }
    };
    (12, $t:expr, $f:ident [$($pre:tt)*] $args:tt) => {
        match $t {
            1..=8 => with_rows!(8, $t, $f [$($pre)*] $args),
            9 => $f::<$($pre)* 9> $args,
            10 => $f::<$($pre)* 10> $args,
            11 => $f::<$($pre)* 11> $args,
            _ => $f::<$($pre)* 12> $args,
        }
    };
}

pub mod act;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_iq;
#[cfg(target_arch = "x86_64")]
mod avx2_iq1;
#[cfg(target_arch = "x86_64")]
mod avx2_iq2;
#[cfg(target_arch = "x86_64")]
mod avx2_iq3;
#[cfg(target_arch = "x86_64")]
mod avx2_iq4;
#[cfg(target_arch = "x86_64")]
mod avx2_lowbit;
#[cfg(target_arch = "x86_64")]
mod avx2_ternary;
#[cfg(target_arch = "x86_64")]
mod avx512_iq;
#[cfg(target_arch = "x86_64")]
mod avx512_iq_gemm;
pub mod awq;
pub mod bnb4;
mod dense;
pub mod gated;
pub mod interleaved;
mod scalar;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod vnni;

use std::cell::Cell;
use std::sync::OnceLock;

use rayon::prelude::*;
use tgi_formats::GgmlType;

use act::VecType;

/// A weight matrix as stored: `rows` output features of `cols` inputs each, row-major, in `ty`'s encoding
/// (GGML blocks along each row for quantized types; plain little-endian f32/f16/bf16 otherwise).
#[derive(Clone, Copy, Debug)]
pub struct WeightView<'a> {
    /// Encoding of the values.
    pub ty: GgmlType,
    /// Output features (matrix rows).
    pub rows: usize,
    /// Inputs per row (matrix columns).
    pub cols: usize,
    /// The encoded rows, `ty.bytes_for(rows * cols)` bytes.
    pub data: &'a [u8],
}

impl<'a> WeightView<'a> {
    /// Checks the shape against the encoding: `cols` a whole number of `ty` blocks and `data`
    /// exactly the bytes of `rows × cols` values.
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: &'a [u8]) -> Result<Self, String> {
        let bs = ty.block_size();
        if !cols.is_multiple_of(bs) {
            return Err(format!("{ty:?} weight: {cols} columns are not a whole number of blocks of {bs}"));
        }
        let expected = rows
            .checked_mul(cols)
            .and_then(|n| ty.bytes_for(n as u64))
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| format!("{ty:?} weight: {rows}×{cols} values overflow"))?;
        if data.len() != expected {
            return Err(format!(
                "{ty:?} weight: {rows}×{cols} values take {expected} bytes, the buffer has {}",
                data.len()
            ));
        }
        Ok(WeightView { ty, rows, cols, data })
    }

    /// Bytes of one encoded row.
    pub fn row_bytes(&self) -> usize {
        self.cols / self.ty.block_size() * self.ty.type_size()
    }
}

/// The implementation a matmul runs: an instruction-set level, chosen once per process from the CPU's features.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Backend {
    /// Portable Rust, any CPU.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C intrinsics.
    Avx2,
    /// AVX2 plus AVX-VNNI (the VEX-encoded fused integer multiply-accumulates).
    AvxVnni,
    /// AVX2 plus AVX-512 F/BW/VL and VNNI.
    Avx512,
}

impl Backend {
    /// Every level, slowest first.
    pub const ALL: [Backend; 4] = [Backend::Scalar, Backend::Avx2, Backend::AvxVnni, Backend::Avx512];

    /// Whether this CPU can run the level.
    pub fn supported(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 =
                is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c");
            match self {
                Backend::Scalar => true,
                Backend::Avx2 => avx2,
                Backend::AvxVnni => avx2 && is_x86_feature_detected!("avxvnni"),
                Backend::Avx512 => {
                    avx2 && is_x86_feature_detected!("avx512f")
                        && is_x86_feature_detected!("avx512bw")
                        && is_x86_feature_detected!("avx512vl")
                        && is_x86_feature_detected!("avx512vnni")
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Backend::Scalar
        }
    }

    /// The levels this CPU can run, slowest first (the tests check each against the scalar one).
    pub fn available() -> Vec<Backend> {
        Backend::ALL.into_iter().filter(|b| b.supported()).collect()
    }

    /// Whether the level includes AVX2 + FMA + F16C (every level but the scalar one).
    pub fn has_avx2(self) -> bool {
        self != Backend::Scalar
    }

    /// The name reported in the startup log and `tgi generate --json`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Scalar => "scalar",
            Backend::Avx2 => "avx2",
            Backend::AvxVnni => "avx-vnni",
            Backend::Avx512 => "avx512-vnni",
        }
    }

    /// Panics unless this CPU can run the level (the `_with` entry points' guard before any intrinsic).
    pub(crate) fn assert_supported(self) {
        assert!(self.supported(), "this CPU cannot run the {} kernels", self.name());
    }
}

impl std::str::FromStr for Backend {
    type Err = String;

    /// Parses a level's [`Backend::name`].
    fn from_str(s: &str) -> Result<Self, String> {
        Backend::ALL.into_iter().find(|b| b.name() == s).ok_or_else(|| {
            let names: Vec<_> = Backend::ALL.iter().map(|b| b.name()).collect();
            format!("unknown CPU kernel level `{s}` (expected {})", names.join(", "))
        })
    }
}

/// Why a kernel level cannot be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChooseError {
    /// The CPU lacks the level's instructions.
    #[error("this CPU cannot run the {} kernels (it runs: {})", .0.name(), names(&Backend::available()))]
    Unsupported(Backend),
    /// Kernels already ran (or were chosen) at another level in this process.
    #[error("the CPU kernels already run at the {} level, not {}", .current.name(), .asked.name())]
    AlreadyChosen {
        /// The level in use.
        current: Backend,
        /// The level asked for.
        asked: Backend,
    },
}

/// The levels' names, comma-separated.
fn names(levels: &[Backend]) -> String {
    levels.iter().map(|b| b.name()).collect::<Vec<_>>().join(", ")
}

/// The level every matmul of the process runs at, fixed at its first use.
static BACKEND: OnceLock<Backend> = OnceLock::new();

/// The backend matmuls run on: the one [`choose`] fixed, else the fastest this CPU supports (detected once).
pub fn backend() -> Backend {
    *BACKEND.get_or_init(|| Backend::available().into_iter().max().unwrap_or(Backend::Scalar))
}

/// Fixes the level for the process (`--cpu-kernels`), before any matmul; choosing the level in use again is fine.
pub fn choose(level: Backend) -> Result<(), ChooseError> {
    if !level.supported() {
        return Err(ChooseError::Unsupported(level));
    }
    match *BACKEND.get_or_init(|| level) {
        current if current == level => Ok(()),
        current => Err(ChooseError::AlreadyChosen { current, asked: level }),
    }
}

/// Checks the shapes of `y = x · Wᵀ` (`x` n×cols, `y` n×rows) and handles the empty products: true when
/// there is nothing left to compute (`y` zeroed when there are no columns).
pub(crate) fn trivial_product(rows: usize, cols: usize, x: &[f32], n: usize, y: &mut [f32]) -> bool {
    assert_eq!(x.len(), n * cols, "x must be n×cols");
    assert_eq!(y.len(), n * rows, "y must be n×rows");
    if cols == 0 {
        y.fill(0.0);
    }
    n == 0 || rows == 0 || cols == 0
}

/// y[i, r] = Σ_c x[i, c] · W[r, c] for i in 0..n: `x` is n×cols row-major f32, `y` is n×rows (overwritten).
/// Runs on the current rayon pool (callers size it with --threads).
pub fn matmul(w: WeightView<'_>, x: &[f32], n: usize, y: &mut [f32]) {
    matmul_with(backend(), w, x, n, y)
}

/// [`matmul`] on a chosen backend (panics if the CPU lacks it).
pub fn matmul_with(backend: Backend, w: WeightView<'_>, x: &[f32], n: usize, y: &mut [f32]) {
    let (rows, cols) = (w.rows, w.cols);
    assert_eq!(cols % w.ty.block_size(), 0, "{:?}: {cols} columns are not whole blocks", w.ty);
    assert_eq!(w.data.len(), rows * w.row_bytes(), "{:?}: weight bytes do not match {rows}×{cols}", w.ty);
    if trivial_product(rows, cols, x, n, y) {
        return;
    }
    if backend != Backend::Scalar && dense::applies(w.ty, n) {
        return dense::matmul(w, x, n, y);
    }
    #[cfg(target_arch = "x86_64")]
    if backend == Backend::Avx512 && avx512_iq_gemm::applies(w.ty, n) {
        return avx512_iq_gemm::matmul(w, x, n, y);
    }
    let kernel = Kernel::select(backend, w.ty);
    let vt = VecType::for_weight(w.ty);
    let xs = vt.row_bytes(cols);
    let wb = w.row_bytes();
    with_quantized(
        x,
        n,
        cols,
        xs,
        |s, d| vt.quantize_row(s, d),
        |xq| {
            tiled_rows(rows, n, y, |r, i, nx, out| {
                kernel.run(&w.data[r * wb..(r + 1) * wb], &xq[i * xs..], xs, nx, cols, out)
            })
        },
    );
}

/// Quantizes the `n` activation rows of `x` (`cols` values each) with `quantize` into `xs` bytes each, in a
/// per-thread scratch buffer (rows in parallel from 8 rows on), and runs `f` on the encoded rows.
pub(crate) fn with_quantized<R>(
    x: &[f32],
    n: usize,
    cols: usize,
    xs: usize,
    quantize: impl Fn(&[f32], &mut [u8]) + Sync,
    f: impl FnOnce(&[u8]) -> R,
) -> R {
    thread_local! {
        static SCRATCH: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
    }
    // Taken out (not borrowed) so that a nested matmul on this thread finds an empty buffer.
    let mut xq = SCRATCH.with(Cell::take);
    xq.resize(n * xs, 0);
    if n >= 8 {
        xq.par_chunks_mut(xs).zip(x.par_chunks(cols)).for_each(|(d, s)| quantize(s, d));
    } else {
        xq.chunks_mut(xs).zip(x.chunks(cols)).for_each(|(d, s)| quantize(s, d));
    }
    let r = f(&xq);
    SCRATCH.with(|s| s.set(xq));
    r
}

/// The parallel loop every matmul shares: weight rows split into tiles over the rayon pool, each tile passed
/// over the activations up to 4 rows at a time (they stay in L1 while the tile's weight rows, at most 64, sit
/// in L2). `dot(r, i, nx, out)` puts weight row `r` against activation rows `i..i + nx` into `out[..nx]`,
/// which lands in `y[(i + j) · rows + r]` (`y` is `n × rows`).
pub(crate) fn tiled_rows(
    rows: usize,
    n: usize,
    y: &mut [f32],
    dot: impl Fn(usize, usize, usize, &mut [f32; 4]) + Sync,
) {
    assert_eq!(y.len(), n * rows, "y must be n×rows");
    let threads = rayon::current_num_threads().max(1);
    let tile_r = rows.div_ceil(threads * 8).clamp(4, 64);
    let yp = SyncPtr(y.as_mut_ptr());
    (0..rows.div_ceil(tile_r)).into_par_iter().for_each(|t| {
        let r0 = t * tile_r;
        let r1 = (r0 + tile_r).min(rows);
        let mut out = [0.0f32; 4];
        for i in (0..n).step_by(4) {
            let nx = (n - i).min(4);
            for r in r0..r1 {
                dot(r, i, nx, &mut out);
                for (j, &v) in out[..nx].iter().enumerate() {
                    // SAFETY: (i + j) < n and r < rows, so the index is inside y (asserted above); every
                    // task owns the rows r0..r1 of its tile, so no two tasks write the same element, and
                    // `y` is borrowed mutably for the whole parallel loop.
                    unsafe { yp.write((i + j) * rows + r, v) };
                }
            }
        }
    });
}

/// `y`'s base pointer, shared by the row tiles that write disjoint elements.
#[derive(Clone, Copy)]
struct SyncPtr(*mut f32);
impl SyncPtr {
    /// Writes `v` at element `k`.
    ///
    /// Safety: `k` is inside the buffer and no other thread accesses element `k` meanwhile.
    #[inline]
    unsafe fn write(self, k: usize, v: f32) {
        self.0.add(k).write(v)
    }

    /// The address of element `k`.
    ///
    /// Safety: `k` is inside the buffer.
    #[inline]
    unsafe fn at(self, k: usize) -> *mut f32 {
        self.0.add(k)
    }
}

// SAFETY: only used for the disjoint writes described in `tiled_rows`.
unsafe impl Send for SyncPtr {}
// SAFETY: as above.
unsafe impl Sync for SyncPtr {}

/// A scalar single-row dot product: weight row, activation row, cols.
type ScalarDot = fn(&[u8], &[u8], usize) -> f32;

/// The dot-product routine for one weight type on one backend.
#[derive(Clone, Copy)]
enum Kernel {
    Scalar(ScalarDot),
    #[cfg(target_arch = "x86_64")]
    Simd(avx2::RowDot),
}

impl Kernel {
    /// The fastest routine for `ty` on `backend`.
    fn select(backend: Backend, ty: GgmlType) -> Kernel {
        backend.assert_supported();
        #[cfg(target_arch = "x86_64")]
        {
            let vnni = match backend {
                Backend::AvxVnni => vnni::avx_vnni(ty),
                Backend::Avx512 => vnni::avx512_vnni(ty),
                Backend::Scalar | Backend::Avx2 => None,
            };
            if backend.has_avx2() {
                return Kernel::Simd(vnni.unwrap_or_else(|| avx2::row_dot(ty)));
            }
        }
        Kernel::Scalar(scalar_dot(ty))
    }

    /// Dots `w` with `nx` (1..=4) activation rows of `xs` bytes at the start of `x`.
    #[inline]
    fn run(self, w: &[u8], x: &[u8], xs: usize, nx: usize, cols: usize, out: &mut [f32; 4]) {
        match self {
            Kernel::Scalar(f) => {
                for (j, o) in out[..nx].iter_mut().enumerate() {
                    *o = f(w, &x[j * xs..(j + 1) * xs], cols);
                }
            }
            #[cfg(target_arch = "x86_64")]
            Kernel::Simd(f) => {
                assert!(x.len() >= nx * xs && (1..=4).contains(&nx));
                // SAFETY: `select` checked the CPU features; `w` is one row of `cols` values of
                // the kernel's type and `x` holds `nx` encoded rows of `xs` bytes (checked above).
                unsafe { f(w, x, xs, nx, cols, out) }
            }
        }
    }
}

/// The portable dot product for weight type `ty`.
fn scalar_dot(ty: GgmlType) -> ScalarDot {
    match ty {
        GgmlType::F32 => scalar::dot_f32,
        GgmlType::F16 => scalar::dot_f16,
        GgmlType::BF16 => scalar::dot_bf16,
        GgmlType::Q4_0 => scalar::dot_q4_0,
        GgmlType::Q4_1 => scalar::dot_q4_1,
        GgmlType::Q5_0 => scalar::dot_q5_0,
        GgmlType::Q5_1 => scalar::dot_q5_1,
        GgmlType::Q8_0 => scalar::dot_q8_0,
        GgmlType::Q2_K => scalar::dot_q2_k,
        GgmlType::Q3_K => scalar::dot_q3_k,
        GgmlType::Q4_K => scalar::dot_q4_k,
        GgmlType::Q5_K => scalar::dot_q5_k,
        GgmlType::Q6_K => scalar::dot_q6_k,
        GgmlType::IQ4_NL => scalar::dot_iq4_nl,
        GgmlType::IQ4_XS => scalar::dot_iq4_xs,
        GgmlType::IQ2_XXS => scalar::dot_iq::<16>,
        GgmlType::IQ2_XS => scalar::dot_iq::<17>,
        GgmlType::IQ3_XXS => scalar::dot_iq::<18>,
        GgmlType::IQ1_S => scalar::dot_iq::<19>,
        GgmlType::IQ3_S => scalar::dot_iq::<21>,
        GgmlType::IQ2_S => scalar::dot_iq::<22>,
        GgmlType::IQ1_M => scalar::dot_iq::<29>,
        GgmlType::TQ1_0 => scalar::dot_tq1_0,
        GgmlType::TQ2_0 => scalar::dot_tq2_0,
    }
}
