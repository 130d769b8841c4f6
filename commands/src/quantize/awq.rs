//! `tgi quantize --format awq`: a Hugging Face checkpoint in, a 4-bit AWQ Hugging Face directory out,
//! in AutoAWQ's GEMM layout (formats.md §2) as transformers (through gptqmodel), vLLM and TGI load it:
//! per decoder linear `qweight` (I32 `[in, out/8]`), `qzeros` (I32 `[in/group, out/8]`) and
//! `scales` (F16 `[in/group, out]`); everything else in F16.
//!
//! Decoder layers are encoded one at a time: a [`LayerWeights`] hands over each layer's linear weights
//! and norms as f32, the codec rounds them to nearest per group, and the tensors go straight to the
//! file (its header declares them all up front), so memory holds about one layer, not the model. Without a zero point the codes are
//! symmetric (`scale = max|w| / 7`) but stored offset by 8 with zero point 8, since the GEMM layout
//! always carries zeros.

mod layers;
mod searched;

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use half::f16;
use rayon::prelude::*;
use tgi_engines::convert::encode::ErrorStats;
use tgi_formats::awq::{AwqConfig, AwqTensor, VALID_GROUP_SIZES};
use tgi_formats::safetensors::{StreamWriter, TensorOut};
use tgi_formats::source::{DType, TensorSource};

use super::hf_dir::{dir_bytes, error_stats, print_summary, progress_bar, report_row, FloatCheckpoint, WEIGHTS};
use super::report::{QuantizeSummary, SummaryHead, TensorReport};
use crate::error::InputError;
use crate::output::{finish_writer, AtomicDir};
pub use layers::{AwqPlan, Layer, LayerTensors, LayerWeights, Linear, StoredWeights};
pub use searched::{CalibOptions, SearchedWeights};

/// How the weights are chosen before they are rounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AwqMethod {
    /// Activation-aware: AutoAWQ's scale and clip search on calibration text, then round-to-nearest.
    Awq,
    /// Round-to-nearest of the weights as stored, per group (no activation-aware search).
    Rtn,
}

impl AwqMethod {
    /// The name on the command line.
    fn name(self) -> &'static str {
        match self {
            AwqMethod::Awq => "awq",
            AwqMethod::Rtn => "rtn",
        }
    }
}

/// What `--format awq` and its flags ask for.
#[derive(Clone, Copy, Debug)]
pub struct AwqOptions {
    /// Bits per weight (only 4).
    pub bits: u32,
    /// Input channels per scale and zero point.
    pub group_size: usize,
    /// Asymmetric quantization with a zero point per group.
    pub zero_point: bool,
    /// How the weights are chosen.
    pub method: AwqMethod,
}

impl AwqOptions {
    /// Refuses settings the GEMM layout cannot hold.
    fn check(&self) -> Result<()> {
        if self.bits != 4 {
            return Err(
                InputError(format!("--bits {}: AWQ GEMM checkpoints hold 4-bit weights only", self.bits)).into()
            );
        }
        if !VALID_GROUP_SIZES.contains(&self.group_size) {
            return Err(InputError(format!("--group-size {} is not one of 32, 64, 128", self.group_size)).into());
        }
        Ok(())
    }

    fn config(&self) -> AwqConfig {
        AwqConfig { bits: self.bits, group_size: self.group_size, zero_point: self.zero_point }
    }
}

