//! The hyperparameters a decoder runs with, from config.json or from GGUF metadata.

use tgi_formats::gguf::{GgufFile, Value};
use tgi_formats::hf::{Architecture, LayerWindows, ModelConfig, MoeConfig, RopeScaling};
use tgi_formats::hyperparameters::{Hyper, Hyperparameters};

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
pub struct DecoderConfig {
    /// The architecture (Llama, Mistral, Qwen2, Qwen3, Gemma 2).
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
    /// Which layers attend within `sliding_window`.
    pub window_layers: LayerWindows,
    /// Attention scores are multiplied by this (`1 / sqrt(head_dim)` unless the family says otherwise).
    pub attn_scale: f32,
    /// Attention scores are soft-capped to `±cap` by `tanh(s / cap) * cap` (Gemma 2).
    pub attn_softcap: Option<f32>,
    /// Output logits are soft-capped the same way (Gemma 2).
    pub final_softcap: Option<f32>,
    /// Gemma 3: the RoPE base of sliding layers, which rotate without scaling (the others use `rope_theta`).
    pub rope_local_theta: Option<f32>,
    /// The mixture of experts (Mixtral, Qwen3-MoE).
    pub moe: Option<MoeConfig>,
    /// The leading dimensions of each head that RoPE rotates (all of them unless partial, as in Phi-4-mini).
    pub rotary_dim: usize,
    /// LongRoPE's frequency divisors and cos/sin scale (Phi-3.5, Phi-4-mini).
    pub long_rope: Option<LongRope>,
}

/// LongRoPE: rotary frequencies divided by `short` for a sequence of up to `original` positions and by `long`
/// beyond (transformers' rule, per sequence), cos and sin multiplied by `attention_factor`.
#[derive(Clone, Debug, PartialEq)]
pub struct LongRope {
    /// Divisors for short sequences, one per rotary frequency.
    pub short: Vec<f32>,
    /// Divisors for long sequences.
    pub long: Vec<f32>,
    /// The pre-extension context length.
    pub original: usize,
    /// The cos/sin scale.
    pub attention_factor: f32,
}

impl DecoderConfig {
    /// From a config.json (whose hyperparameters were checked when it was parsed).
    pub fn from_hf(cfg: &ModelConfig) -> Result<Self, ModelError> {
        let mut h = cfg.hyperparameters();
        h.rope_factor = match &cfg.rope_scaling {
            // Llama 3 scaling divides frequencies (the factors given to the model), not positions.
            None | Some(RopeScaling::Llama3 { .. }) | Some(RopeScaling::LongRope { .. }) => None,
            Some(RopeScaling::Linear { factor }) => Some(*factor),
            Some(RopeScaling::Yarn { .. }) => {
                return Err(ModelError::Unsupported("YaRN rope scaling is not supported by the engine".into()))
            }
        };
        let mut out = Self::new(cfg.architecture, &h, RopeStyle::Halves);
        out.window_layers = cfg.layer_windows.clone();
        out.moe = cfg.moe.clone();
        out.rotary_dim = cfg.rotary_dim;
        if let Some(RopeScaling::LongRope {
            short_factor,
            long_factor,
            original_max_position_embeddings,
            attention_factor,
            ..
        }) = &cfg.rope_scaling
        {
            out.long_rope = Some(LongRope {
                short: short_factor.clone(),
                long: long_factor.clone(),
                original: *original_max_position_embeddings,
                attention_factor: *attention_factor,
            });
        }
        if let Some(g) = &cfg.gemma {
            out.attn_scale = 1.0 / g.query_pre_attn_scalar.sqrt();
            out.attn_softcap = g.attn_logit_softcapping;
            out.final_softcap = g.final_logit_softcapping;
            out.rope_local_theta = g.rope_local_theta;
        }
        Ok(out)
    }

    /// Whether layer `layer` is a sliding-window (local) layer.
    pub fn is_sliding(&self, layer: usize) -> bool {
        match &self.window_layers {
            LayerWindows::All => self.sliding_window.is_some(),
            LayerWindows::PerLayer(sliding) => sliding.get(layer) == Some(&true),
        }
    }

