//! `config.json`: the hyperparameters of a decoder (Llama, Mistral, Qwen2, Qwen3, Gemma 2 and 3), as
//! transformers 4.x (`rope_theta`, `rope_scaling`) and 5.x (`rope_parameters`) write them.

use std::path::Path;

use super::json::{parse_json, read_json, Obj};
use super::HfError;
use crate::hyperparameters::{Hyper, Hyperparameters};

/// Supported decoder architectures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Architecture {
    /// `LlamaForCausalLM` (`model_type: "llama"`).
    Llama,
    /// `MistralForCausalLM` (`model_type: "mistral"`).
    Mistral,
    /// `Qwen2ForCausalLM` (`model_type: "qwen2"`).
    Qwen2,
    /// `Qwen3ForCausalLM` (`model_type: "qwen3"`).
    Qwen3,
    /// `Gemma2ForCausalLM` (`model_type: "gemma2"`).
    Gemma2,
    /// `Gemma3ForCausalLM` (`model_type: "gemma3_text"`), text only.
    Gemma3,
    /// `MixtralForCausalLM` (`model_type: "mixtral"`).
    Mixtral,
    /// `Qwen3MoeForCausalLM` (`model_type: "qwen3_moe"`).
    Qwen3Moe,
    /// `Phi3ForCausalLM` (`model_type: "phi3"`): Phi-3, Phi-3.5 and Phi-4-mini.
    Phi3,
}

impl Architecture {
    /// Every supported architecture.
    pub const ALL: [Architecture; 9] = [
        Architecture::Llama,
        Architecture::Mistral,
        Architecture::Qwen2,
        Architecture::Qwen3,
        Architecture::Gemma2,
        Architecture::Gemma3,
        Architecture::Mixtral,
        Architecture::Qwen3Moe,
        Architecture::Phi3,
    ];

    /// The transformers class named in config.json `architectures`, e.g. `LlamaForCausalLM`.
    pub fn hf_class(self) -> &'static str {
        match self {
            Architecture::Llama => "LlamaForCausalLM",
            Architecture::Mistral => "MistralForCausalLM",
            Architecture::Qwen2 => "Qwen2ForCausalLM",
            Architecture::Qwen3 => "Qwen3ForCausalLM",
            Architecture::Gemma2 => "Gemma2ForCausalLM",
            Architecture::Gemma3 => "Gemma3ForCausalLM",
            Architecture::Mixtral => "MixtralForCausalLM",
            Architecture::Qwen3Moe => "Qwen3MoeForCausalLM",
            Architecture::Phi3 => "Phi3ForCausalLM",
        }
    }

    /// The config.json `model_type`, e.g. `llama`.
    pub fn model_type(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Mistral => "mistral",
            Architecture::Qwen2 => "qwen2",
            Architecture::Qwen3 => "qwen3",
            Architecture::Gemma2 => "gemma2",
            Architecture::Gemma3 => "gemma3_text",
            Architecture::Mixtral => "mixtral",
            Architecture::Qwen3Moe => "qwen3_moe",
            Architecture::Phi3 => "phi3",
        }
    }
}

/// The supported class names, comma-separated, for error messages.
pub(crate) fn supported_classes() -> String {
    Architecture::ALL.map(Architecture::hf_class).join(", ")
}

/// RoPE frequency scaling from `rope_scaling` (4.x) or `rope_parameters` (5.x).
///
/// `"dynamic"` (dynamic NTK) reads as no scaling: it only changes RoPE beyond the trained context,
/// llama.cpp has no equivalent, and its converter writes nothing for it either.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// Position interpolation (`"linear"`): positions divided by `factor`.
    Linear {
        /// The interpolation factor.
        factor: f32,
    },
    /// Llama 3.1 frequency-band scaling (`"llama3"`); llama.cpp takes it as a `rope_freqs` tensor.
    Llama3 {
        /// The scaling factor for low frequencies.
        factor: f32,
        /// Wavelength band boundary factor (low).
        low_freq_factor: f32,
        /// Wavelength band boundary factor (high).
        high_freq_factor: f32,
        /// The context length the model was pre-trained with.
        original_max_position_embeddings: usize,
    },
    /// YaRN (`"yarn"`).
    Yarn {
        /// The context extension factor.
        factor: f32,
        /// The pre-extension context length (`max_position_embeddings` when not given).
        original_max_position_embeddings: usize,
        /// `beta_fast`, when given (transformers default 32).
        beta_fast: Option<f32>,
        /// `beta_slow`, when given (transformers default 1).
        beta_slow: Option<f32>,
        /// `attention_factor`, when given.
        attention_factor: Option<f32>,
    },
    /// LongRoPE (`"longrope"`, Phi-3.5 and Phi-4-mini): per-frequency divisors, `short_factor` for sequences up to
    /// `original_max_position_embeddings` and `long_factor` beyond, and cos/sin scaled by `attention_factor`.
    LongRope {
        /// Divisors of the rotary frequencies for short sequences.
        short_factor: Vec<f32>,
        /// Divisors for sequences longer than `original_max_position_embeddings`.
        long_factor: Vec<f32>,
        /// The pre-extension context length.
        original_max_position_embeddings: usize,
        /// The extension factor (`max_position_embeddings / original_max_position_embeddings` when not given).
        factor: f32,
        /// The cos/sin scale (`sqrt(1 + ln(factor) / ln(original))` when not given, 1 for `factor` <= 1).
        attention_factor: f32,
    },
}

impl RopeScaling {
    /// The scaling factor, whatever the kind.
    pub fn factor(&self) -> f32 {
        match *self {
            RopeScaling::Linear { factor }
            | RopeScaling::Llama3 { factor, .. }
            | RopeScaling::Yarn { factor, .. }
            | RopeScaling::LongRope { factor, .. } => factor,
        }
    }
}

