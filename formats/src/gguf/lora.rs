//! llama.cpp's LoRA adapters in GGUF (`convert_lora_to_gguf.py` output): the header that marks a file as one
//! (`general.type = adapter`, `adapter.type = lora`, `adapter.lora.alpha`) and its tensor names
//! (`blk.N.attn_q.weight.lora_a`). Knows no architecture: which projection a name is, is the engine's business.

use super::GgufFile;
use crate::peft::Factor;

/// `general.type` of an adapter file.
pub const TYPE_KEY: &str = "general.type";
/// `adapter.type`: `lora` for a LoRA adapter.
pub const ADAPTER_TYPE_KEY: &str = "adapter.type";
/// `adapter.lora.alpha`: with each factor pair's rank, its scale `alpha / rank`.
pub const ALPHA_KEY: &str = "adapter.lora.alpha";
/// `general.architecture`: the base model's architecture as llama.cpp names it.
pub const ARCH_KEY: &str = "general.architecture";

/// What a GGUF LoRA adapter's header says.
#[derive(Clone, Debug, PartialEq)]
pub struct AdapterHeader {
    /// The base's architecture (`llama`, `qwen2`...).
    pub architecture: String,
    /// `adapter.lora.alpha`; absent or 0 means a scale of 1, as llama.cpp applies it.
    pub alpha: Option<f32>,
}

impl AdapterHeader {
    /// The scale of a factor pair of rank `rank`: `alpha / rank`, or 1 without an alpha (llama.cpp's rule).
    pub fn scale(&self, rank: usize) -> f32 {
        match self.alpha {
            Some(alpha) if alpha != 0.0 => alpha / rank as f32,
            _ => 1.0,
        }
    }

    /// Reads and checks the header: the file must be a LoRA adapter (a model GGUF or another adapter type is
    /// refused with what it is).
    pub fn read(file: &GgufFile) -> Result<Self, String> {
        let text = |key: &str| file.get(key).and_then(|v| v.as_str().map(str::to_string));
        match text(TYPE_KEY).as_deref() {
            Some("adapter") => {}
            Some(other) => return Err(format!("{TYPE_KEY} is '{other}', not 'adapter': a model, not a LoRA adapter")),
            None => return Err(format!("no {TYPE_KEY}: not an adapter made by llama.cpp's convert_lora_to_gguf.py")),
        }
        match text(ADAPTER_TYPE_KEY).as_deref() {
            Some("lora") => {}
            other => return Err(format!("{ADAPTER_TYPE_KEY} is {other:?}; only 'lora' adapters are supported")),
        }
        let alpha = match file.get(ALPHA_KEY) {
            None => None,
            Some(v) => match v.as_f32().filter(|a| a.is_finite()) {
                Some(a) => Some(a),
                None => return Err(format!("{ALPHA_KEY} is not a finite number")),
            },
        };
        let architecture = text(ARCH_KEY).ok_or_else(|| format!("no {ARCH_KEY}"))?;
        Ok(AdapterHeader { architecture, alpha })
    }
}

/// A GGUF LoRA tensor's name split: the base tensor it changes (`blk.3.attn_q.weight`) and the factor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufLoraName {
    /// The base model's tensor, as llama.cpp names it.
    pub base: String,
    /// `.lora_a` (A, `[r, in]`) or `.lora_b` (B, `[out, r]`).
    pub factor: Factor,
}

impl GgufLoraName {
    /// Parses `<base tensor>.lora_a` / `.lora_b`; `None` for any other name (a norm mergekit put beside).
    pub fn parse(name: &str) -> Option<Self> {
        if let Some(base) = name.strip_suffix(".lora_a") {
            Some(GgufLoraName { base: base.to_string(), factor: Factor::A })
        } else {
            let base = name.strip_suffix(".lora_b")?;
            Some(GgufLoraName { base: base.to_string(), factor: Factor::B })
        }
    }

    /// The decoder layer of a `blk.N.` tensor, `None` outside the layers (`token_embd`, `output`).
    pub fn layer(&self) -> Option<usize> {
        self.base.strip_prefix("blk.")?.split_once('.')?.0.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_into_base_tensor_and_factor() {
        let n = GgufLoraName::parse("blk.12.attn_q.weight.lora_a").unwrap();
        assert_eq!((n.base.as_str(), n.factor, n.layer()), ("blk.12.attn_q.weight", Factor::A, Some(12)));
        let n = GgufLoraName::parse("token_embd.weight.lora_b").unwrap();
        assert_eq!((n.factor, n.layer()), (Factor::B, None));
        assert_eq!(GgufLoraName::parse("blk.0.attn_norm.weight"), None);
    }

    #[test]
    fn scale_is_alpha_over_rank_or_one_without_alpha() {
        let h = AdapterHeader { architecture: "llama".into(), alpha: Some(8.0) };
        assert_eq!(h.scale(4), 2.0);
        assert_eq!(AdapterHeader { alpha: Some(0.0), ..h.clone() }.scale(4), 1.0);
        assert_eq!(AdapterHeader { alpha: None, ..h }.scale(4), 1.0);
    }
}
