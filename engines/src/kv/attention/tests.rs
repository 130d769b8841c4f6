//! Tests of the attention paths over every cache type.

use super::*;
use crate::kv::simd::tests::values as rand;
use crate::kv::{BlockAllocator, KvDType, KvRotation};

/// The host path and the tensor path agree, for a batch mixing a prefill chunk and a decode row,
/// with grouped-query heads, a sliding window, and Gemma 2's scale and soft-cap.
#[test]
fn host_and_tensor_paths_agree() {
    let (heads, kvh, hd, bs) = (4, 2, 8, 4);
    let mut pool = BlockAllocator::new(16, bs);
    let (mut a, mut b) = (BlockTable::new(), BlockTable::new());
    pool.grow(&mut b, 3).unwrap(); // interleave blocks so slots are not contiguous
    pool.grow(&mut a, 6).unwrap();
    pool.grow(&mut b, 7).unwrap();
    for (window, softcap) in [(None, None), (Some(3), None), (Some(3), Some(0.5))] {
        let width = kvh * hd;
        let slots = 16 * bs * width;
        let (mut hk, mut hv) = (HostBuf::F32(vec![0f32; slots]), HostBuf::F32(vec![0f32; slots]));
        let dk = Tensor::zeros((16 * bs, width), DType::F32, &Device::Cpu).unwrap();
        let dv = dk.zeros_like().unwrap();
        // Step 1: a prefills 6 tokens, b prefills 6; step 2: b decodes one token.
        let steps = [vec![(0..6, 0, a.clone()), (6..12, 0, b.clone())], vec![(0..1, 6, b.clone())]];
        for (n, step) in steps.into_iter().enumerate() {
            let seqs: Vec<SeqSpan> =
                step.into_iter().map(|(rows, start, table)| SeqSpan { rows, start, table }).collect();
            let mut plan = AttentionPlan::new(seqs, heads, kvh, hd, window).with_softcap(softcap);
            if softcap.is_some() {
                plan = plan.with_scale(0.7);
            }
            let t = plan.rows();
            let mk = |w: usize, s: u32| Tensor::from_vec(rand(t * w, s + n as u32), (t, w), &Device::Cpu).unwrap();
            let (q, k, v) = (mk(heads * hd, 1), mk(width, 2), mk(width, 3));
            let x = host(&mut hk, &mut hv, &q, &k, &v, &plan, KvRotation::OFF).unwrap().to_vec2::<f32>().unwrap();
            let y = device(&dk, &dv, &q, &k, &v, &plan).unwrap().to_vec2::<f32>().unwrap();
            for (rx, ry) in x.iter().zip(&y) {
                for (a, b) in rx.iter().zip(ry) {
                    assert!((a - b).abs() < 1e-5, "{a} vs {b} (window {window:?}, step {n})");
                }
            }
        }
    }
}

/// Tasks of several rows give every row exactly the result it gets alone: a verification-like batch (two
/// sequences of 5 and 7 rows after cached positions, interleaved blocks) over f32 and f16 caches, with and
/// without a sliding window, grouped into tasks of 1, 3 and 8 rows.
#[test]
fn row_grouping_does_not_change_results() {
    let (heads, kvh, hd, bs) = (4, 2, 8, 4);
    let mut pool = BlockAllocator::new(16, bs);
    let (mut a, mut b) = (BlockTable::new(), BlockTable::new());
    pool.grow(&mut b, 3).unwrap();
    pool.grow(&mut a, 15).unwrap();
    pool.grow(&mut b, 19).unwrap();
    let width = kvh * hd;
    for dtype in [KvDType::F32, KvDType::F16] {
        for window in [None, Some(6)] {
            let mut kc = HostBuf::zeros(16 * bs * width, dtype);
            let mut vc = HostBuf::zeros(16 * bs * width, dtype);
            let slots: Vec<usize> = (0..15).map(|p| a.slot(p)).chain((0..19).map(|p| b.slot(p))).collect();
            store(&mut kc, &varied(34 * width, 4), &slots, width);
            store(&mut vc, &varied(34 * width, 5), &slots, width);
            let seqs = vec![
                SeqSpan { rows: 0..5, start: 10, table: a.clone() },
                SeqSpan { rows: 5..12, start: 12, table: b.clone() },
            ];
            let plan = AttentionPlan::new(seqs, heads, kvh, hd, window);
            let q = varied(12 * heads * hd, 6);
            let run = |per_task| match (&kc, &vc) {
                (HostBuf::F32(k), HostBuf::F32(v)) => host_attend(k, v, &q, &plan, per_task, RowOps::detect()),
                (HostBuf::F16(k), HostBuf::F16(v)) => host_attend(k, v, &q, &plan, per_task, RowOps::detect()),
                _ => unreachable!(),
            };
            let alone = run(1);
            for per_task in [3, 8] {
                assert_eq!(run(per_task), alone, "{dtype:?}, window {window:?}, {per_task} rows per task");
            }
        }
    }
}