/// Which layers attend within the sliding window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayerWindows {
    /// Every layer (when there is a window at all).
    All,
    /// Per layer: whether it is a sliding-window layer (`layer_types`, or Gemma 2's even layers).
    PerLayer(Vec<bool>),
}

/// Gemma's extras: attention scaling, logit soft-capping and (Gemma 3) the sliding layers' RoPE base.
#[derive(Clone, Debug, PartialEq)]
pub struct GemmaExtras {
    /// Attention scores are scaled by `query_pre_attn_scalar^-0.5`.
    pub query_pre_attn_scalar: f32,
    /// `tanh(s / cap) * cap` on attention scores (`attn_logit_softcapping`), when set.
    pub attn_logit_softcapping: Option<f32>,
    /// `tanh(l / cap) * cap` on the output logits (`final_logit_softcapping`), when set.
    pub final_logit_softcapping: Option<f32>,
    /// Gemma 3: the RoPE base of sliding-window layers (`rope_local_base_freq`, or
    /// `rope_parameters.sliding_attention.rope_theta`); the other layers use `rope_theta` and its scaling.
    pub rope_local_theta: Option<f32>,
}

/// A mixture-of-experts MLP: each token goes through its `experts_per_token` best-scoring experts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoeConfig {
    /// Experts per MoE layer (`num_local_experts`, `num_experts`).
    pub experts: usize,
    /// Experts each token is routed to (`num_experts_per_tok`).
    pub experts_per_token: usize,
    /// MLP inner width of one expert (`moe_intermediate_size`; Mixtral's `intermediate_size`).
    pub expert_intermediate: usize,
    /// Whether the chosen experts' softmax weights are renormalized to sum to one (`norm_topk_prob`; always
    /// for Mixtral, whose softmax over the chosen logits is the same thing).
    pub norm_topk_prob: bool,
    /// Per layer: whether its MLP is the mixture (Qwen3-MoE's `mlp_only_layers`, `decoder_sparse_step`).
    pub sparse_layers: Vec<bool>,
}

/// Decoder hyperparameters read from config.json.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// The decoder architecture.
    pub architecture: Architecture,
    /// Model (embedding) width.
    pub hidden_size: usize,
    /// MLP inner width.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_hidden_layers: usize,
    /// Number of query heads.
    pub num_attention_heads: usize,
    /// Number of key/value heads (defaults to `num_attention_heads`).
    pub num_key_value_heads: usize,
    /// Per-head dimension (defaults to `hidden_size / num_attention_heads`).
    pub head_dim: usize,
    /// Rows of the embedding matrix.
    pub vocab_size: usize,
    /// Trained context length.
    pub max_position_embeddings: usize,
    /// RMSNorm epsilon (default 1e-6).
    pub rms_norm_eps: f32,
    /// RoPE base frequency (default 10000).
    pub rope_theta: f32,
    /// RoPE scaling; `None` for plain RoPE (`rope_type: "default"`).
    pub rope_scaling: Option<RopeScaling>,
    /// Whether `lm_head` shares the embedding matrix.
    pub tie_word_embeddings: bool,
    /// Whether q/k/v projections have biases (always true for Qwen2).
    pub attention_bias: bool,
    /// Sliding attention window, when enabled.
    pub sliding_window: Option<usize>,
    /// Which layers use the sliding window.
    pub layer_windows: LayerWindows,
    /// Gemma's scaling, soft-caps and local RoPE (`None` for other architectures).
    pub gemma: Option<GemmaExtras>,
    /// The mixture of experts (`None` for dense architectures).
    pub moe: Option<MoeConfig>,
    /// The leading dimensions of each head that RoPE rotates (`head_dim * partial_rotary_factor`).
    pub rotary_dim: usize,
    /// Beginning-of-sequence token id.
    pub bos_token_id: Option<u32>,
    /// End-of-sequence token ids (config.json allows one or a list).
    pub eos_token_ids: Vec<u32>,
    /// Padding token id.
    pub pad_token_id: Option<u32>,
    /// Checkpoint dtype (`torch_dtype`, or `dtype` in transformers 5), e.g. `bfloat16`.
    pub torch_dtype: Option<String>,
}

impl ModelConfig {
    /// Reads a config.json file.
    pub fn from_file(path: &Path) -> Result<Self, HfError> {
        Self::parse(&read_json(path)?, path)
    }

    /// Parses config.json text; errors name the file `config.json`.
    pub fn from_json_str(json: &str) -> Result<Self, HfError> {
        let path = Path::new("config.json");
        Self::parse(&parse_json(json, path)?, path)
    }

