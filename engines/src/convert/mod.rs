//! Hugging Face or GGUF checkpoint -> GGUF: the export plan (names, types, metadata) and
//! the per-tensor work, shared by `tgi quantize` and in-situ quantization.

pub mod encode;
pub mod metadata;
pub mod names;
pub mod preset;

use tgi_formats::gguf::{GgufFile, TensorSpec, Value};
use tgi_formats::hf::{Architecture, GgufVocab, ModelConfig, RopeScaling};
use tgi_formats::source::{SourceError, TensorSource};
use tgi_formats::GgmlType;

use crate::model::{gemma_27b, gemma_windows, GEMMA3_LOCAL_THETA};
use encode::ErrorStats;
use names::Transform;
use preset::{ModelShape, Preset, TypeOverrides, TypeRules};

/// Errors of planning or running a conversion.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// A checkpoint tensor the architecture does not have.
    #[error("unexpected tensor '{tensor}' for architecture {arch}")]
    UnknownTensor {
        /// The tensor's name in the checkpoint.
        tensor: String,
        /// The architecture.
        arch: String,
    },
    /// A tensor stored in a type tgi cannot convert from.
    #[error("tensor '{tensor}' is stored as {dtype}; only F32, F16 and BF16 tensors can be converted")]
    UnsupportedDType {
        /// The tensor.
        tensor: String,
        /// Its stored type.
        dtype: String,
    },
    /// A tensor already block-quantized to another type than its target, without leave to requantize.
    #[error(
        "tensor '{tensor}' is already quantized ({dtype}); requantizing it adds the new type's error to the old one's"
    )]
    Requantize {
        /// The tensor.
        tensor: String,
        /// Its stored type.
        dtype: String,
    },
    /// A type chosen by an override whose block does not divide the row.
    #[error("tensor '{tensor}': rows of {row} values cannot be stored as {ty} (block of {})", ty.block_size())]
    TypeDoesNotFit {
        /// The tensor.
        tensor: String,
        /// Row length.
        row: u64,
        /// The requested type.
        ty: GgmlType,
    },
    /// A type llama-quantize writes only with an importance matrix, chosen without one.
    #[error("tensor '{tensor}': llama-quantize writes {ty} only with an importance matrix; pass --imatrix FILE")]
    ImatrixRequired {
        /// The tensor.
        tensor: String,
        /// Its type.
        ty: GgmlType,
    },
    /// Rows that are not a whole number of blocks.
    #[error("rows of {row} values are not a whole number of {ty} blocks")]
    RowNotBlockAligned {
        /// Row length.
        row: u64,
        /// The type.
        ty: GgmlType,
    },
    /// Importance values that are not one row's worth per matrix of the tensor.
    #[error("{values} importance values do not give each matrix of rows of {row} values its own")]
    ImportanceShape {
        /// Importance values given.
        values: u64,
        /// Row length.
        row: u64,
    },
    /// Head count that does not divide a Q/K projection.
    #[error("cannot permute {rows} rows into {heads} rotary heads")]
    BadPermutation {
        /// Rows of the projection.
        rows: usize,
        /// Heads.
        heads: usize,
    },
    /// A configuration the GGUF format cannot describe as llama.cpp reads it.
    #[error("{0}")]
    Unrepresentable(String),
    /// A layer's experts do not form one stack (missing experts, or differing shapes or types).
    #[error("the experts of '{0}' are not a complete set of tensors of one shape and type")]
    BadStack(String),
    /// A tensor the configuration requires is missing.
    #[error("the checkpoint has no tensor '{0}'")]
    MissingTensor(String),
    /// Reading a tensor failed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A block codec failed.
    #[error(transparent)]
    Quant(#[from] tgi_formats::quant::QuantError),
}

