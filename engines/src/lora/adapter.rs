//! A LoRA adapter loaded for one base model: per decoder layer and projection, the factors `A` (`[r, in]`) and
//! `B` (`[out, r]`) as f32 and the scale, checked against the base's shapes at load. The stored factors come
//! from a PEFT directory ([`super::peft`]) or a llama.cpp GGUF adapter ([`super::gguf`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tgi_formats::peft::{Factor, PeftError};
use tgi_formats::{SourceError, TensorSource};

use super::module::{Module, SLOTS};
use crate::convert::names::{apply, unpermute_heads, Transform};
use crate::model::{DecoderConfig, RopeStyle};

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

/// A stored factor placed on the base: which tensor, layer, projection and factor, and its shape.
#[derive(Clone, Debug)]
pub(super) struct Stored {
    /// The tensor's name in its file.
    pub name: String,
    /// The decoder layer.
    pub layer: usize,
    /// The projection.
    pub module: Module,
    /// A or B.
    pub factor: Factor,
    /// `[r, in]` for A, `[out, r]` for B.
    pub shape: Vec<usize>,
}

/// What a source says about its factors beyond their places.
pub(super) struct Layout {
    /// The factors.
    pub stored: Vec<Stored>,
    /// The rank every pair must have (PEFT's `r`), or `None` when each pair's shapes tell its own (GGUF).
    pub rank: Option<usize>,
    /// Each pair's scale from its rank.
    pub scale: Box<dyn Fn(usize) -> f32>,
    /// Whether `B`'s q/k rows are in llama.cpp's permuted order (a GGUF adapter of a Llama-family base).
    pub permuted: bool,
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
    layers: Vec<[Option<LoraPair>; SLOTS]>,
    bytes: usize,
    load_time: Duration,
}

impl LoraAdapter {
    /// Loads the adapter at `path` for a base of `cfg`: a PEFT directory (`adapter_config.json`,
    /// `adapter_model.safetensors`) or a `.gguf` file from llama.cpp's `convert_lora_to_gguf.py`; refuses a rank
    /// over `max_rank` and any tensor that does not fit the base.
    pub fn load(name: &str, path: &Path, cfg: &DecoderConfig, max_rank: usize) -> Result<Self, LoraError> {
        let start = Instant::now();
        let mismatch = |problem: String| LoraError::Mismatch { path: path.to_path_buf(), problem };
        let (source, layout) = if path.is_file() && path.extension().is_some_and(|e| e == "gguf") {
            super::gguf::read(path, cfg)?
        } else if path.is_file() {
            return Err(mismatch(
                "not a .gguf adapter or a PEFT adapter directory (adapter_config.json and adapter_model.safetensors)"
                    .into(),
            ));
        } else {
            super::peft::read(path)?
        };
        let (layers, rank, bytes) = assemble(&*source, layout, cfg, max_rank, path)?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        Ok(LoraAdapter {
            name: name.to_string(),
            id,
            path: path.to_path_buf(),
            rank,
            layers,
            bytes,
            load_time: start.elapsed(),
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

    /// The rank (the highest of its projections').
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
        self.layers.get(layer)?[m.slot()].as_ref()
    }
}

/// Per layer and slot, the pairs.
type Layers = Vec<[Option<LoraPair>; SLOTS]>;

/// Checks every factor's shape against the base and its partner, then reads the pairs (B's q/k rows put in the
/// base's order): the layers, the highest rank and the bytes.
fn assemble(
    source: &dyn TensorSource,
    layout: Layout,
    cfg: &DecoderConfig,
    max_rank: usize,
    path: &Path,
) -> Result<(Layers, usize, usize), LoraError> {
    let mismatch = |problem: String| LoraError::Mismatch { path: path.to_path_buf(), problem };
    let (a_halves, mut b_halves): (Vec<_>, Vec<_>) = layout.stored.into_iter().partition(|s| s.factor == Factor::A);
    let mut pairs = Vec::new();
    for a in a_halves {
        let Some(at) = b_halves.iter().position(|b| b.layer == a.layer && b.module == a.module) else {
            return Err(mismatch(format!("layer {} {}: lora_A without lora_B", a.layer, a.module.hf_name())));
        };
        let b = b_halves.swap_remove(at);
        let (out, inp) = a.module.shape(cfg, a.layer).map_err(|p| mismatch(format!("tensor '{}': {p}", a.name)))?;
        let rank = layout.rank.unwrap_or(a.shape.first().copied().unwrap_or(0));
        if rank == 0 {
            return Err(mismatch(format!("tensor '{}' has rank 0", a.name)));
        }
        if rank > max_rank {
            return Err(LoraError::RankTooLarge { path: path.to_path_buf(), rank, max: max_rank });
        }
        for (s, expected) in [(&a, vec![rank, inp]), (&b, vec![out, rank])] {
            if s.shape != expected {
                return Err(mismatch(format!(
                    "tensor '{}' has shape {:?}, but rank {rank} on this base model needs {expected:?} (an adapter \
                     for another base?)",
                    s.name, s.shape
                )));
            }
        }
        pairs.push((a, b, rank, out, inp));
    }
    if let Some(b) = b_halves.first() {
        return Err(mismatch(format!("layer {} {}: lora_B without lora_A", b.layer, b.module.hf_name())));
    }
    // After the shapes: an adapter of another base more often differs in width than in depth.
    if let Some((a, ..)) = pairs.iter().find(|p| p.0.layer >= cfg.layers) {
        return Err(mismatch(format!("tensor '{}': the base model has {} layers", a.name, cfg.layers)));
    }
    if pairs.is_empty() {
        return Err(mismatch("the adapter holds no LoRA factors".into()));
    }
    let mut layers: Layers = (0..cfg.layers).map(|_| Default::default()).collect();
    let (mut bytes, mut top) = (0, 0);
    for (a, b, rank, rows, cols) in pairs {
        let a_data = source.read_f32(&a.name)?;
        let mut b_data = source.read_f32(&b.name)?;
        reorder_qk(&mut b_data, a.module, a.layer, cfg, layout.permuted).map_err(mismatch)?;
        bytes += (a_data.len() + b_data.len()) * 4;
        top = top.max(rank);
        let scale = (layout.scale)(rank);
        layers[a.layer][a.module.slot()] = Some(LoraPair { a: a_data, b: b_data, rank, rows, cols, scale });
    }
    Ok((layers, top, bytes))
}

/// Puts `b`'s rows in the base's order where llama.cpp permutes Q and K rows (Llama-family bases): permuted for
/// a base read from a GGUF (interleaved RoPE), in Hugging Face's order for a base read from safetensors, from the
/// order the adapter stores (`permuted`: llama.cpp's).
fn reorder_qk(b: &mut [f32], m: Module, layer: usize, cfg: &DecoderConfig, permuted: bool) -> Result<(), String> {
    let Some((_, Transform::PermuteHeads(heads))) = m.gguf_tensor(cfg, layer) else { return Ok(()) };
    let rows = heads * cfg.head_dim;
    let base_permuted = cfg.rope_style == RopeStyle::Interleaved;
    let done = match (base_permuted, permuted) {
        (true, false) => apply(Transform::PermuteHeads(heads), b, &mut Vec::new(), rows),
        (false, true) => unpermute_heads(b, &mut Vec::new(), rows, heads),
        _ => return Ok(()),
    };
    done.map_err(|e| e.to_string())
}
