//! `tgi perplexity`: how well a model predicts a text file, computed as llama.cpp's `llama-perplexity` does.

use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use tgi_engines::perplexity::{perplexity, PerplexityOptions};

use crate::error::InputError;
use crate::model_args::ModelArgs;

/// Arguments of `tgi perplexity`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Chunks of --ctx tokens each start with BOS; the second half of each chunk is scored, as in \
llama-perplexity, so the two report the same figure for the same model, text and context.\n\nExamples:\n  \
tgi perplexity -m model-q4_k_m.gguf --ctx 512 wiki.test.raw\n  \
tgi perplexity -m models/stories-distill-4l/hf --ctx 128 --chunks 32 --json models/stories-distill-4l/text/heldout.txt")]
pub struct PerplexityArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// The text file to score.
    pub file: std::path::PathBuf,

    /// Tokens per chunk [default: 512, or the model's context if smaller].
    #[arg(short, long, value_name = "N")]
    pub ctx: Option<usize>,

    /// Score only the first N chunks.
    #[arg(long, value_name = "N")]
    pub chunks: Option<usize>,

    /// Chunks evaluated together in one batched step [default: 512 / ctx, at least 1].
    #[arg(long, value_name = "N")]
    pub parallel: Option<usize>,

    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,

    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
}

/// Runs `tgi perplexity`.
pub fn run(args: PerplexityArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))
        .map_err(|e| InputError(format!("{e:#}")))?;
    let m = args.model.load()?;
    let ctx = args.ctx.unwrap_or(512.min(m.model.config().context));
    let tokens = m.tokenizer.encode(&text, true, false).map_err(|e| InputError(format!("cannot tokenize: {e}")))?;
    let opts =
        PerplexityOptions { ctx, max_chunks: args.chunks, parallel: args.parallel.unwrap_or((512 / ctx).max(1)) };
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
    if args.quiet || args.json {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} chunks {elapsed} (eta {eta})").expect("template"));
    let started = Instant::now();
    let r = perplexity(&m, &tokens, opts, |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })
    .map_err(|e| match e {
        tgi_engines::model::ModelError::Config(msg) => InputError(msg).into(),
        e => anyhow::Error::new(e),
    })?;
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    let evaluated = r.chunks * ctx;
    if args.json {
        let v = json!({
            "perplexity": r.perplexity,
            "stderr": r.stderr,
            "mean_nll": r.mean_nll,
            "ctx": ctx,
            "chunks": r.chunks,
            "scored_tokens": r.scored_tokens,
            "text_tokens": r.text_tokens,
            "model": args.model.model_name()?,
            "seconds": seconds,
            "tokens_per_second": evaluated as f64 / seconds.max(1e-9),
        });
        println!("{v}");
    } else {
        println!(
            "perplexity {:.4} ± {:.4} ({} chunks of {ctx} tokens, {} scored, {:.1} s, {:.0} tok/s)",
            r.perplexity,
            r.stderr,
            r.chunks,
            r.scored_tokens,
            seconds,
            evaluated as f64 / seconds.max(1e-9)
        );
    }
    Ok(())
}
