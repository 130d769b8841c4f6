//! `make-checkpoint`: writes a Hugging Face checkpoint directory (Llama, Qwen3, Gemma 2 or Qwen3-MoE) with
//! deterministic random weights of a real model's shape and a real 32000-token Llama 2 tokenizer, for speed and
//! size work (like vLLM's dummy weights). The values are meaningless; the shapes, names, dtypes, configs and
//! tokenizer are real (the vocabulary is Llama 2's whatever the family).

mod family;
mod gguf_vocab;
mod json;
mod rng;
mod safetensors_out;
mod tokenizer;

use anyhow::{ensure, Context, Result};
use clap::Parser;
use family::Family;
use json::{arr, obj, J};
use safetensors_out::{Dtype, Init, TensorSpec, Written};
use std::path::{Path, PathBuf};

/// llama.cpp's Llama 2 SentencePiece vocabulary GGUF (MIT, see `data/LICENSE-llama.cpp`).
pub const LLAMA_SPM_VOCAB: &[u8] = include_bytes!("../data/ggml-vocab-llama-spm.gguf");

/// Standard deviation of the random matrices (transformers' `initializer_range`, 0.02 in config.json).
const INIT_STD: f32 = 0.02;

/// A named model shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ShapeName {
    /// TinyLlama-1.1B: hidden 2048, 22 layers, 32 heads, 4 KV heads, FFN 5632, context 2048.
    #[value(name = "tinyllama-1.1b")]
    Tinyllama1_1b,
    /// A 150M Llama: hidden 768, 12 layers, 12 heads, 12 KV heads, FFN 2048, context 2048.
    #[value(name = "llama-150m")]
    Llama150m,
    /// Two layers: hidden 256, 4 heads, 2 KV heads, FFN 512, context 512.
    #[value(name = "tiny-2l")]
    Tiny2l,
    /// Qwen3-1.7B: hidden 2048, 28 layers, 16 heads of 128, 8 KV heads, FFN 6144, q/k norms, tied embeddings.
    #[value(name = "qwen3-1.7b")]
    Qwen3_1_7b,
    /// Gemma-2-2B: hidden 2304, 26 layers, 8 heads of 256, 4 KV heads, FFN 9216, soft-caps, window 4096.
    #[value(name = "gemma-2-2b")]
    Gemma2_2b,
    /// Qwen3-30B-A3B's layer (hidden 2048, 32 heads of 128, 4 KV heads, 128 experts of FFN 768, 8 a token) with
    /// 5 of its 48 layers, so that the F16 checkpoint stays under 8 GB (6.5 GB).
    #[value(name = "qwen3-30b-a3b-5l")]
    Qwen3_30bA3b5l,
}

/// The hyperparameters of a model (vocabulary size comes from the tokenizer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    family: Family,
    hidden: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    /// Width of a head; `None` for `hidden / heads`.
    head_dim: Option<usize>,
    ffn: usize,
    ctx: usize,
}

impl Shape {
    fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden / self.heads)
    }
}

impl ShapeName {
    fn shape(self) -> Shape {
        let s = |hidden, layers, heads, kv_heads, ffn, ctx| Shape {
            family: Family::Llama,
            hidden,
            layers,
            heads,
            kv_heads,
            head_dim: None,
            ffn,
            ctx,
        };
        match self {
            ShapeName::Tinyllama1_1b => s(2048, 22, 32, 4, 5632, 2048),
            ShapeName::Llama150m => s(768, 12, 12, 12, 2048, 2048),
            ShapeName::Tiny2l => s(256, 2, 4, 2, 512, 512),
            ShapeName::Qwen3_1_7b => {
                Shape { family: Family::Qwen3, head_dim: Some(128), ..s(2048, 28, 16, 8, 6144, 40960) }
            }
            ShapeName::Gemma2_2b => {
                Shape { family: Family::Gemma2, head_dim: Some(256), ..s(2304, 26, 8, 4, 9216, 8192) }
            }
            ShapeName::Qwen3_30bA3b5l => Shape {
                family: Family::Qwen3Moe { experts: 128, per_token: 8, expert_ffn: 768 },
                head_dim: Some(128),
                ..s(2048, 5, 32, 4, 6144, 40960)
            },
        }
    }
}