    /// The sliding window layer `layer` attends within, if any.
    pub fn window(&self, layer: usize) -> Option<usize> {
        self.sliding_window.filter(|_| self.is_sliding(layer))
    }

    /// From a GGUF file's `{arch}.*` metadata; the vocabulary size comes from the embedding's shape.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, ModelError> {
        gguf_architecture(file)?; // an unsupported architecture is the first thing to say
        let vocab = file
            .tensor("token_embd.weight")
            .map(|t| t.torch_shape()[0])
            .ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?;
        Self::from_gguf_metadata(file, vocab)
    }

    /// From a GGUF file's metadata, with the vocabulary size given.
    fn from_gguf_metadata(file: &GgufFile, vocab: usize) -> Result<Self, ModelError> {
        let (architecture, arch_name) = gguf_architecture(file)?;
        let meta = Metadata { file, arch: arch_name };
        // Mixtral is llama.cpp's `llama` with experts.
        let architecture = match (architecture, meta.int("expert_count")?) {
            (Architecture::Llama, Some(n)) if n > 0 => Architecture::Mixtral,
            (a, _) => a,
        };
        let req = |k: &str| meta.int(k)?.ok_or_else(|| meta.error(k, "is missing"));
        let hidden = req("embedding_length")?;
        let heads = req("attention.head_count")?;
        let kv_heads = meta.int("attention.head_count_kv")?.unwrap_or(heads);
        let (key_length, rope_dims) = (meta.int("attention.key_length")?, meta.int("rope.dimension_count")?);
        // Phi-3's files may rotate part of each head (Phi-4-mini), and state no key_length.
        let phi3 = architecture == Architecture::Phi3;
        if let (Some(k), Some(r)) = (key_length, rope_dims) {
            if k != r && !(phi3 && r < k) {
                return Err(meta.error(
                    "rope.dimension_count",
                    format!("{r} differs from attention.key_length {k} (partial RoPE is not supported)"),
                ));
            }
        }
        if let (Some(k), Some(v)) = (key_length, meta.int("attention.value_length")?) {
            if k != v {
                return Err(meta.error("attention.value_length", format!("{v} differs from attention.key_length {k}")));
            }
        }
        let head_dim = match key_length.or(rope_dims.filter(|_| !phi3)) {
            Some(d) => d,
            None if heads == 0 || !hidden.is_multiple_of(heads) => {
                return Err(meta.error(
                    "attention.key_length",
                    format!("is missing, and embedding_length {hidden} is not a multiple of head_count {heads}"),
                ))
            }
            None => hidden / heads,
        };
        let scaling = meta.str("rope.scaling.type")?;
        let rope_factor = match scaling {
            None | Some("none") => None,
            Some("linear") => Some(meta.float("rope.scaling.factor")?.unwrap_or(1.0)),
            Some(other) => return Err(ModelError::Unsupported(format!("rope scaling '{other}'"))),
        };
        let h = Hyperparameters {
            hidden,
            intermediate: req("feed_forward_length")?,
            layers: req("block_count")?,
            heads,
            kv_heads,
            head_dim,
            vocab,
            context: req("context_length")?,
            rms_eps: meta.float("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5),
            rope_theta: meta.float("rope.freq_base")?.unwrap_or(10000.0),
            rope_factor,
            // llama.cpp reads a window of 0 as none.
            sliding_window: meta.int("attention.sliding_window")?.filter(|&w| w > 0),
        };
        h.check().map_err(|e| {
            let key = match e.hyper {
                Hyper::Hidden => "embedding_length",
                Hyper::Intermediate => "feed_forward_length",
                Hyper::Layers => "block_count",
                Hyper::Heads => "attention.head_count",
                Hyper::KvHeads => "attention.head_count_kv",
                Hyper::HeadDim if key_length.is_some() => "attention.key_length",
                Hyper::HeadDim if rope_dims.is_some() => "rope.dimension_count",
                Hyper::HeadDim => "embedding_length / attention.head_count",
                Hyper::Vocab => {
                    return ModelError::Config(format!("tensor 'token_embd.weight': {} rows: {}", e.value, e.problem))
                }
                Hyper::Context => "context_length",
                Hyper::RmsEps => "attention.layer_norm_rms_epsilon",
                Hyper::RopeTheta => "rope.freq_base",
                Hyper::RopeFactor => "rope.scaling.factor",
                Hyper::SlidingWindow => "attention.sliding_window",
            };
            meta.error(key, e.to_string())
        })?;
        let style = match architecture {
            Architecture::Qwen2
            | Architecture::Qwen3
            | Architecture::Gemma2
            | Architecture::Gemma3
            | Architecture::Qwen3Moe
            | Architecture::Phi3 => RopeStyle::Halves,
            Architecture::Llama | Architecture::Mistral | Architecture::Mixtral => RopeStyle::Interleaved,
        };
        let mut out = Self::new(architecture, &h, style);
        out.moe = gguf_moe(&meta, architecture, &h)?;
        if phi3 {
            out.rotary_dim = rope_dims.unwrap_or(head_dim);
            if out.rotary_dim > head_dim || out.rotary_dim % 2 != 0 || out.rotary_dim == 0 {
                let problem =
                    format!("{} is not a positive even number up to the head width {head_dim}", out.rotary_dim);
                return Err(meta.error("rope.dimension_count", problem));
            }
            out.long_rope = gguf_long_rope(file, &meta, out.rotary_dim)?;
        }
        if let Some(windows) = gemma_windows(architecture, h.layers) {
            // As llama.cpp: a fixed pattern of sliding layers; queries scaled by 1/sqrt(head_dim), except in the
            // 27B models, whose query_pre_attn_scalar is hidden / heads.
            out.window_layers = windows;
            let scalar = if gemma_27b(architecture, h.layers) { hidden / heads } else { head_dim };
            out.attn_scale = 1.0 / (scalar as f32).sqrt();
        }
        if architecture == Architecture::Gemma3 {
            out.rope_local_theta = Some(GEMMA3_LOCAL_THETA);
        }
        if architecture == Architecture::Gemma2 {
            let cap = |k: &str| -> Result<Option<f32>, ModelError> {
                match meta.float(k)? {
                    Some(c) if !(c.is_finite() && c > 0.0) => {
                        Err(meta.error(k, format!("{c} must be a finite positive number")))
                    }
                    c => Ok(c),
                }
            };
            out.attn_softcap = cap("attn_logit_softcapping")?;
            out.final_softcap = cap("final_logit_softcapping")?;
        }
        Ok(out)
    }

    /// From hyperparameters that passed [`Hyperparameters::check`].
    fn new(architecture: Architecture, h: &Hyperparameters, rope_style: RopeStyle) -> Self {
        DecoderConfig {
            architecture,
            hidden: h.hidden,
            intermediate: h.intermediate,
            layers: h.layers,
            heads: h.heads,
            kv_heads: h.kv_heads,
            head_dim: h.head_dim,
            vocab: h.vocab,
            context: h.context,
            rms_eps: h.rms_eps,
            rope_theta: h.rope_theta,
            rope_position_scale: h.rope_factor.map_or(1.0, |f| 1.0 / f),
            rope_style,
            sliding_window: h.sliding_window,
            window_layers: LayerWindows::All,
            attn_scale: 1.0 / (h.head_dim as f32).sqrt(),
            attn_softcap: None,
            final_softcap: None,
            rope_local_theta: None,
            moe: None,
            rotary_dim: h.head_dim,
            long_rope: None,
        }
    }
}

