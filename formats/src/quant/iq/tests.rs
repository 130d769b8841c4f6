use super::*;
use crate::quant::{dequantize_row, quantize_matrix, quantize_row, quantize_row_weighted, QuantError};

const IQ_TYPES: [GgmlType; 7] = [
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
    GgmlType::IQ1_S,
    GgmlType::IQ1_M,
];

/// Deterministic pseudo-random bytes (xorshift).
fn bytes(n: usize, mut s: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect()
}

#[test]
fn codecs_are_the_iquants() {
    for ty in GgmlType::ALL {
        assert_eq!(IqCodec::of(ty).is_some(), IQ_TYPES.contains(&ty), "{ty}");
    }
}

#[test]
fn integer_form_gives_the_decoded_values() {
    // d · ls · q · dot_scale is the decoded value up to f32 rounding, and unpacked levels stay in range.
    for (k, ty) in IQ_TYPES.into_iter().enumerate() {
        let c = IqCodec::of(ty).unwrap();
        let mut raw = bytes(3 * c.block_bytes, 99 + k as u64);
        if ty != GgmlType::IQ1_M {
            for b in raw.chunks_exact_mut(c.block_bytes) {
                b[..2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
            }
        } else {
            for b in raw.chunks_exact_mut(c.block_bytes) {
                // d = 0x2000 (a small normal fp16) in the top nibbles of the scales.
                for (i, nib) in [0u8, 0, 2, 0].into_iter().enumerate() {
                    b[49 + 2 * i] = (b[49 + 2 * i] & 0x0F) | (nib << 4);
                }
            }
        }
        let mut y = vec![0f32; 3 * QK_K];
        dequantize_row(ty, &raw, &mut y).unwrap();
        let mut b = IqBlock::default();
        for (block, y) in raw.chunks_exact(c.block_bytes).zip(y.chunks_exact(QK_K)) {
            c.unpack(block, &mut b);
            for (e, &y) in y.iter().enumerate() {
                assert!(b.ls[e / 16] % 2 == 1 && b.ls[e / 16] <= 31);
                assert!(b.q[e].unsigned_abs() <= 62);
                let v = b.d * b.ls[e / 16] as f32 * b.q[e] as f32 * c.dot_scale;
                assert!((v - y).abs() <= 1e-6 * v.abs(), "{ty} value {e}: {v} vs {y}");
            }
        }
    }
}

#[test]
fn iq2_xxs_iq2_xs_and_iq1_s_need_an_importance_matrix() {
    let x: Vec<f32> = (0..QK_K).map(|i| (i as f32 * 0.37).sin()).collect();
    for ty in [GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ1_S] {
        let mut dst = vec![0u8; ty.type_size()];
        assert_eq!(quantize_row(ty, &x, &mut dst), Err(QuantError::ImportanceRequired(ty)));
        assert_eq!(quantize_matrix(ty, &x, QK_K), Err(QuantError::ImportanceRequired(ty)));
        assert!(QuantError::ImportanceRequired(ty).to_string().contains("--imatrix"));
        quantize_row_weighted(ty, &x, &mut dst, &[1.0; QK_K]).unwrap();
        assert_ne!(dst[..2], [0, 0], "{ty}: a non-zero scale");
    }
}

#[test]
fn iq1_m_is_written_with_and_without_importance() {
    // ggml's quantize_iq1_m takes a NULL matrix (weights x²); unit importance weighs by √(σ² + x²).
    let x: Vec<f32> = (0..2 * QK_K).map(|i| (i as f32 * 0.37).sin() * (1.0 + (i % 7) as f32)).collect();
    let ty = GgmlType::IQ1_M;
    let (mut plain, mut weighted) = (vec![0u8; 2 * ty.type_size()], vec![0u8; 2 * ty.type_size()]);
    quantize_row(ty, &x, &mut plain).unwrap();
    quantize_row_weighted(ty, &x, &mut weighted, &[1.0; 2 * QK_K]).unwrap();
    assert_eq!(quantize_matrix(ty, &x, QK_K).unwrap(), plain);
    for bytes in [&plain, &weighted] {
        let mut y = vec![0f32; x.len()];
        dequantize_row(ty, bytes, &mut y).unwrap();
        let err: f32 = x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum();
        let norm: f32 = x.iter().map(|a| a * a).sum();
        assert!(err < 0.5 * norm, "relative squared error {}", err / norm);
    }
    // A zero block is all zero bytes (no scale, every codeword 0).
    let mut zero = vec![1u8; ty.type_size()];
    quantize_row(ty, &[0.0; QK_K], &mut zero).unwrap();
    assert!(zero.iter().all(|&b| b == 0));
}

/// Checks a kernel table of `ty`'s codewords (`levels(k)`, codeword `k`'s levels) against the unpacker: a block
/// of `ty` whose first codeword is `k` (its index bytes set by `place`), unit scale and no minus signs, unpacks
/// to those levels first.
fn check_words(ty: GgmlType, n: usize, levels: impl Fn(usize) -> Vec<i8>, place: impl Fn(&mut [u8], usize)) {
    let codec = IqCodec::of(ty).unwrap();
    for k in 0..n {
        let mut block = vec![0u8; ty.type_size()];
        place(&mut block, k);
        let mut b = IqBlock::default();
        codec.unpack(&block, &mut b);
        let want = levels(k);
        assert_eq!(want, b.q[..want.len()], "{ty} codeword {k}");
    }
}

#[test]
fn iq3s_words_are_ggml_iq3s_grid() {
    // ggml-common.h's iq3s_grid: 0x01010101, 0x01010103, ..., and the codewords unpacked little-endian (the
    // ninth index bit in qh[0] bit 0).
    assert_eq!([IQ3S_WORDS[0], IQ3S_WORDS[1]], [0x0101_0101, 0x0101_0103]);
    let levels = |k: usize| IQ3S_WORDS[k].to_le_bytes().map(|v| v as i8).to_vec();
    check_words(GgmlType::IQ3_S, 512, levels, |block, k| [block[2], block[66]] = [k as u8, (k >> 8) as u8]);
}

#[test]
fn iq2s_words_are_ggml_iq2s_grid() {
    // ggml-common.h's iq2s_grid starts 0x0808080808080808, 0x080808080808082b; every codeword as the unpacker's
    // (bits 8 and 9 of the index in qh[0] bits 0 and 1).
    assert_eq!([IQ2S_WORDS[0], IQ2S_WORDS[1]], [0x0808_0808_0808_0808, 0x0808_0808_0808_082b]);
    let levels = |k: usize| IQ2S_WORDS[k].to_le_bytes().map(|v| v as i8).to_vec();
    check_words(GgmlType::IQ2_S, 1024, levels, |block, k| [block[2], block[66]] = [k as u8, (k >> 8) as u8]);
}

#[test]
fn iq3xxs_words_are_ggml_iq3xxs_grid() {
    // ggml-common.h's iq3xxs_grid starts 0x04040404, 0x04040414; every codeword as the unpacker's (sign index 0).
    assert_eq!([IQ3XXS_WORDS[0], IQ3XXS_WORDS[1]], [0x0404_0404, 0x0404_0414]);
    let levels = |k: usize| IQ3XXS_WORDS[k].to_le_bytes().map(|v| v as i8).to_vec();
    check_words(GgmlType::IQ3_XXS, 256, levels, |block, k| block[2] = k as u8);
}

#[test]
fn iq2xxs_and_iq2xs_words_are_ggml_grids() {
    // ggml-common.h's iq2xxs_grid and iq2xs_grid both start 0x0808080808080808, 0x080808080808082b; every
    // codeword as the unpacker's (sign index 0: all positive).
    for words in [&IQ2XXS_WORDS[..], &IQ2XS_WORDS[..]] {
        assert_eq!([words[0], words[1]], [0x0808_0808_0808_0808, 0x0808_0808_0808_082b]);
    }
    let levels = |k: usize| IQ2XXS_WORDS[k].to_le_bytes().map(|v| v as i8).to_vec();
    check_words(GgmlType::IQ2_XXS, 256, levels, |block, k| block[2] = k as u8);
    let levels = |k: usize| IQ2XS_WORDS[k].to_le_bytes().map(|v| v as i8).to_vec();
    check_words(GgmlType::IQ2_XS, 512, levels, |block, k| [block[2], block[3]] = [k as u8, (k >> 8) as u8]);
}

#[test]
fn iq1s_words_are_ggml_iq1s_grid() {
    // ggml-common.h's iq1s_grid starts 0xffffffffffffffff, 0xffffffffffffff01; every codeword as the IQ1_S
    // unpacker's eighths (bits 8..10 of the index in qh[0], the shift +1/8).
    assert_eq!([IQ1S_WORDS[0], IQ1S_WORDS[1]], [u64::MAX, 0xffff_ffff_ffff_ff01]);
    let levels = |k: usize| IQ1S_WORDS[k].to_le_bytes().map(|v| 8 * v as i8 + 1).to_vec();
    check_words(GgmlType::IQ1_S, 2048, levels, |block, k| [block[2], block[34]] = [k as u8, (k >> 8) as u8]);
}
