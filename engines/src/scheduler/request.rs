//! What goes into the scheduler (a validated [`Request`] and the [`EventSink`] its results go to) and
//! what comes out of it ([`Event`]s).

use std::time::Duration;

use crate::constraint::Constraint;
use crate::lora::LoraUse;
use crate::pooling::Pooling;
use crate::sampling::{FinishReason, SamplingParams};
use crate::text::thinking::Thinking;

/// A validated generation request: the HTTP layer has tokenized, truncated and checked it.
#[derive(Clone, Debug)]
pub struct Request {
    /// The prompt's token ids (BOS included when the model wants one); never empty.
    pub prompt_ids: Vec<u32>,
    /// Sampling parameters, validated.
    pub params: SamplingParams,
    /// Most tokens to generate (at least 1).
    pub max_new_tokens: usize,
    /// Stop strings; the output ends before the first match.
    pub stop: Vec<String>,
    /// The compiled grammar the output must match, if any (end-of-sequence then comes only where it
    /// accepts, and `ignore_eos` does not apply).
    pub constraint: Option<Constraint>,
    /// Keep generating past end-of-sequence tokens.
    pub ignore_eos: bool,
    /// Report each prompt token's log-probability (TGI's `decoder_input_details`), with
    /// `params.top_logprobs` alternatives when `params.logprobs`; such requests compute their whole
    /// prompt and do not reuse cached prefixes.
    pub prompt_logprobs: bool,
    /// Prefix-cache namespace: only requests with the same salt share cached blocks (e.g. a hash
    /// of the API key); 0 when keys are not in use.
    pub cache_salt: u64,
    /// The id of the HTTP request this came from (`x-request-id`), for log lines; shared by the
    /// candidates of one HTTP request, empty when there is none (e.g. `tgi generate`).
    pub request_id: String,
    /// The thinking block of a reasoning model's answer: a grammar applies outside it, and its budget ends it.
    pub thinking: Option<Thinking>,
    /// Embed instead of generating: the prompt's final hidden states pooled into [`Finished::embedding`];
    /// nothing is sampled, and the prompt's KV blocks are neither shared nor kept.
    pub pooling: Option<Pooling>,
    /// The LoRA adapter its tokens run through (`None`: the base model); prefix-cache entries are kept apart
    /// per adapter and scale.
    pub lora: Option<LoraUse>,
}

/// One generated token, as streamed.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenEvent {
    /// The token id.
    pub id: u32,
    /// Its log-probability in the distribution it was drawn from.
    pub logprob: f32,
    /// The most likely alternatives `(id, logprob)`, when `params.top_logprobs > 0`.
    pub top: Vec<(u32, f32)>,
    /// This token's own text from incremental decoding (empty while a UTF-8 character is
    /// incomplete); TGI streams this as `token.text`.
    pub piece: String,
    /// Output text that became final with this token: stop strings and what could still grow into
    /// one are held back, so the concatenation of every `text` is the final output. OpenAI streams this.
    pub text: String,
    /// Whether the token is a special (control) token such as EOS.
    pub special: bool,
}

/// A prompt token's log-probability under the model (the raw logits' softmax, before any sampling
/// processor).
#[derive(Clone, Debug, PartialEq)]
pub struct PromptLogprob {
    /// The token's log-probability given the tokens before it.
    pub logprob: f32,
    /// The most likely tokens at its position `(id, logprob)`, most likely first (ties to the lower
    /// id), when the request asked for alternatives.
    pub top: Vec<(u32, f32)>,
}

/// How a request ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Finished {
    /// Why generation stopped.
    pub reason: FinishReason,
    /// Tokens generated (EOS included when it ended the sequence).
    pub generated_tokens: usize,
    /// The whole output text (the stop string and what follows excluded).
    pub text: String,
    /// The stop string that ended it, when one did (Anthropic's `stop_sequence`).
    pub stop_sequence: Option<String>,
    /// The sampler's seed, given or drawn.
    pub seed: u64,
    /// From leaving the queue to the last token.
    pub inference_time: Duration,
    /// Times the sequence was preempted (KV blocks taken back) and resumed.
    pub preemptions: u32,
    /// Tokens drafted by speculative decoding and checked by the model.
    pub speculated_tokens: usize,
    /// Drafted tokens the model accepted (each saved a step).
    pub accepted_tokens: usize,
    /// A pooling request's vector (`hidden` floats, not normalized); empty for a generation.
    pub embedding: Vec<f32>,
}

/// What the scheduler reports about a request, in order: `Started` once, `PromptLogprobs` once when
/// asked for, `Token` per generated token, then exactly one of `Finished` or `Failed`.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The request left the queue and its prefill began.
    Started {
        /// Time spent waiting in the queue.
        queue_time: Duration,
        /// Prompt tokens whose KV came from the prefix cache.
        cached_tokens: usize,
    },
    /// Per prompt token, the log-probability the model gave it (`None` for the first).
    PromptLogprobs(Vec<Option<PromptLogprob>>),
    /// A generated token.
    Token(TokenEvent),
    /// Generation ended normally.
    Finished(Finished),
    /// Generation failed (an engine error); the request is over.
    Failed(String),
}

/// Where a request's events go. The scheduler polls [`EventSink::is_closed`] every step and cancels
/// the request (freeing its KV blocks) once the receiver is gone.
pub trait EventSink: Send {
    /// Delivers an event; `false` when the receiver is gone (the request is then cancelled).
    fn send(&mut self, event: Event) -> bool;
    /// Whether the receiver is gone (client disconnected, timed out).
    fn is_closed(&self) -> bool;
}

/// Why the scheduler refused a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The scheduler is shutting down or its thread has stopped.
    #[error("the engine is not running")]
    NotRunning,
    /// The request can never fit: prompt plus new tokens need more KV than the whole pool.
    #[error("the request needs {needed} KV tokens but the cache holds {capacity}")]
    TooLarge {
        /// Tokens the request needs at most.
        needed: usize,
        /// Tokens the KV pool holds.
        capacity: usize,
    },
}
