//! One sequence from prompt to finish through the batched step: chunked prefill, then one decode step per
//! token, with sampling, stop strings, EOS and streaming text. `tgi generate` runs this.

use std::time::{Duration, Instant};

use crate::kv::BlockTable;
use crate::model::{LoadedModel, Logits, ModelError, SeqInput};
use crate::sampling::{FinishReason, Sampled, Sampler, SamplingParams, StopMatcher};
use crate::text::tokenizer::IncrementalDecoder;

/// Tokens per KV block.
pub const BLOCK_SIZE: usize = 16;

/// What to generate.
#[derive(Clone, Debug)]
pub struct GenerateRequest {
    /// The prompt's token ids.
    pub prompt_ids: Vec<u32>,
    /// Sampling parameters (validated).
    pub params: SamplingParams,
    /// Most tokens to generate.
    pub max_new_tokens: usize,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Keep going past EOS tokens.
    pub ignore_eos: bool,
    /// Most prompt tokens per prefill step.
    pub prefill_chunk: usize,
}

/// Where the time went.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timings {
    /// From the start to the first generated token (prefill and one sampling).
    pub ttft: Duration,
    /// Prefill alone.
    pub prefill: Duration,
    /// Every decode step after the first token.
    pub decode: Duration,
    /// Decode steps run.
    pub decode_steps: usize,
}

impl Timings {
    /// Prompt tokens per second of prefill.
    pub fn prefill_rate(&self, prompt_tokens: usize) -> f64 {
        prompt_tokens as f64 / self.prefill.as_secs_f64().max(1e-9)
    }

    /// Generated tokens per second after the first.
    pub fn decode_rate(&self) -> f64 {
        self.decode_steps as f64 / self.decode.as_secs_f64().max(1e-9)
    }
}

/// A finished generation.
#[derive(Clone, Debug)]
pub struct Generated {
    /// Generated token ids (EOS included when it ended the sequence).
    pub tokens: Vec<u32>,
    /// Per generated token: its logprob and top alternatives.
    pub sampled: Vec<Sampled>,
    /// The generated text (stop string and what follows excluded).
    pub text: String,
    /// Why it stopped.
    pub finish: FinishReason,
    /// The sampler's seed.
    pub seed: u64,
    /// Timings.
    pub timings: Timings,
}

/// Runs `req` on `m`, calling `on_text` with each piece of text as soon as it is final.
pub fn generate(
    m: &LoadedModel,
    req: &GenerateRequest,
    mut on_text: impl FnMut(&str),
) -> Result<Generated, ModelError> {
    let cfg = m.model.config();
    let prompt = &req.prompt_ids;
    if prompt.is_empty() {
        return Err(ModelError::Config("the prompt has no tokens".into()));
    }
    if prompt.len() >= cfg.context {
        return Err(ModelError::ContextOverflow { tokens: prompt.len() + 1, context: cfg.context });
    }
    let total = (prompt.len() + req.max_new_tokens).min(cfg.context);
    let mut kv = m.model.new_cache(BLOCK_SIZE, total.div_ceil(BLOCK_SIZE))?;
    let mut table = BlockTable::new();
    kv.reserve(&mut table, total)?;

    let start = Instant::now();
    let mut logits = Vec::new();
    let chunk = req.prefill_chunk.max(1);
    for (i, piece) in prompt.chunks(chunk).enumerate() {
        let last = (i + 1) * chunk >= prompt.len();
        let input = SeqInput {
            tokens: piece,
            start: i * chunk,
            table: &table,
            logits: if last { Logits::Last } else { Logits::None },
        };
        logits = m.model.forward(&mut kv, &[input])?.swap_remove(0);
    }
    let mut timings = Timings { prefill: start.elapsed(), ..Timings::default() };

    let mut sampler = Sampler::new(req.params.clone(), prompt);
    let mut stops = StopMatcher::new(req.stop.clone());
    let mut decoder = IncrementalDecoder::new(&m.tokenizer);
    let (mut tokens, mut sampled, mut text) = (Vec::new(), Vec::new(), String::new());
    let mut emit = |piece: &str, text: &mut String, stops: &mut StopMatcher| -> Option<FinishReason> {
        let r = stops.push(piece);
        text.push_str(&r.text);
        on_text(&r.text);
        r.stop.map(|_| FinishReason::StopSequence)
    };
    let decode_start = Instant::now();
    let mut finish = loop {
        let s = sampler.sample(&logits);
        sampler.accept(s.token);
        let token = s.token;
        tokens.push(token);
        sampled.push(s);
        if tokens.len() == 1 {
            timings.ttft = start.elapsed();
        }
        if !req.ignore_eos && m.eos.contains(&token) {
            break FinishReason::EosToken;
        }
        if let Some(piece) = decoder.push(token) {
            if let Some(f) = emit(&piece, &mut text, &mut stops) {
                break f;
            }
        }
        let pos = prompt.len() + tokens.len() - 1;
        if tokens.len() >= req.max_new_tokens || pos + 1 >= total {
            break FinishReason::Length;
        }
        let input = SeqInput { tokens: std::slice::from_ref(&token), start: pos, table: &table, logits: Logits::Last };
        logits = m.model.forward(&mut kv, &[input])?.swap_remove(0);
        timings.decode_steps += 1;
    };
    timings.decode = decode_start.elapsed().saturating_sub(timings.ttft.saturating_sub(timings.prefill));
    if finish != FinishReason::StopSequence {
        let rest = decoder.finish();
        if let Some(f) = emit(&rest, &mut text, &mut stops) {
            finish = f;
        } else {
            // Text held back as a possible stop-string start is final now.
            let held = stops.flush();
            text.push_str(&held);
            on_text(&held);
        }
    }
    kv.release(&mut table);
    Ok(Generated { tokens, sampled, text, finish, seed: sampler.seed(), timings })
}
