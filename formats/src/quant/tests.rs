//! Round-trip, edge-case and error tests for the public codec API.

use super::*;

mod weighted;

/// Deterministic splitmix64 generator for test data.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1).
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f32 {
        let (u, v) = (self.uniform(), self.uniform());
        ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
    }

    fn normals(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.normal() * scale).collect()
    }
}

/// The quantized types with their round-trip relative-RMSE bound on Gaussian data.
const BOUNDS: [(GgmlType, f64); 22] = [
    (GgmlType::F32, 0.0),
    (GgmlType::F16, 1e-3),
    (GgmlType::BF16, 5e-3),
    (GgmlType::Q8_0, 0.01),
    (GgmlType::Q5_1, 0.05),
    (GgmlType::Q5_0, 0.06),
    (GgmlType::Q4_1, 0.1),
    (GgmlType::Q4_0, 0.12),
    (GgmlType::Q6_K, 0.03),
    (GgmlType::Q5_K, 0.05),
    (GgmlType::Q4_K, 0.1),
    (GgmlType::Q3_K, 0.2),
    (GgmlType::Q2_K, 0.4),
    (GgmlType::IQ4_NL, 0.1),
    (GgmlType::IQ4_XS, 0.1),
    (GgmlType::IQ3_S, 0.2),
    (GgmlType::IQ3_XXS, 0.25),
    (GgmlType::IQ2_S, 0.4),
    (GgmlType::IQ2_XS, 0.45),
    (GgmlType::IQ2_XXS, 0.5),
    (GgmlType::IQ1_S, 0.7),
    (GgmlType::IQ1_M, 0.7),
];

/// Relative RMSE bound of TQ1_0/TQ2_0 on Gaussian data (not in [`BOUNDS`]: no better than half a zero guess).
const TERNARY_GAUSSIAN_BOUND: f64 = 0.85;

/// Encodes `x` into `bytes`, with unit importance for the types that need one and for IQ1_M, which llama-quantize
/// writes only with one (ggml's x² weights without one fit Gaussian data worse: relative RMSE 0.59).
fn encode(ty: GgmlType, x: &[f32], bytes: &mut [u8]) {
    if requires_importance(ty) || ty == GgmlType::IQ1_M {
        quantize_row_weighted(ty, x, bytes, &vec![1.0; x.len()]).unwrap();
    } else {
        quantize_row(ty, x, bytes).unwrap();
    }
}

fn round_trip(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    let mut bytes = vec![0u8; ty.bytes_for(x.len() as u64).unwrap() as usize];
    encode(ty, x, &mut bytes);
    let mut back = vec![f32::NAN; x.len()];
    dequantize_row(ty, &bytes, &mut back).unwrap();
    back
}

fn rel_rmse(x: &[f32], y: &[f32]) -> f64 {
    let err: f64 = x.iter().zip(y).map(|(a, b)| (*a as f64 - *b as f64).powi(2)).sum();
    let norm: f64 = x.iter().map(|a| (*a as f64).powi(2)).sum();
    (err / norm).sqrt()
}

#[test]
fn gaussian_round_trip_error_bounds() {
    let x = Rng(1).normals(4096, 0.02);
    for (ty, bound) in BOUNDS {
        let back = round_trip(ty, &x);
        let e = rel_rmse(&x, &back);
        assert!(e <= bound, "{ty}: relative RMSE {e} > {bound}");
        // A real encoding, not a constant: half the error bound of a zero guess.
        assert!(e < 0.5, "{ty}: {e}");
    }
}

#[test]
fn heavy_tailed_round_trip() {
    let mut rng = Rng(2);
    let x: Vec<f32> = (0..2048).map(|_| rng.normal().powi(3)).collect();
    for (ty, bound) in BOUNDS {
        let e = rel_rmse(&x, &round_trip(ty, &x));
        // Cubed normals are much harder; allow three times the Gaussian bound.
        assert!(e <= 3.0 * bound + 1e-3, "{ty}: relative RMSE {e}");
    }
}

#[test]
fn zero_rows_stay_zero() {
    let x = vec![0.0f32; 512];
    for ty in GgmlType::ALL.into_iter() {
        let back = round_trip(ty, &x);
        assert!(back.iter().all(|&v| v == 0.0), "{ty}");
    }
}

#[test]
fn constant_rows() {
    for c in [1.0f32, -0.37, 1e-3] {
        let x = vec![c; 512];
        for ty in GgmlType::ALL.into_iter() {
            let back = round_trip(ty, &x);
            let tol = match ty {
                GgmlType::BF16 => 4e-3,
                GgmlType::Q2_K | GgmlType::Q3_K => 0.1,
                // The super-block scale d of 1e-3 data is an fp16 subnormal: ~1-2% steps.
                GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K if c.abs() < 0.01 => 3e-2,
                // IQ4_XS's super-block scale is smaller still (max / (113·32)): coarser subnormal steps.
                GgmlType::IQ4_XS if c.abs() < 0.01 => 4e-2,
                // ggml's IQ2/IQ3 searches land on mixed codewords for constant data (up to ±35%, as llama.cpp).
                GgmlType::IQ3_XXS | GgmlType::IQ3_S | GgmlType::IQ2_XS | GgmlType::IQ2_S => 0.35,
                // IQ2_XXS's 256 codewords hold no constant run: 0.3c..1.6c (llama.cpp's bytes too).
                GgmlType::IQ2_XXS => 0.75,
                // IQ1_S's and IQ1_M's levels sit 1/8 off -1, 0, 1: constant data comes back as 1.125c (1.112c).
                GgmlType::IQ1_S | GgmlType::IQ1_M => 0.2,
                _ => 2e-3,
            };
            for &v in &back {
                assert!((v - c).abs() <= tol * c.abs(), "{ty} c={c}: {v}");
            }
        }
    }
}

