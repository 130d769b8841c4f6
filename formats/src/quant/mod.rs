//! GGML block quantizers and dequantizers, byte-identical to llama.cpp's reference encoders
//! (`quantize_row_*_ref` in ggml's `src/ggml-quants.c`, i.e. what `llama-quantize` writes
//! without an importance matrix), to its importance-matrix encoders (`quantize_row_*_impl`, what
//! `llama-quantize --imatrix` writes) and equal to its `dequantize_row_*` decoders.
//!
//! All arithmetic is f32 in the C evaluation order with sequential sums and no fused
//! multiply-add (project format notes, `formats.md` §1.2–1.3). Checked byte for byte against
//! llama.cpp's `ggml_quantize_chunk` and gguf-py by `tests/quant_vectors.rs`.

mod float;
pub mod iq;
mod iq4;
mod legacy;
mod num;
mod q2k;
mod q3k;
mod q4k_q5k;
mod q6k;
mod qp;
mod search;
pub mod ternary;
mod weighted_k;
mod weighted_legacy;

use rayon::prelude::*;

use crate::GgmlType;

pub use float::{bf16_to_fp32, fp32_to_bf16};
pub use iq4::{iq4_xs_block_scale, Iq4Search, IQ4_NL_VALUES};

/// Errors of the block codecs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    /// The number of values is not a whole number of blocks of the type.
    #[error("{len} values are not a whole number of {ty} blocks of {block_size}")]
    PartialBlock {
        /// The target type.
        ty: GgmlType,
        /// Number of values given.
        len: usize,
        /// Values per block of `ty`.
        block_size: usize,
    },
    /// The encoded buffer has the wrong number of bytes for the number of values.
    #[error("{ty}: {values} values take {expected} bytes, the buffer has {actual}")]
    ByteLength {
        /// The target type.
        ty: GgmlType,
        /// Number of values.
        values: usize,
        /// Bytes those values take in `ty`.
        expected: usize,
        /// Bytes in the buffer given.
        actual: usize,
    },
    /// An importance vector whose length is not the row's.
    #[error("{importance} importance values for a row of {values}")]
    ImportanceLength {
        /// Values in the row.
        values: usize,
        /// Importance values given.
        importance: usize,
    },
    /// A type whose ggml encoder needs an importance matrix, asked for without one.
    #[error("{0} needs an importance matrix (ggml writes it only with one; pass --imatrix)")]
    ImportanceRequired(GgmlType),
    /// A matrix whose length is not a whole number of rows (or whose row length is zero).
    #[error("{len} values are not a whole number of rows of {n_per_row}")]
    RaggedMatrix {
        /// Number of values given.
        len: usize,
        /// The row length asked for.
        n_per_row: usize,
    },
}

/// Checks that `n` values are whole blocks of `ty` and returns the bytes they take.
fn encoded_len(ty: GgmlType, n: usize) -> Result<usize, QuantError> {
    ty.bytes_for(n as u64).and_then(|b| usize::try_from(b).ok()).ok_or(QuantError::PartialBlock {
        ty,
        len: n,
        block_size: ty.block_size(),
    })
}

/// Checks that `bytes` is exactly the encoded size of `values` values of `ty`.
fn check_bytes(ty: GgmlType, values: usize, bytes: usize) -> Result<(), QuantError> {
    let expected = encoded_len(ty, values)?;
    if bytes != expected {
        return Err(QuantError::ByteLength { ty, values, expected, actual: bytes });
    }
    Ok(())
}

/// Runs a block encoder over matching `N`-value / `B`-byte blocks.
#[inline(always)]
fn encode_blocks<const N: usize, const B: usize>(src: &[f32], dst: &mut [u8], f: impl Fn(&[f32; N], &mut [u8; B])) {
    for (x, y) in src.chunks_exact(N).zip(dst.chunks_exact_mut(B)) {
        f(num::arr(x), num::arr_mut(y));
    }
}

