//! What chat completions and completions share: sampling fields to engine parameters, response
//! ids, usage, token log-probabilities.

use std::hash::{BuildHasher, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

use tgi_engines::constraint::{Constraint, Grammar};
use tgi_engines::lora::LoraUse;
use tgi_engines::sampling::{FloatParam, SamplingError, SamplingParams};
use tgi_engines::scheduler::{Request, TokenEvent};
use tgi_engines::text::thinking::Thinking;

use super::types::{Sampling, TokenLogprob, TopLogprob, Usage};
use crate::serve::backend::Lexicon;
use crate::serve::error::{ApiError, ValidationError};
use crate::serve::generation::Candidate;
use crate::serve::grammar;
use crate::serve::limits::{Budget, RequestLimits};
use crate::serve::request_id::RequestId;
use crate::serve::state::AppState;

/// The fields every OpenAI response repeats.
#[derive(Clone, Debug)]
pub struct Meta {
    /// `chatcmpl-...` or `cmpl-...`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The served model.
    pub model: String,
    /// The server build.
    pub fingerprint: String,
}

impl Meta {
    /// Fresh ids for a response of the served model.
    pub fn new(state: &AppState, prefix: &str) -> Self {
        Meta {
            id: format!("{prefix}-{:016x}", random()),
            created: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            model: state.model.id.clone(),
            fingerprint: format!("tgi-{}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// 64 random bits (for response and call ids; not for secrets).
pub fn random() -> u64 {
    std::collections::hash_map::RandomState::new().build_hasher().finish()
}

/// The request's sampling fields, checked.
pub struct Checked {
    /// Engine sampling parameters (seed of choice 0).
    pub params: SamplingParams,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Choices per prompt.
    pub n: usize,
    /// Stream the answer.
    pub stream: bool,
    /// Send a usage chunk at the end of the stream.
    pub include_usage: bool,
    /// Keep generating past end-of-sequence tokens.
    pub ignore_eos: bool,
    /// The compiled grammar every choice's output must match (`response_format`, or a forced tool call).
    pub constraint: Option<Constraint>,
    /// The answers' thinking block, for a chat template that thinks.
    pub thinking: Option<Thinking>,
    /// The LoRA adapter `model` or `lora` names (`None`: the base).
    pub lora: Option<LoraUse>,
}

impl Sampling {
    /// Checks the fields against `limits`; `top` alternatives per token when `logprobs`.
    pub fn check(&self, limits: &RequestLimits, logprobs: bool, top: usize) -> Result<Checked, ValidationError> {
        if self.logit_bias.as_ref().is_some_and(|b| !b.is_empty()) {
            return Err(ValidationError::Unsupported("logit_bias"));
        }
        let n = self.n.unwrap_or(1);
        if n == 0 || n > limits.max_n {
            return Err(ValidationError::N { max: limits.max_n, given: n });
        }
        let top_k = match self.top_k {
            None | Some(-1) => None,
            Some(k) if k <= 0 => return Err(SamplingError::TopK.into()),
            Some(k) => Some(k as usize),
        };
        let params = SamplingParams {
            temperature: FloatParam::Temperature.narrow(self.temperature.unwrap_or(1.0))?,
            top_k,
            top_p: FloatParam::TopP.narrow_opt(self.top_p)?,
            min_p: FloatParam::MinP.narrow_opt(self.min_p)?,
            typical_p: None,
            repetition_penalty: FloatParam::RepetitionPenalty.narrow_opt(self.repetition_penalty)?,
            frequency_penalty: FloatParam::FrequencyPenalty.narrow(self.frequency_penalty.unwrap_or(0.0))?,
            presence_penalty: FloatParam::PresencePenalty.narrow(self.presence_penalty.unwrap_or(0.0))?,
            seed: self.seed,
            logprobs,
            top_logprobs: top,
        };
        params.validate()?;
        let stop = match &self.stop {
            None => Vec::new(),
            Some(s) => s.clone().into_vec(),
        };
        limits.check_stop(&stop)?;
        let stream = self.stream.unwrap_or(false);
        let include_usage = stream && self.stream_options.as_ref().and_then(|o| o.include_usage).unwrap_or(false);
        Ok(Checked {
            params,
            stop,
            n,
            stream,
            include_usage,
            ignore_eos: self.ignore_eos.unwrap_or(false),
            constraint: None,
            thinking: None,
            lora: None,
        })
    }
}

impl Checked {
    /// Runs every choice on the adapter the request names: llama-server's `lora` list when given (an unknown
    /// adapter is a 404), else `model` when it is an adapter's name.
    pub fn adapt(&mut self, state: &AppState, sampling: &Sampling) -> Result<(), ApiError> {
        self.lora = match &sampling.lora {
            Some(list) => state.loras.resolve_list(list, &state.model.id)?,
            None => state.loras.by_model(sampling.model.as_deref()),
        };
        Ok(())
    }

    /// Constrains every choice's output to `grammar` (`response_format`, a forced tool call; `param` names
    /// the field in errors); a grammar the engine cannot compile or enforce is refused here.
    pub async fn constrain(&mut self, state: &AppState, param: &'static str, grammar: Grammar) -> Result<(), ApiError> {
        self.constraint = Some(grammar::compile(state, param, grammar).await?);
        Ok(())
    }

    /// `per_prompt` engine requests for each prompt, prompt by prompt; with a seed, candidate `i`
    /// of a prompt uses `seed + i`.
    pub fn requests(
        &self,
        state: &AppState,
        prompts: &[Budget],
        per_prompt: usize,
        prompt_logprobs: bool,
    ) -> Vec<Request> {
        let salt = state.access.cache_salt();
        let id = RequestId::current();
        let id = &id;
        prompts
            .iter()
            .flat_map(|b| {
                (0..per_prompt).map(move |i| Request {
                    prompt_ids: b.ids.clone(),
                    params: SamplingParams {
                        seed: self.params.seed.map(|s| s.wrapping_add(i as u64)),
                        ..self.params.clone()
                    },
                    max_new_tokens: b.max_new_tokens,
                    stop: self.stop.clone(),
                    ignore_eos: self.ignore_eos,
                    prompt_logprobs,
                    cache_salt: salt,
                    constraint: self.constraint.clone(),
                    request_id: id.clone(),
                    thinking: self.thinking.clone(),
                    pooling: None,
                    lora: self.lora.clone(),
                })
            })
            .collect()
    }
}

/// Usage of `candidates` generated for prompts of these lengths.
pub fn usage(prompt_lengths: &[usize], candidates: &[Candidate]) -> Usage {
    let prompt_tokens = prompt_lengths.iter().sum();
    let completion_tokens = candidates.iter().map(|c| c.finished.generated_tokens).sum();
    Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
        prompt_tokens_details: super::types::PromptTokensDetails {
            cached_tokens: candidates.iter().map(|c| c.cached_tokens).max().unwrap_or(0),
        },
    }
}

/// The indices of the `n` most likely of `candidates` (summed log-probability), in their order.
pub fn best(candidates: &[Candidate], n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|&a, &b| candidates[b].logprob().total_cmp(&candidates[a].logprob()).then(a.cmp(&b)));
    order.truncate(n);
    order.sort_unstable();
    order
}

/// A generated token's log-probability entry.
pub fn token_logprob(lex: &dyn Lexicon, t: &TokenEvent) -> TokenLogprob {
    let bytes = lex.tokenizer().token_to_piece(t.id);
    TokenLogprob {
        token: String::from_utf8_lossy(&bytes).into_owned(),
        logprob: t.logprob,
        bytes,
        top_logprobs: t
            .top
            .iter()
            .map(|&(id, logprob)| {
                let bytes = lex.tokenizer().token_to_piece(id);
                TopLogprob { token: String::from_utf8_lossy(&bytes).into_owned(), logprob, bytes }
            })
            .collect(),
    }
}
