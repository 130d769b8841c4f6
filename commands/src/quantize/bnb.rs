//! `tgi quantize --format nf4|fp4`: a Hugging Face checkpoint in, a bitsandbytes 4-bit Hugging Face
//! directory out, in the layout transformers saves for `load_in_4bit` models (`formats.md` §3.3).

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use tgi_engines::convert::encode::ErrorStats;
use tgi_formats::bnb::{
    code, compress_absmax, decompress_absmax, dequantize_4bit, quant_state_key, quantize_4bit, BnbQuantConfig,
    FourBitType, QuantStateJson, NESTED_BLOCKSIZE, VALID_BLOCKSIZES,
};
use tgi_formats::safetensors::{write_file, TensorOut};
use tgi_formats::source::{DType, TensorMeta, TensorSource};

use super::hf_dir::{
    dir_bytes, error_stats, is_quantized_linear, print_summary, progress_bar, report_row, FloatCheckpoint, WEIGHTS,
};
use super::report::{QuantizeSummary, SummaryHead};
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
    let input = FloatCheckpoint::open(model, opts.ty.name())?;
    let (files, weights, metas) = (&input.files, &input.weights, &input.metas);
    let linear: Vec<&TensorMeta> = metas.iter().filter(|m| is_quantized_linear(m)).collect();
    let Some(first) = linear.first() else {
        return Err(
            InputError(format!("{model}: no linear layer weights (model.layers.*_proj.weight) to quantize")).into()
        );
    };
    let compute_dtype = opts.compute_dtype.map_or(torch_dtype_name(first.dtype), ComputeDtype::torch_name);
    let name = &input.name;
    let target = output.unwrap_or_else(|| PathBuf::from(format!("{name}-{}", opts.ty.name().to_uppercase())));
    let out = AtomicDir::create(&target, force, &files.weights)?;

    let progress = progress_bar(quiet || json, metas);
    let mut tensors: Vec<(String, TensorOut<'_>)> = Vec::new();
    let mut rows = Vec::with_capacity(metas.len());
    let mut values = Vec::new();
    for meta in metas {
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
    let mut config = input.config.clone();
    config["quantization_config"] = qc.to_json();
    input.write_side_files(out.path(), &config, quiet || json)?;
    out.commit()?;
    progress.finish_and_clear();

    let head = SummaryHead {
        input: model.to_string(),
        output: target.display().to_string(),
        preset: format!(
            "{} (block {}, {}double quant, compute {compute_dtype})",
            opts.ty,
            opts.blocksize,
            if opts.double_quant { "" } else { "no " }
        ),
        input_bytes: input.input_bytes(),
        output_bytes: dir_bytes(&target)?,
        seconds: started.elapsed().as_secs_f64(),
    };
    let mut summary = QuantizeSummary::new(head, rows);
    summary.format = "bitsandbytes".into();
    print_summary(&summary, json, quiet)
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
