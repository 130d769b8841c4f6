//! `tgi quantize`: a Hugging Face checkpoint or a float GGUF file in, a quantized GGUF file out; or
//! a Hugging Face checkpoint in, a bitsandbytes NF4/FP4 or an AWQ Hugging Face directory out.

pub mod awq;
mod bnb;
mod hf_dir;
mod imatrix;
mod positional;
mod report;

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tgi_engines::convert::preset::{Preset, TypeOverrides};
use tgi_engines::convert::{run_job, ConvertError, ExportPlan, Scratch};
use tgi_engines::model::{DecoderConfig, ModelError};
use tgi_formats::gguf::{GgufFile, GgufWriter};
use tgi_formats::hf::{self, GgufVocab, ModelConfig};
use tgi_formats::safetensors::SafetensorsSet;
use tgi_formats::source::DType;
use tgi_formats::source::TensorSource;
use tgi_formats::GgmlType;

use crate::error::InputError;
use crate::output::{finish_writer, AtomicFile};
use positional::PresetParser;
use report::{QuantizeSummary, SummaryHead, TensorReport};

/// Output formats of `tgi quantize`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// GGUF, as llama.cpp loads it.
    Gguf,
    /// bitsandbytes 4-bit NormalFloat: a Hugging Face directory as transformers saves load_in_4bit models.
    Nf4,
    /// bitsandbytes 4-bit float: the same layout with the FP4 code.
    Fp4,
    /// bitsandbytes 4-bit with the type from --quant-type (default nf4).
    Bnb,
    /// AWQ 4-bit in AutoAWQ's GEMM layout: a Hugging Face directory that transformers (gptqmodel), vLLM and TGI load.
    Awq,
}

pub use awq::AwqMethod;
pub use bnb::ComputeDtype;
use tgi_formats::bnb::FourBitType;

/// Arguments of `tgi quantize`.
#[derive(Debug, clap::Args)]
#[command(after_help = "llama-quantize's positional form works too: tgi quantize IN [OUT] TYPE [THREADS].\n\n\
Examples:\n  \
tgi quantize models/stories260k/hf --type q8_0 -o stories-q8_0.gguf\n  \
tgi quantize models/stories260k/stories260k-f32.gguf out-Q8_0.gguf Q8_0\n  \
tgi quantize models/stories-distill-4l/hf\n  \
tgi quantize models/stories-distill-4l/hf --type q3_k_m \\\n    \
--imatrix stories.imatrix.gguf -o stories-q3_k_m-imat.gguf\n  \
tgi quantize TinyLlama/TinyLlama-1.1B-Chat-v1.0 --type q4_k_m \\\n    \
-o tinyllama-q4_k_m.gguf\n  \
tgi quantize model-f16.gguf --type q6_k --tensor-type 'ffn_down=q8_0' \\\n    \
-o model-q6_k.gguf\n  \
tgi quantize models/stories260k/hf --format nf4 -o stories-nf4\n  \
tgi quantize TinyLlama/TinyLlama-1.1B-Chat-v1.0 --format fp4 \\\n    \
--blocksize 128 --no-double-quant -o tinyllama-fp4\n  \
tgi quantize models/stories-distill-4l/hf --format awq -o stories-awq\n  \
tgi quantize models/stories-distill-4l/hf --format awq \\\n    \
--calib-file calib.jsonl --calib-samples 64 -o stories-awq-calib\n  \
tgi quantize models/stories-distill-4l/hf --format awq --method rtn \\\n    \
-o stories-awq-rtn")]
pub struct QuantizeArgs {
    /// The model: a Hugging Face directory (or its model.safetensors, with config.json beside
    /// it), a hub id (org/name, from the local cache or downloaded), or a GGUF file (F32/F16/BF16,
    /// or already quantized with --allow-requantize).
    pub model: String,

    /// llama-quantize's positional form after the model: [OUTPUT] TYPE [THREADS], the same as -o, --type and
    /// --threads.
    #[arg(value_name = "[OUTPUT] TYPE [THREADS]", num_args = 0..=3)]
    pub positional: Vec<String>,