/// Runs a block decoder over matching `B`-byte / `N`-value blocks.
#[inline(always)]
fn decode_blocks<const N: usize, const B: usize>(src: &[u8], dst: &mut [f32], f: fn(&[u8; B], &mut [f32; N])) {
    for (y, x) in src.chunks_exact(B).zip(dst.chunks_exact_mut(N)) {
        f(num::arr(y), num::arr_mut(x));
    }
}

/// Encodes one row (or any whole number of blocks) of f32 values into `dst` (exactly
/// `ty.bytes_for(src.len())` bytes), as `ggml_quantize_chunk` does without an importance matrix
/// (refused for the types ggml encodes only with one, [`requires_importance`]).
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    quantize_row_searched(ty, src, dst, Iq4Search::Full)
}

/// [`quantize_row`] with IQ4_NL's scale search `iq4` ([`Iq4Search::FromFloat`]: as ggml's `from_float`
/// writes a KV cache); every other type has one encoder.
pub fn quantize_row_searched(ty: GgmlType, src: &[f32], dst: &mut [u8], iq4: Iq4Search) -> Result<(), QuantError> {
    check_bytes(ty, src.len(), dst.len())?;
    match ty {
        GgmlType::F32 => float::encode_f32(src, dst),
        GgmlType::F16 => float::encode_f16(src, dst),
        GgmlType::BF16 => float::encode_bf16(src, dst),
        GgmlType::Q4_0 => encode_blocks(src, dst, legacy::quantize_q4_0),
        GgmlType::Q4_1 => encode_blocks(src, dst, legacy::quantize_q4_1),
        GgmlType::Q5_0 => encode_blocks(src, dst, legacy::quantize_q5_0),
        GgmlType::Q5_1 => encode_blocks(src, dst, legacy::quantize_q5_1),
        GgmlType::Q8_0 => encode_blocks(src, dst, legacy::quantize_q8_0),
        GgmlType::Q2_K => encode_blocks(src, dst, q2k::quantize_q2_k),
        GgmlType::Q3_K => encode_blocks(src, dst, q3k::quantize_q3_k),
        GgmlType::Q4_K => encode_blocks(src, dst, q4k_q5k::quantize_q4_k),
        GgmlType::Q5_K => encode_blocks(src, dst, q4k_q5k::quantize_q5_k),
        GgmlType::Q6_K => encode_blocks(src, dst, q6k::quantize_q6_k),
        GgmlType::IQ4_NL => encode_blocks(src, dst, |x, y| iq4::quantize_iq4_nl(x, None, iq4, y)),
        GgmlType::IQ4_XS => encode_blocks(src, dst, |x, y| iq4::quantize_iq4_xs(x, None, y)),
        GgmlType::IQ3_XXS => encode_blocks(src, dst, |x, y| iq::encode3::quantize_iq3_xxs(x, None, y)),
        GgmlType::IQ3_S => encode_blocks(src, dst, |x, y| iq::encode3::quantize_iq3_s(x, None, y)),
        GgmlType::IQ2_S => encode_blocks(src, dst, |x, y| iq::encode2::quantize_iq2_s(x, None, y)),
        GgmlType::IQ1_M => encode_blocks(src, dst, |x, y| iq::encode1m::quantize_iq1_m(x, None, y)),
        GgmlType::TQ1_0 => encode_blocks(src, dst, ternary::quantize_tq1_0),
        GgmlType::TQ2_0 => encode_blocks(src, dst, ternary::quantize_tq2_0),
        GgmlType::IQ2_XXS | GgmlType::IQ2_XS | GgmlType::IQ1_S => return Err(QuantError::ImportanceRequired(ty)),
    }
    Ok(())
}

