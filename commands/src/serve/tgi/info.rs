//! `GET /info` and `POST /tokenize`.

use hyper::StatusCode;

use super::types::{GenerateRequest, Info, SimpleToken};
use crate::serve::backend::Lexicon;
use crate::serve::body::{self, HttpResponse};
use crate::serve::error::{ApiError, ValidationError};
use crate::serve::limits::tokenize as encode;
use crate::serve::spans::spans;
use crate::serve::state::AppState;

/// `GET /info`.
pub fn info(state: &AppState) -> HttpResponse {
    let l = &state.limits;
    body::json(
        StatusCode::OK,
        &Info {
            model_id: state.model.id.clone(),
            model_sha: None,
            model_pipeline_tag: None,
            max_concurrent_requests: l.max_concurrent_requests,
            max_best_of: l.max_best_of,
            max_stop_sequences: l.max_stop_sequences,
            max_input_tokens: l.max_input_tokens,
            max_total_tokens: l.max_total_tokens,
            validation_workers: 1,
            max_client_batch_size: 1,
            router: "tgi",
            version: env!("CARGO_PKG_VERSION"),
            sha: None,
            docker_label: None,
            max_batch_total_tokens: l.max_batch_total_tokens,
            kv_cache_budget: state.model.kv_budget.clone(),
            kv_cache_dtype: state.model.kv_dtype.name(),
            kv_cache_rotation: state.model.kv_rotation.is_on(),
            lora_adapters: state.loras.list(),
            max_loras: state.loras.max_loras,
            max_lora_rank: state.loras.max_rank,
            lora_reserved_bytes: state.loras.reserved_bytes,
        },
    )
}

/// `POST /tokenize`: the prompt's tokens (after `parameters.truncate`) with their byte spans. Bounded
/// like a generation's prompt: refused over the byte bound before tokenizing, and over
/// `--max-input-tokens` tokens after truncation.
pub fn tokenize(state: &AppState, req: GenerateRequest) -> Result<HttpResponse, ApiError> {
    state.limits.check_truncate(req.parameters.truncate)?;
    let mut ids = encode(state.lexicon.as_ref(), &state.prompt_bytes, &req.inputs, req.add_special_tokens)?;
    let kept = req.parameters.truncate.map_or(ids.len(), |t| t.min(ids.len()));
    if kept > state.limits.max_input_tokens {
        let max = state.limits.max_input_tokens;
        return Err(ValidationError::InputLength { max, given: kept }.into());
    }
    let mut tokens = tokens(state.lexicon.as_ref(), &req.inputs, &ids);
    if let Some(t) = req.parameters.truncate.filter(|&t| t < ids.len()) {
        let cut = ids.len() - t;
        ids.drain(..cut);
        tokens.drain(..cut);
    }
    Ok(body::json(StatusCode::OK, &tokens))
}

/// Each token with the byte span of `input` it covers, as TGI reports them (BOS: an empty span and text).
fn tokens(lex: &dyn Lexicon, input: &str, ids: &[u32]) -> Vec<SimpleToken> {
    let bytes = input.as_bytes();
    ids.iter()
        .zip(spans(lex, input, ids))
        .map(|(&id, r)| SimpleToken {
            id,
            text: String::from_utf8_lossy(&bytes[r.clone()]).into_owned(),
            start: r.start,
            stop: r.end,
        })
        .collect()
}
