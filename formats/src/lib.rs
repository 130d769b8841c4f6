//! Checkpoint I/O and quantized encodings for tgi: safetensors, GGUF, Hugging Face model
//! directories and the GGML block types. Knows no model architectures and runs no model.

pub mod awq;
pub mod bnb;
pub mod convert;
pub mod ggml_type;
pub mod gguf;
pub mod hf;
pub mod hyperparameters;
pub mod imatrix;
pub mod peft;
pub mod quant;
pub mod safetensors;
pub mod source;

pub use ggml_type::GgmlType;
pub use gguf::{GgufError, GgufFile, GgufWriter};
pub use safetensors::{SafetensorsError, SafetensorsSet};
pub use source::{DType, SourceError, TensorMeta, TensorSource};