/// Where a tensor's values come from.
#[derive(Clone, Debug)]
pub enum JobInput {
    /// A tensor of the source checkpoint, by its source name.
    Tensor(String),
    /// Tensors of the source checkpoint stacked in order along a new outer dimension (the experts of a layer).
    Stack(Vec<String>),
    /// Values computed by the converter (Llama 3 `rope_freqs.weight`).
    Generated(Vec<f32>),
}

/// One output tensor: where it comes from, how it is transformed and its target type.
#[derive(Clone, Debug)]
pub struct TensorJob {
    /// GGUF name.
    pub name: String,
    /// The values.
    pub input: JobInput,
    /// Type the values are stored in at the source (F32 for generated values).
    pub source_type: GgmlType,
    /// GGML dims (ne[0] = row length).
    pub dims: Vec<u64>,
    /// Row rearrangement.
    pub transform: Transform,
    /// The type written.
    pub target: GgmlType,
}

impl TensorJob {
    /// Whether the job decodes block-quantized values to encode them as another type.
    pub fn requantizes(&self) -> bool {
        self.source_type.is_quantized() && self.target != self.source_type
    }

    /// Number of values.
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// The experts of one layer's projection, gathered for one stacked GGUF tensor.
struct Stack {
    /// The stack's GGUF name.
    gguf: String,
    /// (expert, source name) of each expert found.
    parts: Vec<(usize, String)>,
    /// One expert's GGML dims.
    dims: Vec<u64>,
    /// The stored type, the same for every expert.
    dtype: GgmlType,
}

/// Everything needed to write one GGUF file.
#[derive(Debug)]
pub struct ExportPlan {
    /// Metadata in write order.
    pub metadata: Vec<(String, Value)>,
    /// Tensors in write order (llama.cpp's order).
    pub jobs: Vec<TensorJob>,
}

/// Buffers reused from tensor to tensor, so that streaming over a model does not fault in
/// fresh memory for every tensor.
#[derive(Default)]
pub struct Scratch {
    values: Vec<f32>,
    spare: Vec<f32>,
    /// The last tensor's encoded bytes.
    pub bytes: Vec<u8>,
}

impl ExportPlan {
    /// Plans the GGUF export of an HF checkpoint whose tensors are `tensors` (name, PyTorch shape, dtype).
    pub fn from_hf(
        model_name: &str,
        cfg: &ModelConfig,
        vocab: &GgufVocab,
        tensors: &[(String, Vec<usize>, GgmlType)],
        preset: Preset,
        overrides: &TypeOverrides,
    ) -> Result<ExportPlan, ConvertError> {
        check_representable(cfg)?;
        let mut jobs = Vec::new();
        let mut stacks: Vec<Stack> = Vec::new();
        let has_lm_head = tensors.iter().any(|(n, _, _)| n == "lm_head.weight");
        for (name, shape, dtype) in tensors {
            if !matches!(dtype, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
                return Err(ConvertError::UnsupportedDType { tensor: name.clone(), dtype: dtype.to_string() });
            }
            if name == "lm_head.weight" && cfg.tie_word_embeddings {
                continue;
            }
            let Some((gguf, transform)) =
                names::map_name(cfg.architecture, cfg.num_attention_heads, cfg.num_key_value_heads, name)?
            else {
                continue;
            };
            let dims: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
            if let Some((_, e)) = names::split_expert(name) {
                match stacks.iter_mut().find(|s| s.gguf == gguf) {
                    Some(s) if s.dims == dims && s.dtype == *dtype => s.parts.push((e, name.clone())),
                    Some(_) => return Err(ConvertError::BadStack(gguf)),
                    None => stacks.push(Stack { gguf, parts: vec![(e, name.clone())], dims, dtype: *dtype }),
                }
                continue;
            }
            jobs.push(TensorJob {
                name: gguf,
                input: JobInput::Tensor(name.clone()),
                source_type: GgmlType::F32,
                dims,
                transform,
                target: GgmlType::F32,
            });
        }
        let mut stack_types = Vec::new();
        for Stack { gguf, mut parts, mut dims, dtype } in stacks {
            stack_types.push((gguf.clone(), dtype));
            parts.sort();
            if parts.iter().enumerate().any(|(i, (e, _))| *e != i) {
                return Err(ConvertError::BadStack(gguf));
            }
            dims.push(parts.len() as u64);
            jobs.push(TensorJob {
                name: gguf,
                input: JobInput::Stack(parts.into_iter().map(|(_, n)| n).collect()),
                source_type: GgmlType::F32,
                dims,
                transform: Transform::None,
                target: GgmlType::F32,
            });
        }
        if !cfg.tie_word_embeddings && !has_lm_head {
            return Err(ConvertError::MissingTensor("lm_head.weight".into()));
        }
        let mut generated: Vec<(&str, Vec<f32>)> = Vec::new();
        if let Some(factors) = metadata::llama3_rope_factors(cfg) {
            generated.push(("rope_freqs.weight", factors));
        }
        if let Some(RopeScaling::LongRope { short_factor, long_factor, .. }) = &cfg.rope_scaling {
            generated.push(("rope_factors_long.weight", long_factor.clone()));
            generated.push(("rope_factors_short.weight", short_factor.clone()));
        }
        for (name, factors) in generated {
            jobs.push(TensorJob {
                name: name.into(),
                dims: vec![factors.len() as u64],
                input: JobInput::Generated(factors),
                source_type: GgmlType::F32,
                transform: Transform::None,
                target: GgmlType::F32,
            });
        }
        let shape = ModelShape {
            n_layer: cfg.num_hidden_layers,
            n_head: cfg.num_attention_heads,
            n_head_kv: cfg.num_key_value_heads,
            tied_embeddings: !jobs.iter().any(|j| j.name == "output.weight"),
            n_expert: cfg.moe.as_ref().map_or(0, |m| m.experts),
        };
        // The rules see the model as llama.cpp's converter writes it (all F32), then each
        // job remembers how its tensor is really stored, so unchanged tensors are copied.
        assign_types(&mut jobs, preset, overrides, shape)?;
        for job in &mut jobs {
            match &job.input {
                JobInput::Tensor(src) => {
                    if let Some((_, _, dtype)) = tensors.iter().find(|(n, _, _)| n == src) {
                        job.source_type = *dtype;
                    }
                }
                JobInput::Stack(_) => {
                    if let Some((_, dtype)) = stack_types.iter().find(|(n, _)| *n == job.name) {
                        job.source_type = *dtype;
                    }
                }
                JobInput::Generated(_) => {}
            }
        }
        let metadata = metadata::hf_metadata(model_name, cfg, vocab, preset.file_type());
        Ok(ExportPlan { metadata, jobs })
    }

