//! The flags every command that runs a model shares: which model, on which device, how.

use std::path::PathBuf;

use anyhow::{Context, Result};
use tgi_engines::device::{ComputeDType, DeviceSpec};
use tgi_engines::kernels::{self, Backend};
use tgi_engines::kv::{KvDType, KvError};
use tgi_engines::model::{self, LoadOptions, LoadedModel, ModelError, Quantize};
use tgi_engines::text::chat::{marked_by, ChatTemplate, ChatTemplates, BUILTIN_NAMES};
use tgi_formats::GgmlType;

use crate::error::InputError;

/// The bundled demo model (stories260k, MIT, from llama2.c), used when no `--model` is given.
const BUNDLED_GGUF: &[u8] = include_bytes!("../../models/stories260k/stories260k-f32.gguf");

/// How errors name the bundled model (its file in the temp directory is an implementation detail).
const BUNDLED_NAME: &str = "the bundled stories260k demo model";

/// The chat template the bundled model is served with (it ships none), so that a first chat request works.
const BUNDLED_TEMPLATE: &str = "chatml";

/// Which model to run and where.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// The model: a GGUF file, a Hugging Face directory, or a hub id (org/name) [default: the bundled
    /// stories260k demo model, served with the chatml template].
    #[arg(short, long, visible_alias = "model-id", value_name = "MODEL")]
    pub model: Option<String>,

    /// The revision of a hub id: a branch, tag or commit [default: main].
    #[arg(long, value_name = "REV")]
    pub revision: Option<String>,

    /// Device: cpu, gpu (the GPU this build has), cuda, cuda:N or metal; GPUs need a build with
    /// `--features cuda` (NVIDIA) or `--features metal` (Apple).
    #[arg(long, default_value = "cpu", value_parser = |s: &str| s.parse::<DeviceSpec>().map_err(|e| e.to_string()))]
    pub device: DeviceSpec,

    /// Layers on the GPU, as llama.cpp's -ngl: tgi runs a model on one device, so N of at least the model's
    /// layers (or -1) puts all of them on the GPU this build has (as --device gpu), 0 keeps them on the CPU, and
    /// partial offload is refused.
    #[arg(long, visible_alias = "gpu-layers", value_name = "N", allow_negative_numbers = true)]
    pub n_gpu_layers: Option<i64>,

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
    /// q5_k_s, q5_k_m, q6_k, iq4_nl, iq4_xs, iq3_s, iq3_m, tq1_0, tq2_0; q3_k/q4_k/q5_k mean the _m mixes; not the presets
    /// that need an importance matrix), with the per-tensor types
    /// `tgi quantize --type` writes.
    #[arg(long, value_name = "TYPE", value_parser = |s: &str| s.parse::<Quantize>())]
    pub quantize: Option<Quantize>,

    /// Quantize the output layer (lm_head, read in full for every token) while loading it, to a GGML type:
    /// q6_k, q8_0, q4_k, ... or f16/bf16/f32; for checkpoints whose output layer is dense (NF4, AWQ, F16/BF16),
    /// where it makes decoding faster. A tied output layer gets its own copy (the embeddings stay as they are);
    /// refused for an output layer already quantized to another type, or rows that are not whole blocks
    /// [default: as stored, or as --quantize's preset gives it].
    #[arg(long, value_name = "TYPE", value_parser = parse_ggml_type)]
    pub lm_head_type: Option<GgmlType>,

    /// KV cache element type: f32, f16, bf16, or ggml's blocks of 32 as llama.cpp's --cache-type-k/-v names
    /// them: q8_0 (34 bytes per 32 values, about half of f16's memory), q5_1 (24), q5_0 (22), q4_1 (20), q4_0
    /// or iq4_nl (18, 28% of f16; iq4_nl's 16 levels are non-uniform); block types are CPU only and need a head width that is a multiple of 32 [default:
    /// f32 for all-f32 weights, else f16, as llama.cpp].
    #[arg(long, value_name = "TYPE", value_parser = |s: &str| s.parse::<KvDType>())]
    pub kv_cache_dtype: Option<KvDType>,

    /// Store a block-quantized KV cache (q8_0 ... q4_0, iq4_nl) without llama.cpp's Hadamard rotation. By default, as
    /// llama.cpp does, queries and keys are multiplied by an orthonormal Walsh-Hadamard matrix over each head
    /// (the largest power of two dividing the head width) and values by one of 64, the attention output rotated
    /// back, when the head width is a multiple of 64: q·k is unchanged but outlier channels no longer set the
    /// block scales. llama.cpp's LLAMA_ATTN_ROT_DISABLE=1 turns it off too.
    #[arg(long)]
    pub no_kv_rotation: bool,
}

