use super::act::{quantize_q8_k_block, VecType, Q8_K_BYTES};
use super::*;
use tgi_formats::quant::{dequantize_row, quantize_row, quantize_row_weighted, requires_importance};

/// Deterministic pseudo-random values, roughly normal (sum of 4 uniforms), scaled.
struct Rng(u64);

impl Rng {
    fn next_f32(&mut self) -> f32 {
        let mut s = 0.0;
        for _ in 0..4 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            s += (self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        }
        s
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next_f32() * scale).collect()
    }
}

/// Relative L2 error of `a` against the reference `r`.
fn rel_err(a: &[f32], r: &[f64]) -> f64 {
    let num: f64 = a.iter().zip(r).map(|(&a, &r)| (a as f64 - r).powi(2)).sum();
    let den: f64 = r.iter().map(|r| r * r).sum();
    (num / den.max(1e-30)).sqrt()
}

/// Tolerance of the whole output vector against the f32 reference (activation rounding).
fn ref_tolerance(ty: GgmlType) -> f64 {
    match ty {
        GgmlType::F32 => 1e-6,
        GgmlType::F16 => 1e-3,
        GgmlType::BF16 => 8e-3,
        _ => 1.5e-2,
    }
}

/// `w` encoded as `ty` (with unit importance for the types ggml encodes only with a matrix).
fn encode(ty: GgmlType, w: &[f32]) -> Vec<u8> {
    let mut data = vec![0u8; ty.bytes_for(w.len() as u64).unwrap() as usize];
    if requires_importance(ty) {
        quantize_row_weighted(ty, w, &mut data, &vec![1.0; w.len()]).unwrap();
    } else {
        quantize_row(ty, w, &mut data).unwrap();
    }
    data
}

fn check(ty: GgmlType, rows: usize, cols: usize, n: usize, seed: u64) {
    let mut rng = Rng(seed);
    let wf = rng.vec(rows * cols, 1.0);
    let x = rng.vec(n * cols, 2.0);
    let data = encode(ty, &wf);
    let w = WeightView::new(ty, rows, cols, &data).unwrap();
    let mut deq = vec![0f32; rows * cols];
    dequantize_row(ty, &data, &mut deq).unwrap();
    let reference: Vec<f64> = (0..n * rows)
        .map(|k| {
            let (i, r) = (k / rows, k % rows);
            (0..cols).map(|c| x[i * cols + c] as f64 * deq[r * cols + c] as f64).sum()
        })
        .collect();

    let mut ys = vec![f32::NAN; n * rows];
    matmul_with(Backend::Scalar, w, &x, n, &mut ys);
    let e = rel_err(&ys, &reference);
    assert!(e < ref_tolerance(ty), "{ty:?} {rows}x{cols} n={n}: scalar vs f32 reference rel err {e}");

    let scalar64: Vec<f64> = ys.iter().map(|&v| v as f64).collect();
    let scale = scalar64.iter().fold(0f64, |m, v| m.max(v.abs()));
    for fast in Backend::available().into_iter().filter(|b| b.has_avx2()) {
        let mut yf = vec![f32::NAN; n * rows];
        matmul_with(fast, w, &x, n, &mut yf);
        let e2 = rel_err(&yf, &scalar64);
        assert!(e2 < 1e-5, "{ty:?} {rows}x{cols} n={n}: {fast:?} vs scalar rel err {e2}");
        for (k, (&a, &b)) in yf.iter().zip(&ys).enumerate() {
            assert!(
                (a as f64 - b as f64).abs() <= 1e-5 * scale,
                "{ty:?} {rows}x{cols} n={n}: element {k} {fast:?} {a} scalar {b}"
            );
        }
        if fast == backend() {
            // The default entry point is the fastest level.
            let mut yd = vec![f32::NAN; n * rows];
            matmul(w, &x, n, &mut yd);
            assert_eq!(yd, yf);
        }
    }
}

#[test]
fn kernels_every_type_matches_scalar_and_reference() {
    for (s, ty) in GgmlType::ALL.into_iter().enumerate() {
        let seed = 0x9e37_79b9_7f4a_7c15 ^ (s as u64 + 1);
        for &(rows, n) in &[(37, 1), (37, 3), (16, 17), (5, 40)] {
            check(ty, rows, 512, n, seed + n as u64);
        }
        check(ty, 3, 256, 70, seed);
        if ty.block_size() <= 32 {
            check(ty, 37, 96, 3, seed);
            check(ty, 9, 224, 17, seed);
        }
        if ty.block_size() == 1 {
            check(ty, 11, 37, 5, seed);
            check(ty, 4, 7, 2, seed);
        }
    }
}

#[test]
fn kernels_large_rows_tile_evenly() {
    for ty in [GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::Q6_K, GgmlType::F16] {
        check(ty, 301, 1024, 1, 7);
        check(ty, 130, 1024, 9, 8);
    }
}