/// The RoPE base of Gemma 3's sliding layers, which llama.cpp does not read from the file.
pub const GEMMA3_LOCAL_THETA: f32 = 10000.0;

/// The sliding layers llama.cpp gives a Gemma model of `layers` layers (it reads no pattern from the file):
/// Gemma 2 every other one from the first, Gemma 3 five of every six.
pub fn gemma_windows(arch: Architecture, layers: usize) -> Option<LayerWindows> {
    let slides: fn(usize) -> bool = match arch {
        Architecture::Gemma2 => |i| i % 2 == 0,
        Architecture::Gemma3 => |i| i % 6 < 5,
        _ => return None,
    };
    Some(LayerWindows::PerLayer((0..layers).map(slides).collect()))
}

/// Whether llama.cpp takes a Gemma model of `layers` layers for the 27B (attention scaled by
/// `1/sqrt(hidden / heads)` rather than `1/sqrt(head_dim)`).
pub fn gemma_27b(arch: Architecture, layers: usize) -> bool {
    matches!((arch, layers), (Architecture::Gemma2, 46) | (Architecture::Gemma3, 62))
}

/// The mixture of experts a GGUF file states (`expert_count`, `expert_used_count`, Qwen3-MoE's
/// `expert_feed_forward_length`): in llama.cpp every layer is a mixture and the chosen weights are renormalized.
fn gguf_moe(meta: &Metadata, arch: Architecture, h: &Hyperparameters) -> Result<Option<MoeConfig>, ModelError> {
    let inner_key = match arch {
        Architecture::Mixtral => "feed_forward_length",
        Architecture::Qwen3Moe => "expert_feed_forward_length",
        _ => return Ok(None),
    };
    let req = |k: &str| meta.int(k)?.ok_or_else(|| meta.error(k, "is missing"));
    let experts = req("expert_count")?;
    if experts == 0 || experts > 1 << 12 {
        return Err(meta.error("expert_count", format!("{experts} must be between 1 and 4096")));
    }
    let used = req("expert_used_count")?;
    if used == 0 || used > experts {
        return Err(meta.error("expert_used_count", format!("{used} must be between 1 and the {experts} experts")));
    }
    let inner = req(inner_key)?;
    if inner == 0 || inner > tgi_formats::hyperparameters::MAX_WIDTH {
        return Err(meta.error(inner_key, format!("{inner} must be positive and at most 2^20")));
    }
    Ok(Some(MoeConfig {
        experts,
        experts_per_token: used,
        expert_intermediate: inner,
        norm_topk_prob: true,
        sparse_layers: vec![true; h.layers],
    }))
}

