//! AWQ 4-bit weights in AutoAWQ's GEMM layout (what transformers, vLLM and TGI load): per-group
//! round-to-nearest with a zero point, the packing of codes, zeros and scales, and the
//! `quantization_config` of config.json. The activation-aware scale search lives in the engine,
//! which runs the model; this module only encodes the weights it hands over (formats.md §2).

mod codec;
mod config;

pub use codec::{fake_quantize_group, group_params, AwqError, AwqTensor, GroupParams, AWQ_ORDER, VALID_GROUP_SIZES};
pub use config::AwqConfig;