/// Runs the AWQ export of `model` into directory `output`; `calib` is used by `--method awq`.
#[allow(clippy::too_many_arguments)] // the command's flags, passed through
pub fn run(
    model: &str,
    output: Option<PathBuf>,
    opts: AwqOptions,
    calib: &CalibOptions,
    force: bool,
    quiet: bool,
    json: bool,
) -> Result<()> {
    let started = Instant::now();
    opts.check()?;
    let input = FloatCheckpoint::open(model, "awq")?;
    let plan = AwqPlan::new(&input.metas, opts.group_size)?;
    let calibration = match opts.method {
        AwqMethod::Awq => Some(searched::calibration(&input, calib)?),
        AwqMethod::Rtn => None,
    };
    let calib_line = calibration.as_ref().map(|c| searched::describe(c, calib.samples));
    if let (Some(line), false) = (&calib_line, quiet || json) {
        eprintln!("calibration: {line}");
    }
    let target = output.unwrap_or_else(|| PathBuf::from(format!("{}-AWQ", input.name)));
    let out = AtomicDir::create(&target, force, &input.files.weights)?;

    let progress = progress_bar(quiet || json, &input.metas);
    let mut weights: Box<dyn LayerWeights + '_> = match &calibration {
        Some(c) => Box::new(SearchedWeights::new(
            &input,
            c,
            opts.group_size,
            opts.zero_point,
            calib.search_samples,
            progress.clone(),
        )?),
        None => Box::new(StoredWeights { source: &input.weights }),
    };
    let shapes: HashMap<&str, &[usize]> = input.metas.iter().map(|m| (m.name.as_str(), m.shape.as_slice())).collect();
    let file = File::create(out.path().join(WEIGHTS)).with_context(|| format!("cannot create {WEIGHTS}"))?;
    let metadata = HashMap::from([("format".into(), "pt".into())]);
    let mut writer =
        StreamWriter::new(BufWriter::with_capacity(1 << 20, file), &declare(&plan, &shapes, opts), metadata)?;
    drop(calibration);
    // Tensors outside the linears and norms that a layer's weights changed (a v_proj bias under v -> o scaling).
    let mut changed: HashMap<String, Vec<f32>> = HashMap::new();
    let mut rows = Vec::with_capacity(input.metas.len());
    for layer in &plan.layers {
        progress.set_message(format!("layer {}", layer.index));
        let values = weights.layer(layer).with_context(|| format!("layer {}", layer.index))?;
        let encoded: Vec<Result<_>> = layer
            .linears
            .par_iter()
            .map(|linear| {
                let v = layer_values(&values, &linear.name, linear.out_features * linear.in_features)?;
                let encoded = encode_linear(linear, v, opts).with_context(|| format!("tensor '{}'", linear.name));
                progress.inc(v.len() as u64);
                encoded
            })
            .collect();
        for e in encoded {
            let (group, row) = e?;
            for (name, t) in group {
                writer.write(&name, &t.data)?;
            }
            rows.push((row, true));
        }
        for norm in &layer.norms {
            let v = layer_values(&values, norm, shapes[norm.as_str()].iter().product())?;
            let (t, row) = f16_tensor(norm, shapes[norm.as_str()], v)?;
            writer.write(norm, &t.data)?;
            rows.push((row, false));
            progress.inc(v.len() as u64);
        }
        changed.extend(values.into_iter().filter(|(name, _)| name.ends_with(".bias")));
    }
    drop(weights);
    let mut values = Vec::new();
    for meta in &plan.others {
        progress.set_message(meta.name.clone());
        match changed.remove(&meta.name) {
            Some(v) => values = v,
            None => {
                input.weights.read_f32_into(&meta.name, &mut values)?;
                input.weights.release(&meta.name);
            }
        }
        let (t, row) = f16_tensor(&meta.name, &meta.shape, &values)?;
        writer.write(&meta.name, &t.data)?;
        rows.push((row, false));
        progress.inc(values.len() as u64);
    }
    finish_writer(writer.finish()?)?;
    let mut config = input.config.clone();
    config["quantization_config"] = opts.config().to_json();
    config["torch_dtype"] = "float16".into();
    config["dtype"] = "float16".into();
    input.write_side_files(out.path(), &config, quiet || json)?;
    out.commit()?;
    progress.finish_and_clear();

    let head = SummaryHead {
        input: model.to_string(),
        output: target.display().to_string(),
        preset: format!(
            "awq {}-bit gemm (group {}, {}zero point, method {}{})",
            opts.bits,
            opts.group_size,
            if opts.zero_point { "" } else { "no " },
            opts.method.name(),
            calib_line.map(|l| format!("; calibration {l}")).unwrap_or_default()
        ),
        input_bytes: input.input_bytes(),
        output_bytes: dir_bytes(&target)?,
        seconds: started.elapsed().as_secs_f64(),
    };
    let mut summary = QuantizeSummary::new(head, rows);
    summary.format = "awq".into();
    print_summary(&summary, json, quiet)
}

/// Every tensor of the output with its dtype and shape, in the order they are encoded: layer by
/// layer each linear's `qweight`, `qzeros`, `scales`, then the layer's norms; then the other tensors.
fn declare(plan: &AwqPlan, shapes: &HashMap<&str, &[usize]>, opts: AwqOptions) -> Vec<(String, DType, Vec<usize>)> {
    let g = opts.group_size;
    let mut out = Vec::new();
    for layer in &plan.layers {
        for l in &layer.linears {
            let (o, i, m) = (l.out_features, l.in_features, l.module());
            out.push((format!("{m}.qweight"), DType::I32, vec![i, o / 8]));
            out.push((format!("{m}.qzeros"), DType::I32, vec![i / g, o / 8]));
            out.push((format!("{m}.scales"), DType::F16, vec![i / g, o]));
        }
        out.extend(layer.norms.iter().map(|n| (n.clone(), DType::F16, shapes[n.as_str()].to_vec())));
    }
    out.extend(plan.others.iter().map(|m| (m.name.clone(), DType::F16, m.shape.clone())));
    out
}

/// The values a [`LayerWeights`] gave for `name`, checked to hold `len` of them.
fn layer_values<'a>(values: &'a LayerTensors, name: &str, len: usize) -> Result<&'a [f32]> {
    let v = values.get(name).with_context(|| format!("the layer weights lack '{name}'"))?;
    anyhow::ensure!(v.len() == len, "'{name}' has {} values, expected {len}", v.len());
    Ok(v)
}

/// A tensor stored little-endian from a vector of plain values.
fn owned<T: Copy, const N: usize>(
    dtype: DType,
    shape: Vec<usize>,
    v: &[T],
    bytes: fn(T) -> [u8; N],
) -> TensorOut<'static> {
    TensorOut { dtype, shape, data: Cow::Owned(v.iter().flat_map(|&x| bytes(x)).collect()) }
}

