use tgi_formats::quant::quantize_row;

use super::*;
use crate::kernels::matmul_with;

/// Deterministic pseudo-random values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

fn encode(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let w = values(rows * cols, seed);
    let mut data = vec![0u8; ty.bytes_for((rows * cols) as u64).unwrap() as usize];
    quantize_row(ty, &w, &mut data).unwrap();
    data
}

const TYPES: [GgmlType; 8] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q5_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::F16,
    GgmlType::BF16,
];

/// Shapes with whole blocks of every type: (rows, cols) with cols a multiple of 256 (an odd number of groups
/// of 16 rows in two of them, so that the floats' pairs of groups end with a single one).
const SHAPES: [(usize, usize); 3] = [(16, 256), (48, 512), (80, 768)];

/// The levels of this CPU with an interleaved kernel (every x86 one).
fn levels() -> Vec<Backend> {
    Backend::available().into_iter().filter(|&b| b != Backend::Scalar).collect()
}

#[test]
fn every_layout_round_trips_to_the_stored_bytes() {
    for ty in TYPES {
        for level in levels() {
            for (rows, cols) in SHAPES {
                let data = encode(ty, rows, cols, 7);
                let w = WeightView::new(ty, rows, cols, &data).unwrap();
                let packed = Interleaved::pack(level, w, |_| {}).expect("a packable matrix");
                let growth = packed.bytes().len() as f64 / data.len() as f64;
                assert!((1.0..1.03).contains(&growth), "{ty:?}: the packed matrix is {growth}x the stored one");
                assert!(packed.unpack() == data, "{ty:?} {rows}x{cols} on {level:?}: unpacked bytes differ");
            }
        }
    }
}

#[test]
fn the_kernel_matches_the_scalar_path_on_odd_shapes() {
    for (ty, level) in TYPES.into_iter().flat_map(|ty| levels().into_iter().map(move |l| (ty, l))) {
        for (rows, cols) in SHAPES {
            let data = encode(ty, rows, cols, 11);
            let w = WeightView::new(ty, rows, cols, &data).unwrap();
            let packed = Interleaved::pack(level, w, |_| {}).unwrap();
            for n in [1, 3, 4, 5, 8, 9, 12, 13, 17, 25] {
                let x: Vec<f32> = values(n * cols, 5 + n as u64).iter().map(|v| 3.0 * v).collect();
                let mut reference = vec![f32::NAN; n * rows];
                matmul_with(Backend::Scalar, w, &x, n, &mut reference);
                let mut y = vec![f32::NAN; n * rows];
                packed.matmul(&x, n, &mut y);
                let scale = reference.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
                for (k, (&a, &b)) in y.iter().zip(&reference).enumerate() {
                    assert!(
                        (a as f64 - b as f64).abs() <= 1e-5 * scale,
                        "{ty:?} {rows}x{cols} n={n} on {level:?}: element {k}: interleaved {a}, scalar {b}"
                    );
                }
            }
        }
    }
}

#[test]
fn only_the_types_and_shapes_with_a_kernel_are_packed() {
    let q8 = encode(GgmlType::Q8_0, 24, 32, 1);
    let w = WeightView::new(GgmlType::Q8_0, 24, 32, &q8).unwrap();
    assert!(Interleaved::pack(Backend::Avx512, w, |_| {}).is_none(), "24 rows are not whole groups of 16");
    let q8 = encode(GgmlType::Q8_0, 16, 32, 1);
    let w = WeightView::new(GgmlType::Q8_0, 16, 32, &q8).unwrap();
    assert!(Interleaved::pack(Backend::Scalar, w, |_| {}).is_none(), "the scalar level keeps the row kernels");
    let f16 = encode(GgmlType::F16, 16, 48, 1);
    let w = WeightView::new(GgmlType::F16, 16, 48, &f16).unwrap();
    assert!(Interleaved::pack(Backend::Avx512, w, |_| {}).is_none(), "48 columns are not whole panels of 32");
    let q3k = encode(GgmlType::Q3_K, 16, 256, 1);
    let w = WeightView::new(GgmlType::Q3_K, 16, 256, &q3k).unwrap();
    assert!(Interleaved::pack(Backend::Avx512, w, |_| {}).is_none(), "Q3_K keeps the row kernels");
}

#[test]
fn huge_zeroed_gives_zeroed_writable_bytes_of_any_length() {
    for len in [0, 1, 4095, (2 << 20) + 17, 5 << 20] {
        let mut data = huge_zeroed(len);
        assert_eq!(data.len(), len);
        assert!(data.iter().all(|&b| b == 0));
        data.iter_mut().for_each(|b| *b = 7);
        assert!(data.iter().all(|&b| b == 7));
    }
}
