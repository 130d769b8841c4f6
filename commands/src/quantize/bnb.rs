//! `tgi quantize --format nf4|fp4`: a Hugging Face checkpoint in, a bitsandbytes 4-bit Hugging Face
//! directory out, in the layout transformers saves for `load_in_4bit` models (`formats.md` §3.3).

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tgi_engines::convert::encode::ErrorStats;
use tgi_formats::bnb::{
    code, compress_absmax, decompress_absmax, dequantize_4bit, quant_state_key, quantize_4bit, BnbQuantConfig,
    FourBitType, QuantStateJson, NESTED_BLOCKSIZE, VALID_BLOCKSIZES,
};
use tgi_formats::hf::{self, ModelConfig};
use tgi_formats::safetensors::{write_file, SafetensorsSet, TensorOut};
use tgi_formats::source::{DType, TensorMeta, TensorSource};

use super::report::{Summary, SummaryHead, TensorReport};
use crate::error::InputError;
use crate::output::AtomicDir;

/// Compute dtype recorded as `bnb_4bit_compute_dtype`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ComputeDtype {
    /// float16.
    F16,
    /// bfloat16.
    Bf16,
    /// float32.
    F32,
}

impl ComputeDtype {
    /// The torch dtype name transformers writes.
    fn torch_name(self) -> &'static str {
        match self {
            ComputeDtype::F16 => "float16",
            ComputeDtype::Bf16 => "bfloat16",
            ComputeDtype::F32 => "float32",
        }
    }
}

/// What `--format nf4|fp4` and its flags ask for.
#[derive(Clone, Copy, Debug)]
pub struct BnbOptions {
    /// NF4 or FP4.
    pub ty: FourBitType,
    /// Values per absmax block.
    pub blocksize: usize,
    /// Double quantization of the absmax values.
    pub double_quant: bool,
    /// `bnb_4bit_compute_dtype`; the linear weights' stored dtype when `None`.
    pub compute_dtype: Option<ComputeDtype>,
}

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
const WEIGHTS: &str = "model.safetensors";

/// Whether transformers + bitsandbytes quantize this tensor: the weight of a linear layer inside the
/// decoder (`*_proj.weight`: q/k/v/o, gate/up/down). Embeddings, norms and lm_head stay as stored.
fn is_quantized_linear(meta: &TensorMeta) -> bool {
    meta.name.starts_with("model.layers.") && meta.name.ends_with("_proj.weight") && meta.shape.len() == 2
}