/// The SIMD dot products and weighted sums give the portable loops' results within 1e-5 of the largest output
/// (2^-10 for an f16 cache, whose rounding of the attention weights to f16 can fall either side of a step):
/// grouped-query ratios 1, 4 and 8, head widths with and without a tail of 8, a prefill after a prefix of cached
/// positions, lengths not a multiple of the block, and every cache type.
#[test]
fn simd_and_portable_row_ops_agree() {
    for (heads, kvh, hd) in [(2, 2, 32), (8, 2, 40), (8, 1, 64), (4, 1, 13)] {
        for dtype in KvDType::ALL {
            if dtype.block_type().is_some() && hd % BLOCK != 0 {
                continue;
            }
            let bs = 16;
            let mut pool = BlockAllocator::new(8, bs);
            let (mut a, mut b) = (BlockTable::new(), BlockTable::new());
            pool.grow(&mut b, 9).unwrap();
            pool.grow(&mut a, 45).unwrap();
            pool.grow(&mut b, 50).unwrap();
            let width = kvh * hd;
            let mut kc = HostBuf::zeros(8 * bs * width, dtype);
            let mut vc = HostBuf::zeros(8 * bs * width, dtype);
            let slots: Vec<usize> = (0..45).map(|p| a.slot(p)).chain((0..50).map(|p| b.slot(p))).collect();
            store(&mut kc, &varied(95 * width, 7), &slots, width);
            store(&mut vc, &varied(95 * width, 8), &slots, width);
            // a: 37 new rows after 8 cached positions; b: 21 after 29, then one decode row of b.
            let seqs = vec![
                SeqSpan { rows: 0..37, start: 8, table: a.clone() },
                SeqSpan { rows: 37..58, start: 29, table: b.clone() },
                SeqSpan { rows: 58..59, start: 49, table: b.clone() },
            ];
            let plan = AttentionPlan::new(seqs, heads, kvh, hd, None);
            let q = varied(59 * heads * hd, 9);
            let run = |ops| run_host(&kc, &vc, &q, &plan, ops);
            let (fast, portable) = (run(RowOps::detect()), run(RowOps::scalar()));
            let tol = if dtype == KvDType::F16 { 1.0 / 1024.0 } else { 1e-5 };
            let scale = portable.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (i, (x, y)) in fast.iter().zip(&portable).enumerate() {
                assert!((x - y).abs() <= tol * scale, "{heads}/{kvh}x{hd} {dtype:?} element {i}: {x} vs {y}");
            }
        }
    }
}

/// The eight-lane maximum and the f16 slice rounding give exactly the sequential values.
#[test]
fn lane_max_and_slice_rounding_are_exact() {
    for n in 0..40 {
        let mut x = varied(n, n as u32);
        let fold = |x: &[f32]| x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        assert_eq!(max_of(&x), fold(&x), "{n} values");
        if n > 3 {
            x[3] = f32::NAN;
            assert_eq!(max_of(&x), fold(&x), "{n} values with a NaN");
        }
    }
    let x: Vec<f32> = varied(150, 11).iter().map(|v| v * 1e-3).collect();
    let mut y = x.clone();
    <Vec<f16> as Rows>::round_all(&mut y);
    let z: Vec<f32> = x.iter().map(|&v| <Vec<f16> as Rows>::round(v)).collect();
    assert_eq!(y, z);
}

/// A single query over one position returns that position's value.
#[test]
fn one_position_returns_its_value() {
    let mut pool = BlockAllocator::new(2, 4);
    let mut t = BlockTable::new();
    pool.grow(&mut t, 1).unwrap();
    let plan = AttentionPlan::new(vec![SeqSpan { rows: 0..1, start: 0, table: t }], 2, 1, 4, None);
    let (mut hk, mut hv) = (HostBuf::F32(vec![0f32; 32]), HostBuf::F32(vec![0f32; 32]));
    let q = Tensor::ones((1, 8), DType::F32, &Device::Cpu).unwrap();
    let k = Tensor::ones((1, 4), DType::F32, &Device::Cpu).unwrap();
    let v = Tensor::new(&[[1f32, 2., 3., 4.]], &Device::Cpu).unwrap();
    let o = host(&mut hk, &mut hv, &q, &k, &v, &plan, KvRotation::OFF).unwrap().to_vec2::<f32>().unwrap();
    assert_eq!(o[0], vec![1., 2., 3., 4., 1., 2., 3., 4.]);
}

