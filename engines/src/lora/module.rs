//! The projections of a decoder layer a LoRA adapter may change: their names (transformers' and llama.cpp's),
//! their shapes in a base model, and the memory an adapter of a given rank on all of them takes.

use crate::convert::names::{map_name, Transform};
use crate::model::{DecoderConfig, Family};

/// A projection of a decoder layer an adapter may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Module {
    /// `self_attn.q_proj`.
    Q,
    /// `self_attn.k_proj`.
    K,
    /// `self_attn.v_proj`.
    V,
    /// `self_attn.o_proj`.
    O,
    /// `mlp.gate_proj`.
    Gate,
    /// `mlp.up_proj`.
    Up,
    /// `mlp.down_proj`.
    Down,
    /// `self_attn.qkv_proj` (Phi-3's fused projection).
    Qkv,
    /// `mlp.gate_up_proj` (Phi-3's fused projection).
    GateUp,
}

/// Slots per layer: one per [`Module`].
pub(crate) const SLOTS: usize = 9;

impl Module {
    /// Every module, in slot order.
    pub(crate) const ALL: [Module; SLOTS] = [
        Module::Q,
        Module::K,
        Module::V,
        Module::O,
        Module::Gate,
        Module::Up,
        Module::Down,
        Module::Qkv,
        Module::GateUp,
    ];

    /// The module's path inside a layer, as transformers names it.
    pub fn hf_name(self) -> &'static str {
        match self {
            Module::Q => "self_attn.q_proj",
            Module::K => "self_attn.k_proj",
            Module::V => "self_attn.v_proj",
            Module::O => "self_attn.o_proj",
            Module::Gate => "mlp.gate_proj",
            Module::Up => "mlp.up_proj",
            Module::Down => "mlp.down_proj",
            Module::Qkv => "self_attn.qkv_proj",
            Module::GateUp => "mlp.gate_up_proj",
        }
    }

    /// The module's weight in a GGUF layer, as llama.cpp names it (`attn_q`; Phi-3's fused gate and up
    /// projection is `ffn_up`), for what observes a forward pass.
    pub fn gguf_name(self) -> &'static str {
        match self {
            Module::Q => "attn_q",
            Module::K => "attn_k",
            Module::V => "attn_v",
            Module::O => "attn_output",
            Module::Gate => "ffn_gate",
            Module::Up | Module::GateUp => "ffn_up",
            Module::Down => "ffn_down",
            Module::Qkv => "attn_qkv",
        }
    }

    /// The module named `name` (transformers' path inside a layer), if it is one.
    pub(crate) fn parse(name: &str) -> Option<Self> {
        Module::ALL.into_iter().find(|m| m.hf_name() == name)
    }

    /// The slot of the module in a layer's array.
    pub(crate) fn slot(self) -> usize {
        Module::ALL.iter().position(|x| *x == self).expect("every module has a slot")
    }

    /// The base projection's `(out, in)` in layer `layer` of `cfg`, or why the base has no such projection.
    pub(crate) fn shape(self, cfg: &DecoderConfig, layer: usize) -> Result<(usize, usize), String> {
        let (h, q, kv, i) = (cfg.hidden, cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.intermediate);
        let fused = Family::of(cfg.architecture).fused_projections;
        let sparse = cfg.moe.as_ref().is_some_and(|m| m.sparse_layers.get(layer) == Some(&true));
        let mlp = matches!(self, Module::Gate | Module::Up | Module::Down | Module::GateUp);
        if sparse && mlp {
            return Err(format!("layer {layer} is a mixture of experts; LoRA on experts is not supported"));
        }
        let wrong = || Err(format!("the base model ({:?}) has no {} projections", cfg.architecture, self.hf_name()));
        Ok(match (self, fused) {
            (Module::Q, false) => (q, h),
            (Module::K | Module::V, false) => (kv, h),
            (Module::O, _) => (h, q),
            (Module::Gate | Module::Up, false) => (i, h),
            (Module::Down, _) => (h, i),
            (Module::Qkv, true) => (q + 2 * kv, h),
            (Module::GateUp, true) => (2 * i, h),
            _ => return wrong(),
        })
    }

    /// llama.cpp's name of the base tensor (`blk.N.attn_q.weight`) and how its converter rearranged the rows,
    /// or `None` when the base has no such projection in `layer`.
    pub(crate) fn gguf_tensor(self, cfg: &DecoderConfig, layer: usize) -> Option<(String, Transform)> {
        self.shape(cfg, layer).ok()?;
        let hf = format!("model.layers.{layer}.{}.weight", self.hf_name());
        map_name(cfg.architecture, cfg.heads, cfg.kv_heads, &hf).ok().flatten()
    }

    /// The projection of `cfg` llama.cpp calls `tensor` (`blk.3.attn_q.weight`) in `layer`.
    pub(crate) fn from_gguf(tensor: &str, cfg: &DecoderConfig, layer: usize) -> Option<Self> {
        Module::ALL.into_iter().find(|m| m.gguf_tensor(cfg, layer).is_some_and(|(name, _)| name == tensor))
    }
}

/// The bytes one adapter of rank `rank` on every projection of every layer of `cfg` takes (f32 factors: `A` is
/// `rank × in`, `B` is `out × rank`): what the server reserves per adapter it may hold, as vLLM sizes its slots.
pub fn full_adapter_bytes(cfg: &DecoderConfig, rank: usize) -> u64 {
    let per_rank: usize = (0..cfg.layers)
        .flat_map(|layer| Module::ALL.into_iter().filter_map(move |m| m.shape(cfg, layer).ok()))
        .map(|(out, inp)| out + inp)
        .sum();
    (per_rank * rank * std::mem::size_of::<f32>()) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use tgi_formats::hf::Architecture;

    /// TinyLlama-1.1B's shapes.
    fn tinyllama() -> DecoderConfig {
        let hf = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/stories260k/hf/config.json");
        let hf = tgi_formats::hf::ModelConfig::from_file(std::path::Path::new(hf)).unwrap();
        let mut c = DecoderConfig::from_hf(&hf).unwrap();
        (c.hidden, c.intermediate, c.layers, c.heads, c.kv_heads, c.head_dim) = (2048, 5632, 22, 32, 4, 64);
        c
    }

    #[test]
    fn a_full_adapter_covers_all_seven_projections_of_every_layer() {
        let c = tinyllama();
        // Per layer and rank: q 2048+2048, k and v 2048+256, o 2048+2048, gate and up and down 2048+5632.
        let per_layer = 4096 + 2 * 2304 + 4096 + 3 * 7680;
        assert_eq!(full_adapter_bytes(&c, 16), (22 * per_layer * 16 * 4) as u64);
        assert_eq!(full_adapter_bytes(&c, 16), 50_462_720);
        assert_eq!(full_adapter_bytes(&c, 0), 0);
    }

    #[test]
    fn gguf_names_map_to_projections() {
        let c = tinyllama();
        assert_eq!(Module::from_gguf("blk.3.attn_q.weight", &c, 3), Some(Module::Q));
        assert_eq!(Module::from_gguf("blk.3.ffn_down.weight", &c, 3), Some(Module::Down));
        assert_eq!(Module::from_gguf("blk.3.attn_norm.weight", &c, 3), None);
        assert!(matches!(Module::Q.gguf_tensor(&c, 0), Some((_, Transform::PermuteHeads(32)))));
        assert_eq!(Module::Qkv.gguf_tensor(&c, 0), None);
        assert_eq!(c.architecture, Architecture::Llama);
    }
}
