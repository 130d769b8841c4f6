use tgi_formats::quant::quantize_row;

use super::*;
use crate::kernels::matmul_with;
use crate::kernels::tests::values;

fn encode(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let w = values(rows * cols, seed);
    let mut data = vec![0u8; ty.bytes_for((rows * cols) as u64).unwrap() as usize];
    quantize_row(ty, &w, &mut data).unwrap();
    data
}

const TYPES: [GgmlType; 11] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q5_0,
    GgmlType::Q4_1,
    GgmlType::Q5_1,
    GgmlType::IQ4_NL,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::F16,
    GgmlType::BF16,
];

/// Shapes with whole blocks of every type: (rows, cols) with cols a multiple of 256 (an odd number of groups
/// of 16 rows in three of them, so that the floats' pairs of groups end with a single one; 23 groups, so that a
/// task of the float kernels holds several pairs; 40 blocks of 32 columns, so that the float kernels' stretches of
/// 32 blocks end with a shorter one).
const SHAPES: [(usize, usize); 5] = [(16, 256), (48, 512), (80, 768), (368, 256), (32, 1280)];

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
            // In bf16 products F16 weights are rounded to bf16 (the activations too, as for BF16 weights).
            let as_bf16 = in_bf16(ty, &data);
            let packed = Interleaved::pack(level, w, |_| {}).unwrap().with_bf16_products();
            let exact = Interleaved::pack(level, w, |_| {}).unwrap().with_f32_products();
            for (n, packed) in
                [1, 3, 4, 5, 8, 9, 12, 13, 17, 25, 32, 37, 49, 61].into_iter().flat_map(|n| [(n, &packed), (n, &exact)])
            {
                let x: Vec<f32> = values(n * cols, 5 + n as u64).iter().map(|v| 3.0 * v).collect();
                let mut reference = vec![f32::NAN; n * rows];
                let reference_w = match &as_bf16 {
                    Some(bf) if packed.in_bf16(n) => WeightView::new(GgmlType::BF16, rows, cols, bf).unwrap(),
                    _ => w,
                };
                matmul_with(Backend::Scalar, reference_w, &x, n, &mut reference);
                let mut y = vec![f32::NAN; n * rows];
                packed.matmul(&x, n, &mut y);
                let scale = reference.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
                let bf = packed.in_bf16(n);
                for (k, (&a, &b)) in y.iter().zip(&reference).enumerate() {
                    assert!(
                        (a as f64 - b as f64).abs() <= 1e-5 * scale,
                        "{ty:?} {rows}x{cols} n={n} on {level:?} (bf16 {bf}): element {k}: interleaved {a}, scalar {b}"
                    );
                }
            }
        }
    }
}

/// F16 weights (`data`) rounded to bf16, the weights the bf16 products multiply.
fn in_bf16(ty: GgmlType, data: &[u8]) -> Option<Vec<u8>> {
    if ty != GgmlType::F16 {
        return None;
    }
    let mut f = vec![0f32; data.len() / 2];
    tgi_formats::quant::dequantize_row(ty, data, &mut f).unwrap();
    let mut bf = vec![0u8; data.len()];
    quantize_row(GgmlType::BF16, &f, &mut bf).unwrap();
    Some(bf)
}

#[test]
fn prefill_meets_float_panels_in_bf16_only_where_the_cpu_has_it_and_it_pays() {
    let data = encode(GgmlType::F16, 32, 64, 3);
    let w = WeightView::new(GgmlType::F16, 32, 64, &data).unwrap();
    for level in levels() {
        let packed = Interleaved::pack(level, w, |_| {}).unwrap();
        let wide = level == Backend::Avx512;
        assert_eq!(packed.in_bf16(BF16_DOT_ROWS), wide && bf16_dot_pays(), "{level:?}");
        let packed = packed.with_bf16_products();
        assert_eq!(packed.in_bf16(BF16_DOT_ROWS), wide && bf16_dot_available(), "{level:?}");
        assert!(!packed.in_bf16(BF16_DOT_ROWS - 1), "decode and small batches keep the f32 products");
        assert!(!packed.with_f32_products().in_bf16(512));
    }
    assert!(!bf16_dot_pays() || is_amd(), "only AMD's cores default to bf16 products");
    let q8 = encode(GgmlType::Q8_0, 16, 32, 1);
    for level in levels() {
        let packed = Interleaved::pack(level, WeightView::new(GgmlType::Q8_0, 16, 32, &q8).unwrap(), |_| {});
        assert!(!packed.unwrap().with_bf16_products().in_bf16(512), "integer kernels stay integer");
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
