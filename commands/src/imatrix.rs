//! `tgi imatrix`: the importance matrix of a model over a text, computed and written as llama.cpp's
//! `llama-imatrix` does, for `tgi quantize --imatrix` and llama-quantize alike.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use tgi_engines::imatrix::{compute, ImatrixOptions};
use tgi_engines::perplexity::PerplexityOptions;
use tgi_formats::imatrix::Imatrix;

use crate::error::InputError;
use crate::model_args::ModelArgs;
use crate::output::AtomicFile;

/// The file forms a matrix can be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ImatrixFormat {
    /// llama.cpp's GGUF form (`general.type = imatrix`): raw sums and counts, one count per expert.
    Gguf,
    /// The legacy `.dat` form older llama.cpp builds read.
    Dat,
}

/// Arguments of `tgi imatrix`.
#[derive(Debug, clap::Args)]
#[command(after_help = "The text is cut into chunks of --ctx tokens, each starting with BOS, and run through the \
model; every weight matrix of the layers keeps the per-column sums of its squared inputs, as llama-imatrix keeps \
them (steps of fewer than 16 rows are skipped, a mixture's experts keep one matrix each). The perplexity of the \
chunks' second halves is printed as it goes. The file is llama.cpp's GGUF imatrix, which tgi quantize --imatrix \
and llama-quantize --imatrix both read.\n\nExamples:\n  \
tgi imatrix -m model-f16.gguf -f calibration.txt -o model.imatrix.gguf\n  \
tgi quantize model-f16.gguf model-IQ4_XS.gguf iq4_xs --imatrix model.imatrix.gguf\n  \
tgi imatrix --in-file a.imatrix.gguf --in-file b.imatrix.gguf -o combined.imatrix.gguf")]
pub struct ImatrixArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// The text to compute the matrix on (llama-imatrix's -f).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<PathBuf>,

    /// Where to write the matrix.
    #[arg(short = 'o', long = "output", alias = "output-file", value_name = "FILE", default_value = "imatrix.gguf")]
    pub output: PathBuf,

    /// The file form [default: dat for a .dat output, else gguf].
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub output_format: Option<ImatrixFormat>,

    /// Tokens per chunk (-c/--ctx-size as llama-imatrix) [default: 512, or the model's context if smaller].
    #[arg(short, long, visible_alias = "ctx-size", value_name = "N")]
    pub ctx: Option<usize>,

    /// Use only the first N chunks.
    #[arg(long, value_name = "N")]
    pub chunks: Option<usize>,

    /// Chunks evaluated together in one batched step [default: 2048 / ctx, at least 1, as llama-imatrix's batch].
    #[arg(long, value_name = "N")]
    pub parallel: Option<usize>,

    /// Keep the output layer's input too (llama-imatrix's --process-output; nothing for tied embeddings).
    #[arg(long)]
    pub process_output: bool,

    /// A matrix to add to (repeatable): with -f the new text's statistics add to them, without it the files are
    /// combined.
    #[arg(long = "in-file", value_name = "FILE")]
    pub in_files: Vec<PathBuf>,

    /// Overwrite an existing output file.
    #[arg(long)]
    pub force: bool,

    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,

    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
}

/// Runs `tgi imatrix`.
pub fn run(args: ImatrixArgs) -> Result<()> {
    if args.file.is_none() && args.in_files.is_empty() {
        return Err(InputError(
            "nothing to compute: give a text with -f, or matrices to combine with --in-file".into(),
        )
        .into());
    }
    let format = args.output_format.unwrap_or(match args.output.extension() {
        Some(e) if e == "dat" => ImatrixFormat::Dat,
        _ => ImatrixFormat::Gguf,
    });
    let mut inputs: Vec<PathBuf> = args.in_files.clone();
    inputs.extend(args.file.clone());
    // Refuse an existing output before the work, not after it.
    let out = AtomicFile::create(&args.output, args.force, &inputs)?;
    let started = Instant::now();
    let (mut imatrix, ppl, ctx) = match &args.file {
        Some(file) => {
            let (m, p, ctx) = compute_on(&args, file)?;
            (m, Some(p), ctx)
        }
        None => (Imatrix::default(), None, args.ctx.unwrap_or(512)),
    };
    for path in &args.in_files {
        let other = Imatrix::read(path, ctx as u32).map_err(|e| InputError(e.to_string()))?;
        imatrix.merge(other).map_err(|e| InputError(format!("{}: {e}", path.display())))?;
    }
    let mut w = out.writer()?;
    match format {
        ImatrixFormat::Gguf => imatrix.write_gguf(&mut w).map(drop),
        ImatrixFormat::Dat => imatrix.write_legacy(&mut w).map(drop),
    }
    .with_context(|| format!("cannot write {}", args.output.display()))?;
    std::io::Write::flush(&mut w)?;
    drop(w);
    out.commit()?;
    let seconds = started.elapsed().as_secs_f64();
    if args.json {
        let v = json!({
            "output": args.output,
            "format": if format == ImatrixFormat::Gguf { "gguf" } else { "dat" },
            "entries": imatrix.entries.len(),
            "chunks": imatrix.chunk_count,
            "chunk_size": imatrix.chunk_size,
            "datasets": imatrix.datasets,
            "perplexity": ppl.as_ref().map(|p| p.perplexity),
            "perplexity_stderr": ppl.as_ref().map(|p| p.stderr),
            "seconds": seconds,
        });
        println!("{v}");
    } else {
        if let Some(p) = &ppl {
            println!("perplexity {:.4} ± {:.4} ({} chunks of {ctx} tokens)", p.perplexity, p.stderr, p.chunks);
        }
        println!(
            "wrote {} entries computed on {} chunks to {} ({:.1} s)",
            imatrix.entries.len(),
            imatrix.chunk_count,
            args.output.display(),
            seconds
        );
    }
    Ok(())
}

/// The matrix of the model over `file`, its perplexity, and the chunk size used.
fn compute_on(args: &ImatrixArgs, file: &Path) -> Result<(Imatrix, tgi_engines::perplexity::Perplexity, usize)> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read {}", file.display()))
        .map_err(|e| InputError(format!("{e:#}")))?;
    let m = args.model.load()?;
    let ctx = args.ctx.unwrap_or(512.min(m.model.config().context));
    let tokens = m.tokenizer.encode(&text, true, false).map_err(|e| InputError(format!("cannot tokenize: {e}")))?;
    let chunks = PerplexityOptions {
        ctx,
        max_chunks: args.chunks,
        parallel: args.parallel.unwrap_or((2048 / ctx.max(1)).max(1)),
    };
    let opts = ImatrixOptions { chunks, process_output: args.process_output };
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
    if args.quiet || args.json {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} chunks {elapsed} (eta {eta}) perplexity {msg}")
            .expect("template"),
    );
    let dataset = file.display().to_string();
    let result = compute(&m, &tokens, opts, vec![dataset], |done, total, ppl| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        bar.set_message(format!("{ppl:.4}"));
    });
    bar.finish_and_clear();
    let (imatrix, ppl) = result.map_err(|e| match e {
        tgi_engines::model::ModelError::Config(msg) => InputError(msg).into(),
        e => anyhow::Error::new(e),
    })?;
    Ok((imatrix, ppl, ctx))
}
