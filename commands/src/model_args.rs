//! The flags every command that runs a model shares: which model, on which device, how.

use std::path::PathBuf;

use anyhow::{Context, Result};
use tgi_engines::device::{ComputeDType, DeviceSpec};
use tgi_engines::kernels::{self, Backend};
use tgi_engines::kv::{KvDType, KvError};
use tgi_engines::model::{self, LoadOptions, LoadedModel, ModelError, Quantize};
use tgi_engines::text::chat::{ChatTemplate, ChatTemplates};
use tgi_formats::GgmlType;

use crate::error::InputError;

/// The bundled demo model (stories260k, MIT, from llama2.c), used when no `--model` is given.
const BUNDLED_GGUF: &[u8] = include_bytes!("../../models/stories260k/stories260k-f32.gguf");

/// Which model to run and where.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// The model: a GGUF file, a Hugging Face directory, or a hub id (org/name) [default: the bundled
    /// stories260k demo model].
    #[arg(short, long, value_name = "MODEL")]
    pub model: Option<String>,

    /// Device: cpu, cuda, cuda:N or metal (GPUs need a build with `--features cuda` or `metal`).
    #[arg(long, default_value = "cpu", value_parser = |s: &str| s.parse::<DeviceSpec>().map_err(|e| e.to_string()))]
    pub device: DeviceSpec,

    /// Float type of dense (unquantized) weights: f32, f16 or bf16 [default: as stored].
    #[arg(long, value_parser = |s: &str| s.parse::<ComputeDType>())]
    pub dtype: Option<ComputeDType>,

    /// CPU threads [default: all cores].
    #[arg(short, long, value_name = "N")]
    pub threads: Option<usize>,

    /// CPU kernel level: scalar, avx2, avx-vnni or avx512-vnni; refused when this CPU lacks it (to compare
    /// levels, or to step around one) [default: the fastest this CPU runs].
    #[arg(long, value_name = "LEVEL", value_parser = |s: &str| s.parse::<Backend>())]
    pub cpu_kernels: Option<Backend>,

    /// Lock the weights in RAM (mlock) so the OS never swaps them out.
    #[arg(long)]
    pub mlock: bool,

    /// Quantize a dense (F32/F16/BF16) checkpoint while loading it, tensor by tensor: nf4 or fp4 (bitsandbytes
    /// 4-bit, block 64, double-quantized absmax; decoder linear layers only, embeddings/lm_head/norms as
    /// stored), or a llama-quantize preset (q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k_m, q4_k_s, q4_k_m,
    /// q5_k_s, q5_k_m, q6_k; q3_k/q4_k/q5_k mean the _m mixes), with the per-tensor types `tgi quantize
    /// --type` writes.
    #[arg(long, value_name = "TYPE", value_parser = |s: &str| s.parse::<Quantize>())]
    pub quantize: Option<Quantize>,

    /// Quantize the output layer (lm_head, read in full for every token) while loading it, to a GGML type:
    /// q6_k, q8_0, q4_k, ... or f16/bf16/f32; for checkpoints whose output layer is dense (NF4, AWQ, F16/BF16),
    /// where it makes decoding faster. A tied output layer gets its own copy (the embeddings stay as they are);
    /// refused for an output layer already quantized to another type, or rows that are not whole blocks
    /// [default: as stored, or as --quantize's preset gives it].
    #[arg(long, value_name = "TYPE", value_parser = parse_ggml_type)]
    pub lm_head_type: Option<GgmlType>,

    /// KV cache element type: f32, f16, bf16 or q8_0 (ggml's 8-bit blocks, about half of f16's memory; CPU
    /// only, head width a multiple of 32) [default: f32 for all-f32 weights, else f16, as llama.cpp].
    #[arg(long, value_name = "TYPE", value_parser = |s: &str| s.parse::<KvDType>())]
    pub kv_cache_dtype: Option<KvDType>,
}

impl ModelArgs {
    /// The model path or id, writing out the bundled model when none was given.
    pub fn model_name(&self) -> Result<String> {
        match &self.model {
            Some(m) => Ok(m.clone()),
            None => Ok(bundled_path()?.display().to_string()),
        }
    }