impl ModelArgs {
    /// The device to run on: --device, or the one --n-gpu-layers implies (any layers: the build's GPU).
    pub fn device(&self) -> Result<DeviceSpec, InputError> {
        match (self.n_gpu_layers, self.device) {
            (None, d) => Ok(d),
            (Some(0), DeviceSpec::Cpu) => Ok(DeviceSpec::Cpu),
            (Some(0), d) => {
                Err(InputError(format!("--n-gpu-layers 0 keeps every layer on the CPU, but --device is {d}")))
            }
            (Some(_), DeviceSpec::Cpu) => DeviceSpec::gpu().map_err(|e| InputError(format!("--n-gpu-layers: {e}"))),
            (Some(_), d) => Ok(d),
        }
    }

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
        // A hub revision is resolved to its snapshot directory here; the engine loads that.
        let path = match &self.revision {
            Some(rev) => {
                let files = tgi_formats::hf::resolve_at(&name, Some(rev))
                    .map_err(|e| InputError(format!("cannot load {name} at --revision {rev}: {e}")))?;
                files.root.display().to_string()
            }
            None => name.clone(),
        };
        let opts = LoadOptions {
            device: self.device()?,
            dtype: self.dtype,
            mlock: self.mlock,
            kv_dtype: self.kv_cache_dtype,
            no_kv_rotation: self.no_kv_rotation || rotation_disabled_by_env(),
            quantize: self.quantize,
            lm_head_type: self.lm_head_type,
            cpu_tensor_ops: false,
        };
        let shown = if self.model.is_some() { name.as_str() } else { BUNDLED_NAME };
        let mut loaded = model::load(&path, &opts).map_err(|e| classify(e, shown))?;
        if let Some(n) = self.n_gpu_layers {
            whole_model_layers(n, loaded.model.config().layers)?;
        }
        if loaded.chat_templates.get(false).is_none() {
            // A model that ships no template (the published Gemma 3 270M GGUF, a base model, has none) gets the
            // built-in one its vocabulary's chat markers name; the bundled model gets ChatML.
            let name = if self.model.is_none() { Some(BUNDLED_TEMPLATE) } else { marked_by(&loaded.tokenizer) };
            if let Some(name) = name {
                if self.model.is_some() {
                    tracing::warn!(
                        "{shown} has no chat template; chat requests use the built-in '{name}' template its \
                         vocabulary's markers name (--chat-template replaces it)"
                    );
                }
                let template = ChatTemplate::builtin(name, &loaded.tokenizer).expect("a built-in name");
                loaded.chat_templates = ChatTemplates::only(template.context("the built-in chat template")?);
            }
        }
        Ok(loaded)
    }
}

/// Refuses `--n-gpu-layers N` for part of a model of `layers` layers: tgi runs every layer on one device.
fn whole_model_layers(n: i64, layers: usize) -> Result<(), InputError> {
    if n > 0 && (n as u64) < layers as u64 {
        return Err(InputError(format!(
            "--n-gpu-layers {n}: the model has {layers} layers, and tgi runs all of them on one device (no partial \
             offload); use --n-gpu-layers {layers} (or -1, 99) for the GPU, or 0 for the CPU"
        )));
    }
    Ok(())
}

/// A GGML type name (`q6_k`, `Q8_0`, `f16`) for `--lm-head-type`.
/// Whether llama.cpp's `LLAMA_ATTN_ROT_DISABLE` is set to a non-zero number (it reads it with `atoi`).
fn rotation_disabled_by_env() -> bool {
    std::env::var("LLAMA_ATTN_ROT_DISABLE").is_ok_and(|v| env_flag(&v))
}