/// LongRoPE as llama.cpp's Phi-3 files state it: `rope_factors_short.weight` and `rope_factors_long.weight`
/// (one divisor per rotary frequency), `rope.scaling.attn_factor` and `rope.scaling.original_context_length`.
fn gguf_long_rope(file: &GgufFile, meta: &Metadata, rotary_dim: usize) -> Result<Option<LongRope>, ModelError> {
    use tgi_formats::TensorSource;
    let (Some(_), Some(_)) = (file.tensor("rope_factors_short.weight"), file.tensor("rope_factors_long.weight")) else {
        return Ok(None);
    };
    let read = |name: &str| -> Result<Vec<f32>, ModelError> {
        let v = TensorSource::read_f32(file, name).map_err(|e| ModelError::Config(e.to_string()))?;
        if v.len() != rotary_dim / 2 || v.iter().any(|&x| !(x.is_finite() && x > 0.0)) {
            return Err(ModelError::Config(format!(
                "tensor '{name}': {} factors for {} rotary frequencies (each must be finite and positive)",
                v.len(),
                rotary_dim / 2
            )));
        }
        Ok(v)
    };
    let original = meta.int("rope.scaling.original_context_length")?.filter(|&n| n > 0);
    let original = original.ok_or_else(|| meta.error("rope.scaling.original_context_length", "is missing or 0"))?;
    let attention_factor = match meta.float("rope.scaling.attn_factor")? {
        Some(a) if !(a.is_finite() && a > 0.0) => {
            return Err(meta.error("rope.scaling.attn_factor", format!("{a} must be a finite positive number")))
        }
        a => a.unwrap_or(1.0),
    };
    Ok(Some(LongRope {
        short: read("rope_factors_short.weight")?,
        long: read("rope_factors_long.weight")?,
        original,
        attention_factor,
    }))
}

