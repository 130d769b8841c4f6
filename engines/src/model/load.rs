//! Loading a model by name: a Hugging Face directory or hub id (config.json + safetensors + tokenizer.json),
//! or a GGUF file (tokenizer.json beside it, else the vocabulary in its metadata).

use std::path::Path;
use std::sync::Arc;

use candle_core::{DType, Device};
use tgi_formats::awq::AwqConfig;
use tgi_formats::hf::{resolve, GgufVocab, ModelConfig};
use tgi_formats::{GgufFile, SafetensorsSet, TensorSource};

use super::config::DecoderConfig;
use super::decoder::Decoder;
use super::insitu::{self, Plan, Quantize};
use super::weights::{Naming, Weights};
use super::{awq, bnb, ModelError};
use crate::convert::metadata::llama3_rope_factors;
use crate::convert::preset::ModelShape;
use crate::device::{ComputeDType, DeviceSpec};
use crate::kv::KvDType;
use crate::text::chat::{ChatTemplate, ChatTemplates, TOOL_USE};
use crate::text::tokenizer::Tokenizer;

/// How to load a model.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions {
    /// The device to run on.
    pub device: DeviceSpec,
    /// Float type for dense weights (default: as stored).
    pub dtype: Option<ComputeDType>,
    /// Pin the weights in RAM.
    pub mlock: bool,
    /// KV cache element type (default: f32 for all-f32 weights, else f16).
    pub kv_dtype: Option<KvDType>,
    /// Turn off the Hadamard rotation of queries and keys that block-quantized KV caches take by default.
    pub no_kv_rotation: bool,
    /// Quantize a dense checkpoint while loading it (in-situ quantization).
    pub quantize: Option<Quantize>,
    /// Quantize (or convert) a dense output layer to this type while loading it (default: as stored, or as
    /// `quantize` gives it).
    pub lm_head_type: Option<tgi_formats::GgmlType>,
    /// On the CPU, compute through candle's tensor ops (the GPU code path) instead of tgi's kernels;
    /// slower, for checking that path where no GPU is at hand.
    pub cpu_tensor_ops: bool,
}

/// A model with everything needed to turn text into tokens and back.
pub struct LoadedModel {
    /// The network.
    pub model: Decoder,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
    /// The chat templates it ships.
    pub chat_templates: ChatTemplates,
    /// Tokens that end generation.
    pub eos: Vec<u32>,
}

/// Loads `model`: a `.gguf` file, a checkpoint directory, or a hub id (see [`resolve`]).
pub fn load(model: &str, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    super::host_heap::keep_freed_buffers();
    let device = opts.device.open()?;
    let act = match device {
        Device::Cpu => DType::F32,
        _ => opts.dtype.map_or(DType::F32, ComputeDType::candle),
    };
    let dense = opts.dtype.map(ComputeDType::ggml);
    let path = Path::new(model);
    let loaded = if path.is_file() && path.extension().is_some_and(|e| e == "gguf") {
        load_gguf(path, device, dense, act, opts)?
    } else {
        load_hf(model, device, dense, act, opts)?
    };
    if opts.mlock {
        loaded.model.lock().map_err(ModelError::Mlock)?;
    }
    Ok(loaded)
}

fn load_hf(
    model: &str,
    device: Device,
    dense: Option<tgi_formats::GgmlType>,
    act: DType,
    opts: &LoadOptions,
) -> Result<LoadedModel, ModelError> {
    let files = resolve(model)?;
    let hf = ModelConfig::from_file(&files.config)?;
    let cfg = DecoderConfig::from_hf(&hf)?;
    let awq = check_quantization_config(&files.config)?;
    let source: Arc<dyn TensorSource> =
        Arc::new(SafetensorsSet::open_files(&files.weights).map_err(tgi_formats::SourceError::from)?);
    let mut weights = Weights::new(source, Naming::Hf, device, dense, act, opts.cpu_tensor_ops);
    if let Some(cfg) = awq {
        weights = weights.with_awq(cfg);
    }
    let tied = hf.tie_word_embeddings || !weights.metas().contains_key("lm_head.weight");
    let weights = in_situ(weights, opts, &cfg, tied, false)?;
    let model = Decoder::load(&weights, cfg, llama3_rope_factors(&hf), opts.kv_dtype, !opts.no_kv_rotation)?;
    let tj = files
        .tokenizer_json
        .as_deref()
        .ok_or_else(|| ModelError::Config(format!("{}: no tokenizer.json beside the weights", files.root.display())))?;
    let tokenizer = Tokenizer::from_tokenizer_json(tj)?;
    let chat_templates = match GgufVocab::from_hf_files(tj, files.tokenizer_config.as_deref(), hf.vocab_size) {
        Ok(vocab) => ChatTemplates::from_vocab(&vocab)?,
        // A tokenizer GGUF cannot describe may still tokenize through tokenizers; no template then.
        Err(_) => ChatTemplates::default(),
    };
    let mut eos = tokenizer.eos_ids().to_vec();
    eos.extend(&hf.eos_token_ids);
    eos.sort_unstable();
    eos.dedup();
    Ok(LoadedModel { model, tokenizer, chat_templates, eos })
}

