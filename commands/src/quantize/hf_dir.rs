//! What the Hugging Face directory outputs (`--format nf4|fp4|bnb|awq`) share: opening a float
//! checkpoint, the files copied beside the new weights, config.json, the per-tensor error rows, the
//! progress bar and the summary.

use std::path::Path;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tgi_engines::convert::encode::ErrorStats;
use tgi_formats::hf::{self, ModelConfig, ModelFiles};
use tgi_formats::safetensors::SafetensorsSet;
use tgi_formats::source::{TensorMeta, TensorSource};

use super::report::{QuantizeSummary, TensorReport};
use crate::error::InputError;

/// Files copied from the input directory when present, beside config.json and the weights.
const COPIED: [&str; 9] = [
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
];

/// The weights file written.
pub const WEIGHTS: &str = "model.safetensors";

/// A float (F32/F16/BF16) Hugging Face checkpoint opened for re-encoding.
pub struct FloatCheckpoint {
    /// Where its files are.
    pub files: ModelFiles,
    /// config.json as parsed JSON, to be rewritten with a `quantization_config`.
    pub config: serde_json::Value,
    /// The weights.
    pub weights: SafetensorsSet,
    /// Every tensor, in file order.
    pub metas: Vec<TensorMeta>,
    /// The model's name, for default output names.
    pub name: String,
}

impl FloatCheckpoint {
    /// Opens `model` (directory, .safetensors file or hub id) for `--format {format}`: refuses GGUF
    /// files, architectures tgi does not know, already-quantized checkpoints and non-float tensors.
    pub fn open(model: &str, format: &str) -> Result<FloatCheckpoint> {
        let path = Path::new(model);
        if path.is_file() && path.extension().is_none_or(|e| e != "safetensors") {
            return Err(InputError(format!(
                "{model}: --format {format} needs a Hugging Face checkpoint (directory, model.safetensors or hub id), not a GGUF file"
            ))
            .into());
        }
        let files = hf::resolve(model)?;
        ModelConfig::from_file(&files.config)?; // an architecture tgi knows
        let text = std::fs::read(&files.config).with_context(|| files.config.display().to_string())?;
        let config: serde_json::Value =
            serde_json::from_slice(&text).map_err(|e| InputError(format!("{}: {e}", files.config.display())))?;
        if let Some(q) = config.get("quantization_config") {
            let method = q.get("quant_method").and_then(|m| m.as_str()).unwrap_or("unknown");
            return Err(InputError(format!(
                "{}: the checkpoint is already quantized ({method}); start from a float checkpoint",
                files.config.display()
            ))
            .into());
        }
        let weights = SafetensorsSet::open_files(&files.weights)?;
        let metas = weights.tensors();
        if let Some(m) = metas.iter().find(|m| !m.dtype.is_readable_as_f32()) {
            return Err(InputError(format!(
                "tensor '{}' is stored as {}; only F32, F16 and BF16 checkpoints can be quantized",
                m.name, m.dtype
            ))
            .into());
        }
        Ok(FloatCheckpoint { files, config, weights, metas, name: model_name(model) })
    }

    /// Bytes of the weight files.
    pub fn input_bytes(&self) -> u64 {
        self.files.weights.iter().map(|p| std::fs::metadata(p).map_or(0, |m| m.len())).sum()
    }

    /// Writes `config` (the input's, with a quantization_config) and copies the tokenizer,
    /// generation and chat-template files into `dir`. Warns on stderr (unless `quiet`) when the
    /// input has no tokenizer to copy.
    pub fn write_side_files(&self, dir: &Path, config: &serde_json::Value, quiet: bool) -> Result<()> {
        std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(config)? + "\n")
            .context("cannot write config.json")?;
        let mut tokenizer = false;
        for file in COPIED {
            let src = self.files.root.join(file);
            if src.is_file() {
                std::fs::copy(&src, dir.join(file)).with_context(|| format!("cannot copy {}", src.display()))?;
                tokenizer |= file == "tokenizer.json" || file == "tokenizer.model";
            }
        }
        if !tokenizer && !quiet {
            eprintln!(
                "warning: {} has no tokenizer.json or tokenizer.model; the output has no tokenizer either",
                self.files.root.display()
            );
        }
        Ok(())
    }
}

/// Whether transformers quantizes this tensor: the weight of a linear layer inside the decoder
/// (`*_proj.weight`: q/k/v/o, gate/up/down). Embeddings, norms and lm_head are not.
pub fn is_quantized_linear(meta: &TensorMeta) -> bool {
    meta.name.starts_with("model.layers.") && meta.name.ends_with("_proj.weight") && meta.shape.len() == 2
}

/// Total bytes of the files in `dir`.
pub fn dir_bytes(dir: &Path) -> Result<u64> {
    Ok(std::fs::read_dir(dir)?.filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).sum())
}

/// Squared-error statistics of `decoded` against `original`.
pub fn error_stats(original: &[f32], decoded: &[f32]) -> ErrorStats {
    let mut s = ErrorStats { count: original.len() as u64, ..Default::default() };
    for (&a, &b) in original.iter().zip(decoded) {
        let e = a - b;
        s.sum_sq_err += f64::from(e) * f64::from(e);
        s.sum_sq += f64::from(a) * f64::from(a);
        s.max_abs_err = s.max_abs_err.max(e.abs());
    }
    s
}

