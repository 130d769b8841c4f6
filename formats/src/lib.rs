//! Checkpoint I/O and quantized encodings for tgi: safetensors, GGUF, Hugging Face model
//! directories and the GGML block types. Knows no model architectures and runs no model.

pub mod ggml_type;
pub mod quant;

pub use ggml_type::GgmlType;