/// Runs a weighted block encoder over matching blocks of values, importance and bytes.
#[inline(always)]
fn encode_weighted<const N: usize, const B: usize>(
    src: &[f32],
    importance: &[f32],
    dst: &mut [u8],
    f: impl Fn(&[f32; N], &[f32; N], &mut [u8; B]),
) {
    for ((x, qw), y) in src.chunks_exact(N).zip(importance.chunks_exact(N)).zip(dst.chunks_exact_mut(B)) {
        f(num::arr(x), num::arr(qw), num::arr_mut(y));
    }
}

/// Encodes one row of f32 values into `dst` with `importance` (one value per column, as
/// llama-quantize derives it from an importance matrix), byte-identical to ggml's
/// `quantize_*(.., quant_weights)`. `src` must be exactly one row: Q4_0..Q5_1 weigh by the mean
/// square of the whole row. Types whose ggml encoder takes no importance (F32, F16, BF16, Q8_0, TQ1_0,
/// TQ2_0) are encoded as [`quantize_row`] does.
pub fn quantize_row_weighted(ty: GgmlType, src: &[f32], dst: &mut [u8], importance: &[f32]) -> Result<(), QuantError> {
    check_bytes(ty, src.len(), dst.len())?;
    if importance.len() != src.len() {
        return Err(QuantError::ImportanceLength { values: src.len(), importance: importance.len() });
    }
    let sigma2 = || weighted_legacy::row_sigma2(src);
    match ty {
        GgmlType::Q4_0 => {
            let s = sigma2();
            encode_weighted(src, importance, dst, |x, w, y| weighted_legacy::quantize_q4_0(x, w, s, y));
        }
        GgmlType::Q4_1 => {
            let s = sigma2();
            encode_weighted(src, importance, dst, |x, w, y| weighted_legacy::quantize_q4_1(x, w, s, y));
        }
        GgmlType::Q5_0 => {
            let s = sigma2();
            encode_weighted(src, importance, dst, |x, w, y| weighted_legacy::quantize_q5_0(x, w, s, y));
        }
        GgmlType::Q5_1 => {
            let s = sigma2();
            encode_weighted(src, importance, dst, |x, w, y| weighted_legacy::quantize_q5_1(x, w, s, y));
        }
        GgmlType::Q2_K => encode_weighted(src, importance, dst, weighted_k::quantize_q2_k),
        GgmlType::Q3_K => encode_weighted(src, importance, dst, weighted_k::quantize_q3_k),
        GgmlType::Q4_K => encode_weighted(src, importance, dst, weighted_k::quantize_q4_k),
        GgmlType::Q5_K => encode_weighted(src, importance, dst, weighted_k::quantize_q5_k),
        GgmlType::Q6_K => encode_weighted(src, importance, dst, q6k::quantize_q6_k_weighted),
        GgmlType::IQ4_NL => {
            encode_weighted(src, importance, dst, |x, w, y| iq4::quantize_iq4_nl(x, Some(w), Iq4Search::Full, y))
        }
        GgmlType::IQ4_XS => encode_weighted(src, importance, dst, |x, w, y| iq4::quantize_iq4_xs(x, Some(w), y)),
        GgmlType::IQ3_XXS => {
            encode_weighted(src, importance, dst, |x, w, y| iq::encode3::quantize_iq3_xxs(x, Some(w), y))
        }
        GgmlType::IQ3_S => encode_weighted(src, importance, dst, |x, w, y| iq::encode3::quantize_iq3_s(x, Some(w), y)),
        GgmlType::IQ2_XXS => encode_weighted(src, importance, dst, iq::encode2::quantize_iq2_xxs),
        GgmlType::IQ2_XS => encode_weighted(src, importance, dst, iq::encode2::quantize_iq2_xs),
        GgmlType::IQ1_S => encode_weighted(src, importance, dst, iq::encode1::quantize_iq1_s),
        GgmlType::IQ2_S => encode_weighted(src, importance, dst, |x, w, y| iq::encode2::quantize_iq2_s(x, Some(w), y)),
        GgmlType::IQ1_M => encode_weighted(src, importance, dst, |x, w, y| iq::encode1m::quantize_iq1_m(x, Some(w), y)),
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 | GgmlType::Q8_0 | GgmlType::TQ1_0 | GgmlType::TQ2_0 => {
            return quantize_row(ty, src, dst)
        }
    }
    Ok(())
}