/// The torch name of a float dtype (`float16`, ...).
fn torch_dtype_name(d: DType) -> &'static str {
    match d {
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        _ => "float32",
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Runs the bitsandbytes export of `model` into directory `output`.
pub fn run(model: &str, output: Option<PathBuf>, opts: BnbOptions, force: bool, quiet: bool, json: bool) -> Result<()> {
    let started = Instant::now();
    if !VALID_BLOCKSIZES.contains(&opts.blocksize) {
        return Err(InputError(format!(
            "--blocksize {} is not one bitsandbytes accepts (32, 64, 128, 256, 512, 1024, 2048, 4096)",
            opts.blocksize
        ))
        .into());
    }
    let path = Path::new(model);
    if path.is_file() && path.extension().is_none_or(|e| e != "safetensors") {
        return Err(InputError(format!(
            "{model}: --format {} needs a Hugging Face checkpoint (directory, model.safetensors or hub id), not a GGUF file",
            opts.ty
        ))
        .into());
    }
    let files = hf::resolve(model)?;
    ModelConfig::from_file(&files.config)?; // an architecture tgi knows
    let config_text = std::fs::read(&files.config).with_context(|| files.config.display().to_string())?;
    let mut config: serde_json::Value =
        serde_json::from_slice(&config_text).map_err(|e| InputError(format!("{}: {e}", files.config.display())))?;
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
    let linear: Vec<&TensorMeta> = metas.iter().filter(|m| is_quantized_linear(m)).collect();
    let Some(first) = linear.first() else {
        return Err(
            InputError(format!("{model}: no linear layer weights (model.layers.*_proj.weight) to quantize")).into()
        );
    };
    let compute_dtype = opts.compute_dtype.map_or(torch_dtype_name(first.dtype), ComputeDtype::torch_name);
    let name = if path.is_dir() {
        std::fs::canonicalize(path).ok().and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
    } else {
        None
    }
    .unwrap_or_else(|| model.trim_end_matches('/').rsplit('/').next().unwrap_or(model).to_string());
    let target = output.unwrap_or_else(|| PathBuf::from(format!("{name}-{}", opts.ty.name().to_uppercase())));
    let out = AtomicDir::create(&target, force, &files.weights)?;

    let progress = progress_bar(quiet || json, &metas);
    let mut tensors: Vec<(String, TensorOut<'_>)> = Vec::new();
    let mut rows = Vec::with_capacity(metas.len());
    let mut values = Vec::new();
    for meta in &metas {
        progress.set_message(meta.name.clone());
        let numel: u64 = meta.shape.iter().product::<usize>() as u64;
        if is_quantized_linear(meta) {
            weights.read_f32_into(&meta.name, &mut values)?;
            weights.release(&meta.name);
            let (group, stats) =
                encode_weight(meta, &values, opts).with_context(|| format!("tensor '{}'", meta.name))?;
            let bytes = group.iter().map(|(_, t)| t.data.len() as u64).sum();
            rows.push((report_row(&meta.name, opts.ty.name(), &meta.shape, bytes, &stats), true));
            tensors.extend(group);
        } else {
            let data = weights.raw_bytes(&meta.name)?;
            let ty = meta.dtype.to_string().to_lowercase();
            rows.push((report_row(&meta.name, &ty, &meta.shape, data.len() as u64, &ErrorStats::default()), false));
            tensors.push((
                meta.name.clone(),
                TensorOut { dtype: meta.dtype, shape: meta.shape.clone(), data: Cow::Borrowed(data) },
            ));
        }
        progress.inc(numel);
    }
    progress.set_message(format!("writing {WEIGHTS}"));
    write_file(&out.path().join(WEIGHTS), &tensors, HashMap::from([("format".into(), "pt".into())]))?;
    drop(tensors);
    let qc =
        BnbQuantConfig { quant_type: opts.ty, double_quant: opts.double_quant, compute_dtype: compute_dtype.into() };
    config["quantization_config"] = qc.to_json();
    std::fs::write(out.path().join("config.json"), serde_json::to_string_pretty(&config)? + "\n")
        .context("cannot write config.json")?;
    for file in COPIED {
        let src = files.root.join(file);
        if src.is_file() {
            std::fs::copy(&src, out.path().join(file)).with_context(|| format!("cannot copy {}", src.display()))?;
        }
    }
    out.commit()?;
    progress.finish_and_clear();

    let input_bytes = files.weights.iter().map(|p| std::fs::metadata(p).map_or(0, |m| m.len())).sum();
    let output_bytes = std::fs::read_dir(&target)?.filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).sum();
    let head = SummaryHead {
        input: model.to_string(),
        output: target.display().to_string(),
        preset: format!(
            "{} (block {}, {}double quant, compute {compute_dtype})",
            opts.ty,
            opts.blocksize,
            if opts.double_quant { "" } else { "no " }
        ),
        input_bytes,
        output_bytes,
        seconds: started.elapsed().as_secs_f64(),
    };
    let mut summary = Summary::new(head, rows);
    summary.format = "bitsandbytes".into();
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else if !quiet {
        println!("{}", summary.to_table());
    }
    Ok(())
}

/// Quantizes one linear weight into its tensor group and measures the error of what a loader decodes.
fn encode_weight(
    meta: &TensorMeta,
    values: &[f32],
    opts: BnbOptions,
) -> Result<(Vec<(String, TensorOut<'static>)>, ErrorStats)> {
    let w = &meta.name;
    let n = values.len();
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return Err(InputError(format!("value {i} is {}; cannot quantize non-finite weights", values[i])).into());
    }
    let (packed, absmax) = quantize_4bit(opts.ty, opts.blocksize, values)?;
    let nested = opts.double_quant.then(|| compress_absmax(&absmax));
    let decoded_absmax = nested.as_ref().map_or_else(|| absmax.clone(), decompress_absmax);
    let mut decoded = vec![0.0f32; n];
    dequantize_4bit(opts.ty, opts.blocksize, &packed, &decoded_absmax, n, &mut decoded)?;
    let stats = error_stats(values, &decoded);

    let owned = |dtype, shape: Vec<usize>, data: Vec<u8>| TensorOut { dtype, shape, data: Cow::Owned(data) };
    let blocks = absmax.len();
    let mut group = vec![(w.clone(), owned(DType::U8, vec![packed.len(), 1], packed))];
    let state = QuantStateJson {
        quant_type: opts.ty.name().into(),
        blocksize: opts.blocksize,
        dtype: torch_dtype_name(meta.dtype).into(),
        shape: meta.shape.clone(),
        nested_blocksize: nested.as_ref().map(|_| NESTED_BLOCKSIZE),
        nested_dtype: nested.as_ref().map(|_| "float32".into()),
        nested_offset: nested.as_ref().map(|n| f64::from(n.offset)),
    };
    match nested {
        Some(nq) => {
            group.push((format!("{w}.absmax"), owned(DType::U8, vec![blocks], nq.codes)));
            group.push((format!("{w}.quant_map"), owned(DType::F32, vec![16], f32_bytes(&code(opts.ty)))));
            let nb = nq.nested_absmax.len();
            group.push((format!("{w}.nested_absmax"), owned(DType::F32, vec![nb], f32_bytes(&nq.nested_absmax))));
            group.push((format!("{w}.nested_quant_map"), owned(DType::F32, vec![256], f32_bytes(&nq.nested_map))));
        }
        None => {
            group.push((format!("{w}.absmax"), owned(DType::F32, vec![blocks], f32_bytes(&absmax))));
            group.push((format!("{w}.quant_map"), owned(DType::F32, vec![16], f32_bytes(&code(opts.ty)))));
        }
    }
    let json = state.to_json().into_bytes();
    group.push((quant_state_key(w, opts.ty), owned(DType::U8, vec![json.len()], json)));
    Ok((group, stats))
}

/// Squared-error statistics of `decoded` against `original`.
fn error_stats(original: &[f32], decoded: &[f32]) -> ErrorStats {
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
fn report_row(name: &str, ty: &str, shape: &[usize], bytes: u64, stats: &ErrorStats) -> TensorReport {
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
fn progress_bar(hidden: bool, metas: &[TensorMeta]) -> ProgressBar {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