    /// GGUF input: requantize tensors that are already block-quantized to another type than their
    /// target (decoded to f32, then encoded), as llama-quantize --allow-requantize does. Each step
    /// adds its error to the last: start from F16/BF16 where you can. Tensors already of their
    /// target type are copied as they are.
    #[arg(long)]
    pub allow_requantize: bool,

    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Gguf)]
    pub format: Format,

    /// GGUF quantization preset, with llama.cpp's per-tensor rules, in any case (Q8_0 or q8_0); q3_k, q4_k and
    /// q5_k mean the _m mixes [default: q4_k_m].
    #[arg(long = "type", short = 't', value_name = "TYPE", value_parser = PresetParser)]
    pub preset: Option<Preset>,

    /// Output file for GGUF [default: <model name>-<type>.gguf], output directory for nf4/fp4/bnb
    /// [default: <model name>-NF4 (or -FP4)] and awq [default: <model name>-AWQ], in the current directory. The
    /// model name is a hub id's, a GGUF file's general.name, or a directory's (its parent's for a directory named
    /// like a layout, such as hf/, and the repo's for a hub cache snapshot).
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,

    /// bitsandbytes 4-bit type (nf4, fp4) for --format bnb; must agree with --format nf4/fp4.
    #[arg(long, value_name = "TYPE", value_parser = parse_four_bit_type)]
    pub quant_type: Option<FourBitType>,

    /// bitsandbytes: values per absmax block (32, 64, 128, ..., 4096) [default: 64].
    #[arg(long, value_name = "N")]
    pub blocksize: Option<usize>,

    /// bitsandbytes: store the absmax values as f32 instead of double-quantizing them
    /// (8-bit, blocks of 256, as bnb_4bit_use_double_quant; on by default).
    #[arg(long)]
    pub no_double_quant: bool,

    /// bitsandbytes: bnb_4bit_compute_dtype recorded in config.json [default: the stored dtype of
    /// the linear weights].
    #[arg(long, value_enum, value_name = "DTYPE")]
    pub compute_dtype: Option<ComputeDtype>,

    /// AWQ: bits per weight; only 4 (the GEMM layout) [default: 4].
    #[arg(long, value_name = "N")]
    pub bits: Option<u32>,

    /// AWQ: input channels sharing one scale and zero point (32, 64, 128) [default: 128].
    #[arg(long, value_name = "N")]
    pub group_size: Option<usize>,

    /// AWQ: asymmetric quantization with a zero point per group (the default).
    #[arg(long, overrides_with = "no_zero_point")]
    pub zero_point: bool,

    /// AWQ: symmetric quantization (scale max|w|/7); the codes are stored offset by 8 with zero
    /// point 8, as the GEMM layout always carries zero points.
    #[arg(long, overrides_with = "zero_point")]
    pub no_zero_point: bool,

    /// AWQ: how the weights are chosen before rounding: awq runs AutoAWQ's activation-aware scale
    /// and clip search on calibration text; rtn rounds the stored weights to nearest per group
    /// [default: awq].
    #[arg(long, value_enum, value_name = "METHOD")]
    pub method: Option<AwqMethod>,

    /// AWQ calibration text: plain text (one text per non-empty line) or, for .jsonl/.json, JSON
    /// Lines with a "text" field [default: a built-in public-domain (CC0) English text].
    #[arg(long, value_name = "FILE")]
    pub calib_file: Option<PathBuf>,

    /// AWQ: calibration samples (blocks of --calib-seq-len tokens, cut from the concatenated
    /// texts; texts longer than a block are skipped, as AutoAWQ does) [default: 128].
    #[arg(long, value_name = "N")]
    pub calib_samples: Option<usize>,

    /// AWQ: tokens per calibration sample [default: 512].
    #[arg(long, value_name = "N")]
    pub calib_seq_len: Option<usize>,

    /// AWQ: the scale search measures each candidate's loss on the first N calibration samples
    /// (the activation statistics use all of them; the clip search strides over all tokens),
    /// which bounds its cost on CPUs [default: 8].
    #[arg(long, value_name = "N")]
    pub calib_search_samples: Option<usize>,

    /// Type of output.weight, overriding the preset (e.g. q8_0, f16).
    #[arg(long, value_name = "TYPE", value_parser = parse_ggml_type)]
    pub output_tensor_type: Option<GgmlType>,

    /// Type of token_embd.weight, overriding the preset.
    #[arg(long, value_name = "TYPE", value_parser = parse_ggml_type)]
    pub token_embedding_type: Option<GgmlType>,

    /// Type for tensors whose GGUF name matches REGEX (first matching rule wins; repeatable).
    #[arg(long = "tensor-type", value_name = "REGEX=TYPE", value_parser = parse_tensor_type)]
    pub tensor_types: Vec<TensorTypeRule>,

    /// Importance matrix from llama-imatrix (GGUF or legacy .dat): every tensor with an entry is
    /// quantized with it, byte-identical to llama-quantize --imatrix (Q2_K..Q6_K, Q4_0..Q5_1, IQ4_NL, IQ4_XS,
    /// IQ3_S and IQ3_XXS use it; Q8_0, TQ1_0, TQ2_0 and float types ignore it; IQ3_XXS tensors need it). Its file, dataset, entry and chunk counts are recorded as
    /// quantize.imatrix.* metadata.
    #[arg(long, value_name = "FILE")]
    pub imatrix: Option<String>,

    /// With --imatrix: use only the entries whose name contains NAME (repeatable).
    #[arg(long = "include-weights", value_name = "NAME")]
    pub include_weights: Vec<String>,

    /// With --imatrix: drop the entries whose name contains NAME, so those tensors are quantized as
    /// without a matrix (repeatable; not with --include-weights).
    #[arg(long = "exclude-weights", value_name = "NAME")]
    pub exclude_weights: Vec<String>,

    /// Worker threads [default: all cores].
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,

    /// Overwrite the output file if it exists.
    #[arg(long)]
    pub force: bool,

    /// No progress bars and no summary table.
    #[arg(short, long)]
    pub quiet: bool,

    /// Print the summary as JSON on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// A parsed `--tensor-type REGEX=TYPE` rule.