/// A GGUF file's `general.architecture`, when the engine runs it.
fn gguf_architecture(file: &GgufFile) -> Result<(Architecture, &str), ModelError> {
    let name = file.get("general.architecture").and_then(|v| v.as_str()).unwrap_or("");
    match name {
        "llama" => Ok((Architecture::Llama, name)),
        "mistral" => Ok((Architecture::Mistral, name)),
        "qwen2" => Ok((Architecture::Qwen2, name)),
        "qwen3" => Ok((Architecture::Qwen3, name)),
        "gemma2" => Ok((Architecture::Gemma2, name)),
        "gemma3" => Ok((Architecture::Gemma3, name)),
        "qwen3moe" => Ok((Architecture::Qwen3Moe, name)),
        "phi3" => Ok((Architecture::Phi3, name)),
        other => Err(ModelError::Unsupported(format!(
            "GGUF architecture '{other}' (supported: llama, mistral, qwen2, qwen3, qwen3moe, gemma2, gemma3, phi3)"
        ))),
    }
}

/// The `{arch}.*` keys of a GGUF file, read with errors that name the key and what it holds.
struct Metadata<'a> {
    file: &'a GgufFile,
    arch: &'a str,
}

impl Metadata<'_> {
    fn error(&self, key: &str, problem: impl std::fmt::Display) -> ModelError {
        ModelError::Config(format!("GGUF metadata '{}.{key}': {problem}", self.arch))
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.file.get(&format!("{}.{key}", self.arch))
    }

    fn wrong(&self, key: &str, expected: &str, found: &Value) -> ModelError {
        let shown: String = format!("{found:?}").chars().take(40).collect();
        self.error(key, format!("expected {expected}, found {shown} (type {})", found.value_type()))
    }

    /// An optional non-negative integer.
    fn int(&self, key: &str) -> Result<Option<usize>, ModelError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let n = v.as_u64().ok_or_else(|| self.wrong(key, "a non-negative integer", v))?;
        usize::try_from(n).map(Some).map_err(|_| self.error(key, format!("{n} is too large")))
    }

    /// An optional number.
    fn float(&self, key: &str) -> Result<Option<f32>, ModelError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        v.as_f32().map(Some).ok_or_else(|| self.wrong(key, "a number", v))
    }

    /// An optional string.
    fn str(&self, key: &str) -> Result<Option<&str>, ModelError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        v.as_str().map(Some).ok_or_else(|| self.wrong(key, "a string", v))
    }
}

#[cfg(test)]
mod tests {
    use tgi_formats::GgufWriter;

    use super::*;

    const STORIES_GGUF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/stories260k/stories260k-f32.gguf");

    /// The bundled model's metadata with `changes` applied (a key set, or removed when `None`), as a
    /// metadata-only file.
    fn mutated(changes: &[(&str, Option<Value>)]) -> GgufFile {
        let stories = GgufFile::open(std::path::Path::new(STORIES_GGUF)).unwrap();
        let mut metadata: Vec<(String, Value)> =
            stories.metadata().iter().filter(|(k, _)| changes.iter().all(|(c, _)| c != k)).cloned().collect();
        metadata.extend(changes.iter().filter_map(|(k, v)| Some((k.to_string(), v.clone()?))));
        let file = tempfile::NamedTempFile::new().unwrap();
        let out = std::io::BufWriter::new(file.reopen().unwrap());
        GgufWriter::new(out, metadata, vec![]).unwrap().finish().unwrap();
        GgufFile::open(file.path()).unwrap()
    }

    fn err(changes: &[(&str, Option<Value>)]) -> String {
        DecoderConfig::from_gguf_metadata(&mutated(changes), 512).unwrap_err().to_string()
    }

    #[test]
    fn gguf_and_hf_agree_on_the_bundled_model() {
        let gguf = DecoderConfig::from_gguf(&GgufFile::open(std::path::Path::new(STORIES_GGUF)).unwrap()).unwrap();
        let hf = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/stories260k/hf/config.json");
        let hf = DecoderConfig::from_hf(&ModelConfig::from_file(std::path::Path::new(hf)).unwrap()).unwrap();
        assert_eq!(gguf, DecoderConfig { rope_style: RopeStyle::Interleaved, ..hf });
        assert_eq!((gguf.heads, gguf.kv_heads, gguf.head_dim, gguf.sliding_window), (8, 4, 8, None));
    }

