//! What distinguishes one decoder family from another: the per-family description the one decoder
//! implementation ([`super::Decoder`]) is parameterised by. A new dense family is a new arm here (and its
//! names in `convert/names.rs`), not a new forward loop.

use tgi_formats::hf::Architecture;

use super::mlp::MlpNames;
use super::moe::MoeNames;

pub use crate::kernels::gated::Activation;

/// The structure of one family's decoder layer and embedding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Family {
    /// RMSNorm scales by `1 + w` (Gemma) instead of `w`.
    pub norm_plus_one: bool,
    /// Per-head RMSNorm of queries and keys before RoPE (`q_norm`, `k_norm`: Qwen3, Gemma 3).
    pub qk_norm: bool,
    /// Norms after attention and after the MLP too, before the residual add (Gemma 2 and 3).
    pub sandwich_norms: bool,
    /// The embedding is multiplied by `sqrt(hidden)` (Gemma).
    pub embed_scale: bool,
    /// The MLP's activation.
    pub activation: Activation,
    /// Where a mixture of experts keeps its weights (mixture families only).
    pub moe_names: Option<MoeNames>,
    /// Fused `qkv_proj` and `gate_up_proj` projections (Phi-3).
    pub fused_projections: bool,
}

impl Family {
    /// The description of `arch`.
    pub fn of(arch: Architecture) -> Self {
        let llama = Family {
            norm_plus_one: false,
            qk_norm: false,
            sandwich_norms: false,
            embed_scale: false,
            activation: Activation::Silu,
            moe_names: None,
            fused_projections: false,
        };
        let mlp_experts = MoeNames { block: "mlp", expert: MlpNames::LLAMA };
        match arch {
            Architecture::Llama | Architecture::Mistral | Architecture::Qwen2 => llama,
            Architecture::Qwen3 => Family { qk_norm: true, ..llama },
            Architecture::Gemma2 => Family {
                norm_plus_one: true,
                sandwich_norms: true,
                embed_scale: true,
                activation: Activation::GeluTanh,
                ..llama
            },
            Architecture::Gemma3 => Family { qk_norm: true, ..Family::of(Architecture::Gemma2) },
            Architecture::Mixtral => {
                Family { moe_names: Some(MoeNames { block: "block_sparse_moe", expert: MlpNames::MIXTRAL }), ..llama }
            }
            Architecture::Qwen3Moe => Family { qk_norm: true, moe_names: Some(mlp_experts), ..llama },
            Architecture::Phi3 => Family { fused_projections: true, ..llama },
        }
    }

    /// The Hugging Face name of layer `p`'s norm before the MLP (Gemma 2's `post_attention_layernorm` is
    /// the norm after attention).
    pub fn mlp_norm_name(self) -> &'static str {
        if self.sandwich_norms {
            "pre_feedforward_layernorm"
        } else {
            "post_attention_layernorm"
        }
    }
}