    /// Plans the re-quantization of a GGUF file: its metadata kept, file type updated. As in llama-quantize, a
    /// tensor already of its target type is copied, and a block-quantized one of another type is decoded and
    /// encoded again only with `allow_requantize`.
    pub fn from_gguf(
        file: &GgufFile,
        preset: Preset,
        overrides: &TypeOverrides,
        allow_requantize: bool,
    ) -> Result<ExportPlan, ConvertError> {
        let arch = file.get("general.architecture").and_then(|v| v.as_str()).unwrap_or("llama").to_string();
        let get_u32 = |k: &str| file.get(&format!("{arch}.{k}")).and_then(|v| v.as_u64()).unwrap_or(0) as usize;
        let mut jobs: Vec<TensorJob> = file
            .tensors()
            .iter()
            .map(|t| TensorJob {
                name: t.name.clone(),
                input: JobInput::Tensor(t.name.clone()),
                source_type: t.ty,
                dims: t.dims.clone(),
                transform: Transform::None,
                target: t.ty,
            })
            .collect();
        let n_head = get_u32("attention.head_count");
        let n_expert = get_u32("expert_count");
        let shape = ModelShape {
            n_layer: get_u32("block_count"),
            n_head,
            n_head_kv: match get_u32("attention.head_count_kv") {
                0 => n_head,
                n => n,
            },
            tied_embeddings: !jobs.iter().any(|j| j.name == "output.weight"),
            n_expert,
        };
        assign_types(&mut jobs, preset, overrides, shape)?;
        if let Some(j) = jobs.iter().find(|j| j.requantizes()).filter(|_| !allow_requantize) {
            return Err(ConvertError::Requantize { tensor: j.name.clone(), dtype: j.source_type.to_string() });
        }
        let mut metadata: Vec<(String, Value)> = file.metadata().to_vec();
        set_kv(&mut metadata, "general.quantization_version", Value::U32(2));
        set_kv(&mut metadata, "general.file_type", Value::U32(preset.file_type()));
        Ok(ExportPlan { metadata, jobs })
    }