#[test]
fn one_huge_outlier() {
    let mut x = Rng(3).normals(1024, 1.0);
    x[300] = 1e4;
    for ty in GgmlType::ALL.into_iter() {
        let back = round_trip(ty, &x);
        assert!(back.iter().all(|v| v.is_finite()), "{ty}");
        // The outlier itself is kept to the precision of its block scale.
        assert!((back[300] - 1e4).abs() < 1e4 * 0.1, "{ty}: {}", back[300]);
        // Blocks without the outlier are unaffected.
        let far = &x[512..];
        let e = rel_rmse(far, &back[512..]);
        // Ternary blocks scaled by their largest magnitude zero most of Gaussian data (they are for ternary models).
        let bound = BOUNDS.iter().find(|b| b.0 == ty).map_or(TERNARY_GAUSSIAN_BOUND, |b| b.1);
        assert!(e <= bound.max(1e-6), "{ty}: far-block error {e}");
    }
}

#[test]
fn one_signed_data() {
    let mut rng = Rng(4);
    let pos: Vec<f32> = (0..1024).map(|_| rng.normal().abs() + 0.1).collect();
    let neg: Vec<f32> = pos.iter().map(|v| -v).collect();
    for (ty, bound) in BOUNDS {
        for x in [&pos, &neg] {
            let e = rel_rmse(x, &round_trip(ty, x));
            assert!(e <= bound, "{ty}: {e}");
        }
    }
}

#[test]
fn tiny_values() {
    let x = Rng(5).normals(512, 1e-30);
    for ty in GgmlType::ALL.into_iter() {
        let back = round_trip(ty, &x);
        assert!(back.iter().all(|v| v.is_finite() && v.abs() < 1e-20), "{ty}");
    }
}

#[test]
fn length_errors() {
    let x = vec![1.0f32; 100];
    let mut buf = vec![0u8; 1000];
    assert_eq!(
        quantize_row(GgmlType::Q4_K, &x, &mut buf),
        Err(QuantError::PartialBlock { ty: GgmlType::Q4_K, len: 100, block_size: 256 })
    );
    let x = vec![1.0f32; 64];
    assert_eq!(
        quantize_row(GgmlType::Q8_0, &x, &mut buf),
        Err(QuantError::ByteLength { ty: GgmlType::Q8_0, values: 64, expected: 68, actual: 1000 })
    );
    let mut out = vec![0f32; 256];
    assert!(matches!(
        dequantize_row(GgmlType::Q6_K, &buf[..200], &mut out),
        Err(QuantError::ByteLength { expected: 210, actual: 200, .. })
    ));
    let mut out = vec![0f32; 33];
    assert!(matches!(dequantize_row(GgmlType::Q4_0, &buf[..36], &mut out), Err(QuantError::PartialBlock { .. })));
    assert!(matches!(
        quantize_matrix(GgmlType::Q8_0, &[0.0; 96], 64),
        Err(QuantError::RaggedMatrix { len: 96, n_per_row: 64 })
    ));
    assert!(matches!(quantize_matrix(GgmlType::Q8_0, &[0.0; 96], 0), Err(QuantError::RaggedMatrix { .. })));
    assert!(matches!(quantize_matrix(GgmlType::Q4_K, &[0.0; 96], 48), Err(QuantError::PartialBlock { len: 48, .. })));
    // Empty input is zero whole blocks.
    assert_eq!(quantize_row(GgmlType::Q4_K, &[], &mut []), Ok(()));
    assert_eq!(quantize_matrix(GgmlType::Q4_K, &[], 256), Ok(vec![]));
}

#[test]
fn matrix_equals_rows() {
    let x = Rng(6).normals(8 * 512, 0.1);
    for ty in GgmlType::ALL.into_iter().filter(|&t| !requires_importance(t)) {
        let m = quantize_matrix(ty, &x, 512).unwrap();
        let row_bytes = ty.bytes_for(512).unwrap() as usize;
        assert_eq!(m.len(), 8 * row_bytes);
        // Rows are independent: encoding the whole buffer as one row gives the same bytes.
        let mut whole = vec![0u8; m.len()];
        quantize_row(ty, &x, &mut whole).unwrap();
        assert_eq!(m, whole, "{ty}");
    }
}

#[test]
fn decoding_is_deterministic_on_arbitrary_bytes() {
    // Any byte pattern with finite scales decodes to finite values.
    let mut rng = Rng(7);
    for ty in GgmlType::ALL {
        if !ty.is_quantized() {
            continue;
        }
        let n = 512;
        let mut bytes: Vec<u8> = (0..ty.bytes_for(n).unwrap()).map(|_| rng.next_u64() as u8).collect();
        // Make every fp16 field a small finite value by clearing the exponent's top bits.
        for b in bytes.iter_mut() {
            *b &= 0xBF;
        }
        let mut out = vec![0f32; n as usize];
        dequantize_row(ty, &bytes, &mut out).unwrap();
        assert!(out.iter().all(|v| v.is_finite()), "{ty}");
    }
}

#[test]
fn encoders_overwrite_every_byte() {
    // Callers reuse output buffers: the bytes must not depend on what the buffer held before.
    let x: Vec<f32> = (0..512).map(|i| ((i * 7919 % 257) as f32 - 128.0) / 37.0).collect();
    for ty in GgmlType::ALL.into_iter() {
        let n = ty.bytes_for(512).unwrap() as usize;
        let mut zeros = vec![0u8; n];
        let mut ones = vec![0xFFu8; n];
        encode(ty, &x, &mut zeros);
        encode(ty, &x, &mut ones);
        assert_eq!(zeros, ones, "{ty}");
    }
}
