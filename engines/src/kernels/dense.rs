//! Dense (F32/F16/BF16) weights against many activation rows (prefill): the weight rows are widened to f32 a
//! tile at a time and multiplied with a blocked, register-tiled GEMM (the `gemm` crate), which keeps the FMA
//! units busy where the row kernels would be bound by loads. Activations are first rounded to the weight's
//! precision, as the row kernels do (ggml's f16 · f16 semantics), so both paths compute the same products.

use std::borrow::Cow;

use gemm::{gemm, Parallelism};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;
use tgi_formats::GgmlType;

use super::WeightView;

/// Weight rows widened per GEMM call (a few MiB of f32).
const TILE_ROWS: usize = 256;

/// Activation rows from which the GEMM path wins over the row kernels.
const MIN_ROWS: usize = 32;

/// One stored row as f32: F16 through the vectorized slice conversion when the bytes are aligned.
fn widen(ty: GgmlType, src: &[u8], dst: &mut [f32]) {
    if ty == GgmlType::F16 {
        // SAFETY: every bit pattern is a valid f16; align_to only yields the aligned middle.
        let (pre, mid, _) = unsafe { src.align_to::<f16>() };
        if pre.is_empty() && mid.len() == dst.len() {
            mid.convert_to_f32_slice(dst);
            return;
        }
    }
    tgi_formats::quant::dequantize_row(ty, src, dst).expect("a float row of the checked size");
}

/// Whether [`matmul`] is the better path for `n` activation rows of weights `ty`.
pub(super) fn applies(ty: GgmlType, n: usize) -> bool {
    n >= MIN_ROWS && matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}

/// y = x · Wᵀ for dense `w` (see [`super::matmul`] for the shapes).
pub(super) fn matmul(w: WeightView<'_>, x: &[f32], n: usize, y: &mut [f32]) {
    let (rows, cols) = (w.rows, w.cols);
    let x: Cow<[f32]> = match w.ty {
        GgmlType::F16 => Cow::Owned(x.par_iter().map(|&v| f16::from_f32(v).to_f32()).collect()),
        GgmlType::BF16 => Cow::Owned(x.par_iter().map(|&v| bf16::from_f32(v).to_f32()).collect()),
        _ => Cow::Borrowed(x),
    };
    let rb = w.row_bytes();
    let mut tile = vec![0f32; TILE_ROWS.min(rows) * cols];
    let threads = rayon::current_num_threads();
    for r0 in (0..rows).step_by(TILE_ROWS) {
        let tr = TILE_ROWS.min(rows - r0);
        let t = &mut tile[..tr * cols];
        t.par_chunks_mut(cols).enumerate().for_each(|(i, dst)| widen(w.ty, &w.data[(r0 + i) * rb..][..rb], dst));
        // SAFETY: dst is y[i * rows + r0 + j] for i < n, j < tr, inside y (n × rows); lhs is x[i * cols + k]
        // (n × cols) and rhs t[j * cols + k] (tr × cols), both fully initialized; nothing else touches y meanwhile.
        unsafe {
            gemm(
                n,
                tr,
                cols,
                y.as_mut_ptr().add(r0),
                1,
                rows as isize,
                false,
                x.as_ptr(),
                1,
                cols as isize,
                t.as_ptr(),
                cols as isize,
                1,
                0.0,
                1.0,
                false,
                false,
                false,
                Parallelism::Rayon(threads),
            )
        };
    }
}
