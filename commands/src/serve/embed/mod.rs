//! Embeddings: OpenAI's `POST /v1/embeddings` ([`openai`]) and TGI's `POST /embed` ([`tgi`]). Each input is a
//! prompt-only engine request, batched by the scheduler like any prompt, that returns the decoder's final hidden
//! states (after the final norm) pooled into one vector by `--pooling` (mean or last token) instead of sampling;
//! its KV blocks are released when it ends.

mod openai;
mod tgi;

use tgi_engines::pooling::Pooling;
use tgi_engines::sampling::SamplingParams;
use tgi_engines::scheduler::Request;
use tokio::sync::OwnedSemaphorePermit;

pub use openai::embeddings;
pub use tgi::embed;

use super::error::{ApiError, ValidationError};
use super::generation::{collect, fail, submit};
use super::limits::tokenize;
use super::metrics::Tracker;
use super::openai::types::Prompt;
use super::request_id::RequestId;
use super::state::AppState;

/// Most inputs one request may embed (OpenAI's own limit on `input` arrays).
pub const MAX_INPUTS: usize = 2048;

/// `--pooling`: how the final hidden states of an input become its embedding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PoolingFlag {
    /// The mean over every input position (sentence-transformers' default).
    #[default]
    Mean,
    /// The last input position's state (for models trained for it: Qwen3-Embedding, e5-mistral, gte-Qwen2).
    Last,
}

impl From<PoolingFlag> for Pooling {
    fn from(p: PoolingFlag) -> Self {
        match p {
            PoolingFlag::Mean => Pooling::Mean,
            PoolingFlag::Last => Pooling::Last,
        }
    }
}

/// The inputs' token ids: texts tokenized (with the BOS the model wants; cut first to the longest text
/// `--max-input-tokens` can hold when they will be truncated), ids checked against the vocabulary; `field` names
/// them in errors.
fn inputs(
    state: &AppState,
    field: &'static str,
    given: &Prompt,
    truncate: bool,
) -> Result<Vec<Vec<u32>>, ValidationError> {
    let (lex, bound) = (state.lexicon.as_ref(), &state.prompt_bytes);
    let count = match given {
        Prompt::Text(_) | Prompt::Ids(_) => 1,
        Prompt::Texts(v) => v.len(),
        Prompt::IdLists(v) => v.len(),
    };
    if count == 0 {
        return Err(ValidationError::EmptyInput);
    }
    if count > MAX_INPUTS {
        return Err(ValidationError::Inputs { field, max: MAX_INPUTS, given: count });
    }
    let vocab = lex.tokenizer().vocab_size();
    let known = |ids: &Vec<u32>| match ids.iter().find(|&&id| id as usize >= vocab) {
        Some(&id) => Err(ValidationError::TokenId { field, id, vocab }),
        None => Ok(ids.clone()),
    };
    let max = if truncate { bound.max_bytes } else { usize::MAX };
    match given {
        Prompt::Text(t) => Ok(vec![tokenize(lex, bound, head(t, max), true)?]),
        Prompt::Texts(ts) => {
            // Every input's bytes before any input's tokens, so that a huge one costs no tokenizing.
            ts.iter().try_for_each(|t| bound.check(head(t, max)))?;
            ts.iter().map(|t| tokenize(lex, bound, head(t, max), true)).collect()
        }
        Prompt::Ids(ids) => Ok(vec![known(ids)?]),
        Prompt::IdLists(lists) => lists.iter().map(known).collect(),
    }
}

/// The longest start of `text` of at most `max` bytes.
fn head(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// An input within `--max-input-tokens`: cut to it (its end dropped) when `truncate`, else refused when longer.
fn fit(state: &AppState, mut ids: Vec<u32>, truncate: bool) -> Result<Vec<u32>, ValidationError> {
    let max = state.limits.max_input_tokens;
    if truncate {
        ids.truncate(max);
    }
    match ids.len() {
        0 => Err(ValidationError::EmptyInput),
        n if n > max => Err(ValidationError::InputLength { max, given: n }),
        _ => Ok(ids),
    }
}

/// Each input's embedding (not normalized), in order; `inputs` are token ids that fit the limits, run under
/// `permit`.
async fn run(
    state: &AppState,
    permit: OwnedSemaphorePermit,
    inputs: Vec<Vec<u32>>,
    tracker: &mut Tracker,
) -> Result<Vec<Vec<f32>>, ApiError> {
    let (salt, id) = (state.access.cache_salt(), RequestId::current());
    let tokens: usize = inputs.iter().map(Vec::len).sum();
    let requests: Vec<Request> = inputs
        .into_iter()
        .map(|prompt_ids| Request {
            prompt_ids,
            params: SamplingParams::greedy(),
            max_new_tokens: 1,
            stop: Vec::new(),
            constraint: None,
            ignore_eos: false,
            prompt_logprobs: false,
            cache_salt: salt,
            request_id: id.clone(),
            thinking: None,
            pooling: Some(state.model.pooling),
            lora: None,
        })
        .collect();
    tracker.queued(tokens, 0, requests.len());
    let running = submit(state, requests, permit).map_err(|e| fail(state, tracker, e))?;
    let (candidates, _) = collect(state, running, tracker).await?;
    Ok(candidates.into_iter().map(|c| c.finished.embedding).collect())
}