#[test]
fn kernels_low_bit_types_every_row_count() {
    // Every activation group size (1..=4 and the remainders of 5..=17 rows), a row count that is not a
    // multiple of the tile, an odd number of blocks for the legacy types and 3 super-blocks for the k- and i-quants.
    let iq = [
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ2_S,
        GgmlType::IQ3_XXS,
        GgmlType::IQ3_S,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
        GgmlType::TQ1_0,
        GgmlType::TQ2_0,
    ];
    let legacy_k = [
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
    ];
    for ty in legacy_k.into_iter().chain(iq) {
        let cols = if ty.block_size() == 32 { 800 } else { 768 };
        for n in 1..=17 {
            check(ty, 37, cols, n, 0x5eed ^ ((n as u64) << 8) ^ ty.id() as u64);
        }
    }
}

#[test]
fn kernels_q8_k_known_block() {
    // x_j = j%16 - 8 except x_5 = 254: max is +254, iscale = -0.5, d = -2.
    let mut x: Vec<f32> = (0..256).map(|j| (j % 16) as f32 - 8.0).collect();
    x[5] = 254.0;
    let mut y = [0u8; Q8_K_BYTES];
    quantize_q8_k_block(&x, &mut y);
    assert_eq!(f32::from_le_bytes(y[0..4].try_into().unwrap()), -2.0);
    // q = nearest_int(-x/2), half to even: -8..7 → 4 4 3 2 2 2 1 0 0 0 -1 -2 -2 -2 -3 -4.
    let pattern = [4i8, 4, 3, 2, 2, 2, 1, 0, 0, 0, -1, -2, -2, -2, -3, -4];
    for j in 0..256 {
        let want = if j == 5 { -127 } else { pattern[j % 16] };
        assert_eq!(y[4 + j] as i8, want, "q[{j}]");
    }
    let bsums: Vec<i16> = y[260..292].chunks_exact(2).map(|b| i16::from_le_bytes([b[0], b[1]])).collect();
    let mut want = vec![4i16; 16];
    want[0] = 4 - 2 - 127;
    assert_eq!(bsums, want);

    // An all-zero block is all zero; a negative maximum clamps the top level to 127.
    quantize_q8_k_block(&[0.0; 256], &mut y);
    assert!(y.iter().all(|&b| b == 0));
    let mut x = vec![1.0f32; 256];
    x[0] = -2.0;
    quantize_q8_k_block(&x, &mut y);
    assert_eq!(f32::from_le_bytes(y[0..4].try_into().unwrap()), 2.0 / 127.0);
    assert_eq!(y[4] as i8, -127);
    assert_eq!(y[5] as i8, 64); // 63.5 rounds to even
}

#[test]
fn kernels_q8_0_activation_block() {
    let x: Vec<f32> = (0..32).map(|j| j as f32 - 16.0).collect();
    let mut y = vec![0u8; VecType::Q8_0.row_bytes(32)];
    VecType::Q8_0.quantize_row(&x, &mut y);
    let d = half::f16::from_le_bytes([y[0], y[1]]).to_f32();
    assert_eq!(d, half::f16::from_f32(16.0 / 127.0).to_f32());
    assert_eq!(y[2] as i8, -127);
    assert_eq!(y[2 + 16] as i8, 0);
    // 8 · 127/16 = 63.5 → 64 (half to even).
    assert_eq!(y[2 + 24] as i8, 64);
}

#[test]
fn kernels_weight_view_rejects_bad_shapes() {
    let data = vec![0u8; 144];
    assert!(WeightView::new(GgmlType::Q4_K, 1, 256, &data).is_ok());
    assert!(WeightView::new(GgmlType::Q4_K, 1, 128, &data[..72]).unwrap_err().contains("whole number"));
    assert!(WeightView::new(GgmlType::Q4_K, 2, 256, &data).unwrap_err().contains("288 bytes"));
    assert!(WeightView::new(GgmlType::F32, usize::MAX, 2, &data).unwrap_err().contains("overflow"));
    let w = WeightView::new(GgmlType::F32, 0, 5, &[]).unwrap();
    let mut y = [];
    matmul(w, &[1.0; 10], 2, &mut y);
}

#[test]
fn kernels_levels_parse_by_name_and_refuse_what_the_cpu_lacks() {
    for b in Backend::ALL {
        assert_eq!(b.name().parse::<Backend>(), Ok(b));
    }
    let err = "avx9".parse::<Backend>().unwrap_err();
    assert_eq!(err, "unknown CPU kernel level `avx9` (expected scalar, avx2, avx-vnni, avx512-vnni)");
    // Only an unsupported level can be tried here: a supported one would fix the level for every test.
    for b in Backend::ALL.into_iter().filter(|b| !b.supported()) {
        assert_eq!(choose(b), Err(ChooseError::Unsupported(b)));
    }
}

/// Deterministic pseudo-random values, roughly normal.
pub(super) fn values(n: usize, mut s: u64) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let mut v = 0.0;
            for _ in 0..4 {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                v += (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            }
            v
        })
        .collect()
}