/// `x` stored in a one-row host buffer of `dtype` and read back as f32.
fn round_trip(x: &[f32], dtype: KvDType) -> Vec<f32> {
    let mut buf = HostBuf::zeros(x.len(), dtype);
    store(&mut buf, x, &[0], x.len());
    let mut out = vec![0f32; x.len()];
    match &buf {
        HostBuf::F32(b) => b.read(0, &mut out),
        HostBuf::F16(b) => b.read(0, &mut out),
        HostBuf::BF16(b) => b.read(0, &mut out),
        HostBuf::Blocks(ty, b) => Blocks { ty: *ty, bytes: b, ops: RowOps::scalar() }.read(0, &mut out),
    }
    out
}

/// Random values in ±1..±4, the magnitude changing every 32 values so q8_0's block scales differ.
fn varied(n: usize, seed: u32) -> Vec<f32> {
    rand(n, seed).iter().enumerate().map(|(i, x)| x * (1 + i / 32 % 4) as f32).collect()
}

/// The outputs of two steps (two sequences prefilling 6 tokens each in interleaved blocks, then one
/// decoding) of grouped-query attention with 64-wide heads over a cache of `dtype`, host or tensor path,
/// the keys and values first rounded through `through`; and the largest Σ|q| of a query head, |k| and
/// |v| of the inputs.
fn two_steps(dtype: KvDType, tensor: bool, through: KvDType) -> (Vec<Vec<f32>>, [f32; 3]) {
    let (heads, kvh, hd, bs) = (4, 2, 64, 4);
    let mut pool = BlockAllocator::new(16, bs);
    let (mut a, mut b) = (BlockTable::new(), BlockTable::new());
    pool.grow(&mut b, 3).unwrap();
    pool.grow(&mut a, 6).unwrap();
    pool.grow(&mut b, 7).unwrap();
    let width = kvh * hd;
    let (mut hk, mut hv) = (HostBuf::zeros(16 * bs * width, dtype), HostBuf::zeros(16 * bs * width, dtype));
    let dk = Tensor::zeros((16 * bs, width), dtype.tensor_dtype().unwrap_or(DType::F32), &Device::Cpu).unwrap();
    let dv = dk.zeros_like().unwrap();
    let (mut outs, mut maxes) = (Vec::new(), [0f32; 3]);
    let steps = [vec![(0..6, 0, a.clone()), (6..12, 0, b.clone())], vec![(0..1, 6, b.clone())]];
    for (n, step) in steps.into_iter().enumerate() {
        let seqs: Vec<SeqSpan> = step.into_iter().map(|(rows, start, table)| SeqSpan { rows, start, table }).collect();
        let plan = AttentionPlan::new(seqs, heads, kvh, hd, None);
        let t = plan.rows();
        let n = n as u32;
        let (qd, kd, vd) = (varied(t * heads * hd, 1 + n), varied(t * width, 2 + n), varied(t * width, 3 + n));
        let amax = |x: &[f32]| x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let qsum = qd.chunks(hd).map(|h| h.iter().map(|x| x.abs()).sum::<f32>()).fold(0f32, f32::max);
        maxes = [maxes[0].max(qsum), maxes[1].max(amax(&kd)), maxes[2].max(amax(&vd))];
        let mk = |x: Vec<f32>, w: usize| Tensor::from_vec(x, (t, w), &Device::Cpu).unwrap();
        let (q, k, v) = (mk(qd, heads * hd), mk(round_trip(&kd, through), width), mk(round_trip(&vd, through), width));
        let o = if tensor {
            device(&dk, &dv, &q, &k, &v, &plan).unwrap()
        } else {
            host(&mut hk, &mut hv, &q, &k, &v, &plan, KvRotation::OFF).unwrap()
        };
        outs.push(o.flatten_all().unwrap().to_vec1::<f32>().unwrap());
    }
    (outs, maxes)
}

/// Worst |difference| between two runs' outputs.
fn worst(x: &[Vec<f32>], y: &[Vec<f32>]) -> f32 {
    x.iter().flatten().zip(y.iter().flatten()).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max)
}

/// Per-element rounding of the formats: bf16 keeps 8 significant bits (|error| ≤ 2^-8·|x|); q8_0 rounds
/// to the nearest step of d = amax/127 of its block of 32 (≤ amax/254), d stored as f16 (another
/// 127·d·2^-11 = amax·2^-11).
#[test]
fn rounding_is_within_format_precision() {
    let x = varied(4096, 7);
    for (a, b) in x.iter().zip(round_trip(&x, KvDType::BF16)) {
        assert!((a - b).abs() <= a.abs() * 2f32.powi(-8), "bf16: {a} vs {b}");
    }
    let q8 = round_trip(&x, KvDType::Q8_0);
    for (x, y) in x.chunks(32).zip(q8.chunks(32)) {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (a, b) in x.iter().zip(y) {
            assert!((a - b).abs() <= amax * (1.0 / 254.0 + 2f32.powi(-11)), "q8_0: {a} vs {b} (amax {amax})");
        }
    }
}

