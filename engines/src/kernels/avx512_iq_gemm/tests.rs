use tgi_formats::quant::{quantize_row, quantize_row_weighted, requires_importance};

use super::*;
use crate::kernels::tests::values;
use crate::kernels::{matmul_with, Backend};

/// `rows × cols` pseudo-random weights encoded as `ty` (with unit importance where ggml requires a matrix).
fn encode(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let w = values(rows * cols, seed);
    let mut data = vec![0u8; ty.bytes_for((rows * cols) as u64).unwrap() as usize];
    if requires_importance(ty) {
        quantize_row_weighted(ty, &w, &mut data, &vec![1.0; w.len()]).unwrap();
    } else {
        quantize_row(ty, &w, &mut data).unwrap();
    }
    data
}

const TYPES: [GgmlType; 8] = [
    GgmlType::IQ4_XS,
    GgmlType::IQ3_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ2_S,
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ1_S,
    GgmlType::IQ1_M,
];

#[test]
fn expanded_groups_match_the_scalar_path_on_odd_shapes() {
    if !Backend::Avx512.supported() {
        return;
    }
    // Rows short of a group, one group, a partial last group; activation rows 1, 2, a tile less one, a tile, more.
    for ty in TYPES {
        for (rows, cols) in [(5, 256), (16, 512), (37, 768), (100, 256)] {
            let data = encode(ty, rows, cols, 11 + rows as u64);
            let w = WeightView::new(ty, rows, cols, &data).unwrap();
            for n in [1, 2, TILE - 1, TILE, TILE + 1, 2 * TILE + 3, 40] {
                let x: Vec<f32> = values(n * cols, 5 + n as u64).iter().map(|v| 3.0 * v).collect();
                let mut reference = vec![f32::NAN; n * rows];
                matmul_with(Backend::Scalar, w, &x, n, &mut reference);
                let mut y = vec![f32::NAN; n * rows];
                matmul(w, &x, n, &mut y);
                // Through the level's dispatch too (the expanded path from FROM_ROWS activation rows).
                let mut dispatched = vec![f32::NAN; n * rows];
                matmul_with(Backend::Avx512, w, &x, n, &mut dispatched);
                for (k, ((&a, &b), &r)) in y.iter().zip(&dispatched).zip(&reference).enumerate() {
                    let tol = 1e-4 * (1.0 + r.abs());
                    assert!((a - r).abs() <= tol, "{ty:?} {rows}x{cols} n={n} [{k}]: {a} vs scalar {r}");
                    assert!((b - r).abs() <= tol, "{ty:?} {rows}x{cols} n={n} [{k}] dispatched: {b} vs scalar {r}");
                }
            }
        }
    }
}

#[test]
fn small_batches_keep_the_row_kernels() {
    assert!(!applies(GgmlType::IQ4_XS, FROM_ROWS - 1) && applies(GgmlType::IQ4_XS, FROM_ROWS));
    assert!(!applies(GgmlType::IQ4_NL, 64) && !applies(GgmlType::Q4_K, 64));
}
