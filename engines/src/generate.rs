//! One request from prompt to finish through the scheduler, alone: a scheduler sized for one sequence, the
//! text streamed to a callback as it becomes final, and where the time went. `tgi generate` runs this.

use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::kv::BLOCK_SIZE;
use crate::model::{LoadedModel, ModelError};
use crate::sampling::{FinishReason, Sampled};
use crate::scheduler::{Batching, Event, EventSink, Request, Scheduler, SchedulerConfig, SubmitError};

/// What to generate, and how big the prefill steps are.
#[derive(Clone, Debug)]
pub struct GenerateRequest {
    /// The request, as the scheduler takes it.
    pub request: Request,
    /// Most prompt tokens per prefill step.
    pub prefill_chunk: usize,
}

/// Why a generation did not finish.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// The request does not fit the model, or the scheduler could not start.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The scheduler refused the request.
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// The engine failed while generating.
    #[error("generation failed: {0}")]
    Failed(String),
    /// The scheduler thread ended before the request did.
    #[error("the scheduler stopped before the request finished")]
    Stopped,
}

/// Where the time went, per phase.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PhaseTimings {
    /// From submission to the first generated token (queue, prefill and one sampling).
    pub ttft: Duration,
    /// From leaving the queue to the first generated token: the prefill steps and one sampling.
    pub prefill: Duration,
    /// From the first generated token to the last: the decode steps.
    pub decode: Duration,
    /// Decode steps run (one per token after the first).
    pub decode_steps: usize,
}

impl PhaseTimings {
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
    pub timings: PhaseTimings,
}

/// Events with the instant the scheduler sent them, so that timings do not include the hop to this thread.
struct TimedSink(Sender<(Instant, Event)>);

impl EventSink for TimedSink {
    fn send(&mut self, event: Event) -> bool {
        self.0.send((Instant::now(), event)).is_ok()
    }

    fn is_closed(&self) -> bool {
        false
    }
}

/// The scheduler for `req` alone: one sequence, a KV pool of prompt plus new tokens (clamped to the context)
/// rounded up to whole blocks, prefill in chunks of `req.prefill_chunk`, no prefix cache, no speculation.
fn config_for(req: &GenerateRequest, context: usize) -> SchedulerConfig {
    let total = (req.request.prompt_ids.len() + req.request.max_new_tokens.max(1)).min(context);
    SchedulerConfig {
        max_batch_size: 1,
        max_batch_total_tokens: total.div_ceil(BLOCK_SIZE) * BLOCK_SIZE,
        batching: Batching {
            max_batch_prefill_tokens: req.prefill_chunk,
            prefix_caching: false,
            ..Batching::default()
        },
        speculation: None,
    }
}

/// Runs `req` on `m` through a scheduler of its own, calling `on_text` with each piece of text as soon as it
/// is final.
pub fn generate(
    m: &Arc<LoadedModel>,
    req: &GenerateRequest,
    mut on_text: impl FnMut(&str),
) -> Result<Generated, GenerateError> {
    let context = m.model.config().context;
    let prompt = req.request.prompt_ids.len();
    if prompt == 0 {
        return Err(ModelError::Config("the prompt has no tokens".into()).into());
    }
    if prompt >= context {
        return Err(ModelError::ContextOverflow { tokens: prompt + 1, context }.into());
    }
    let scheduler = Scheduler::start(m.clone(), config_for(req, context))?;
    let (tx, rx) = mpsc::channel();
    let submitted = Instant::now();
    scheduler.submit(req.request.clone(), Box::new(TimedSink(tx)))?;
    // The scheduler thread ends once the request has.
    drop(scheduler);
    let (mut started, mut first, mut last) = (submitted, None, submitted);
    let (mut tokens, mut sampled) = (Vec::new(), Vec::new());
    for (at, event) in rx {
        match event {
            Event::Started { .. } => started = at,
            Event::PromptLogprobs(_) => {}
            Event::Token(t) => {
                first.get_or_insert(at);
                last = at;
                on_text(&t.text);
                tokens.push(t.id);
                sampled.push(Sampled { token: t.id, logprob: t.logprob, top: t.top });
            }
            Event::Finished(f) => {
                let first = first.unwrap_or(at);
                let timings = PhaseTimings {
                    ttft: first - submitted,
                    prefill: first - started,
                    decode: last - first,
                    decode_steps: tokens.len().saturating_sub(1),
                };
                return Ok(Generated { tokens, sampled, text: f.text, finish: f.reason, seed: f.seed, timings });
            }
            Event::Failed(message) => return Err(GenerateError::Failed(message)),
        }
    }
    Err(GenerateError::Stopped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::TokenEvent;

    #[test]
    fn one_sequence_sized_to_its_tokens() {
        let request = Request {
            prompt_ids: vec![1; 20],
            params: crate::sampling::SamplingParams::greedy(),
            max_new_tokens: 13,
            stop: Vec::new(),
            ignore_eos: false,
            prompt_logprobs: false,
            cache_salt: 0,
            constraint: None,
            request_id: String::new(),
            thinking: None,
            pooling: None,
            lora: None,
        };
        let req = GenerateRequest { request, prefill_chunk: 7 };
        let c = config_for(&req, 512);
        assert_eq!((c.max_batch_size, c.max_batch_total_tokens, c.batching.max_batch_prefill_tokens), (1, 48, 7));
        assert!(!c.batching.prefix_caching && c.speculation.is_none());
        assert_eq!(config_for(&req, 24).max_batch_total_tokens, 32, "clamped to the context, then whole blocks");
        c.validate().unwrap();
        assert!(config_for(&GenerateRequest { prefill_chunk: 0, ..req }, 512).validate().is_err());
        let (tx, rx) = mpsc::channel();
        let mut sink = TimedSink(tx);
        let token =
            TokenEvent { id: 1, logprob: 0.0, top: vec![], piece: "a".into(), text: "a".into(), special: false };
        assert!(sink.send(Event::Token(token.clone())) && !sink.is_closed());
        assert_eq!(rx.recv().unwrap().1, Event::Token(token.clone()));
        drop(rx);
        assert!(!sink.send(Event::Token(token)));
    }
}
