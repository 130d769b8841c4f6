//! The hyperparameters a Llama-family model runs with, from config.json or from GGUF metadata.

use tgi_formats::gguf::GgufFile;
use tgi_formats::hf::{Architecture, ModelConfig, RopeScaling};

use super::ModelError;

/// How RoPE pairs the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Dimension `i` with `i + d/2` (transformers' `rotate_half`; llama.cpp's NEOX).
    Halves,
    /// Dimension `2i` with `2i + 1` (llama.cpp's NORM, for its permuted Llama Q/K weights).
    Interleaved,
}

/// Everything the forward pass needs to know about the architecture.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// The architecture (Llama, Mistral, Qwen2).
    pub architecture: Architecture,
    /// Model width.
    pub hidden: usize,
    /// MLP inner width.
    pub intermediate: usize,
    /// Decoder layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Width of a head.
    pub head_dim: usize,
    /// Vocabulary size (rows of the embedding).
    pub vocab: usize,
    /// Trained context length.
    pub context: usize,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// RoPE base.
    pub rope_theta: f32,
    /// Positions are multiplied by this (linear scaling: 1 / factor).
    pub rope_position_scale: f32,
    /// How RoPE pairs dimensions.
    pub rope_style: RopeStyle,
    /// Sliding attention window.
    pub sliding_window: Option<usize>,
}

impl LlamaConfig {
    /// From a config.json.
    pub fn from_hf(cfg: &ModelConfig) -> Result<Self, ModelError> {
        let rope_position_scale = match &cfg.rope_scaling {
            None | Some(RopeScaling::Llama3 { .. }) => 1.0,
            Some(RopeScaling::Linear { factor }) => 1.0 / factor,
            Some(RopeScaling::Yarn { .. }) => {
                return Err(ModelError::Unsupported("YaRN rope scaling is not supported by the engine".into()))
            }
        };
        Ok(LlamaConfig {
            architecture: cfg.architecture,
            hidden: cfg.hidden_size,
            intermediate: cfg.intermediate_size,
            layers: cfg.num_hidden_layers,
            heads: cfg.num_attention_heads,
            kv_heads: cfg.num_key_value_heads,
            head_dim: cfg.head_dim,
            vocab: cfg.vocab_size,
            context: cfg.max_position_embeddings,
            rms_eps: cfg.rms_norm_eps,
            rope_theta: cfg.rope_theta,
            rope_position_scale,
            rope_style: RopeStyle::Halves,
            sliding_window: cfg.sliding_window,
        })
    }

    /// From a GGUF file's `{arch}.*` metadata; the vocabulary size comes from the embedding's shape.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, ModelError> {
        let arch_name = file.get("general.architecture").and_then(|v| v.as_str()).unwrap_or("");
        let architecture = match arch_name {
            "llama" => Architecture::Llama,
            "mistral" => Architecture::Mistral,
            "qwen2" => Architecture::Qwen2,
            other => {
                return Err(ModelError::Unsupported(format!(
                    "GGUF architecture '{other}' (supported: llama, mistral, qwen2)"
                )))
            }
        };
        let vocab = file
            .tensor("token_embd.weight")
            .map(|t| t.torch_shape()[0])
            .ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?;
        let key = |k: &str| format!("{arch_name}.{k}");
        let int = |k: &str| file.get(&key(k)).and_then(|v| v.as_u64()).map(|v| v as usize);
        let req = |k: &str| {
            int(k).filter(|&v| v > 0).ok_or_else(|| ModelError::Config(format!("GGUF metadata lacks {}", key(k))))
        };
        let float = |k: &str| file.get(&key(k)).and_then(|v| v.as_f32());
        let hidden = req("embedding_length")?;
        let heads = req("attention.head_count")?;
        let kv_heads = int("attention.head_count_kv").unwrap_or(heads);
        if kv_heads == 0 || heads % kv_heads != 0 {
            return Err(ModelError::Config(format!("{kv_heads} KV heads do not divide {heads} heads")));
        }
        let head_dim = int("attention.key_length").or(int("rope.dimension_count")).unwrap_or(hidden / heads);
        let rope_position_scale = match file.get(&key("rope.scaling.type")).and_then(|v| v.as_str()) {
            None | Some("none") => 1.0,
            Some("linear") => 1.0 / float("rope.scaling.factor").unwrap_or(1.0),
            Some(other) => return Err(ModelError::Unsupported(format!("rope scaling '{other}'"))),
        };
        Ok(LlamaConfig {
            architecture,
            hidden,
            intermediate: req("feed_forward_length")?,
            layers: req("block_count")?,
            heads,
            kv_heads,
            head_dim,
            vocab,
            context: req("context_length")?,
            rms_eps: float("attention.layer_norm_rms_epsilon").unwrap_or(1e-5),
            rope_theta: float("rope.freq_base").unwrap_or(10000.0),
            rope_position_scale,
            rope_style: match architecture {
                Architecture::Qwen2 => RopeStyle::Halves,
                Architecture::Llama | Architecture::Mistral => RopeStyle::Interleaved,
            },
            sliding_window: int("attention.sliding_window").filter(|&w| w > 0),
        })
    }
}