/// `atoi(v) != 0`: the leading integer of `v` (after spaces and a sign), 0 when there is none.
fn env_flag(v: &str) -> bool {
    let v = v.trim_start();
    let digits = v.strip_prefix(['+', '-']).unwrap_or(v);
    digits.chars().take_while(char::is_ascii_digit).any(|c| c != '0')
}

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
    /// Chat template to use instead of the model's, e.g. for a model that ships none: a Jinja file, the template
    /// text itself, or one of llama.cpp's built-in names (chatml, llama2, llama3, mistral-v7, phi3, gemma, zephyr,
    /// deepseek, ...; the error for an unknown name lists them all).
    #[arg(long, value_name = "FILE|NAME|TEMPLATE")]
    pub chat_template: Option<String>,
}

impl ChatTemplateArg {
    /// Installs the given template on `m` for every request (nothing when none was given).
    pub fn apply(&self, m: &mut LoadedModel) -> Result<()> {
        let Some(arg) = &self.chat_template else {
            return Ok(());
        };
        let template = if std::path::Path::new(arg).is_file() {
            let source =
                std::fs::read_to_string(arg).with_context(|| format!("cannot read the chat template {arg}"))?;
            ChatTemplate::with_tokens_of(&source, &m.tokenizer)
        } else if let Some(template) = ChatTemplate::builtin(arg, &m.tokenizer) {
            template
        } else if arg.contains("{{") || arg.contains("{%") {
            ChatTemplate::with_tokens_of(arg, &m.tokenizer)
        } else {
            return Err(InputError(format!(
                "--chat-template: '{arg}' is no file, no built-in template name ({}) and no Jinja template",
                BUILTIN_NAMES.join(", ")
            ))
            .into());
        }
        .map_err(|e| InputError(format!("--chat-template: {e}")))?;
        m.chat_templates = ChatTemplates::only(template);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        m: ModelArgs,
    }

    fn args(flags: &[&str]) -> ModelArgs {
        Wrap::try_parse_from(std::iter::once("x").chain(flags.iter().copied())).unwrap().m
    }

    /// LLAMA_ATTN_ROT_DISABLE is read as C's atoi reads it.
    #[test]
    fn rotation_env_is_read_like_atoi() {
        for (v, off) in
            [("1", true), ("0", false), ("", false), (" 2x", true), ("-1", true), ("00", false), ("no", false)]
        {
            assert_eq!(env_flag(v), off, "{v:?}");
        }
        assert!(args(&["--no-kv-rotation"]).no_kv_rotation);
        assert!(!args(&[]).no_kv_rotation);
    }

    #[test]
    fn gpu_layers_mean_all_or_none() {
        assert_eq!(args(&["--n-gpu-layers", "0"]).device().unwrap(), DeviceSpec::Cpu);
        assert_eq!(args(&["--n-gpu-layers", "99", "--device", "cuda:1"]).device().unwrap(), DeviceSpec::Cuda(1));
        let e = args(&["--n-gpu-layers", "0", "--device", "cuda"]).device().unwrap_err().0;
        assert!(e.contains("but --device is cuda:0"), "{e}");
        match args(&["--n-gpu-layers", "-1"]).device() {
            Ok(d) => assert_ne!(d, DeviceSpec::Cpu),
            Err(e) => assert!(e.0.contains("without GPU support"), "{}", e.0),
        }
        assert!(whole_model_layers(99, 18).is_ok() && whole_model_layers(-1, 18).is_ok());
        assert!(whole_model_layers(18, 18).is_ok() && whole_model_layers(0, 18).is_ok());
        let e = whole_model_layers(10, 18).unwrap_err().0;
        assert!(e.contains("no partial offload") && e.contains("--n-gpu-layers 18"), "{e}");
    }

    #[test]
    fn the_bundled_template_is_a_builtin() {
        assert!(BUILTIN_NAMES.contains(&BUNDLED_TEMPLATE));
    }
}