    #[test]
    fn hostile_gguf_metadata() {
        let one = |key: &'static str, value: Value| vec![(key, Some(value))];
        let cases = [
            (
                one("llama.attention.layer_norm_rms_epsilon", Value::F32(f32::NAN)),
                "'llama.attention.layer_norm_rms_epsilon': NaN must be a number between 0 and 1",
            ),
            (
                one("llama.rope.freq_base", Value::F32(0.0)),
                "'llama.rope.freq_base': 0 must be a finite number greater than 1",
            ),
            (one("llama.rope.freq_base", Value::F32(f32::INFINITY)), "'llama.rope.freq_base': inf must be"),
            (
                one("llama.block_count", Value::U64(1 << 40)),
                "'llama.block_count': 1099511627776 is larger than the 4096 tgi accepts",
            ),
            (one("llama.block_count", Value::U32(0)), "'llama.block_count': 0 must be positive"),
            (one("llama.context_length", Value::U64(1 << 40)), "'llama.context_length': 1099511627776 is larger"),
            (
                one("llama.context_length", Value::I32(-1)),
                "'llama.context_length': expected a non-negative integer, found I32(-1) (type i32)",
            ),
            (
                one("llama.embedding_length", Value::String("64".into())),
                "'llama.embedding_length': expected a non-negative integer, found String(\"64\") (type string)",
            ),
            (
                one("llama.attention.head_count_kv", Value::U32(3)),
                "'llama.attention.head_count_kv': 3 does not divide the 8 attention heads",
            ),
            (one("llama.attention.head_count", Value::U32(0)), "'llama.attention.head_count': 0 must be positive"),
            (
                one("llama.attention.head_count", Value::U32(7)),
                "'llama.attention.head_count_kv': 4 does not divide the 7 attention heads",
            ),
            (
                vec![
                    ("llama.rope.dimension_count", None),
                    ("llama.attention.head_count", Some(Value::U32(7))),
                    ("llama.attention.head_count_kv", Some(Value::U32(7))),
                ],
                "'llama.attention.key_length': is missing, and embedding_length 64 is not a multiple of head_count 7",
            ),
            (one("llama.feed_forward_length", Value::U32(0)), "'llama.feed_forward_length': 0 must be positive"),
            (
                one("llama.rope.scaling.type", Value::U32(1)),
                "'llama.rope.scaling.type': expected a string, found U32(1) (type u32)",
            ),
            (
                vec![("llama.rope.dimension_count", None), ("llama.attention.key_length", Some(Value::U32(7)))],
                "'llama.attention.key_length': 7 must be even",
            ),
            (
                vec![
                    ("llama.attention.key_length", Some(Value::U32(8))),
                    ("llama.rope.dimension_count", Some(Value::U32(4))),
                ],
                "'llama.rope.dimension_count': 4 differs from attention.key_length 8 (partial RoPE is not supported)",
            ),
            (
                vec![
                    ("llama.rope.scaling.type", Some(Value::String("linear".into()))),
                    ("llama.rope.scaling.factor", Some(Value::F32(-1.0))),
                ],
                "'llama.rope.scaling.factor': -1 must be a finite positive number",
            ),
            (vec![("llama.context_length", None)], "'llama.context_length': is missing"),
        ];
        for (changes, want) in cases {
            let msg = err(&changes);
            assert!(msg.starts_with("invalid model: GGUF metadata"), "{changes:?}: {msg}");
            assert!(msg.contains(want), "{changes:?}: {msg}");
        }
        let huge_vocab = DecoderConfig::from_gguf_metadata(&mutated(&[]), 1 << 40);
        assert_eq!(
            huge_vocab.unwrap_err().to_string(),
            "invalid model: tensor 'token_embd.weight': 1099511627776 rows: is larger than the 16777216 tgi accepts"
        );
    }

    #[test]
    fn gguf_window_zero_means_none() {
        let window = |w: u32| {
            let file = mutated(&[("llama.attention.sliding_window", Some(Value::U32(w)))]);
            DecoderConfig::from_gguf_metadata(&file, 512).unwrap().sliding_window
        };
        assert_eq!((window(0), window(16)), (None, Some(16)));
    }
}
