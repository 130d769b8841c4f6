//! TGI's `parameters` checked, in TGI's order and with its messages, and turned into engine requests.

use tgi_engines::sampling::{FloatParam, SamplingError, SamplingParams};
use tgi_engines::scheduler::Request;

use super::types::GenerateRequest;
use tgi_engines::constraint::Grammar;

use crate::serve::error::{ApiError, ValidationError};
use crate::serve::grammar;
use crate::serve::limits::tokenize;
use crate::serve::request_id::RequestId;
use crate::serve::state::AppState;

/// A validated TGI request.
#[derive(Debug)]
pub struct ValidGenerate {
    /// The engine requests: one, or `best_of` candidates.
    pub requests: Vec<Request>,
    /// The prompt's token ids after truncation.
    pub input_ids: Vec<u32>,
    /// Tokens to generate at most.
    pub max_new_tokens: usize,
    /// Whether tokens are sampled (the seed is reported then).
    pub sampling: bool,
    /// Return `details`.
    pub details: bool,
    /// Return the prompt tokens in `details.prefill`.
    pub decoder_input_details: bool,
    /// Put this (the prompt) before the generated text.
    pub prefix: Option<String>,
}

/// Validates `req` for a streaming or a non-streaming route, its grammar compiled last (off the HTTP threads).
pub async fn validate(state: &AppState, req: &GenerateRequest, stream: bool) -> Result<ValidGenerate, ApiError> {
    let (mut valid, grammar) = check(state, req, stream)?;
    let lora = state.loras.resolve(req.parameters.adapter_id.as_deref(), &state.model.id)?;
    for r in &mut valid.requests {
        r.lora = lora.clone();
    }
    if let Some(g) = grammar {
        let constraint = grammar::compile(state, "grammar", g).await?;
        for r in &mut valid.requests {
            r.constraint = Some(constraint.clone());
        }
    }
    Ok(valid)
}

/// Everything but compiling the grammar, which comes back to be compiled.
fn check(
    state: &AppState,
    req: &GenerateRequest,
    stream: bool,
) -> Result<(ValidGenerate, Option<Grammar>), ValidationError> {
    let p = &req.parameters;
    let limits = &state.limits;
    let best_of = p.best_of.unwrap_or(1);
    let decoder_input_details = p.decoder_input_details.unwrap_or(false);
    if stream && best_of != 1 {
        return Err(ValidationError::BestOfStream);
    }
    if stream && decoder_input_details {
        return Err(ValidationError::PrefillDetailsStream);
    }
    if best_of == 0 || best_of > limits.max_best_of {
        return Err(ValidationError::BestOf { max: limits.max_best_of, given: best_of });
    }
    let grammar = p.grammar.as_ref().map(|g| grammar::parse("grammar", g)).transpose()?.flatten();
    if p.watermark == Some(true) {
        return Err(ValidationError::Unsupported("watermark"));
    }
    let sampling = p.do_sample.unwrap_or(false)
        || p.temperature.is_some()
        || p.top_k.is_some()
        || p.top_p.is_some()
        || p.typical_p.is_some();
    if best_of > 1 && !sampling {
        return Err(ValidationError::BestOfSampling);
    }
    let temperature = FloatParam::PositiveTemperature.narrow(p.temperature.unwrap_or(1.0))?;
    let top_k = match p.top_k {
        Some(k) if k <= 0 => return Err(SamplingError::TopK.into()),
        k => k.map(|k| k as usize),
    };
    let params = SamplingParams {
        temperature: if sampling { temperature } else { 0.0 },
        top_k: top_k.filter(|_| sampling),
        top_p: FloatParam::TopP.narrow_opt(p.top_p)?.filter(|_| sampling),
        min_p: None,
        typical_p: FloatParam::TypicalP.narrow_opt(p.typical_p)?.filter(|_| sampling),
        repetition_penalty: FloatParam::RepetitionPenalty.narrow_opt(p.repetition_penalty)?,
        frequency_penalty: FloatParam::FrequencyPenalty.narrow(p.frequency_penalty.unwrap_or(0.0))?,
        presence_penalty: 0.0,
        seed: p.seed,
        logprobs: true,
        top_logprobs: 0,
    };
    params.validate()?;
    if p.max_new_tokens == Some(0) {
        return Err(ValidationError::NegativeMaxNewTokens);
    }
    let stop = p.stop.clone().unwrap_or_default();
    limits.check_stop(&stop)?;
    if p.seed.is_some() && best_of > 1 {
        return Err(ValidationError::BestOfSeed);
    }
    let top_n = p.top_n_tokens.unwrap_or(0);
    if top_n > limits.max_top_n_tokens {
        return Err(ValidationError::TopNTokens { max: limits.max_top_n_tokens, given: top_n });
    }
    if req.inputs.is_empty() {
        return Err(ValidationError::EmptyInput);
    }
    limits.check_truncate(p.truncate)?;
    let ids = tokenize(state.lexicon.as_ref(), &state.prompt_bytes, &req.inputs, req.add_special_tokens)?;
    let budget = limits.fit(ids, p.truncate, p.max_new_tokens.map(|n| n as usize))?;
    let request = Request {
        prompt_ids: budget.ids.clone(),
        params: SamplingParams { top_logprobs: top_n as usize, ..params },
        max_new_tokens: budget.max_new_tokens,
        stop,
        ignore_eos: false,
        prompt_logprobs: decoder_input_details,
        cache_salt: state.access.cache_salt(),
        constraint: None,
        request_id: RequestId::current(),
        thinking: None,
        pooling: None,
        lora: None,
    };
    let valid = ValidGenerate {
        requests: vec![request; best_of],
        input_ids: budget.ids,
        max_new_tokens: budget.max_new_tokens,
        sampling,
        details: p.details.unwrap_or(false) || decoder_input_details,
        decoder_input_details,
        prefix: p.return_full_text.unwrap_or(false).then(|| req.inputs.clone()),
    };
    Ok((valid, grammar))
}