    /// Sizes the thread pool and loads the model.
    pub fn load(&self) -> Result<LoadedModel> {
        if let Some(n) = self.threads {
            if n == 0 {
                return Err(InputError("--threads must be at least 1".into()).into());
            }
            // The pool may already be sized by an earlier call in the same process; that one stands.
            let _ = rayon::ThreadPoolBuilder::new().num_threads(n).build_global();
        }
        if let Some(level) = self.cpu_kernels {
            kernels::choose(level).map_err(|e| InputError(format!("--cpu-kernels: {e}")))?;
        }
        let name = self.model_name()?;
        let opts = LoadOptions {
            device: self.device,
            dtype: self.dtype,
            mlock: self.mlock,
            kv_dtype: self.kv_cache_dtype,
            quantize: self.quantize,
            lm_head_type: self.lm_head_type,
            cpu_tensor_ops: false,
        };
        model::load(&name, &opts).map_err(|e| classify(e, &name))
    }
}

/// A GGML type name (`q6_k`, `Q8_0`, `f16`) for `--lm-head-type`.
fn parse_ggml_type(s: &str) -> Result<GgmlType, String> {
    GgmlType::parse(s).ok_or_else(|| {
        let names: Vec<String> = GgmlType::ALL.iter().map(|t| t.ggml_name().to_ascii_lowercase()).collect();
        format!("unknown GGML type '{s}'; expected one of: {}", names.join(", "))
    })
}

/// Input errors (bad files, unsupported models, missing devices) exit with 2; the rest with 1.
fn classify(e: ModelError, name: &str) -> anyhow::Error {
    let input = match &e {
        ModelError::Candle(_) | ModelError::Mlock(_) => false,
        ModelError::Kv(k) => matches!(k, KvError::Unsupported(_)),
        _ => true,
    };
    let msg = format!("cannot load {name}: {e}");
    if input {
        InputError(msg).into()
    } else {
        anyhow::Error::new(e).context(format!("cannot load {name}"))
    }
}

/// The bundled model as a file in the temp directory, written once (atomically) per content.
pub(crate) fn bundled_path() -> Result<PathBuf> {
    let path = std::env::temp_dir().join(format!("tgi-stories260k-{:08x}.gguf", checksum(BUNDLED_GGUF)));
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == BUNDLED_GGUF.len() as u64) {
        return Ok(path);
    }
    let dir = path.parent().expect("temp dir");
    let mut tmp = tempfile::NamedTempFile::new_in(dir).context("cannot write the bundled model")?;
    std::io::Write::write_all(&mut tmp, BUNDLED_GGUF).context("cannot write the bundled model")?;
    tmp.persist(&path).context("cannot write the bundled model")?;
    Ok(path)
}

/// FNV-1a, to name the bundled file after its content.
fn checksum(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c9dc5u32, |h, &b| (h ^ b as u32).wrapping_mul(0x01000193))
}

/// `--chat-template`: replace (or supply) the model's chat template, as llama.cpp's and vLLM's flag of the same name.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ChatTemplateArg {
    /// Chat template to use instead of the model's (a Jinja file, or the template text itself), e.g. for a model
    /// that ships none.
    #[arg(long, value_name = "FILE|TEMPLATE")]
    pub chat_template: Option<String>,
}

impl ChatTemplateArg {
    /// Installs the given template on `m` for every request (nothing when none was given).
    pub fn apply(&self, m: &mut LoadedModel) -> Result<()> {
        let Some(arg) = &self.chat_template else {
            return Ok(());
        };
        let source = if std::path::Path::new(arg).is_file() {
            std::fs::read_to_string(arg).with_context(|| format!("cannot read the chat template {arg}"))?
        } else if arg.contains("{{") || arg.contains("{%") {
            arg.clone()
        } else {
            return Err(
                InputError(format!("--chat-template: no such file '{arg}' (and it is not a Jinja template)")).into()
            );
        };
        let template = ChatTemplate::with_tokens_of(&source, &m.tokenizer)
            .map_err(|e| InputError(format!("--chat-template: {e}")))?;
        m.chat_templates = ChatTemplates::only(template);
        Ok(())
    }
}