/// Quantizes one linear into its `qweight`, `qzeros` and `scales`, measuring the error of what a
/// loader decodes from them against the values handed over.
fn encode_linear(
    linear: &Linear,
    values: &[f32],
    opts: AwqOptions,
) -> Result<(Vec<(String, TensorOut<'static>)>, TensorReport)> {
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return Err(InputError(format!("value {i} is {}; cannot quantize non-finite weights", values[i])).into());
    }
    let (out, inp, g) = (linear.out_features, linear.in_features, opts.group_size);
    let t = AwqTensor::quantize(values, out, inp, g, opts.zero_point).map_err(|e| InputError(e.to_string()))?;
    let stats = error_stats(values, &t.dequantize());
    let m = linear.module();
    let group = vec![
        (format!("{m}.qweight"), owned(DType::I32, vec![inp, out / 8], &t.qweight, i32::to_le_bytes)),
        (format!("{m}.qzeros"), owned(DType::I32, vec![inp / g, out / 8], &t.qzeros, i32::to_le_bytes)),
        (format!("{m}.scales"), owned(DType::F16, vec![inp / g, out], &t.scales, f16::to_le_bytes)),
    ];
    let bytes = group.iter().map(|(_, t)| t.data.len() as u64).sum();
    Ok((group, report_row(&linear.name, "awq4", &[out, inp], bytes, &stats)))
}

/// A tensor stored as F16, refusing values beyond F16's range.
fn f16_tensor(name: &str, shape: &[usize], values: &[f32]) -> Result<(TensorOut<'static>, TensorReport)> {
    let half: Vec<f16> = values.iter().map(|&x| f16::from_f32(x)).collect();
    if let Some(i) = values.iter().zip(&half).position(|(x, h)| x.is_finite() != h.is_finite()) {
        return Err(InputError(format!(
            "tensor '{name}': value {i} ({}) is beyond float16's range; AWQ checkpoints store it as float16",
            values[i]
        ))
        .into());
    }
    let decoded: Vec<f32> = half.iter().map(|h| h.to_f32()).collect();
    let stats =
        if values.iter().all(|x| x.is_finite()) { error_stats(values, &decoded) } else { ErrorStats::default() };
    let t = owned(DType::F16, shape.to_vec(), &half, f16::to_le_bytes);
    let row = report_row(name, "f16", shape, t.data.len() as u64, &stats);
    Ok((t, row))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(group_size: usize, zero_point: bool) -> AwqOptions {
        AwqOptions { bits: 4, group_size, zero_point, method: AwqMethod::Rtn }
    }

    #[test]
    fn refuses_other_bits_and_group_sizes() {
        assert!(opts(128, true).check().is_ok());
        let bits = AwqOptions { bits: 8, ..opts(128, true) }.check().unwrap_err().to_string();
        assert!(bits.contains("4-bit weights only"), "{bits}");
        assert!(opts(48, true).check().unwrap_err().to_string().contains("--group-size 48"));
    }

    #[test]
    fn linear_tensors_have_the_gemm_shapes() {
        let linear = Linear { name: "model.layers.0.mlp.up_proj.weight".into(), out_features: 16, in_features: 64 };
        let w: Vec<f32> = (0..16 * 64).map(|k| ((k * 37 % 101) as f32 - 50.0) / 50.0).collect();
        let (group, row) = encode_linear(&linear, &w, opts(32, true)).unwrap();
        let shapes: Vec<(&str, DType, &[usize])> =
            group.iter().map(|(n, t)| (n.as_str(), t.dtype, t.shape.as_slice())).collect();
        assert_eq!(
            shapes,
            [
                ("model.layers.0.mlp.up_proj.qweight", DType::I32, &[64, 2][..]),
                ("model.layers.0.mlp.up_proj.qzeros", DType::I32, &[2, 2][..]),
                ("model.layers.0.mlp.up_proj.scales", DType::F16, &[2, 16][..]),
            ]
        );
        assert_eq!(row.bytes, 64 * 2 * 4 + 2 * 2 * 4 + 2 * 16 * 2);
        assert!(row.relative_rmse > 0.0 && row.relative_rmse < 0.1, "{}", row.relative_rmse);
        let mut bad = w.clone();
        bad[5] = f32::NAN;
        assert!(encode_linear(&linear, &bad, opts(32, true)).unwrap_err().to_string().contains("non-finite"));
    }

    #[test]
    fn f16_tensors_refuse_overflow() {
        let (t, row) = f16_tensor("n", &[2], &[1.0, 0.1]).unwrap();
        assert_eq!(t.data.as_ref(), [0x00, 0x3c, 0x66, 0x2e]);
        assert!(row.max_abs_error > 0.0 && row.max_abs_error < 1e-4);
        assert!(f16_tensor("n", &[1], &[1e6]).unwrap_err().to_string().contains("beyond float16"));
    }
}