/// A summary row (dims in PyTorch order, `[out, in]`).
pub fn report_row(name: &str, ty: &str, shape: &[usize], bytes: u64, stats: &ErrorStats) -> TensorReport {
    TensorReport {
        name: name.to_string(),
        ty: ty.to_string(),
        dims: shape.iter().map(|&d| d as u64).collect(),
        bytes,
        rmse: stats.rmse(),
        relative_rmse: stats.relative_rmse(),
        max_abs_error: stats.max_abs_err,
    }
}

/// One bar over all values of the checkpoint, naming the current tensor.
pub fn progress_bar(hidden: bool, metas: &[TensorMeta]) -> ProgressBar {
    let total: u64 = metas.iter().map(|m| m.shape.iter().product::<usize>() as u64).sum();
    let bar = ProgressBar::new(total);
    if hidden {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template("{prefix:>8} [{bar:40}] {percent:>3}% {msg} ({elapsed} / ~{duration})")
            .expect("template")
            .progress_chars("=> "),
    );
    bar.set_prefix("quantize");
    bar
}

/// Prints the summary: JSON on stdout with `json`, else the table unless `quiet`.
pub fn print_summary(summary: &QuantizeSummary, json: bool, quiet: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(summary)?);
    } else if !quiet {
        println!("{}", summary.to_table());
    }
    Ok(())
}

/// Folder names that say how a checkpoint is stored rather than what it is: the model's name is its parent's.
const LAYOUT_FOLDERS: [&str; 6] = ["hf", "model", "checkpoint", "weights", "original", "safetensors"];

/// The name default outputs are named after: a hub id's name; for a local checkpoint (a directory, or a file in
/// one) the directory's name, its parent's when that is a layout folder (hf/, model/, ...), or the repo's for a
/// hub cache snapshot (models--ORG--NAME/snapshots/REV).
pub(super) fn model_name(model: &str) -> String {
    let path = Path::new(model);
    let Ok(full) = std::fs::canonicalize(path) else {
        return model.trim_end_matches('/').rsplit('/').next().unwrap_or(model).to_string();
    };
    let dir = if full.is_dir() { full.as_path() } else { full.parent().unwrap_or(&full) };
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    let parent = dir.parent();
    if parent.and_then(name).as_deref() == Some("snapshots") {
        if let Some(repo) = parent.and_then(Path::parent).and_then(name) {
            if let Some(id) = repo.strip_prefix("models--") {
                return id.rsplit("--").next().unwrap_or(id).to_string();
            }
        }
    }
    match name(dir) {
        Some(n) if LAYOUT_FOLDERS.contains(&n.to_ascii_lowercase().as_str()) => parent.and_then(name).unwrap_or(n),
        Some(n) => n,
        None => "model".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tgi_formats::source::DType;

    #[test]
    fn linear_rule() {
        let m =
            |name: &str, shape: &[usize]| TensorMeta { name: name.into(), shape: shape.to_vec(), dtype: DType::F16 };
        assert!(is_quantized_linear(&m("model.layers.0.self_attn.q_proj.weight", &[8, 8])));
        assert!(is_quantized_linear(&m("model.layers.11.mlp.down_proj.weight", &[8, 16])));
        assert!(!is_quantized_linear(&m("model.layers.0.self_attn.q_proj.bias", &[8])));
        assert!(!is_quantized_linear(&m("model.layers.0.input_layernorm.weight", &[8])));
        assert!(!is_quantized_linear(&m("model.embed_tokens.weight", &[8, 8])));
        assert!(!is_quantized_linear(&m("lm_head.weight", &[8, 8])));
    }

    #[test]
    fn default_names_come_from_the_model_not_its_layout_folder() {
        let dir = tempfile::tempdir().unwrap();
        let hf = dir.path().join("stories260k/hf");
        let snapshot = dir.path().join("models--TinyLlama--TinyLlama-1.1B-Chat-v1.0/snapshots/0123abcd");
        let plain = dir.path().join("my-model");
        for d in [&hf, &snapshot, &plain] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(hf.join("model.safetensors"), b"").unwrap();
        let name = |p: &Path| model_name(p.to_str().unwrap());
        assert_eq!(name(&hf), "stories260k");
        assert_eq!(name(&hf.join("model.safetensors")), "stories260k");
        assert_eq!(name(&snapshot), "TinyLlama-1.1B-Chat-v1.0");
        assert_eq!(name(&plain), "my-model");
        assert_eq!(model_name("TinyLlama/TinyLlama-1.1B-Chat-v1.0"), "TinyLlama-1.1B-Chat-v1.0");
    }

    #[test]
    fn error_statistics() {
        let s = error_stats(&[1.0, -2.0], &[1.5, -2.0]);
        assert_eq!((s.count, s.max_abs_err), (2, 0.5));
        assert!((s.sum_sq_err - 0.25).abs() < 1e-12 && (s.sum_sq - 5.0).abs() < 1e-12);
    }
}