/// Write a Hugging Face Llama checkpoint with random weights of a real shape.
#[derive(Debug, Parser)]
#[command(name = "make-checkpoint", version)]
struct Args {
    /// Model shape.
    #[arg(long, value_enum)]
    shape: ShapeName,
    /// Weight dtype.
    #[arg(long, value_enum, default_value = "f16")]
    dtype: Dtype,
    /// PRNG seed; the same seed gives byte-identical files.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output directory (created if missing; existing checkpoint files are overwritten).
    #[arg(short, long)]
    output: PathBuf,
    /// Override the hidden size.
    #[arg(long)]
    hidden: Option<usize>,
    /// Override the number of layers.
    #[arg(long)]
    layers: Option<usize>,
    /// Override the number of attention heads.
    #[arg(long)]
    heads: Option<usize>,
    /// Override the number of key/value heads.
    #[arg(long)]
    kv_heads: Option<usize>,
    /// Override the FFN (intermediate) size.
    #[arg(long)]
    ffn: Option<usize>,
    /// Override the context length (max_position_embeddings).
    #[arg(long)]
    ctx: Option<usize>,
    /// Largest safetensors shard in bytes of tensor data (transformers' "2GB" = 2e9).
    #[arg(long, default_value_t = 2_000_000_000)]
    max_shard_size: u64,
    /// SentencePiece vocabulary GGUF (`tokenizer.ggml.model = llama`) to use instead of the embedded Llama 2 one;
    /// the vocabulary size follows it.
    #[arg(long)]
    vocab: Option<PathBuf>,
}

/// The model's parameters in state-dict order.
fn tensor_specs(s: &Shape, vocab: usize) -> Vec<TensorSpec> {
    let head_dim = s.head_dim();
    let (q, kv) = (s.heads * head_dim, s.kv_heads * head_dim);
    let t = |name: String, shape: &[usize], init| TensorSpec { name, shape: shape.to_vec(), init };
    let w = Init::Normal(INIT_STD);
    let norm = Init::AroundOne(INIT_STD);
    let mut specs = vec![t("model.embed_tokens.weight".into(), &[vocab, s.hidden], w)];
    for i in 0..s.layers {
        let p = format!("model.layers.{i}");
        specs.extend([
            t(format!("{p}.self_attn.q_proj.weight"), &[q, s.hidden], w),
            t(format!("{p}.self_attn.k_proj.weight"), &[kv, s.hidden], w),
            t(format!("{p}.self_attn.v_proj.weight"), &[kv, s.hidden], w),
            t(format!("{p}.self_attn.o_proj.weight"), &[s.hidden, q], w),
        ]);
        let mlp = |prefix: String, ffn: usize| {
            [
                t(format!("{prefix}.gate_proj.weight"), &[ffn, s.hidden], w),
                t(format!("{prefix}.up_proj.weight"), &[ffn, s.hidden], w),
                t(format!("{prefix}.down_proj.weight"), &[s.hidden, ffn], w),
            ]
        };
        match s.family {
            Family::Qwen3Moe { experts, expert_ffn, .. } => {
                specs.push(t(format!("{p}.mlp.gate.weight"), &[experts, s.hidden], w));
                specs.extend((0..experts).flat_map(|e| mlp(format!("{p}.mlp.experts.{e}"), expert_ffn)));
            }
            _ => specs.extend(mlp(format!("{p}.mlp"), s.ffn)),
        }
        // Gemma scales by (1 + w): its norms are drawn around 0.
        let norm = if s.family == Family::Gemma2 { w } else { norm };
        specs.push(t(format!("{p}.input_layernorm.weight"), &[s.hidden], norm));
        specs.push(t(format!("{p}.post_attention_layernorm.weight"), &[s.hidden], norm));
        for (name, width) in s.family.extra_norms(s.hidden, head_dim) {
            specs.push(t(format!("{p}.{name}.weight"), &[width], norm));
        }
    }
    let norm = if s.family == Family::Gemma2 { w } else { norm };
    specs.push(t("model.norm.weight".into(), &[s.hidden], norm));
    if !s.family.tied() {
        specs.push(t("lm_head.weight".into(), &[vocab, s.hidden], w));
    }
    specs
}