    fn parse(value: &serde_json::Value, path: &Path) -> Result<Self, HfError> {
        let o = Obj::root(path, value)?;
        let architecture = architecture(&o)?;
        let hidden_size = o.req_usize("hidden_size")?;
        let num_attention_heads = positive(&o, "num_attention_heads")?;
        let num_key_value_heads = o.usize("num_key_value_heads")?.unwrap_or(num_attention_heads);
        let head_dim = match o.usize("head_dim")? {
            Some(d) => d,
            None if hidden_size % num_attention_heads != 0 => {
                return Err(o.error(
                    "head_dim",
                    format!(
                        "missing, and hidden_size {hidden_size} is not a multiple of \
                         num_attention_heads {num_attention_heads}"
                    ),
                ))
            }
            None => hidden_size / num_attention_heads,
        };
        let max_position_embeddings = o.req_usize("max_position_embeddings")?;
        let rope_params = o.object("rope_parameters")?;
        // Gemma 3 in transformers 5: one set of parameters per layer type.
        let (rope, rope_local) = match &rope_params {
            Some(r) if r.has("full_attention") => (r.object("full_attention")?, r.object("sliding_attention")?),
            _ => (rope_params, None),
        };
        let rope_theta = match rope.map(|r| r.f32("rope_theta")).transpose()?.flatten() {
            Some(theta) => theta,
            None => o.f32("rope_theta")?.unwrap_or(10000.0),
        };
        // Phi-3.5 states LongRoPE's original context at the top level.
        let original = o.usize("original_max_position_embeddings")?;
        let rope_scaling = match rope {
            Some(r) => rope_scaling(&r, max_position_embeddings, original)?,
            None => match o.object("rope_scaling")? {
                Some(r) => rope_scaling(&r, max_position_embeddings, original)?,
                None => None,
            },
        };
        let partial = match rope.map(|r| r.f32("partial_rotary_factor")).transpose()?.flatten() {
            Some(f) => Some(f),
            None => o.f32("partial_rotary_factor")?,
        };
        let rotary_dim = match partial {
            Some(f) if !(f > 0.0 && f <= 1.0) => {
                return Err(o.error("partial_rotary_factor", format!("{f} must be in (0, 1]")))
            }
            Some(f) => (head_dim as f32 * f) as usize,
            None => head_dim,
        };
        // Without a partial factor, head_dim's own checks (below) apply.
        if partial.is_some() && (rotary_dim % 2 != 0 || rotary_dim == 0) {
            let problem = format!("rotates {rotary_dim} dimensions, not a positive even number");
            return Err(o.error("partial_rotary_factor", problem));
        }
        if let Some(RopeScaling::LongRope { short_factor, long_factor, .. }) = &rope_scaling {
            for (field, f) in [("short_factor", short_factor), ("long_factor", long_factor)] {
                if f.len() != rotary_dim / 2 || f.iter().any(|&x| x <= 0.0) {
                    let problem = format!(
                        "{} factors for {} rotary frequencies (each must be positive)",
                        f.len(),
                        rotary_dim / 2
                    );
                    return Err(o.error(field, problem));
                }
            }
        }
        let sliding_window = match o.bool("use_sliding_window")? {
            Some(false) => None,
            _ => o.usize("sliding_window")?,
        };
        let attention_bias = match architecture {
            Architecture::Qwen2 => true,
            Architecture::Llama
            | Architecture::Mistral
            | Architecture::Qwen3
            | Architecture::Mixtral
            | Architecture::Qwen3Moe => o.bool("attention_bias")?.unwrap_or(false),
            Architecture::Phi3 => false,
            Architecture::Gemma2 | Architecture::Gemma3 => match o.bool("attention_bias")? {
                Some(true) => return Err(o.error("attention_bias", "Gemma with attention biases is not supported")),
                _ => false,
            },
        };
        let num_hidden_layers = o.req_usize("num_hidden_layers")?;
        let layer_windows = layer_windows(&o, architecture, num_hidden_layers)?;
        let gemma = match architecture {
            Architecture::Gemma2 => Some(gemma_extras(&o, head_dim, None)?),
            Architecture::Gemma3 => {
                let local = match rope_local {
                    Some(r) => {
                        if self::rope_scaling(&r, max_position_embeddings, None)?.is_some() {
                            return Err(r.error("rope_type", "scaled RoPE on sliding layers is not supported"));
                        }
                        r.f32("rope_theta")?
                    }
                    None => o.f32("rope_local_base_freq")?,
                };
                let local = local.unwrap_or(10000.0);
                if !(local.is_finite() && local > 1.0) {
                    return Err(
                        o.error("rope_local_base_freq", format!("{local} must be a finite number greater than 1"))
                    );
                }
                Some(gemma_extras(&o, head_dim, Some(local))?)
            }
            _ => None,
        };
        let torch_dtype = match o.str("torch_dtype")? {
            Some(dtype) => Some(dtype),
            None => o.str("dtype")?,
        };
        let cfg = ModelConfig {
            architecture,
            hidden_size,
            intermediate_size: o.req_usize("intermediate_size")?,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            vocab_size: o.req_usize("vocab_size")?,
            max_position_embeddings,
            rms_norm_eps: o.f32("rms_norm_eps")?.unwrap_or(1e-6),
            rope_theta,
            rope_scaling,
            tie_word_embeddings: o.bool("tie_word_embeddings")?.unwrap_or(false),
            attention_bias,
            sliding_window,
            layer_windows,
            gemma,
            moe: moe_config(&o, architecture, num_hidden_layers)?,
            rotary_dim,
            bos_token_id: o.u32("bos_token_id")?,
            eos_token_ids: o.u32_list("eos_token_id")?,
            pad_token_id: o.u32("pad_token_id")?,
            torch_dtype: torch_dtype.map(str::to_string),
        };
        cfg.hyperparameters().check().map_err(|e| {
            let rope_factor = if rope.is_some() { "rope_parameters.factor" } else { "rope_scaling.factor" };
            let field = match e.hyper {
                Hyper::Hidden => "hidden_size",
                Hyper::Intermediate => "intermediate_size",
                Hyper::Layers => "num_hidden_layers",
                Hyper::Heads => "num_attention_heads",
                Hyper::KvHeads => "num_key_value_heads",
                Hyper::HeadDim => "head_dim",
                Hyper::Vocab => "vocab_size",
                Hyper::Context => "max_position_embeddings",
                Hyper::RmsEps => "rms_norm_eps",
                Hyper::RopeTheta if rope.is_some() => "rope_parameters.rope_theta",
                Hyper::RopeTheta => "rope_theta",
                Hyper::RopeFactor => rope_factor,
                Hyper::SlidingWindow => "sliding_window",
            };
            o.error(field, e.to_string())
        })?;
        Ok(cfg)
    }