#[derive(Clone, Debug)]
pub struct TensorTypeRule(pub regex::Regex, pub GgmlType);

fn parse_ggml_type(s: &str) -> Result<GgmlType, String> {
    GgmlType::parse(s).ok_or_else(|| {
        let names: Vec<String> = GgmlType::ALL.iter().map(|t| t.ggml_name().to_ascii_lowercase()).collect();
        format!("unknown tensor type '{s}'; expected one of: {}", names.join(", "))
    })
}

fn parse_four_bit_type(s: &str) -> Result<FourBitType, String> {
    s.parse().map_err(|e: tgi_formats::bnb::BnbError| e.to_string())
}

fn parse_tensor_type(s: &str) -> Result<TensorTypeRule, String> {
    TypeOverrides::parse_pattern(s).map(|(re, t)| TensorTypeRule(re, t))
}

/// The checkpoint being converted.
#[allow(clippy::large_enum_variant)] // one value per run
enum Input {
    Hf { name: String, config: ModelConfig, vocab: GgufVocab, weights: SafetensorsSet, files: Vec<PathBuf> },
    Gguf { name: String, file: GgufFile, path: PathBuf },
}

impl Input {
    fn open(model: &str) -> Result<Input> {
        let path = Path::new(model);
        if path.is_file() && path.extension().is_none_or(|e| e != "safetensors") {
            let file = GgufFile::open(path)?;
            // Hostile hyperparameters are refused here rather than copied into the output (architectures the
            // engine does not run are requantized unchecked).
            if let Err(e @ ModelError::Config(_)) = DecoderConfig::from_gguf(&file) {
                return Err(InputError(format!("{}: {e}", path.display())).into());
            }
            let name =
                file.get("general.name").and_then(|v| v.as_str()).map(str::to_string).unwrap_or_else(|| stem(path));
            return Ok(Input::Gguf { name, file, path: path.to_path_buf() });
        }
        let files = hf::resolve(model)?;
        let config = ModelConfig::from_file(&files.config)?;
        let tokenizer = files.tokenizer_json.as_deref().ok_or_else(|| {
            InputError(format!(
                "{}: no tokenizer.json; GGUF files carry the vocabulary, so it is required",
                files.root.display()
            ))
        })?;
        let vocab = GgufVocab::from_hf_files(tokenizer, files.tokenizer_config.as_deref(), config.vocab_size)?;
        let weights = SafetensorsSet::open_files(&files.weights)?;
        Ok(Input::Hf { name: hf_dir::model_name(model), config, vocab, weights, files: files.weights })
    }

    fn name(&self) -> &str {
        match self {
            Input::Hf { name, .. } | Input::Gguf { name, .. } => name,
        }
    }

    fn paths(&self) -> Vec<PathBuf> {
        match self {
            Input::Hf { files, .. } => files.clone(),
            Input::Gguf { path, .. } => vec![path.clone()],
        }
    }