/// `config.json` as transformers 5 writes it for the family's class (plus the top-level `rope_theta` and
/// `torch_dtype` older readers look for, like the project's fixtures).
fn config_json(s: &Shape, vocab: &gguf_vocab::SpmVocab, dtype: Dtype) -> J {
    let llama = s.family == Family::Llama;
    let rope_theta = match s.family {
        Family::Llama | Family::Gemma2 => 10000.0,
        Family::Qwen3 | Family::Qwen3Moe { .. } => 1_000_000.0,
    };
    let mut keys = vec![
        ("architectures", arr([J::from(s.family.class())])),
        ("attention_bias", J::Bool(false)),
        ("attention_dropout", J::Float(0.0)),
        ("bos_token_id", J::from(vocab.bos)),
        ("dtype", J::from(dtype.torch_name())),
        ("eos_token_id", J::from(vocab.eos)),
        ("head_dim", J::from(s.head_dim())),
        ("hidden_act", J::from("silu")),
        ("hidden_size", J::from(s.hidden)),
        ("initializer_range", J::Float(0.02)),
        ("intermediate_size", J::from(s.ffn)),
        ("max_position_embeddings", J::from(s.ctx)),
        ("mlp_bias", J::Bool(false)),
        ("model_type", J::from(s.family.model_type())),
        ("num_attention_heads", J::from(s.heads)),
        ("num_hidden_layers", J::from(s.layers)),
        ("num_key_value_heads", J::from(s.kv_heads)),
        ("pad_token_id", J::Null),
        ("pretraining_tp", J::Int(1)),
        ("rms_norm_eps", J::Float(if llama { 1e-5 } else { 1e-6 })),
        ("rope_parameters", obj([("rope_theta", J::Float(rope_theta)), ("rope_type", J::from("default"))])),
        ("tie_word_embeddings", J::Bool(s.family.tied())),
        ("transformers_version", J::from("5.24.0")),
        ("use_cache", J::Bool(true)),
        ("vocab_size", J::from(vocab.tokens.len())),
    ];
    keys.extend(s.family.config_keys(s.layers, s.head_dim()));
    keys.extend([("rope_theta", J::Float(rope_theta)), ("torch_dtype", J::from(dtype.torch_name()))]);
    obj(keys)
}

/// `generation_config.json` (greedy by default, like the project's fixtures).
fn generation_config_json(s: &Shape, vocab: &gguf_vocab::SpmVocab) -> J {
    obj([
        ("bos_token_id", J::from(vocab.bos)),
        ("do_sample", J::Bool(false)),
        ("eos_token_id", J::from(vocab.eos)),
        ("max_length", J::from(s.ctx)),
        ("transformers_version", J::from("5.24.0")),
    ])
}

/// Whether `d` divides `n` (`usize::is_multiple_of` needs Rust 1.87; the workspace supports 1.85).
fn divides(d: usize, n: usize) -> bool {
    n / d * d == n
}

/// The shape after applying the command-line overrides, validated.
fn resolve_shape(args: &Args) -> Result<Shape> {
    let mut s = args.shape.shape();
    s.hidden = args.hidden.unwrap_or(s.hidden);
    s.layers = args.layers.unwrap_or(s.layers);
    s.heads = args.heads.unwrap_or(s.heads);
    s.kv_heads = args.kv_heads.unwrap_or(s.kv_heads);
    s.ffn = args.ffn.unwrap_or(s.ffn);
    s.ctx = args.ctx.unwrap_or(s.ctx);
    ensure!(
        s.hidden > 0 && s.layers > 0 && s.heads > 0 && s.kv_heads > 0 && s.ffn > 0 && s.ctx > 0,
        "sizes must be > 0"
    );
    if s.head_dim.is_none() {
        ensure!(divides(s.heads, s.hidden), "hidden {} is not a multiple of heads {}", s.hidden, s.heads);
    }
    ensure!(divides(2, s.head_dim()), "head dim {} must be even (RoPE)", s.head_dim());
    ensure!(divides(s.kv_heads, s.heads), "heads {} is not a multiple of kv-heads {}", s.heads, s.kv_heads);
    Ok(s)
}

/// The command-line spelling of a value.
fn value_name<V: clap::ValueEnum>(v: &V) -> String {
    v.to_possible_value().map(|p| p.get_name().to_string()).unwrap_or_default()
}

/// Human-readable byte size.
fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

fn run(args: &Args) -> Result<()> {
    let shape = resolve_shape(args)?;
    let vocab = match &args.vocab {
        Some(path) => {
            let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            gguf_vocab::read_spm_vocab(&bytes).with_context(|| format!("vocabulary of {}", path.display()))?
        }
        None => gguf_vocab::read_spm_vocab(LLAMA_SPM_VOCAB).context("embedded vocabulary")?,
    };
    let dir = &args.output;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let start = std::time::Instant::now();
    let specs = tensor_specs(&shape, vocab.tokens.len());
    let params: usize = specs.iter().map(TensorSpec::numel).sum();
    let mut written = safetensors_out::write_weights(dir, &specs, args.dtype, args.seed, args.max_shard_size)?;
    let mut json_file = |name: &str, value: J, newline: bool| -> Result<()> {
        let path = dir.join(name);
        let bytes =
            json::write_pretty(&path, &value, newline).with_context(|| format!("writing {}", path.display()))?;
        written.push(Written { path, bytes });
        Ok(())
    };
    json_file("config.json", config_json(&shape, &vocab, args.dtype), false)?;
    json_file("generation_config.json", generation_config_json(&shape, &vocab), true)?;
    json_file("tokenizer.json", tokenizer::tokenizer_json(&vocab), false)?;
    json_file("tokenizer_config.json", tokenizer::tokenizer_config_json(&vocab, shape.ctx), false)?;
    json_file("special_tokens_map.json", tokenizer::special_tokens_map_json(&vocab), false)?;
    print_summary(dir, args, &shape, vocab.tokens.len(), params, &written, start.elapsed());
    Ok(())
}

