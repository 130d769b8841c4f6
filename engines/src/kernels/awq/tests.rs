use tgi_formats::awq::AwqTensor;

use super::*;
use crate::kernels::tests::values;

/// The checkpoint bytes of an AWQ tensor: qweight, qzeros, scales.
fn bytes(t: &AwqTensor) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let le = |v: &[i32]| v.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>();
    (le(&t.qweight), le(&t.qzeros), t.scales.iter().flat_map(|s| s.to_le_bytes()).collect())
}

/// Quantizes random weights with the formats codec and repacks them.
fn matrix(rows: usize, cols: usize, group: usize, zero_point: bool) -> (AwqTensor, AwqMatrix) {
    let w = values(rows * cols, 0x9E37_79B9 + (cols * group) as u64);
    let t = AwqTensor::quantize(&w, rows, cols, group, zero_point).unwrap();
    let (qw, qz, sc) = bytes(&t);
    let m = AwqMatrix::from_gemm(rows, cols, group, &qw, &qz, &sc).unwrap();
    (t, m)
}

fn rel_err(a: &[f32], r: &[f64]) -> f64 {
    let num: f64 = a.iter().zip(r).map(|(&a, &r)| (a as f64 - r).powi(2)).sum();
    let den: f64 = r.iter().map(|r| r * r).sum();
    (num / den).sqrt()
}

/// Runs every backend on one shape: the scalar path against the f64 product with the exactly dequantized
/// weight, the AVX2 path against the scalar one. Returns the scalar path's relative error.
fn check(rows: usize, cols: usize, group: usize, n: usize, zero_point: bool) -> f64 {
    let (t, m) = matrix(rows, cols, group, zero_point);
    let mut wd = vec![0f32; rows * cols];
    m.dequantize(&mut wd);
    assert_eq!(wd, t.dequantize(), "{rows}×{cols} g {group}: repacked dequantization");
    let x = values(n * cols, 77 + n as u64);
    let want: Vec<f64> = (0..n * rows)
        .map(|k| {
            let (i, r) = (k / rows, k % rows);
            (0..cols).map(|c| x[i * cols + c] as f64 * wd[r * cols + c] as f64).sum()
        })
        .collect();
    let mut ys = vec![0f32; n * rows];
    matmul_with(Backend::Scalar, &m, &x, n, &mut ys);
    let err = rel_err(&ys, &want);
    // Activations rounded to int8 per group: about 0.5-1% of the output's norm.
    assert!(err < 1.5e-2, "{rows}×{cols} g {group} n {n} zp {zero_point}: scalar vs f64 reference {err}");
    if super::super::backend().has_avx2() {
        let mut ya = vec![0f32; n * rows];
        matmul_with(Backend::Avx2, &m, &x, n, &mut ya);
        for (k, (a, s)) in ya.iter().zip(&ys).enumerate() {
            // Same integer sums per group; only the f32 accumulation order differs.
            assert!(
                (a - s).abs() <= 1e-4 * (1.0 + s.abs()),
                "{rows}×{cols} g {group} n {n} [{k}]: avx2 {a} scalar {s}"
            );
        }
    }
    err
}

#[test]
fn every_group_size_and_row_count() {
    for group in [32, 64, 128] {
        for zero_point in [true, false] {
            for n in [1, 2, 3, 4, 5, 9] {
                check(40, 256, group, n, zero_point);
            }
        }
    }
}

#[test]
fn long_and_odd_groups() {
    // Groups of 256 fill the 16-bit sums exactly; 512 needs a second widening per group.
    check(16, 512, 256, 3, true);
    check(16, 1024, 512, 2, true);
    // An odd number of blocks per row, and groups of 3 blocks (every other one starting mid-pair).
    check(24, 96, 32, 4, false);
    check(16, 192, 96, 3, true);
    check(16, 960, 480, 1, true);
}

#[test]
fn int8_activations_cost_little_precision() {
    // On TinyLlama's row length: the kernel against exact f32 (dequantized weight · unquantized x), compared
    // with AWQ's own 4-bit error (dequantized weight against the unquantized one).
    let (rows, cols) = (64, 2048);
    let err = check(rows, cols, 128, 1, true);
    let w = values(rows * cols, 0x9E37_79B9 + (cols * 128) as u64);
    let (t, _) = matrix(rows, cols, 128, true);
    let wd = t.dequantize();
    let x = values(cols, 78);
    let exact: Vec<f64> = (0..rows).map(|r| (0..cols).map(|c| x[c] as f64 * w[r * cols + c] as f64).sum()).collect();
    let coded: Vec<f32> =
        (0..rows).map(|r| (0..cols).map(|c| x[c] as f64 * wd[r * cols + c] as f64).sum::<f64>() as f32).collect();
    let q4_err = rel_err(&coded, &exact);
    eprintln!("int8 activations: {err:.4} of the output norm; 4-bit weights: {q4_err:.4}");
    assert!(err < 1.2e-2 && err < 0.25 * q4_err, "int8 {err}, 4-bit {q4_err}");
}

#[test]
fn repacking_follows_the_awq_order() {
    // One word per row of qweight: output channel 8c + j takes nibble AWQ_ORDER⁻¹[j].
    let (rows, cols) = (8, 32);
    let codes: Vec<u8> = (0..rows * cols).map(|k| (k * 7 % 16) as u8).collect(); // [o, i]
    let mut qweight = Vec::new();
    for i in 0..cols {
        let w = AWQ_ORDER.iter().enumerate().fold(0u32, |w, (k, &j)| w | u32::from(codes[j * cols + i]) << (4 * k));
        qweight.extend(w.to_le_bytes());
    }
    let zeros = AWQ_ORDER.iter().enumerate().fold(0u32, |w, (k, &j)| w | (j as u32) << (4 * k));
    let scales: Vec<u8> = (0..rows).flat_map(|o| f16::from_f32(1.0 + o as f32).to_le_bytes()).collect();
    let m = AwqMatrix::from_gemm(rows, cols, 32, &qweight, &zeros.to_le_bytes(), &scales).unwrap();
    let mut w = vec![0f32; rows * cols];
    m.dequantize(&mut w);
    for o in 0..rows {
        for i in 0..cols {
            assert_eq!(w[o * cols + i], (codes[o * cols + i] as f32 - o as f32) * (1.0 + o as f32), "[{o}, {i}]");
        }
    }
}

#[test]
fn bad_shapes_are_refused() {
    let e = |r: Result<AwqMatrix, String>| r.unwrap_err();
    assert!(e(AwqMatrix::from_gemm(8, 64, 48, &[0; 256], &[0; 8], &[0; 32])).contains("multiple of 32"));
    assert!(e(AwqMatrix::from_gemm(8, 96, 64, &[0; 384], &[0; 8], &[0; 32])).contains("groups of 64"));
    assert!(e(AwqMatrix::from_gemm(12, 64, 64, &[0; 384], &[0; 8], &[0; 32])).contains("multiple of 8"));
    assert!(e(AwqMatrix::from_gemm(8, 64, 64, &[0; 255], &[0; 4], &[0; 16])).contains("qweight"));
    assert!(e(AwqMatrix::from_gemm(8, 64, 64, &[0; 256], &[0; 8], &[0; 16])).contains("qzeros"));
    assert!(e(AwqMatrix::from_gemm(8, 64, 64, &[0; 256], &[0; 4], &[0; 8])).contains("scales"));
}
