//! `tgi perplexity`: how well a model predicts a text file, computed as llama.cpp's `llama-perplexity` does.

use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use tgi_engines::kld::{compare, log_softmax, KlStats, KlSummary};
use tgi_engines::perplexity::{chunk_count, perplexity_observed, PerplexityOptions};

use crate::error::InputError;
use crate::kl_base::{BaseHeader, BaseReader, BaseWriter};
use crate::model_args::ModelArgs;

/// Arguments of `tgi perplexity`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Chunks of --ctx tokens each start with BOS; the second half of each chunk is scored, as in \
llama-perplexity, so the two report the same figure for the same model, text and context.\n\nExamples:\n  \
tgi perplexity -m model-q4_k_m.gguf -c 512 -f wiki.test.raw\n  \
tgi perplexity -m model-f16.gguf --kl-divergence-base base.kld wiki.test.raw\n  \
tgi perplexity -m model-q4_k_m.gguf --kl-divergence-base base.kld \\\n    \
--kl-divergence wiki.test.raw\n  \
tgi perplexity -m models/stories-distill-4l/hf --ctx 128 --chunks 32 \\\n    \
--json models/stories-distill-4l/text/heldout.txt")]
pub struct PerplexityArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// The text file to score.
    #[arg(value_name = "FILE", required_unless_present = "file_flag", conflicts_with = "file_flag")]
    pub file: Option<std::path::PathBuf>,

    /// The text file to score, as llama-perplexity's -f (instead of the FILE argument).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file_flag: Option<std::path::PathBuf>,

    /// Tokens per chunk (-c/--ctx-size as llama-perplexity) [default: 512, or the model's context if smaller].
    #[arg(short, long, visible_alias = "ctx-size", value_name = "N")]
    pub ctx: Option<usize>,

    /// Score only the first N chunks.
    #[arg(long, value_name = "N")]
    pub chunks: Option<usize>,

    /// Chunks evaluated together in one batched step [default: 512 / ctx, at least 1].
    #[arg(long, value_name = "N")]
    pub parallel: Option<usize>,

    /// Save the model's log-probabilities at every scored position to FILE (about 2 bytes per vocabulary
    /// entry per position); with --kl-divergence, read them instead and compare this model with that base.
    #[arg(long, value_name = "FILE")]
    pub kl_divergence_base: Option<std::path::PathBuf>,

    /// Report the KL divergence (base || this model) from the --kl-divergence-base file, its percentiles,
    /// how often the top token agrees and the mean change in the probability of the correct token.
    #[arg(long, requires = "kl_divergence_base")]
    pub kl_divergence: bool,

    /// Overwrite an existing --kl-divergence-base file.
    #[arg(long)]
    pub force: bool,

    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,

    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
}

/// Runs `tgi perplexity`.
pub fn run(args: PerplexityArgs) -> Result<()> {
    let file = args.file.clone().or(args.file_flag.clone()).ok_or_else(|| InputError("no text file".into()))?;
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("cannot read {}", file.display()))
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
    let chunks = chunk_count(tokens.len(), &opts);
    let header = BaseHeader {
        vocab: m.model.config().vocab,
        ctx,
        chunks,
        tokens: tokens[..(chunks * ctx).min(tokens.len())].to_vec(),
    };
    let mut kl = match &args.kl_divergence_base {
        Some(path) if args.kl_divergence => Kl::Compare(BaseReader::open(path, &header)?, KlStats::default()),
        Some(path) if chunks > 0 => {
            Kl::Save(BaseWriter::create(path, args.force, std::slice::from_ref(&file), &header)?)
        }
        _ => Kl::None,
    };
    let mut kl_error = None;
    let started = Instant::now();
    let r = perplexity_observed(
        &m,
        &tokens,
        opts,
        |done, total, _| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        },
        |logits, target| {
            if kl_error.is_none() {
                kl_error = kl.observe(logits, target).err();
            }
        },
    )
    .map_err(|e| match e {
        tgi_engines::model::ModelError::Config(msg) => InputError(msg).into(),
        e => anyhow::Error::new(e),
    })?;
    if let Some(e) = kl_error {
        return Err(e);
    }
    let kld = match kl {
        Kl::Save(w) => {
            w.commit()?;
            None
        }
        Kl::Compare(_, stats) => stats.summary(),
        Kl::None => None,
    };
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
            "kl_divergence": kld.map(kl_json),
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
        if let Some(k) = kld {
            println!("{}", kl_table(&k));
        }
    }
    Ok(())
}

/// What `--kl-divergence-base` does in this run.
enum Kl {
    None,
    Save(BaseWriter),
    Compare(BaseReader, KlStats),
}

impl Kl {
    fn observe(&mut self, logits: &[f32], target: u32) -> Result<()> {
        match self {
            Kl::None => Ok(()),
            Kl::Save(w) => w.push(logits),
            Kl::Compare(r, stats) => {
                let base = r.next_row()?;
                stats.push(compare(&base, &log_softmax(logits), target));
                Ok(())
            }
        }
    }
}

fn kl_json(k: KlSummary) -> serde_json::Value {
    json!({
        "positions": k.positions,
        "mean": k.mean,
        "stderr": k.stderr,
        "max": k.max,
        "p99": k.p99,
        "median": k.median,
        "min": k.min,
        "same_top_p": k.same_top,
        "same_top_p_stderr": k.same_top_stderr,
        "mean_delta_p": k.mean_delta_p,
        "delta_p_stderr": k.delta_p_stderr,
    })
}

fn kl_table(k: &KlSummary) -> comfy_table::Table {
    use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(["KL divergence from the base", "value"]);
    let rows = [
        ("mean KLD", format!("{:.6} ± {:.6}", k.mean, k.stderr)),
        ("max KLD", format!("{:.6}", k.max)),
        ("99% KLD", format!("{:.6}", k.p99)),
        ("median KLD", format!("{:.6}", k.median)),
        ("same top p", format!("{:.3} ± {:.3} %", 100.0 * k.same_top, 100.0 * k.same_top_stderr)),
        ("mean Δp", format!("{:.3} ± {:.3} %", 100.0 * k.mean_delta_p, 100.0 * k.delta_p_stderr)),
        ("positions", k.positions.to_string()),
    ];
    for (name, value) in rows {
        t.add_row([Cell::new(name), Cell::new(value).set_alignment(CellAlignment::Right)]);
    }
    t
}