    fn source(&self) -> &dyn TensorSource {
        match self {
            Input::Hf { weights, .. } => weights,
            Input::Gguf { file, .. } => file,
        }
    }

    fn plan(&self, preset: Preset, overrides: &TypeOverrides, allow_requantize: bool) -> Result<ExportPlan> {
        match self {
            Input::Gguf { file, .. } => match ExportPlan::from_gguf(file, preset, overrides, allow_requantize) {
                Err(e @ ConvertError::Requantize { .. }) => Err(InputError(format!(
                    "{e}. Pass --allow-requantize to requantize it anyway (as llama-quantize's flag of that name), \
                     or start from the F16/BF16 checkpoint"
                ))
                .into()),
                plan => Ok(plan?),
            },
            Input::Hf { name, config, vocab, weights, .. } => {
                let mut tensors = Vec::new();
                for meta in weights.tensors() {
                    let ty = match meta.dtype {
                        DType::F32 => GgmlType::F32,
                        DType::F16 => GgmlType::F16,
                        DType::BF16 => GgmlType::BF16,
                        other => {
                            return Err(InputError(format!(
                            "tensor '{}' is stored as {other:?}; only F32, F16 and BF16 checkpoints can be quantized",
                            meta.name
                        ))
                            .into())
                        }
                    };
                    tensors.push((meta.name, meta.shape, ty));
                }
                Ok(ExportPlan::from_hf(name, config, vocab, &tensors, preset, overrides)?)
            }
        }
    }
}

fn stem(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into())
}

fn file_size(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// Runs `tgi quantize`.
pub fn run(args: QuantizeArgs) -> Result<()> {
    let started = Instant::now();
    let args = args.with_positional()?;
    if let Some(n) = args.threads {
        if n == 0 {
            return Err(InputError("--threads must be at least 1".into()).into());
        }
        rayon::ThreadPoolBuilder::new().num_threads(n).build_global().context("cannot start the thread pool")?;
    }
    check_flags(&args)?;
    match args.format {
        Format::Gguf => {}
        Format::Awq => return run_awq(args),
        Format::Nf4 | Format::Fp4 | Format::Bnb => return run_bnb(args),
    }
    let preset = args.preset.unwrap_or(Preset::Q4_K_M);
    let importance = imatrix::from_args(&args)?;
    let overrides = TypeOverrides {
        output: args.output_tensor_type,
        token_embedding: args.token_embedding_type,
        patterns: args.tensor_types.iter().map(|r| (r.0.clone(), r.1)).collect(),
        imatrix: importance.is_some(),
    };
    let input = Input::open(&args.model)?;
    if args.allow_requantize && !matches!(input, Input::Gguf { .. }) {
        return Err(InputError("--allow-requantize applies to a GGUF input only".into()).into());
    }
    let mut plan = input.plan(preset, &overrides, args.allow_requantize)?;
    let weights = imatrix::job_weights(importance.as_ref(), &mut plan, args.quiet)?;
    let requantized: Vec<&str> = plan.jobs.iter().filter(|j| j.requantizes()).map(|j| j.name.as_str()).collect();
    if !requantized.is_empty() && !args.quiet {
        eprintln!(
            "warning: requantizing {} tensors that are already quantized (first: {}): the result is worse than \
             quantizing the F16/BF16 checkpoint to {}",
            requantized.len(),
            requantized[0],
            preset.name()
        );
    }
    let target = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}-{}.gguf", input.name(), preset.name().to_uppercase())));
    let out = AtomicFile::create(&target, args.force, &input.paths())?;
    let writer = GgufWriter::new(out.writer()?, plan.metadata.clone(), plan.tensor_specs())?;
    let progress = Progress::new(args.quiet || args.json, &plan);
    let rows = encode_all(&plan, input.source(), &weights, writer, &progress)?;
    out.commit()?;
    progress.clear();

    let head = SummaryHead {
        input: args.model.clone(),
        output: target.display().to_string(),
        preset: preset.name().to_string(),
        input_bytes: input.paths().iter().map(|p| file_size(p)).sum(),
        output_bytes: file_size(&target),
        seconds: started.elapsed().as_secs_f64(),
    };
    let summary = QuantizeSummary::new(head, rows);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else if !args.quiet {
        println!("{}", summary.to_table());
    }
    Ok(())
}

