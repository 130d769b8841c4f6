//! Perplexity as llama.cpp's `llama-perplexity` computes it: the text is cut into consecutive chunks of
//! `ctx` tokens, each starting with BOS, and only the second half of each chunk is scored, so that every
//! scored token has at least `ctx / 2` tokens of context. Several chunks share each batched step.

use rayon::prelude::*;

use crate::kv::BlockTable;
use crate::model::{ActivationObserver, LoadedModel, Logits, ModelError, SeqInput};

/// How to measure.
#[derive(Clone, Copy, Debug)]
pub struct PerplexityOptions {
    /// Tokens per chunk.
    pub ctx: usize,
    /// Score at most this many chunks.
    pub max_chunks: Option<usize>,
    /// Chunks evaluated together in one step.
    pub parallel: usize,
}

/// The result.
#[derive(Clone, Debug, PartialEq)]
pub struct Perplexity {
    /// exp(mean negative log-likelihood).
    pub perplexity: f64,
    /// Standard error of the perplexity (from the NLL's standard error, as llama-perplexity reports it).
    pub stderr: f64,
    /// Mean negative log-likelihood per scored token.
    pub mean_nll: f64,
    /// Chunks scored.
    pub chunks: usize,
    /// Tokens scored.
    pub scored_tokens: usize,
    /// Tokens in the text.
    pub text_tokens: usize,
}

/// `log softmax(logits)[target]` with the max subtracted, the sum in f64 (as llama.cpp).
pub(crate) fn log_prob(logits: &[f32], target: u32) -> f64 {
    LogSoftmax::of(logits).at(logits[target as usize])
}

/// What `log softmax` of a row of logits subtracts from each: its max, and the log of the sum of
/// `exp(logit - max)` in f64 (as llama.cpp).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LogSoftmax {
    max: f32,
    ln_sum: f64,
}

impl LogSoftmax {
    /// The normalizer of `logits`.
    pub(crate) fn of(logits: &[f32]) -> Self {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
        LogSoftmax { max, ln_sum: sum.ln() }
    }

    /// The log-probability of a token with this logit.
    pub(crate) fn at(self, logit: f32) -> f64 {
        (logit - self.max) as f64 - self.ln_sum
    }
}

/// Chunks that `perplexity` scores for a text of `text_tokens` tokens.
pub fn chunk_count(text_tokens: usize, opts: &PerplexityOptions) -> usize {
    let available = text_tokens / opts.ctx.max(1);
    opts.max_chunks.map_or(available, |c| c.min(available))
}

/// Perplexity of `tokens` (the whole text, tokenized with BOS as the model asks), calling `progress` after
/// each batch with (chunks done, chunks total, perplexity so far).
pub fn perplexity(
    m: &LoadedModel,
    tokens: &[u32],
    opts: PerplexityOptions,
    progress: impl FnMut(usize, usize, f64),
) -> Result<Perplexity, ModelError> {
    perplexity_observed(m, tokens, opts, progress, |_, _| {})
}

/// [`perplexity`], also calling `observe` with the logits and the next token of every scored position, in
/// order (chunk by chunk, position by position).
pub fn perplexity_observed(
    m: &LoadedModel,
    tokens: &[u32],
    opts: PerplexityOptions,
    progress: impl FnMut(usize, usize, f64),
    observe: impl FnMut(&[f32], u32),
) -> Result<Perplexity, ModelError> {
    perplexity_with(m, tokens, opts, progress, observe, None)
}

/// [`perplexity_observed`], also showing `activations` the input of every weight matrix: with `all_rows`, the
/// output layer's for every position (llama-imatrix's), else for the scored ones only.
pub(crate) fn perplexity_with(
    m: &LoadedModel,
    tokens: &[u32],
    opts: PerplexityOptions,
    mut progress: impl FnMut(usize, usize, f64),
    mut observe: impl FnMut(&[f32], u32),
    activations: Option<(&dyn ActivationObserver, bool)>,
) -> Result<Perplexity, ModelError> {
    let cfg = m.model.config();
    let ctx = opts.ctx;
    if ctx < 2 || ctx > cfg.context {
        return Err(ModelError::Config(format!(
            "--ctx {ctx} must be between 2 and the model's context {}",
            cfg.context
        )));
    }
    let chunks = chunk_count(tokens.len(), &opts);
    if chunks == 0 {
        return Err(ModelError::Config(format!(
            "the text has {} tokens; at least {} (one chunk of --ctx {ctx}) are needed",
            tokens.len(),
            ctx
        )));
    }
    let parallel = opts.parallel.clamp(1, chunks);
    let block = crate::kv::BLOCK_SIZE;
    let mut kv = m.model.new_cache(block, parallel * ctx.div_ceil(block))?;
    let bos = m.tokenizer.bos_id().filter(|_| m.tokenizer.add_bos());
    let first = ctx / 2;
    // The first row whose logits come back.
    let from = if activations.is_some_and(|(_, all_rows)| all_rows) { 0 } else { first };
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    for group in (0..chunks).collect::<Vec<_>>().chunks(parallel) {
        let inputs: Vec<Vec<u32>> = group
            .iter()
            .map(|&c| {
                let mut t = tokens[c * ctx..(c + 1) * ctx].to_vec();
                if let Some(b) = bos {
                    t[0] = b;
                }
                t
            })
            .collect();
        let mut tables = vec![BlockTable::new(); group.len()];
        for t in &mut tables {
            kv.reserve(t, ctx)?;
        }
        let batch: Vec<SeqInput<'_>> = inputs
            .iter()
            .zip(&tables)
            .map(|(t, table)| SeqInput { tokens: t, start: 0, table, logits: Logits::From(from) })
            .collect();
        let logits = match activations {
            Some((observer, _)) => m.model.forward_observed(&mut kv, &batch, observer)?,
            None => m.model.forward(&mut kv, &batch)?,
        };
        for (&c, rows) in group.iter().zip(&logits) {
            let vocab = cfg.vocab;
            let target = |j: usize| tokens[c * ctx + j + 1];
            let row = |j: usize| &rows[(j - from) * vocab..(j - from + 1) * vocab];
            // The rows' normalizers in parallel; summed in order, as before.
            let lps: Vec<f64> = (first..ctx - 1).into_par_iter().map(|j| log_prob(row(j), target(j))).collect();
            for (j, lp) in (first..ctx - 1).zip(lps) {
                observe(row(j), target(j));
                nll -= lp;
                nll2 += lp * lp;
                count += 1;
            }
        }
        for t in &mut tables {
            kv.release(t);
        }
        progress(group.last().map_or(0, |c| c + 1), chunks, (nll / count.max(1) as f64).exp());
    }
    let mean = nll / count as f64;
    let var = (nll2 / count as f64 - mean * mean).max(0.0);
    let stderr_nll = if count > 1 { (var / (count - 1) as f64).sqrt() } else { 0.0 };
    let perplexity = mean.exp();
    Ok(Perplexity {
        perplexity,
        stderr: stderr_nll * perplexity,
        mean_nll: mean,
        chunks,
        scored_tokens: count,
        text_tokens: tokens.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_prob_is_a_normalized_log_softmax() {
        let l = [1.0f32, 2.0, 3.0];
        let total: f64 = (0..3).map(|t| log_prob(&l, t).exp()).sum();
        assert!((total - 1.0).abs() < 1e-12);
        assert!((log_prob(&l, 2) - (3.0 - (1f64.exp() + 2f64.exp() + 3f64.exp()).ln())).abs() < 1e-9);
    }
}