/// Whether ggml's encoder for `ty` uses an importance matrix (Q8_0, the ternary and the float types ignore it).
pub fn uses_importance(ty: GgmlType) -> bool {
    ty.is_quantized() && !matches!(ty, GgmlType::Q8_0 | GgmlType::TQ1_0 | GgmlType::TQ2_0)
}

/// Whether ggml encodes `ty` only with an importance matrix (`quantize_row_*_impl` asserts one;
/// llama-quantize asks for one for more types, `requires_imatrix` of the presets).
pub fn requires_importance(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::IQ2_XXS | GgmlType::IQ2_XS | GgmlType::IQ1_S)
}

/// Decodes blocks of `ty` into f32 (`dst.len()` elements; `src` must be exactly their size).
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    check_bytes(ty, dst.len(), src.len())?;
    match ty {
        GgmlType::F32 => float::decode_f32(src, dst),
        GgmlType::F16 => float::decode_f16(src, dst),
        GgmlType::BF16 => float::decode_bf16(src, dst),
        GgmlType::Q4_0 => decode_blocks(src, dst, legacy::dequantize_q4_0),
        GgmlType::Q4_1 => decode_blocks(src, dst, legacy::dequantize_q4_1),
        GgmlType::Q5_0 => decode_blocks(src, dst, legacy::dequantize_q5_0),
        GgmlType::Q5_1 => decode_blocks(src, dst, legacy::dequantize_q5_1),
        GgmlType::Q8_0 => decode_blocks(src, dst, legacy::dequantize_q8_0),
        GgmlType::Q2_K => decode_blocks(src, dst, q2k::dequantize_q2_k),
        GgmlType::Q3_K => decode_blocks(src, dst, q3k::dequantize_q3_k),
        GgmlType::Q4_K => decode_blocks(src, dst, q4k_q5k::dequantize_q4_k),
        GgmlType::Q5_K => decode_blocks(src, dst, q4k_q5k::dequantize_q5_k),
        GgmlType::Q6_K => decode_blocks(src, dst, q6k::dequantize_q6_k),
        GgmlType::IQ4_NL => decode_blocks(src, dst, iq4::dequantize_iq4_nl),
        GgmlType::IQ4_XS => decode_blocks(src, dst, iq4::dequantize_iq4_xs),
        GgmlType::TQ1_0 => decode_blocks(src, dst, ternary::dequantize_tq1_0),
        GgmlType::TQ2_0 => decode_blocks(src, dst, ternary::dequantize_tq2_0),
        GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ3_XXS
        | GgmlType::IQ1_S
        | GgmlType::IQ3_S
        | GgmlType::IQ2_S
        | GgmlType::IQ1_M => iq::IqCodec::of(ty).expect("an i-quant type").dequantize(src, dst),
    }
    Ok(())
}

/// Quantizes a `[rows, n_per_row]` matrix, rows in parallel with rayon; returns the encoded
/// bytes (rows concatenated, as `ggml_quantize_chunk` lays them out).
pub fn quantize_matrix(ty: GgmlType, src: &[f32], n_per_row: usize) -> Result<Vec<u8>, QuantError> {
    if n_per_row == 0 || !src.chunks_exact(n_per_row).remainder().is_empty() {
        return Err(QuantError::RaggedMatrix { len: src.len(), n_per_row });
    }
    let row_bytes = encoded_len(ty, n_per_row)?;
    let mut out = vec![0u8; src.len() / n_per_row * row_bytes];
    out.par_chunks_mut(row_bytes)
        .zip(src.par_chunks(n_per_row))
        .try_for_each(|(dst, row)| quantize_row(ty, row, dst))?;
    Ok(out)
}

#[cfg(test)]
mod tests;