/// Refuses flags that belong to another `--format`.
fn check_flags(args: &QuantizeArgs) -> Result<()> {
    let gguf = [
        (args.imatrix.is_some(), "--imatrix"),
        (args.preset.is_some(), "--type"),
        (args.output_tensor_type.is_some(), "--output-tensor-type"),
        (args.token_embedding_type.is_some(), "--token-embedding-type"),
        (!args.tensor_types.is_empty(), "--tensor-type"),
        (args.allow_requantize, "--allow-requantize"),
    ];
    let bnb = [
        (args.quant_type.is_some(), "--quant-type"),
        (args.blocksize.is_some(), "--blocksize"),
        (args.no_double_quant, "--no-double-quant"),
        (args.compute_dtype.is_some(), "--compute-dtype"),
    ];
    let awq = [
        (args.bits.is_some(), "--bits"),
        (args.group_size.is_some(), "--group-size"),
        (args.zero_point, "--zero-point"),
        (args.no_zero_point, "--no-zero-point"),
        (args.method.is_some(), "--method"),
        (args.calib_file.is_some(), "--calib-file"),
        (args.calib_samples.is_some(), "--calib-samples"),
        (args.calib_seq_len.is_some(), "--calib-seq-len"),
        (args.calib_search_samples.is_some(), "--calib-search-samples"),
    ];
    let format = match args.format {
        Format::Gguf => "gguf",
        Format::Nf4 => "nf4",
        Format::Fp4 => "fp4",
        Format::Bnb => "bnb",
        Format::Awq => "awq",
    };
    let foreign = |flags: &[(bool, &'static str)], applies: &str, ours: bool| -> Result<()> {
        match flags.iter().find(|(set, _)| *set) {
            Some((_, flag)) if !ours => Err(InputError(format!("{flag} applies to {applies}, not {format}")).into()),
            _ => Ok(()),
        }
    };
    foreign(&gguf, "--format gguf only", args.format == Format::Gguf)?;
    foreign(&bnb, "--format nf4, fp4 and bnb", matches!(args.format, Format::Nf4 | Format::Fp4 | Format::Bnb))?;
    foreign(&awq, "--format awq only", args.format == Format::Awq)
}

/// `--format awq`: runs the AWQ export.
fn run_awq(args: QuantizeArgs) -> Result<()> {
    let opts = awq::AwqOptions {
        bits: args.bits.unwrap_or(4),
        group_size: args.group_size.unwrap_or(128),
        zero_point: !args.no_zero_point,
        method: args.method.unwrap_or(AwqMethod::Awq),
    };
    let calib = awq::CalibOptions {
        file: args.calib_file,
        samples: args.calib_samples.unwrap_or(128),
        seq_len: args.calib_seq_len.unwrap_or(512),
        search_samples: args.calib_search_samples.unwrap_or(tgi_engines::awq::DEFAULT_SEARCH_SAMPLES),
    };
    let calib_set = [
        (calib.file.is_some(), "--calib-file"),
        (args.calib_samples.is_some(), "--calib-samples"),
        (args.calib_seq_len.is_some(), "--calib-seq-len"),
        (args.calib_search_samples.is_some(), "--calib-search-samples"),
    ];
    if let (AwqMethod::Rtn, Some((_, flag))) = (opts.method, calib_set.iter().find(|(set, _)| *set)) {
        return Err(InputError(format!("{flag} applies to --method awq, not rtn")).into());
    }
    if calib.samples == 0 || calib.seq_len == 0 || calib.search_samples == 0 {
        return Err(InputError(
            "--calib-samples, --calib-seq-len and --calib-search-samples must be at least 1".into(),
        )
        .into());
    }
    awq::run(&args.model, args.output, opts, &calib, args.force, args.quiet, args.json)
}

/// `--format nf4|fp4|bnb`: runs the bitsandbytes export.
fn run_bnb(args: QuantizeArgs) -> Result<()> {
    let ty = match (args.format, args.quant_type) {
        (Format::Nf4, Some(FourBitType::Fp4)) | (Format::Fp4, Some(FourBitType::Nf4)) => {
            return Err(InputError(format!(
                "--quant-type {} contradicts --format {}; use --format bnb --quant-type TYPE",
                args.quant_type.map_or("", FourBitType::name),
                if args.format == Format::Nf4 { "nf4" } else { "fp4" }
            ))
            .into())
        }
        (Format::Fp4, _) => FourBitType::Fp4,
        (_, ty) => ty.unwrap_or(FourBitType::Nf4),
    };
    let opts = bnb::BnbOptions {
        ty,
        blocksize: args.blocksize.unwrap_or(64),
        double_quant: !args.no_double_quant,
        compute_dtype: args.compute_dtype,
    };
    bnb::run(&args.model, args.output, opts, args.force, args.quiet, args.json)
}

/// Encodes every tensor of the plan (job i with the importance `weights[i]`) while a writer thread
/// writes the previous one, so the disk write of tensor i overlaps the encoding of tensor i+1. Two
/// byte buffers take turns.
fn encode_all(
    plan: &ExportPlan,
    source: &dyn TensorSource,
    weights: &[Option<&[f32]>],
    mut writer: GgufWriter<BufWriter<File>>,
    progress: &Progress,
) -> Result<Vec<(TensorReport, bool)>> {
    let (to_writer, written) = mpsc::sync_channel::<(usize, Vec<u8>)>(0);
    let (recycle, recycled) = mpsc::channel::<Vec<u8>>();
    std::thread::scope(|scope| {
        let names: Vec<&str> = plan.jobs.iter().map(|j| j.name.as_str()).collect();
        let write_thread = scope.spawn(move || -> Result<()> {
            for (i, bytes) in written {
                writer.write_tensor(names[i], &bytes)?;
                let _ = recycle.send(bytes);
            }
            finish_writer(writer.finish()?)
        });
        let mut rows = Vec::with_capacity(plan.jobs.len());
        let mut scratch = Scratch::default();
        let mut encode = || -> Result<()> {
            for (i, job) in plan.jobs.iter().enumerate() {
                progress.start(job);
                if let Ok(buffer) = recycled.try_recv() {
                    scratch.bytes = buffer;
                }
                let stats = run_job(job, source, weights[i], &mut scratch, &|n| progress.advance(n))
                    .with_context(|| format!("tensor '{}'", job.name))?;
                let bytes = std::mem::take(&mut scratch.bytes);
                let report = TensorReport::new(&job.name, job.target, &job.dims, bytes.len() as u64, &stats);
                rows.push((report, job.target != job.source_type));
                if to_writer.send((i, bytes)).is_err() {
                    break; // the writer failed; its error is reported below
                }
                progress.finish_tensor();
            }
            Ok(())
        };
        let encoded = encode();
        drop(to_writer);
        let write_result = write_thread.join().map_err(|_| anyhow::anyhow!("the writer thread panicked"))?;
        encoded?;
        write_result?;
        Ok(rows)
    })
}

/// The overall bar (all values) and the current tensor's bar.
struct Progress {
    _multi: MultiProgress,
    overall: ProgressBar,
    tensor: ProgressBar,
    done: std::sync::atomic::AtomicUsize,
    total: usize,
}

impl Progress {
    fn new(hidden: bool, plan: &ExportPlan) -> Progress {
        let multi = MultiProgress::new();
        if hidden {
            multi.set_draw_target(ProgressDrawTarget::hidden());
        }
        let total: u64 = plan.jobs.iter().map(|j| j.elements()).sum();
        let overall = multi.add(ProgressBar::new(total));
        overall.set_style(
            ProgressStyle::with_template("{prefix:>8} [{bar:40}] {percent:>3}% {msg} ({elapsed} / ~{duration})")
                .expect("template")
                .progress_chars("=> "),
        );
        overall.set_prefix("overall");
        overall.set_message(format!("0/{} tensors", plan.jobs.len()));
        let tensor = multi.add(ProgressBar::new(0));
        tensor.set_style(
            ProgressStyle::with_template("{prefix:>8} [{bar:40}] {percent:>3}% {msg}")
                .expect("template")
                .progress_chars("=> "),
        );
        tensor.set_prefix("tensor");
        Progress { _multi: multi, overall, tensor, done: Default::default(), total: plan.jobs.len() }
    }

    fn start(&self, job: &tgi_engines::convert::TensorJob) {
        self.tensor.reset();
        self.tensor.set_length(job.elements());
        self.tensor.set_message(format!("{} -> {}", job.name, job.target));
    }

    fn advance(&self, n: u64) {
        self.tensor.inc(n);
        self.overall.inc(n);
    }

    fn finish_tensor(&self) {
        let done = self.done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        self.overall.set_message(format!("{done}/{} tensors", self.total));
    }

    fn clear(&self) {
        self.tensor.finish_and_clear();
        self.overall.finish_and_clear();
    }
}