    /// Sets a metadata key as gguf's `gguf_set_val_*` does (any old entry removed, the new one appended).
    pub fn set_metadata(&mut self, key: &str, value: Value) {
        set_kv(&mut self.metadata, key, value);
    }

    /// The tensor table for the GGUF writer.
    pub fn tensor_specs(&self) -> Vec<TensorSpec> {
        self.jobs.iter().map(|j| TensorSpec { name: j.name.clone(), dims: j.dims.clone(), ty: j.target }).collect()
    }
}

/// The type llama-quantize's `preset` gives each tensor of a model with the Llama shape `shape`, keyed by GGUF
/// name; `tensors` are (GGUF name, GGML dims) as the converter sees them, all F32 (in-situ quantization
/// plans with this, so that it picks exactly the types `tgi quantize` writes).
pub fn preset_types(
    tensors: &[(String, Vec<u64>)],
    preset: Preset,
    shape: ModelShape,
) -> Result<Vec<(String, GgmlType)>, ConvertError> {
    let mut jobs: Vec<TensorJob> = tensors
        .iter()
        .map(|(name, dims)| TensorJob {
            name: name.clone(),
            input: JobInput::Tensor(name.clone()),
            source_type: GgmlType::F32,
            dims: dims.clone(),
            transform: Transform::None,
            target: GgmlType::F32,
        })
        .collect();
    assign_types(&mut jobs, preset, &TypeOverrides::default(), shape)?;
    Ok(jobs.into_iter().map(|j| (j.name, j.target)).collect())
}

/// Sorts jobs into llama.cpp's order and picks each one's type.
fn assign_types(
    jobs: &mut [TensorJob],
    preset: Preset,
    overrides: &TypeOverrides,
    shape: ModelShape,
) -> Result<(), ConvertError> {
    jobs.sort_by(|a, b| names::gguf_order(&a.name, &b.name));
    let names: Vec<String> = jobs.iter().map(|j| j.name.clone()).collect();
    let refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    let rules = TypeRules::new(preset, overrides, shape, &refs);
    let mut i_attention_wv = 0;
    for job in jobs.iter_mut() {
        job.target = rules.choose(&job.name, &job.dims, job.source_type, i_attention_wv)?;
        if job.name.contains("attn_v.weight") {
            i_attention_wv += 1;
        }
    }
    Ok(())
}

/// Refuses what llama.cpp would run differently from the checkpoint: for Gemma it takes the attention scale
/// (`1/sqrt(head_dim)`, or `1/sqrt(hidden / heads)` for the 27B models), the sliding layers and Gemma 3's local
/// RoPE base from the architecture and shape, not from the file, and applies no soft-caps to Gemma 3.
fn check_representable(cfg: &ModelConfig) -> Result<(), ConvertError> {
    if let Some(moe) = &cfg.moe {
        // llama.cpp makes every layer a mixture and renormalizes the chosen experts' weights.
        if !moe.norm_topk_prob || moe.sparse_layers.iter().any(|&s| !s) {
            return Err(ConvertError::Unrepresentable(format!(
                "{} with dense layers or without norm_topk_prob: llama.cpp runs every layer as a mixture with \
                 renormalized weights and a GGUF file cannot state otherwise",
                cfg.architecture.hf_class()
            )));
        }
    }
    let (Some(g), Some(windows)) = (&cfg.gemma, gemma_windows(cfg.architecture, cfg.num_hidden_layers)) else {
        return Ok(());
    };
    let refuse = |what: String| {
        Err(ConvertError::Unrepresentable(format!(
            "{what}; llama.cpp assumes otherwise for this {} shape and a GGUF file cannot state it",
            cfg.architecture.hf_class()
        )))
    };
    let implied = if gemma_27b(cfg.architecture, cfg.num_hidden_layers) {
        cfg.hidden_size / cfg.num_attention_heads
    } else {
        cfg.head_dim
    };
    if g.query_pre_attn_scalar != implied as f32 {
        return refuse(format!("query_pre_attn_scalar {} is not {implied}", g.query_pre_attn_scalar));
    }
    if cfg.layer_windows != windows {
        return refuse(format!("the sliding layers {:?} are not llama.cpp's {windows:?}", cfg.layer_windows));
    }
    if let Some(theta) = g.rope_local_theta.filter(|&t| t != GEMMA3_LOCAL_THETA) {
        return refuse(format!("the sliding layers' RoPE base {theta} is not {GEMMA3_LOCAL_THETA}"));
    }
    let caps = g.attn_logit_softcapping.is_some() || g.final_logit_softcapping.is_some();
    if cfg.architecture == Architecture::Gemma3 && caps {
        return refuse("Gemma 3 with logit soft-capping".into());
    }
    Ok(())
}

/// Sets a key as gguf's `gguf_set_val_*` does: any old entry removed, the new one appended.
fn set_kv(kv: &mut Vec<(String, Value)>, key: &str, value: Value) {
    kv.retain(|(k, _)| k != key);
    kv.push((key.to_string(), value));
}

/// Reads, transforms and encodes one tensor into `scratch.bytes`, returning its error.
/// A tensor whose type does not change is copied as stored. `importance` (a row's worth per
/// matrix, see [`encode::encode`]) weighs the encoding as an importance matrix does.
/// `progress` receives the number of values done as work advances.
pub fn run_job(
    job: &TensorJob,
    source: &dyn TensorSource,
    importance: Option<&[f32]>,
    scratch: &mut Scratch,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ErrorStats, ConvertError> {
    let n_per_row = job.dims.first().copied().unwrap_or(1) as usize;
    let rows = (job.elements() as usize) / n_per_row.max(1);
    match &job.input {
        JobInput::Generated(v) => {
            scratch.values.clear();
            scratch.values.extend_from_slice(v);
        }
        JobInput::Tensor(name) => {
            if job.target == job.source_type && job.transform == Transform::None {
                scratch.bytes.clear();
                scratch.bytes.extend_from_slice(source.raw_bytes(name)?);
                source.release(name);
                progress(job.elements());
                return Ok(ErrorStats { count: job.elements(), ..Default::default() });
            }
            source.read_f32_into(name, &mut scratch.values)?;
            source.release(name);
        }
        JobInput::Stack(names) => {
            let copy = job.target == job.source_type;
            scratch.bytes.clear();
            scratch.values.clear();
            for name in names {
                if copy {
                    scratch.bytes.extend_from_slice(source.raw_bytes(name)?);
                } else {
                    source.read_f32_into(name, &mut scratch.spare)?;
                    scratch.values.extend_from_slice(&scratch.spare);
                }
                source.release(name);
            }
            if copy {
                progress(job.elements());
                return Ok(ErrorStats { count: job.elements(), ..Default::default() });
            }
        }
    }
    names::apply(job.transform, &mut scratch.values, &mut scratch.spare, rows)?;
    encode::encode(job.target, &scratch.values, n_per_row, importance, &mut scratch.bytes, progress)
}