fn load_gguf(
    path: &Path,
    device: Device,
    dense: Option<tgi_formats::GgmlType>,
    act: DType,
    opts: &LoadOptions,
) -> Result<LoadedModel, ModelError> {
    let mut file = GgufFile::open(path)?;
    let cfg = DecoderConfig::from_gguf(&file)?;
    let beside = path.with_file_name("tokenizer.json");
    let tokenizer =
        if beside.is_file() { Tokenizer::from_tokenizer_json(&beside)? } else { Tokenizer::from_gguf(&file)? };
    let template = |key: &str| {
        file.get(key).and_then(|v| v.as_str()).map(|s| ChatTemplate::with_tokens_of(s, &tokenizer)).transpose()
    };
    let chat_templates = ChatTemplates::new(
        template("tokenizer.chat_template")?,
        template(&format!("tokenizer.chat_template.{TOOL_USE}"))?,
    );
    let eos = tokenizer.eos_ids().to_vec();
    file.drop_arrays("tokenizer.ggml.");
    let naming = Naming::Gguf { arch: cfg.architecture, heads: cfg.heads, kv_heads: cfg.kv_heads };
    let source: Arc<dyn TensorSource> = Arc::new(file);
    let weights = Weights::new(source, naming, device, dense, act, opts.cpu_tensor_ops);
    let tied = !weights.metas().contains_key("output.weight");
    let weights = in_situ(weights, opts, &cfg, tied, true)?;
    let factors = weights.host_vector("rope_freqs.weight")?;
    let model = Decoder::load(&weights, cfg, factors, opts.kv_dtype, !opts.no_kv_rotation)?;
    Ok(LoadedModel { model, tokenizer, chat_templates, eos })
}

/// Refuses quantization configurations the engine cannot run (bitsandbytes 8-bit LLM.int8; AWQ other than
/// 4-bit GEMM); returns the AWQ settings of an AWQ checkpoint.
fn check_quantization_config(path: &Path) -> Result<Option<AwqConfig>, ModelError> {
    let text = std::fs::read_to_string(path).map_err(|e| ModelError::Config(format!("{}: {e}", path.display())))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| ModelError::Config(format!("{}: {e}", path.display())))?;
    tgi_formats::bnb::BnbQuantConfig::from_config(&value)?;
    AwqConfig::from_config(&value).map_err(|e| ModelError::Config(format!("{}: {e}", path.display())))
}

/// Applies the in-situ options: `quantize`'s plan and the output layer's type.
fn in_situ(
    mut weights: Weights,
    opts: &LoadOptions,
    cfg: &DecoderConfig,
    tied: bool,
    gguf_names: bool,
) -> Result<Weights, ModelError> {
    match opts.quantize {
        // TGI's `--quantize awq` names what the checkpoint is: nothing to do for an AWQ one.
        Some(Quantize::Awq) if awq::any_packed(weights.metas()) => {}
        Some(q) => {
            let plan = plan(q, &weights, cfg, tied, gguf_names)?;
            weights = weights.with_plan(plan);
        }
        None => {}
    }
    if let Some(ty) = opts.lm_head_type {
        weights = weights.with_output_type(ty);
    }
    Ok(weights)
}

/// The in-situ quantization plan for `q` over the model's tensors (refused for an already 4-bit checkpoint).
fn plan(q: Quantize, weights: &Weights, cfg: &DecoderConfig, tied: bool, gguf_names: bool) -> Result<Plan, ModelError> {
    if bnb::any_bnb4(weights.metas()) {
        return Err(ModelError::Unsupported(format!(
            "--quantize {q}: the checkpoint is already bitsandbytes 4-bit; --quantize needs a dense (F32/F16/BF16) one"
        )));
    }
    if awq::any_packed(weights.metas()) {
        return Err(ModelError::Unsupported(format!(
            "--quantize {q}: the checkpoint is already AWQ 4-bit; --quantize needs a dense (F32/F16/BF16) one"
        )));
    }
    Ok(match q {
        Quantize::Bnb4(ty) => Plan::Bnb4(ty),
        Quantize::Awq => {
            return Err(ModelError::Unsupported(
                "--quantize awq: the checkpoint is not AWQ (AWQ checkpoints load as they are, with or without \
                 --quantize awq); `tgi quantize --format awq` makes one, and --quantize nf4 or q4_k_m quantize \
                 this one in place"
                    .into(),
            ))
        }
        Quantize::Ggml(preset) => {
            let shape = ModelShape {
                n_layer: cfg.layers,
                n_head: cfg.heads,
                n_head_kv: cfg.kv_heads,
                tied_embeddings: tied,
                n_expert: cfg.moe.as_ref().map_or(0, |m| m.experts),
            };
            Plan::Ggml(insitu::ggml_plan(weights.metas(), preset, shape, cfg.architecture, gguf_names)?)
        }
    })
}
