//! The architectures make-checkpoint writes besides Llama: their per-layer tensors and config.json keys.

use crate::json::{arr, J};

/// A checkpoint's architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `LlamaForCausalLM`.
    Llama,
    /// `Qwen3ForCausalLM`: per-head q/k norms, tied embeddings.
    Qwen3,
    /// `Gemma2ForCausalLM`: four norms a layer, soft-caps, alternating sliding windows, tied embeddings.
    Gemma2,
    /// `Qwen3MoeForCausalLM`: Qwen3's attention, a mixture of experts in every layer.
    Qwen3Moe {
        /// Experts per layer.
        experts: usize,
        /// Experts per token.
        per_token: usize,
        /// One expert's FFN width.
        expert_ffn: usize,
    },
}

impl Family {
    /// The transformers class.
    pub fn class(self) -> &'static str {
        match self {
            Family::Llama => "LlamaForCausalLM",
            Family::Qwen3 => "Qwen3ForCausalLM",
            Family::Gemma2 => "Gemma2ForCausalLM",
            Family::Qwen3Moe { .. } => "Qwen3MoeForCausalLM",
        }
    }

    /// config.json's `model_type`.
    pub fn model_type(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Qwen3 => "qwen3",
            Family::Gemma2 => "gemma2",
            Family::Qwen3Moe { .. } => "qwen3_moe",
        }
    }

    /// Whether `lm_head` is the embedding (no `lm_head.weight`).
    pub fn tied(self) -> bool {
        matches!(self, Family::Qwen3 | Family::Gemma2)
    }

    /// Norm weights beyond `input_layernorm` and `post_attention_layernorm`, with their widths.
    pub fn extra_norms(self, hidden: usize, head_dim: usize) -> Vec<(&'static str, usize)> {
        match self {
            Family::Llama => vec![],
            Family::Qwen3 | Family::Qwen3Moe { .. } => {
                vec![("self_attn.q_norm", head_dim), ("self_attn.k_norm", head_dim)]
            }
            Family::Gemma2 => vec![("pre_feedforward_layernorm", hidden), ("post_feedforward_layernorm", hidden)],
        }
    }

    /// The family's config.json keys beyond Llama's (values as the published models have them).
    pub fn config_keys(self, layers: usize, head_dim: usize) -> Vec<(&'static str, J)> {
        match self {
            Family::Llama => vec![],
            Family::Qwen3 => vec![("use_sliding_window", J::Bool(false))],
            Family::Gemma2 => vec![
                ("attn_logit_softcapping", J::Float(50.0)),
                ("final_logit_softcapping", J::Float(30.0)),
                ("hidden_activation", J::from("gelu_pytorch_tanh")),
                ("query_pre_attn_scalar", J::from(head_dim)),
                ("sliding_window", J::Int(4096)),
                (
                    "layer_types",
                    arr((0..layers).map(|i| J::from(if i % 2 == 0 { "sliding_attention" } else { "full_attention" }))),
                ),
            ],
            Family::Qwen3Moe { experts, per_token, expert_ffn } => vec![
                ("decoder_sparse_step", J::Int(1)),
                ("mlp_only_layers", arr([])),
                ("moe_intermediate_size", J::from(expert_ffn)),
                ("norm_topk_prob", J::Bool(true)),
                ("num_experts", J::from(experts)),
                ("num_experts_per_tok", J::from(per_token)),
                ("use_sliding_window", J::Bool(false)),
            ],
        }
    }
}