    /// The hyperparameters the bounds of [`Hyperparameters::check`] apply to.
    pub fn hyperparameters(&self) -> Hyperparameters {
        Hyperparameters {
            hidden: self.hidden_size,
            intermediate: self.intermediate_size,
            layers: self.num_hidden_layers,
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            vocab: self.vocab_size,
            context: self.max_position_embeddings,
            rms_eps: self.rms_norm_eps,
            rope_theta: self.rope_theta,
            rope_factor: self.rope_scaling.as_ref().map(RopeScaling::factor),
            sliding_window: self.sliding_window,
        }
    }
}

/// A required integer that must be > 0.
fn positive(o: &Obj, field: &str) -> Result<usize, HfError> {
    match o.req_usize(field)? {
        0 => Err(o.error(field, "must be positive")),
        n => Ok(n),
    }
}

/// The architecture from `architectures[0]`, else from `model_type`.
fn architecture(o: &Obj) -> Result<Architecture, HfError> {
    if let Some(list) = o.get("architectures") {
        let name = list
            .as_array()
            .and_then(|items| items.first())
            .and_then(|first| first.as_str())
            .ok_or_else(|| o.error("architectures", "expected a non-empty list of class names"))?;
        return Architecture::ALL
            .into_iter()
            .find(|a| a.hf_class() == name)
            .ok_or_else(|| HfError::UnsupportedArchitecture { path: o.path().to_path_buf(), name: name.to_string() });
    }
    let model_type =
        o.str("model_type")?.ok_or_else(|| o.error("architectures", "missing (and no model_type either)"))?;
    Architecture::ALL.into_iter().find(|a| a.model_type() == model_type).ok_or_else(|| {
        let supported = Architecture::ALL.map(Architecture::model_type).join(", ");
        o.error("model_type", format!("unsupported model type '{model_type}'; supported: {supported}"))
    })
}