fn print_summary(
    dir: &Path,
    args: &Args,
    s: &Shape,
    vocab: usize,
    params: usize,
    written: &[Written],
    elapsed: std::time::Duration,
) {
    println!(
        "{}: {} {} hidden {} layers {} heads {}/{} ffn {} vocab {} ctx {}, {} params, {}, seed {}",
        dir.display(),
        s.family.class(),
        value_name(&args.shape),
        s.hidden,
        s.layers,
        s.heads,
        s.kv_heads,
        s.ffn,
        vocab,
        s.ctx,
        params,
        value_name(&args.dtype),
        args.seed
    );
    for w in written {
        let name = w.path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
        println!("  {name:<40} {:>12} bytes  {}", w.bytes, human(w.bytes));
    }
    let total: u64 = written.iter().map(|w| w.bytes).sum();
    println!("  total {total} bytes ({}) in {:.1} s", human(total), elapsed.as_secs_f64());
}

/// The command line: parses `std::env::args` (printing help or usage errors and exiting as clap does) and runs.
pub fn cli_main() -> Result<()> {
    run(&Args::parse())
}

/// Runs with the given arguments (the first is the program name), as the tests and other tools call it.
pub fn run_args<I, T>(args: I) -> Result<()>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    run(&Args::try_parse_from(args)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tinyllama_has_1_1b_params() {
        let specs = tensor_specs(&ShapeName::Tinyllama1_1b.shape(), 32000);
        let params: usize = specs.iter().map(TensorSpec::numel).sum();
        assert_eq!(params, 1_100_048_384);
        assert_eq!(specs.len(), 2 + 22 * 9 + 1);
        assert_eq!(specs[2].shape, vec![256, 2048]); // k_proj: 4 KV heads of 64
    }

    /// The families' shapes: Qwen3-1.7B's decoder (1.47B parameters with Llama 2's 32000-token vocabulary, 2.03B
    /// with Qwen's 151936), tied,
    /// Gemma-2-2B's four norms a layer, and one Qwen3-30B-A3B layer of 128 experts.
    #[test]
    fn family_shapes() {
        let count = |name: ShapeName| {
            let specs = tensor_specs(&name.shape(), 32000);
            (specs.iter().map(TensorSpec::numel).sum::<usize>(), specs)
        };
        let (params, specs) = count(ShapeName::Qwen3_1_7b);
        assert_eq!(params, 1_474_946_048);
        assert!(specs.iter().any(|t| t.name == "model.layers.0.self_attn.q_norm.weight" && t.shape == [128]));
        assert!(!specs.iter().any(|t| t.name == "lm_head.weight"));
        let (_, specs) = count(ShapeName::Gemma2_2b);
        assert_eq!(
            specs.iter().filter(|t| t.name.starts_with("model.layers.0.") && t.name.contains("norm")).count(),
            4
        );
        let (params, specs) = count(ShapeName::Qwen3_30bA3b5l);
        assert_eq!(specs.iter().filter(|t| t.name.starts_with("model.layers.0.mlp.experts.")).count(), 3 * 128);
        assert!(params * 2 < 8_000_000_000, "{params} parameters are over 8 GB in F16");
        let cfg = config_json(
            &ShapeName::Gemma2_2b.shape(),
            &gguf_vocab::read_spm_vocab(LLAMA_SPM_VOCAB).unwrap(),
            Dtype::F16,
        );
        assert_eq!(cfg.get("query_pre_attn_scalar"), Some(&J::Int(256)));
    }

    #[test]
    fn overrides_are_validated() {
        let args = |extra: &[&str]| {
            let mut v = vec!["make-checkpoint", "--shape", "tiny-2l", "-o", "x"];
            v.extend_from_slice(extra);
            Args::parse_from(v)
        };
        assert_eq!(resolve_shape(&args(&["--layers", "3"])).unwrap().layers, 3);
        assert!(resolve_shape(&args(&["--heads", "3"])).is_err());
        assert!(resolve_shape(&args(&["--kv-heads", "3"])).is_err());
    }
}
