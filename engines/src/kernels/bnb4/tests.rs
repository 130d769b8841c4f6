use super::*;
use crate::kernels::tests::values;

/// bitsandbytes' NF4 code.
fn nf4() -> [f32; 16] {
    tgi_formats::bnb::code(tgi_formats::bnb::FourBitType::Nf4)
}

/// bitsandbytes' FP4 code (its table divided by 12).
const FP4: [f32; 16] = [
    0.0,
    0.0625 / 12.0,
    8.0 / 12.0,
    1.0,
    4.0 / 12.0,
    0.5,
    2.0 / 12.0,
    3.0 / 12.0,
    -0.0,
    -0.0625 / 12.0,
    -8.0 / 12.0,
    -1.0,
    -4.0 / 12.0,
    -0.5,
    -2.0 / 12.0,
    -3.0 / 12.0,
];

/// Nearest-code blockwise quantization over the flattened matrix (the layout bitsandbytes writes).
fn quantize(w: &[f32], blocksize: usize, code: &[f32; 16]) -> (Vec<u8>, Vec<f32>) {
    let absmax: Vec<f32> = w.chunks(blocksize).map(|b| b.iter().fold(0f32, |m, v| m.max(v.abs()))).collect();
    let q: Vec<u8> = w
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let s = v / absmax[i / blocksize].max(1e-38);
            (0..16).min_by(|&a, &b| (code[a] - s).abs().total_cmp(&(code[b] - s).abs())).unwrap() as u8
        })
        .collect();
    (q.chunks(2).map(|p| p[0] << 4 | p.get(1).copied().unwrap_or(0)).collect(), absmax)
}

/// f64 product of `x` (n×cols) with the exactly dequantized weight.
fn reference(view: &Bnb4View<'_>, x: &[f32], n: usize) -> Vec<f64> {
    let mut wd = vec![0f32; view.rows * view.cols];
    view.dequantize(&mut wd);
    let mut y = vec![0f64; n * view.rows];
    for i in 0..n {
        for r in 0..view.rows {
            y[i * view.rows + r] =
                (0..view.cols).map(|c| x[i * view.cols + c] as f64 * wd[r * view.cols + c] as f64).sum();
        }
    }
    y
}

fn rel_err(a: &[f32], r: &[f64]) -> f64 {
    let num: f64 = a.iter().zip(r).map(|(&a, &r)| (a as f64 - r).powi(2)).sum();
    let den: f64 = r.iter().map(|r| r * r).sum();
    (num / den).sqrt()
}

/// Runs every backend on one shape and checks them against each other and against the f32 reference.
fn check(rows: usize, cols: usize, blocksize: usize, n: usize, code: &[f32; 16]) -> f64 {
    let w = values(rows * cols, 0x9E37_79B9 + cols as u64);
    let (packed, absmax) = quantize(&w, blocksize, code);
    let view = Bnb4View::new(rows, cols, blocksize, &packed, &absmax, code).unwrap();
    let x = values(n * cols, 77 + n as u64);
    let want = reference(&view, &x, n);
    let mut ys = vec![0f32; n * rows];
    matmul_with(Backend::Scalar, view, &x, n, &mut ys);
    let err = rel_err(&ys, &want);
    // Activation and code rounding to int8: about 0.5% of the output's norm.
    assert!(err < 1.5e-2, "{rows}×{cols} bs {blocksize} n {n}: scalar vs f32 reference {err}");
    if super::super::backend().has_avx2() {
        let mut ya = vec![0f32; n * rows];
        matmul_with(Backend::Avx2, view, &x, n, &mut ya);
        for (k, (a, s)) in ya.iter().zip(&ys).enumerate() {
            // Same integer sums; only the f32 accumulation order differs.
            assert!((a - s).abs() <= 1e-4 * (1.0 + s.abs()), "{rows}×{cols} n {n} [{k}]: avx2 {a} scalar {s}");
        }
    }
    err
}

#[test]
fn nf4_matches_the_reference_for_every_row_count() {
    for n in [1, 2, 3, 4, 5, 9] {
        check(37, 256, 64, n, &nf4());
    }
}

#[test]
fn fp4_and_other_block_sizes() {
    check(16, 128, 64, 3, &FP4);
    for bs in [32, 128, 256, 4096] {
        check(19, 512, bs, 2, &nf4());
    }
}

#[test]
fn blocks_straddling_rows() {
    // 96 columns in blocks of 64: every other block spans two rows.
    check(11, 96, 64, 4, &nf4());
    check(5, 160, 128, 1, &nf4());
}

#[test]
fn int8_path_costs_little_precision() {
    // The int8 arithmetic against exact f32 (dequantized weight · unquantized x) on TinyLlama's row length,
    // compared with NF4's own error (exact dequantized weight against the unquantized one).
    let (rows, cols) = (64, 2048);
    let err = check(rows, cols, 64, 1, &nf4());
    let w = values(rows * cols, 0x9E37_79B9 + cols as u64);
    let (packed, absmax) = quantize(&w, 64, &nf4());
    let code = nf4();
    let view = Bnb4View::new(rows, cols, 64, &packed, &absmax, &code).unwrap();
    let x = values(cols, 78);
    let exact: Vec<f64> = (0..rows).map(|r| (0..cols).map(|c| x[c] as f64 * w[r * cols + c] as f64).sum()).collect();
    let coded: Vec<f32> = reference(&view, &x, 1).iter().map(|&v| v as f32).collect();
    let nf4_err = rel_err(&coded, &exact);
    // Measured: int8 path 0.85% of the output norm, NF4 itself 9-10%.
    assert!(err < 1.2e-2 && err < 0.15 * nf4_err, "int8 {err}, nf4 {nf4_err}");
}

#[test]
fn rows_not_a_multiple_of_32_take_the_exact_path() {
    // stories260k's down_proj: rows of 172; and an odd row length, whose rows start mid-byte.
    for (rows, cols) in [(64, 172), (7, 45)] {
        let w = values(rows * cols, 5);
        let (packed, absmax) = quantize(&w, 64, &nf4());
        let code = nf4();
        let view = Bnb4View::new(rows, cols, 64, &packed, &absmax, &code).unwrap();
        let x = values(3 * cols, 6);
        let want = reference(&view, &x, 3);
        for backend in [Backend::Scalar, super::super::backend()] {
            let mut y = vec![0f32; 3 * rows];
            matmul_with(backend, view, &x, 3, &mut y);
            assert!(rel_err(&y, &want) < 1e-6, "{rows}×{cols}");
        }
    }
}

#[test]
fn bad_shapes_are_refused() {
    let code = nf4();
    assert!(Bnb4View::new(2, 64, 48, &[0; 64], &[1.0; 3], &code).unwrap_err().contains("power of two"));
    assert!(Bnb4View::new(2, 64, 64, &[0; 63], &[1.0; 2], &code).unwrap_err().contains("bytes"));
    assert!(Bnb4View::new(2, 64, 64, &[0; 64], &[1.0; 3], &code).unwrap_err().contains("absmax"));
}