/// Attention over a bf16 or block-quantized cache (unrotated) is f32 attention over the keys and values rounded
/// through the format, bit for bit: queries and softmax weights stay f32 and only the storage rounds.
#[test]
fn bf16_and_block_types_only_round_the_storage() {
    for dtype in KvDType::ALL.into_iter().filter(|t| *t == KvDType::BF16 || t.block_type().is_some()) {
        let (got, _) = two_steps(dtype, false, KvDType::F32);
        let (want, _) = two_steps(KvDType::F32, false, dtype);
        assert_eq!(got, want, "{dtype:?}");
    }
}

/// bf16 and q8_0 caches stay within the worst-case error their rounding allows of the f32 cache. If each
/// cached key element is off by at most `ek` and each value by `ev` (see above), every score `scale·q·k`
/// moves by at most Δ = scale·Σ|q|·ek, each softmax weight by a factor within e^±2Δ, and the output by at
/// most (e^2Δ − 1)(max|v| + ev) + ev. (Typical errors are far smaller: the roundings do not line up.)
#[test]
fn bf16_and_q8_0_are_within_their_precision_of_f32() {
    let (exact, [qsum, kmax, vmax]) = two_steps(KvDType::F32, false, KvDType::F32);
    let scale = 1.0 / 64f32.sqrt();
    for (dtype, rel) in [(KvDType::BF16, 2f32.powi(-8)), (KvDType::Q8_0, 1.0 / 254.0 + 2f32.powi(-11))] {
        let (ek, ev) = (rel * kmax, rel * vmax);
        let delta = scale * qsum * ek;
        let bound = (2.0 * delta).exp_m1() * (vmax + ev) + ev + 1e-5;
        let (got, _) = two_steps(dtype, false, KvDType::F32);
        let err = worst(&got, &exact);
        assert!(err <= bound, "{dtype:?}: max |diff| {err} > bound {bound}");
    }
}

/// The tensor path over a bf16 cache matches the host path over one: same stored values, f32 products.
#[test]
fn bf16_host_and_tensor_paths_agree() {
    let (host, _) = two_steps(KvDType::BF16, false, KvDType::F32);
    let (tensor, _) = two_steps(KvDType::BF16, true, KvDType::F32);
    let err = worst(&host, &tensor);
    assert!(err < 1e-5, "max |diff| {err}");
}

/// q8_0 rows hold ggml's block_q8_0 (f16 d = amax/127, then round(x/d) as i8) and read back as q·d.
#[test]
fn q8_0_rows_are_ggml_blocks() {
    let x: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) / 8.0).collect();
    let mut buf = HostBuf::zeros(2 * 64, KvDType::Q8_0);
    store(&mut buf, &x, &[1], 64);
    let HostBuf::Blocks(GgmlType::Q8_0, bytes) = &buf else { unreachable!() };
    assert!(bytes[..2 * 34].iter().all(|&b| b == 0), "slot 0 untouched");
    let block = &bytes[2 * 34..3 * 34];
    let d = 20.0 / 8.0 / 127.0;
    assert_eq!(f16::from_le_bytes([block[0], block[1]]), f16::from_f32(d));
    assert_eq!(block[2] as i8, -127);
    assert_eq!(block[2 + 20] as i8, 0);
    assert_eq!(block[2 + 21] as i8, (0.125f32 / d).round() as i8);
    let mut back = vec![0f32; 64];
    Blocks { ty: GgmlType::Q8_0, bytes, ops: RowOps::detect() }.read(64, &mut back);
    for (i, (a, b)) in x.iter().zip(&back).enumerate() {
        let amax = if i < 32 { 2.5f32 } else { 43.0 / 8.0 };
        assert!((a - b).abs() <= amax * (1.0 / 254.0 + 2f32.powi(-11)), "{i}: {a} vs {b}");
    }
}

/// iq4_nl rows hold the blocks ggml's `from_float` writes a KV cache with (ntry -1, checked against ggml in
/// `formats/tests/quant_vectors.rs`), not `ggml_quantize_chunk`'s, which differ on most blocks of random rows.
#[test]
fn iq4_nl_rows_are_ggml_from_float_blocks() {
    use tgi_formats::quant::quantize_row;
    let x = varied(128, 7);
    let mut buf = HostBuf::zeros(128, KvDType::IQ4_NL);
    store(&mut buf, &x, &[0], 128);
    let HostBuf::Blocks(GgmlType::IQ4_NL, bytes) = &buf else { unreachable!() };
    let mut want = vec![0u8; bytes.len()];
    quantize_row_searched(GgmlType::IQ4_NL, &x, &mut want, Iq4Search::FromFloat).unwrap();
    assert_eq!(bytes, &want);
    quantize_row(GgmlType::IQ4_NL, &x, &mut want).unwrap();
    assert_ne!(bytes, &want);
}
