//! bitsandbytes 4-bit weights (NF4 and FP4, `load_in_4bit` checkpoints): the 4-bit codes, blockwise
//! quantization and dequantization, double quantization of the absmax values, and the tensor
//! group of one quantized weight as transformers saves it.
//!
//! Bit-exact with bitsandbytes 0.50.2 on CPU (`functional.quantize_4bit` / `dequantize_4bit`):
//! the 4-bit path is the torch default backend, the 8-bit absmax codes come from the native CPU
//! kernel's 65536-entry lookup table, and the double-quant offset is torch's float32 `mean`
//! (project format notes, `formats.md` §3). Checked against committed bitsandbytes vectors by
//! `formats/tests/bnb_vectors.rs`.

mod checkpoint;
mod codec;
mod config;
mod nested;

pub use checkpoint::{
    is_bnb4_weight, quant_state_key, read_bnb4, weight_group, Bnb4Weight, BnbError, QuantStateJson, BNB_WEIGHT_SUFFIXES,
};
pub use codec::{code, dequantize_4bit, quantize_4bit, FourBitType, VALID_BLOCKSIZES};
pub use config::BnbQuantConfig;
pub use nested::{
    compress_absmax, compress_absmax_with_offset, decompress_absmax, dynamic_map, torch_mean_f32, NestedAbsmax,
    NESTED_BLOCKSIZE,
};
