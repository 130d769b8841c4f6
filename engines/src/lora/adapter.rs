//! A LoRA adapter loaded for one base model: per decoder layer and projection, the factors `A` (`[r, in]`) and
//! `B` (`[out, r]`) as f32 and the scale, checked against the base's shapes at load.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tgi_formats::hf::Architecture;
use tgi_formats::peft::{AdapterConfig, Factor, LoraTensorName, PeftError, WEIGHTS_FILE};
use tgi_formats::{SafetensorsSet, SourceError, TensorSource};

use crate::convert::names::{apply, Transform};
use crate::model::{DecoderConfig, Family, RopeStyle};

/// Why an adapter cannot be loaded for a base model.
#[derive(Debug, thiserror::Error)]
pub enum LoraError {
    /// The configuration is unreadable or asks for what tgi does not apply.
    #[error(transparent)]
    Peft(#[from] PeftError),
    /// The weights file could not be read.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The adapter does not fit the base model (a tensor's shape, a module or layer it lacks).
    #[error("{}: {problem}", path.display())]
    Mismatch {
        /// The adapter.
        path: PathBuf,
        /// What does not fit.
        problem: String,
    },
    /// The rank passes the server's bound.
    #[error("{}: rank {rank} exceeds --max-lora-rank {max}", path.display())]
    RankTooLarge {
        /// The adapter.
        path: PathBuf,
        /// Its rank.
        rank: usize,
        /// The bound.
        max: usize,
    },
}

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

impl Module {
    /// Every module, in slot order.
    const ALL: [Module; 9] = [
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
    /// projection is `ffn_up`).
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

    /// The module named `name`, if it is one.
    fn parse(name: &str) -> Option<Self> {
        Module::ALL.into_iter().find(|m| m.hf_name() == name)
    }

    /// The base projection's `(out, in)` in layer `layer` of `cfg`, or why the base has no such projection.
    fn shape(self, cfg: &DecoderConfig, layer: usize) -> Result<(usize, usize), String> {
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
}

/// One projection's LoRA factors.
#[derive(Debug)]
pub(crate) struct LoraPair {
    /// `[rank, cols]`, row-major.
    pub a: Vec<f32>,
    /// `[rows, rank]`, row-major.
    pub b: Vec<f32>,
    /// The rank.
    pub rank: usize,
    /// Outputs (the base projection's rows).
    pub rows: usize,
    /// Inputs (its columns).
    pub cols: usize,
    /// `alpha / r` (or `alpha / sqrt(r)` with rsLoRA).
    pub scale: f32,
}

/// Process-wide counter giving each loaded adapter its own id.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A LoRA adapter ready to run beside its base model.
#[derive(Debug)]
pub struct LoraAdapter {
    name: String,
    id: u64,
    path: PathBuf,
    rank: usize,
    /// Per layer, per [`Module`] slot.
    layers: Vec<[Option<LoraPair>; 9]>,
    bytes: usize,
    load_time: Duration,
}

impl LoraAdapter {
    /// Loads the PEFT adapter in `dir` (`adapter_config.json`, `adapter_model.safetensors`) for a base of `cfg`,
    /// refusing a rank over `max_rank` and any tensor that does not fit the base.
    pub fn load(name: &str, dir: &Path, cfg: &DecoderConfig, max_rank: usize) -> Result<Self, LoraError> {
        let start = Instant::now();
        let config = AdapterConfig::read(dir)?;
        let mismatch = |problem: String| LoraError::Mismatch { path: dir.to_path_buf(), problem };
        if config.rank > max_rank {
            return Err(LoraError::RankTooLarge { path: dir.to_path_buf(), rank: config.rank, max: max_rank });
        }
        let source = SafetensorsSet::open_files(&[dir.join(WEIGHTS_FILE)]).map_err(SourceError::from)?;
        let mut layers: Vec<[Option<LoraPair>; 9]> = (0..cfg.layers).map(|_| Default::default()).collect();
        let mut halves: Vec<(usize, Module, Factor, Vec<f32>)> = Vec::new();
        for meta in source.tensors() {
            let parsed = LoraTensorName::parse(&meta.name);
            let Some(LoraTensorName { layer, module, factor }) = parsed else {
                return Err(mismatch(format!("tensor '{}' is not a LoRA factor of a decoder projection", meta.name)));
            };
            let Some(m) = Module::parse(&module) else {
                return Err(mismatch(format!("tensor '{}': module '{module}' is not supported", meta.name)));
            };
            if layer >= cfg.layers {
                return Err(mismatch(format!("tensor '{}': the base model has {} layers", meta.name, cfg.layers)));
            }
            let (out, inp) = m.shape(cfg, layer).map_err(|p| mismatch(format!("tensor '{}': {p}", meta.name)))?;
            let expected = match factor {
                Factor::A => vec![config.rank, inp],
                Factor::B => vec![out, config.rank],
            };
            if meta.shape != expected {
                return Err(mismatch(format!(
                    "tensor '{}' has shape {:?}, but rank {} on this base model needs {:?} (an adapter for another base?)",
                    meta.name, meta.shape, config.rank, expected
                )));
            }
            halves.push((layer, m, factor, source.read_f32(&meta.name)?));
        }
        let (a_halves, mut b_halves): (Vec<_>, Vec<_>) = halves.into_iter().partition(|h| h.2 == Factor::A);
        let mut bytes = 0;
        for (layer, m, _, a) in a_halves {
            let Some(at) = b_halves.iter().position(|h| h.0 == layer && h.1 == m) else {
                return Err(mismatch(format!("layer {layer} {}: lora_A without lora_B", m.hf_name())));
            };
            let mut b = b_halves.swap_remove(at).3;
            let (rows, cols) = m.shape(cfg, layer).expect("checked above");
            permute_for_gguf(&mut b, m, cfg).map_err(mismatch)?;
            bytes += (a.len() + b.len()) * 4;
            let pair = LoraPair { a, b, rank: config.rank, rows, cols, scale: config.scale() as f32 };
            layers[layer][slot(m)] = Some(pair);
        }
        if let Some((layer, m, ..)) = b_halves.first() {
            return Err(mismatch(format!("layer {layer} {}: lora_B without lora_A", m.hf_name())));
        }
        if bytes == 0 {
            return Err(mismatch(format!("{WEIGHTS_FILE} holds no LoRA factors")));
        }
        let load_time = start.elapsed();
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        Ok(LoraAdapter {
            name: name.to_string(),
            id,
            path: dir.to_path_buf(),
            rank: config.rank,
            layers,
            bytes,
            load_time,
        })
    }

    /// The name requests use.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// An id no other adapter loaded by this process has (prefix-cache keys use it).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Where it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The memory its factors take.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// How long loading took.
    pub fn load_time(&self) -> Duration {
        self.load_time
    }

    /// Layer `layer`'s factors for `m`, if the adapter changes it.
    pub(crate) fn pair(&self, layer: usize, m: Module) -> Option<&LoraPair> {
        self.layers.get(layer)?[slot(m)].as_ref()
    }
}

/// The slot of `m` in a layer's array.
fn slot(m: Module) -> usize {
    Module::ALL.iter().position(|x| *x == m).expect("every module has a slot")
}

/// Reorders `b`'s rows as llama.cpp permuted the base's q and k rows, when the base came from a GGUF of a family
/// whose Q/K llama.cpp permutes (the decoder then runs interleaved RoPE on them).
fn permute_for_gguf(b: &mut [f32], m: Module, cfg: &DecoderConfig) -> Result<(), String> {
    let permuted = matches!(cfg.architecture, Architecture::Llama | Architecture::Mistral | Architecture::Mixtral);
    if cfg.rope_style != RopeStyle::Interleaved || !permuted {
        return Ok(());
    }
    let heads = match m {
        Module::Q => cfg.heads,
        Module::K => cfg.kv_heads,
        _ => return Ok(()),
    };
    let rows = heads * cfg.head_dim;
    apply(Transform::PermuteHeads(heads), b, &mut Vec::new(), rows).map_err(|e| e.to_string())
}
