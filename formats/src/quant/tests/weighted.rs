//! The importance-matrix encoders on ordinary and odd inputs: all-zero blocks, one huge value, zero or
//! uneven importance. Their exactness against llama.cpp is checked by `tests/quantize_imatrix.rs`.

use super::*;

/// The types whose encoder uses the importance.
const WEIGHTED: [GgmlType; 9] = [
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
];

fn round_trip_weighted(ty: GgmlType, x: &[f32], qw: &[f32]) -> Vec<f32> {
    let mut bytes = vec![0u8; ty.bytes_for(x.len() as u64).unwrap() as usize];
    quantize_row_weighted(ty, x, &mut bytes, qw).unwrap();
    let mut back = vec![f32::NAN; x.len()];
    dequantize_row(ty, &bytes, &mut back).unwrap();
    back
}

/// `sum qw (x - y)² / sum qw x²`.
fn weighted_error(x: &[f32], y: &[f32], qw: &[f32]) -> f64 {
    let err: f64 = x.iter().zip(y).zip(qw).map(|((a, b), w)| *w as f64 * (*a as f64 - *b as f64).powi(2)).sum();
    let norm: f64 = x.iter().zip(qw).map(|(a, w)| *w as f64 * (*a as f64).powi(2)).sum();
    err / norm
}

#[test]
fn weighted_error_is_within_bounds_and_beats_the_reference_on_skewed_importance() {
    let mut rng = Rng(11);
    let x = rng.normals(2048, 0.02);
    // A few columns matter a hundred times more, as in real activations.
    let qw: Vec<f32> = (0..2048).map(|i| if i % 37 == 0 { 100.0 } else { 0.5 + rng.uniform() as f32 }).collect();
    for ty in WEIGHTED {
        let bound = BOUNDS.iter().find(|b| b.0 == ty).unwrap().1;
        let ours = round_trip_weighted(ty, &x, &qw);
        let e = rel_rmse(&x, &ours);
        assert!(e <= 1.5 * bound, "{ty}: relative RMSE {e}");
        let plain = round_trip(ty, &x);
        let (w_ours, w_plain) = (weighted_error(&x, &ours, &qw), weighted_error(&x, &plain, &qw));
        assert!(w_ours < w_plain, "{ty}: weighted error {w_ours} not below the reference's {w_plain}");
    }
}

#[test]
fn zero_rows_and_zero_importance() {
    let ones = vec![1.0f32; 512];
    let zeros = vec![0.0f32; 512];
    let x = Rng(12).normals(512, 1.0);
    for ty in WEIGHTED {
        assert!(round_trip_weighted(ty, &zeros, &ones).iter().all(|&v| v == 0.0), "{ty}: zero row");
        assert!(round_trip_weighted(ty, &zeros, &zeros).iter().all(|&v| v == 0.0), "{ty}: zero row and importance");
        // No importance anywhere: nothing to fit, but the encoding stays finite.
        let back = round_trip_weighted(ty, &x, &zeros);
        assert!(back.iter().all(|v| v.is_finite()), "{ty}: zero importance");
    }
}

#[test]
fn zero_blocks_inside_a_row() {
    let mut x = Rng(13).normals(1024, 1.0);
    x[256..512].fill(0.0);
    let qw = vec![1.0f32; 1024];
    for ty in WEIGHTED {
        let back = round_trip_weighted(ty, &x, &qw);
        assert!(back.iter().all(|v| v.is_finite()), "{ty}");
        assert!(back[256..512].iter().all(|&v| v == 0.0), "{ty}: the zero super-block");
    }
}

#[test]
fn one_huge_value() {
    let mut x = Rng(14).normals(1024, 1.0);
    x[300] = 1e4;
    let qw: Vec<f32> = (0..1024).map(|i| 1.0 + (i % 7) as f32).collect();
    for ty in WEIGHTED {
        let back = round_trip_weighted(ty, &x, &qw);
        assert!(back.iter().all(|v| v.is_finite()), "{ty}");
        assert!((back[300] - 1e4).abs() < 1e4 * 0.1, "{ty}: {}", back[300]);
    }
}

#[test]
fn extreme_values_do_not_panic() {
    // Values whose square overflows f32 make ggml's weights infinite or NaN; the encoder must still
    // return (its bytes are whatever ggml's arithmetic gives).
    let mut x = Rng(15).normals(512, 1.0);
    x[3] = 3e38;
    x[400] = -3e38;
    let qw = vec![1.0f32; 512];
    for ty in WEIGHTED {
        let mut bytes = vec![0u8; ty.bytes_for(512).unwrap() as usize];
        quantize_row_weighted(ty, &x, &mut bytes, &qw).unwrap();
        quantize_row_weighted(ty, &x, &mut bytes, &vec![0.0; 512]).unwrap();
        quantize_row_weighted(ty, &x, &mut bytes, &vec![f32::MAX; 512]).unwrap();
    }
}

#[test]
fn unweighted_types_ignore_the_importance() {
    let x = Rng(16).normals(512, 1.0);
    let qw: Vec<f32> = (0..512).map(|i| i as f32).collect();
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0] {
        assert!(!uses_importance(ty));
        let n = ty.bytes_for(512).unwrap() as usize;
        let (mut a, mut b) = (vec![0u8; n], vec![0u8; n]);
        quantize_row(ty, &x, &mut a).unwrap();
        quantize_row_weighted(ty, &x, &mut b, &qw).unwrap();
        assert_eq!(a, b, "{ty}");
    }
    assert!(WEIGHTED.iter().all(|&t| uses_importance(t)));
}

#[test]
fn weighted_length_errors() {
    let x = vec![1.0f32; 256];
    let mut buf = vec![0u8; 144];
    assert_eq!(
        quantize_row_weighted(GgmlType::Q4_K, &x, &mut buf, &[1.0; 255]),
        Err(QuantError::ImportanceLength { values: 256, importance: 255 })
    );
    assert!(matches!(
        quantize_row_weighted(GgmlType::Q4_K, &x[..100], &mut buf, &[1.0; 100]),
        Err(QuantError::PartialBlock { .. })
    ));
}

#[test]
fn weighted_encoders_overwrite_every_byte() {
    let x: Vec<f32> = (0..512).map(|i| ((i * 7919 % 257) as f32 - 128.0) / 37.0).collect();
    let qw: Vec<f32> = (0..512).map(|i| (i % 11) as f32 * 0.3).collect();
    for ty in WEIGHTED {
        let n = ty.bytes_for(512).unwrap() as usize;
        let (mut zeros, mut ones) = (vec![0u8; n], vec![0xFFu8; n]);
        quantize_row_weighted(ty, &x, &mut zeros, &qw).unwrap();
        quantize_row_weighted(ty, &x, &mut ones, &qw).unwrap();
        assert_eq!(zeros, ones, "{ty}");
    }
}