/// `layer_types` (`sliding_attention` / `full_attention` per layer) when given; else Gemma 2's alternation
/// (even layers slide) or a window on every layer.
fn layer_windows(o: &Obj, architecture: Architecture, layers: usize) -> Result<LayerWindows, HfError> {
    let Some(list) = o.get("layer_types").filter(|v| !v.is_null()) else {
        return Ok(match architecture {
            Architecture::Gemma2 => LayerWindows::PerLayer((0..layers).map(|i| i % 2 == 0).collect()),
            Architecture::Gemma3 => {
                let pattern = match o.usize("sliding_window_pattern")? {
                    Some(0) => return Err(o.error("sliding_window_pattern", "0 must be positive")),
                    p => p.unwrap_or(6),
                };
                LayerWindows::PerLayer((0..layers).map(|i| (i + 1) % pattern != 0).collect())
            }
            _ => LayerWindows::All,
        });
    };
    let items = list.as_array().ok_or_else(|| o.error("layer_types", "expected a list of layer types"))?;
    if items.len() != layers {
        return Err(o.error("layer_types", format!("{} entries for {layers} layers", items.len())));
    }
    let sliding = items
        .iter()
        .map(|t| match t.as_str() {
            Some("sliding_attention") => Ok(true),
            Some("full_attention") => Ok(false),
            _ => Err(o.error(
                "layer_types",
                format!("unsupported layer type {t}; supported: sliding_attention, full_attention"),
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(LayerWindows::PerLayer(sliding))
}

/// The mixture of experts of a Mixtral or Qwen3-MoE config.
fn moe_config(o: &Obj, architecture: Architecture, layers: usize) -> Result<Option<MoeConfig>, HfError> {
    let (experts_field, per_token, intermediate, norm, sparse_layers) = match architecture {
        Architecture::Mixtral => (
            "num_local_experts",
            o.usize("num_experts_per_tok")?.unwrap_or(2),
            "intermediate_size",
            true,
            vec![true; layers],
        ),
        Architecture::Qwen3Moe => {
            let step = match o.usize("decoder_sparse_step")?.unwrap_or(1) {
                0 => return Err(o.error("decoder_sparse_step", "0 must be positive")),
                s => s,
            };
            let dense = o.u32_list("mlp_only_layers")?;
            let sparse = (0..layers).map(|i| !dense.contains(&(i as u32)) && (i + 1) % step == 0).collect();
            let per_token = o.usize("num_experts_per_tok")?.unwrap_or(8);
            // transformers 5 writes `num_local_experts`; Qwen's own configs `num_experts`.
            let experts = if o.has("num_local_experts") { "num_local_experts" } else { "num_experts" };
            (experts, per_token, "moe_intermediate_size", o.bool("norm_topk_prob")?.unwrap_or(false), sparse)
        }
        _ => return Ok(None),
    };
    let experts = o.req_usize(experts_field)?;
    if experts == 0 || experts > 1 << 12 {
        return Err(o.error(experts_field, format!("{experts} must be between 1 and 4096")));
    }
    if per_token == 0 || per_token > experts {
        return Err(o.error("num_experts_per_tok", format!("{per_token} must be between 1 and the {experts} experts")));
    }
    let expert_intermediate = o.req_usize(intermediate)?;
    if expert_intermediate == 0 || expert_intermediate > crate::hyperparameters::MAX_WIDTH {
        return Err(o.error(intermediate, format!("{expert_intermediate} must be positive and at most 2^20")));
    }
    Ok(Some(MoeConfig {
        experts,
        experts_per_token: per_token,
        expert_intermediate,
        norm_topk_prob: norm,
        sparse_layers,
    }))
}

/// Gemma's `query_pre_attn_scalar` (default `head_dim`) and soft-caps, checked to be finite and positive.
fn gemma_extras(o: &Obj, head_dim: usize, rope_local_theta: Option<f32>) -> Result<GemmaExtras, HfError> {
    let positive = |field: &str| -> Result<Option<f32>, HfError> {
        match o.f32(field)? {
            Some(x) if !(x.is_finite() && x > 0.0) => {
                Err(o.error(field, format!("{x} must be a finite positive number")))
            }
            x => Ok(x),
        }
    };
    match o.str("hidden_activation")?.or(o.str("hidden_act")?) {
        None | Some("gelu_pytorch_tanh") => {}
        Some(other) => {
            return Err(
                o.error("hidden_activation", format!("unsupported activation '{other}'; supported: gelu_pytorch_tanh"))
            )
        }
    }
    Ok(GemmaExtras {
        query_pre_attn_scalar: positive("query_pre_attn_scalar")?.unwrap_or(head_dim as f32),
        attn_logit_softcapping: positive("attn_logit_softcapping")?,
        final_logit_softcapping: positive("final_logit_softcapping")?,
        rope_local_theta,
    })
}

/// Parses a `rope_scaling` / `rope_parameters` object; `None` for no type, `"default"` and `"dynamic"`.
fn rope_scaling(
    r: &Obj,
    max_position_embeddings: usize,
    top_original: Option<usize>,
) -> Result<Option<RopeScaling>, HfError> {
    let type_field = if r.has("rope_type") { "rope_type" } else { "type" };
    let Some(rope_type) = r.str(type_field)? else {
        return Ok(None);
    };
    let required_f32 = |field: &str| r.f32(field)?.ok_or_else(|| r.error(field, "missing"));
    let factor = |r: &Obj| r.f32("factor")?.ok_or_else(|| r.error("factor", "missing"));
    Ok(Some(match rope_type {
        "default" | "dynamic" => return Ok(None),
        "linear" => RopeScaling::Linear { factor: factor(r)? },
        "llama3" => {
            let (low, high) = (required_f32("low_freq_factor")?, required_f32("high_freq_factor")?);
            if !(low.is_finite() && low > 0.0) {
                return Err(r.error("low_freq_factor", format!("{low} must be a finite positive number")));
            }
            if !(high.is_finite() && high > low) {
                return Err(r.error("high_freq_factor", format!("{high} must be finite and above low_freq_factor")));
            }
            let original = r.req_usize("original_max_position_embeddings")?;
            if original == 0 {
                return Err(r.error("original_max_position_embeddings", "0 must be positive"));
            }
            RopeScaling::Llama3 {
                factor: factor(r)?,
                low_freq_factor: low,
                high_freq_factor: high,
                original_max_position_embeddings: original,
            }
        }
        "yarn" => RopeScaling::Yarn {
            factor: factor(r)?,
            original_max_position_embeddings: r
                .usize("original_max_position_embeddings")?
                .unwrap_or(max_position_embeddings),
            beta_fast: r.f32("beta_fast")?,
            beta_slow: r.f32("beta_slow")?,
            attention_factor: r.f32("attention_factor")?,
        },
        "longrope" => {
            let original = match r.usize("original_max_position_embeddings")?.or(top_original) {
                Some(0) | None => return Err(r.error("original_max_position_embeddings", "missing or 0")),
                Some(n) => n,
            };
            let factor = r.f32("factor")?.unwrap_or(max_position_embeddings as f32 / original as f32);
            let attention_factor = match r.f32("attention_factor")? {
                Some(a) => a,
                None if factor <= 1.0 => 1.0,
                None => (1.0 + factor.ln() / (original as f32).ln()).sqrt(),
            };
            RopeScaling::LongRope {
                short_factor: r.req_f32_list("short_factor")?,
                long_factor: r.req_f32_list("long_factor")?,
                original_max_position_embeddings: original,
                factor,
                attention_factor,
            }
        }
        other => {
            return Err(r.error(
                type_field,
                format!("unsupported RoPE type '{other}'; supported: default, linear, dynamic, llama3, yarn, longrope"),
            ))
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STORIES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/stories260k/hf/config.json");

    /// A minimal Llama config with `extra` fields spliced in (later keys win in serde_json).
    fn llama(extra: &str) -> Result<ModelConfig, HfError> {
        let sep = if extra.is_empty() { "" } else { "," };
        ModelConfig::from_json_str(&format!(
            r#"{{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 172,
                "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 512,
                "max_position_embeddings": 512{sep}{extra}}}"#
        ))
    }

    fn err(extra: &str) -> String {
        llama(extra).unwrap_err().to_string()
    }

    #[test]
    fn stories260k_transformers5() {
        let c = ModelConfig::from_file(Path::new(STORIES)).unwrap();
        assert_eq!(
            c,
            ModelConfig {
                architecture: Architecture::Llama,
                hidden_size: 64,
                intermediate_size: 172,
                num_hidden_layers: 5,
                num_attention_heads: 8,
                num_key_value_heads: 4,
                head_dim: 8,
                vocab_size: 512,
                max_position_embeddings: 512,
                rms_norm_eps: 1e-5,
                rope_theta: 10000.0,
                rope_scaling: None,
                tie_word_embeddings: true,
                attention_bias: false,
                sliding_window: None,
                layer_windows: LayerWindows::All,
                gemma: None,
                moe: None,
                rotary_dim: 8,
                bos_token_id: Some(1),
                eos_token_ids: vec![2],
                pad_token_id: None,
                torch_dtype: Some("float32".into()),
            }
        );
    }

    #[test]
    fn defaults() {
        let c = llama("").unwrap();
        assert_eq!((c.num_key_value_heads, c.head_dim), (8, 8));
        assert_eq!((c.rms_norm_eps, c.rope_theta), (1e-6, 10000.0));
        assert_eq!((c.rope_scaling, c.tie_word_embeddings, c.attention_bias), (None, false, false));
        assert_eq!((c.bos_token_id, c.eos_token_ids.len(), c.torch_dtype), (None, 0, None));
        // head_dim: null (Mistral configs) means the default.
        assert_eq!(llama(r#""head_dim": null"#).unwrap().head_dim, 8);
        assert_eq!(llama(r#""head_dim": 16"#).unwrap().head_dim, 16);
        assert_eq!(llama(r#""dtype": "bfloat16""#).unwrap().torch_dtype.as_deref(), Some("bfloat16"));
    }

    #[test]
    fn architectures() {
        let arch = |json: &str| {
            let c = ModelConfig::from_json_str(&format!(
                r#"{{{json}, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
                    "num_attention_heads": 1, "vocab_size": 8, "max_position_embeddings": 8}}"#
            ));
            c.map(|c| c.architecture)
        };
        assert_eq!(arch(r#""architectures": ["MistralForCausalLM"]"#).unwrap(), Architecture::Mistral);
        assert_eq!(arch(r#""model_type": "qwen2""#).unwrap(), Architecture::Qwen2);
        assert_eq!(
            arch(r#""architectures": ["GPT2LMHeadModel"]"#).unwrap_err().to_string(),
            "config.json: unsupported architecture 'GPT2LMHeadModel'; supported: \
             LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma2ForCausalLM, \
             Gemma3ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM, Phi3ForCausalLM"
        );
        assert_eq!(
            arch(r#""model_type": "gpt2""#).unwrap_err().to_string(),
            "config.json: field 'model_type': unsupported model type 'gpt2'; supported: llama, mistral, qwen2, qwen3, \
             gemma2, gemma3_text, mixtral, qwen3_moe, phi3"
        );
        assert!(arch(r#""architectures": []"#).is_err());
        assert!(arch(r#""other": 1"#).unwrap_err().to_string().contains("'architectures': missing"));
    }

    #[test]
    fn qwen2_bias_and_sliding_window() {
        let qwen = |extra: &str| {
            ModelConfig::from_json_str(&format!(
                r#"{{"architectures": ["Qwen2ForCausalLM"], "hidden_size": 896, "intermediate_size": 4864,
                    "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
                    "vocab_size": 151936, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
                    "sliding_window": 32768, "tie_word_embeddings": true, "bos_token_id": 151643,
                    "eos_token_id": 151645, {extra}}}"#
            ))
            .unwrap()
        };
        let c = qwen(r#""use_sliding_window": false"#);
        assert_eq!((c.architecture, c.attention_bias, c.sliding_window), (Architecture::Qwen2, true, None));
        assert_eq!((c.head_dim, c.num_key_value_heads, c.rope_theta), (64, 2, 1e6));
        assert_eq!(qwen(r#""use_sliding_window": true"#).sliding_window, Some(32768));
        // Mistral v0.1 has a window and no use_sliding_window key.
        assert_eq!(llama(r#""sliding_window": 4096"#).unwrap().sliding_window, Some(4096));
    }

    #[test]
    fn gemma2_and_qwen3() {
        let tiny = |name: &str| {
            let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../models");
            ModelConfig::from_file(&Path::new(dir).join(name).join("hf/config.json")).unwrap()
        };
        let g = tiny("tiny-gemma2");
        assert_eq!((g.architecture, g.head_dim, g.sliding_window), (Architecture::Gemma2, 16, Some(5)));
        assert_eq!(g.layer_windows, LayerWindows::PerLayer(vec![true, false, true]));
        let extras = GemmaExtras {
            query_pre_attn_scalar: 16.0,
            attn_logit_softcapping: Some(5.0),
            final_logit_softcapping: Some(8.0),
            rope_local_theta: None,
        };
        assert_eq!(g.gemma, Some(extras));
        let q = tiny("tiny-qwen3");
        assert_eq!((q.architecture, q.head_dim, q.attention_bias), (Architecture::Qwen3, 16, false));
        assert_eq!((q.layer_windows, q.gemma), (LayerWindows::PerLayer(vec![false, false]), None));
        let g3 = tiny("tiny-gemma3");
        assert_eq!(g3.layer_windows, LayerWindows::PerLayer(vec![true, true, true, true, true, false]));
        let g3e = g3.gemma.unwrap();
        assert_eq!((g3.rope_theta, g3e.rope_local_theta, g3e.final_logit_softcapping), (1e6, Some(10000.0), None));
        let g3_4x = ModelConfig::from_json_str(
            r#"{"architectures": ["Gemma3ForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
                "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 512, "head_dim": 16,
                "max_position_embeddings": 512, "rope_theta": 1000000.0, "rope_local_base_freq": 20000.0,
                "sliding_window_pattern": 2, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}"#,
        )
        .unwrap();
        assert_eq!(g3_4x.layer_windows, LayerWindows::PerLayer(vec![true, false, true, false]));
        assert_eq!(g3_4x.gemma.unwrap().rope_local_theta, Some(20000.0));
        assert_eq!(g3_4x.rope_scaling, Some(RopeScaling::Linear { factor: 8.0 }));
        let gemma = |extra: &str| {
            ModelConfig::from_json_str(&format!(
                r#"{{"architectures": ["Gemma2ForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
                    "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 512,
                    "max_position_embeddings": 512, "head_dim": 16{extra}}}"#
            ))
        };
        let g = gemma("").unwrap();
        assert_eq!(g.layer_windows, LayerWindows::PerLayer(vec![true, false, true, false]));
        assert_eq!(g.gemma.unwrap().query_pre_attn_scalar, 16.0);
        let err = |extra: &str| gemma(extra).unwrap_err().to_string();
        assert!(err(r#", "layer_types": ["full_attention"]"#).contains("'layer_types': 1 entries for 4 layers"));
        assert!(err(r#", "hidden_activation": "relu""#).contains("unsupported activation 'relu'"));
        assert!(err(r#", "attn_logit_softcapping": -1"#).contains("'attn_logit_softcapping': -1 must be"));
        assert!(err(r#", "attention_bias": true"#).contains("attention biases is not supported"));
    }

    #[test]
    fn mixture_of_experts() {
        let moe = |arch: &str, extra: &str| {
            ModelConfig::from_json_str(&format!(
                r#"{{"architectures": ["{arch}"], "hidden_size": 64, "intermediate_size": 96,
                    "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 512,
                    "max_position_embeddings": 512{extra}}}"#
            ))
        };
        let q = moe(
            "Qwen3MoeForCausalLM",
            r#", "num_experts": 8, "num_experts_per_tok": 2,
            "moe_intermediate_size": 32, "norm_topk_prob": true, "mlp_only_layers": [1]"#,
        )
        .unwrap()
        .moe
        .unwrap();
        let want = MoeConfig {
            experts: 8,
            experts_per_token: 2,
            expert_intermediate: 32,
            norm_topk_prob: true,
            sparse_layers: vec![true, false, true, true],
        };
        assert_eq!(q, want);
        let m = moe("MixtralForCausalLM", r#", "num_local_experts": 8"#).unwrap().moe.unwrap();
        assert_eq!((m.experts, m.experts_per_token, m.expert_intermediate, m.norm_topk_prob), (8, 2, 96, true));
        assert_eq!(moe("LlamaForCausalLM", "").unwrap().moe, None);
        let err = |extra: &str| moe("Qwen3MoeForCausalLM", extra).unwrap_err().to_string();
        assert!(err(r#", "moe_intermediate_size": 32"#).contains("'num_experts': missing"));
        let too_many = r#", "num_experts": 4, "num_experts_per_tok": 5, "moe_intermediate_size": 32"#;
        assert!(err(too_many).contains("'num_experts_per_tok': 5 must be between 1 and the 4 experts"));
        assert!(err(r#", "num_experts": 4, "decoder_sparse_step": 0"#).contains("'decoder_sparse_step': 0"));
    }

    #[test]
    fn phi3_longrope_and_partial_rotary() {
        let p = ModelConfig::from_file(Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../models/tiny-phi3/hf/config.json"
        )))
        .unwrap();
        assert_eq!((p.architecture, p.head_dim, p.rotary_dim), (Architecture::Phi3, 16, 8));
        let Some(RopeScaling::LongRope {
            short_factor,
            original_max_position_embeddings,
            factor,
            attention_factor,
            ..
        }) = p.rope_scaling
        else {
            panic!("{:?}", p.rope_scaling)
        };
        assert_eq!((short_factor, original_max_position_embeddings, factor), (vec![1.0, 1.5, 2.0, 3.0], 256, 2.0));
        assert!((attention_factor - (1.0 + 2f32.ln() / 256f32.ln()).sqrt()).abs() < 1e-7);
        // Phi-3.5's transformers 4 layout: the original context at the top level.
        let phi35 = |extra: &str| {
            ModelConfig::from_json_str(&format!(
                r#"{{"architectures": ["Phi3ForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
                    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 512,
                    "max_position_embeddings": 1024, "original_max_position_embeddings": 256,
                    "rope_scaling": {{"type": "longrope", "short_factor": [1, 1, 1, 1, 1, 1, 1, 1],
                    "long_factor": [2, 2, 2, 2, 2, 2, 2, 2]}}{extra}}}"#
            ))
        };
        let c = phi35("").unwrap();
        assert_eq!((c.rotary_dim, c.rope_scaling.unwrap().factor()), (16, 4.0));
        let e = phi35(r#", "partial_rotary_factor": 0.5"#).unwrap_err().to_string();
        assert!(e.contains("'short_factor': 8 factors for 4 rotary frequencies"), "{e}");
        assert!(phi35(r#", "partial_rotary_factor": 0"#).unwrap_err().to_string().contains("must be in (0, 1]"));
    }

    #[test]
    fn eos_list() {
        let c = llama(r#""bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]"#).unwrap();
        assert_eq!(c.eos_token_ids, vec![128001, 128008, 128009]);
        assert_eq!(c.bos_token_id, Some(128000));
    }

    #[test]
    fn rope_transformers4() {
        let llama31 = r#""rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}"#;
        let c = llama(llama31).unwrap();
        assert_eq!(c.rope_theta, 500000.0);
        assert_eq!(
            c.rope_scaling,
            Some(RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 8192
            })
        );
        let c = llama(r#""rope_scaling": {"type": "linear", "factor": 2.0}"#).unwrap();
        assert_eq!(c.rope_scaling, Some(RopeScaling::Linear { factor: 2.0 }));
        let c = llama(r#""rope_scaling": {"type": "dynamic", "factor": 2.0}"#).unwrap();
        assert_eq!(c.rope_scaling, None);
        let qwen_yarn = r#""rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}"#;
        assert_eq!(
            llama(qwen_yarn).unwrap().rope_scaling,
            Some(RopeScaling::Yarn {
                factor: 4.0,
                original_max_position_embeddings: 32768,
                beta_fast: None,
                beta_slow: None,
                attention_factor: None
            })
        );
        assert_eq!(llama(r#""rope_scaling": null"#).unwrap().rope_scaling, None);
        assert_eq!(llama(r#""rope_scaling": {"rope_type": "default"}"#).unwrap().rope_scaling, None);
    }

    #[test]
    fn rope_transformers5() {
        let c = llama(
            r#""rope_parameters": {"rope_theta": 1000000.0, "rope_type": "yarn", "factor": 2.0,
                "beta_fast": 32.0, "beta_slow": 1.0}"#,
        )
        .unwrap();
        assert_eq!(c.rope_theta, 1e6);
        assert_eq!(
            c.rope_scaling,
            Some(RopeScaling::Yarn {
                factor: 2.0,
                original_max_position_embeddings: 512,
                beta_fast: Some(32.0),
                beta_slow: Some(1.0),
                attention_factor: None
            })
        );
        // rope_parameters wins over a stale top-level rope_theta.
        let c = llama(r#""rope_theta": 5.0, "rope_parameters": {"rope_theta": 7.0, "rope_type": "default"}"#);
        assert_eq!(c.unwrap().rope_theta, 7.0);
    }

    #[test]
    fn rope_errors() {
        assert_eq!(
            err(r#""rope_scaling": {"rope_type": "mrope", "factor": 2.0}"#),
            "config.json: field 'rope_scaling.rope_type': unsupported RoPE type 'mrope'; \
             supported: default, linear, dynamic, llama3, yarn, longrope"
        );
        assert_eq!(err(r#""rope_scaling": {"type": "linear"}"#), "config.json: field 'rope_scaling.factor': missing");
        assert_eq!(
            err(r#""rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0}"#),
            "config.json: field 'rope_parameters.high_freq_factor': missing"
        );
        assert_eq!(
            err(r#""rope_scaling": {"type": "linear", "factor": 0}"#),
            "config.json: field 'rope_scaling.factor': 0 must be a finite positive number"
        );
        let llama3 = |low: &str, high: &str| {
            err(&format!(
                r#""rope_scaling": {{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": {low},
                    "high_freq_factor": {high}, "original_max_position_embeddings": 8192}}"#
            ))
        };
        assert!(llama3("1.0", "1.0").contains("'rope_scaling.high_freq_factor': 1 must be finite and above"));
        assert!(llama3("0", "4.0").contains("'rope_scaling.low_freq_factor': 0 must be a finite positive"));
        assert!(err(r#""rope_scaling": 2"#).contains("expected an object, found a number"));
    }

    #[test]
    fn field_errors() {
        let c = ModelConfig::from_json_str(r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 64}"#);
        assert_eq!(c.unwrap_err().to_string(), "config.json: field 'num_attention_heads': missing");
        assert_eq!(
            err(r#""hidden_size": "64""#),
            "config.json: field 'hidden_size': expected a non-negative integer, found a string"
        );
        assert_eq!(err(r#""vocab_size": 0"#), "config.json: field 'vocab_size': 0 must be positive");
        assert_eq!(
            err(r#""num_key_value_heads": 3"#),
            "config.json: field 'num_key_value_heads': 3 does not divide the 8 attention heads"
        );
        assert!(err(r#""hidden_size": 60"#).contains("field 'head_dim': missing, and hidden_size 60"));
        assert!(err(r#""rms_norm_eps": "x""#).contains("'rms_norm_eps': expected a number, found a string"));
        assert!(err(r#""tie_word_embeddings": 1"#).contains("expected a boolean, found a number"));
        assert!(err(r#""eos_token_id": [1, "x"]"#).contains("field 'eos_token_id'"));
        assert!(ModelConfig::from_json_str("{").unwrap_err().to_string().starts_with("config.json: invalid JSON"));
    }

    /// Values that parse but that no model has: each refused, naming the key and the value.
    #[test]
    fn hostile_hyperparameters() {
        let cases = [
            (r#""sliding_window": 0"#, "'sliding_window': 0 must be positive (or absent, for no window)"),
            (r#""rms_norm_eps": 0"#, "'rms_norm_eps': 0 must be a number between 0 and 1"),
            (r#""rms_norm_eps": 1e300"#, "'rms_norm_eps': inf must be a number between 0 and 1"),
            (r#""rope_theta": 0"#, "'rope_theta': 0 must be a finite number greater than 1"),
            (r#""rope_theta": -1"#, "'rope_theta': -1 must be a finite number greater than 1"),
            (r#""rope_parameters": {"rope_theta": 0.5}"#, "'rope_parameters.rope_theta': 0.5 must be"),
            (r#""num_hidden_layers": 0"#, "'num_hidden_layers': 0 must be positive"),
            (r#""num_hidden_layers": 1099511627776"#, "'num_hidden_layers': 1099511627776 is larger than the 4096"),
            (r#""vocab_size": 1099511627776"#, "'vocab_size': 1099511627776 is larger than the 16777216"),
            (r#""max_position_embeddings": 0"#, "'max_position_embeddings': 0 must be positive"),
            (r#""max_position_embeddings": 1099511627776"#, "'max_position_embeddings': 1099511627776 is larger"),
            (r#""hidden_size": 0"#, "'hidden_size': 0 must be positive"),
            (r#""intermediate_size": 0"#, "'intermediate_size': 0 must be positive"),
            (r#""num_key_value_heads": 0"#, "'num_key_value_heads': 0 must be positive"),
            (r#""num_key_value_heads": 16"#, "'num_key_value_heads': 16 does not divide the 8 attention heads"),
            (r#""head_dim": 0"#, "'head_dim': 0 must be positive"),
            (r#""head_dim": 9"#, "'head_dim': 9 must be even"),
            (r#""rope_scaling": {"type": "yarn", "factor": -2}"#, "'rope_scaling.factor': -2 must be"),
            (r#""sliding_window": -1"#, "'sliding_window': expected a non-negative integer, found a number"),
            (r#""rope_theta": "big""#, "'rope_theta': expected a number, found a string"),
        ];
        for (extra, want) in cases {
            let msg = err(extra);
            assert!(msg.contains(want), "{extra}: {msg}");
        }
        assert!(err(r#""num_attention_heads": 0"#).contains("'num_attention_heads': must be positive"));
        assert!(ModelConfig::from_json_str(r#"{"rms_norm_eps": NaN}"#)
            .unwrap_err()
            .to_string()
            .contains("invalid JSON"));
    }

    #[test]
    fn from_file_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("config.json");
        let msg = ModelConfig::from_file(&missing).unwrap_err().to_string();
        assert!(msg.starts_with(&missing.display().to_string()), "{msg}");
        std::fs::write(&missing, r#"{"architectures": ["GPT2LMHeadModel"]}"#).unwrap();
        let msg = ModelConfig::from_file(&missing).unwrap_err().to_string();
        assert!(msg.starts_with(&format!("{}: unsupported architecture", missing.display())), "{msg}");
    }
}
