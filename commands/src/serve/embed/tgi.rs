//! `POST /embed`, as TGI's (text-embeddings-inference's) API has it: `inputs` as a text, texts or token ids,
//! `normalize` (unit length, the default), `truncate` (inputs cut to `--max-input-tokens`, their end dropped);
//! the answer is one vector per input, always a list.

use std::sync::Arc;

use hyper::StatusCode;
use serde::Deserialize;
use tgi_engines::pooling::l2_normalize;

use super::{fit, inputs, run};
use crate::serve::body::{self, HttpResponse};
use crate::serve::error::{ApiError, ValidationError};
use crate::serve::generation::fail;
use crate::serve::metrics::Tracker;
use crate::serve::openai::types::Prompt;
use crate::serve::state::AppState;

/// `POST /embed`.
#[derive(Debug, Deserialize)]
pub struct EmbedRequest {
    /// What to embed.
    pub inputs: Prompt,
    /// Scale each vector to unit length [default: true].
    #[serde(default)]
    pub normalize: Option<bool>,
    /// Cut inputs longer than `--max-input-tokens` instead of refusing them [default: false].
    #[serde(default)]
    pub truncate: Option<bool>,
    /// A sentence-transformers prompt name (not supported: refused when given).
    #[serde(default)]
    pub prompt_name: Option<String>,
}

/// `POST /embed`.
pub async fn embed(state: &Arc<AppState>, req: EmbedRequest) -> Result<HttpResponse, ApiError> {
    let mut tracker = Tracker::new(state.metrics.clone());
    let permit = state.permit().map_err(|e| fail(state, &mut tracker, e))?;
    let ids = validate(state, &req).map_err(|e| fail(state, &mut tracker, e.into()))?;
    let mut vectors = run(state, permit, ids, &mut tracker).await?;
    if req.normalize.unwrap_or(true) {
        vectors.iter_mut().for_each(|v| l2_normalize(v));
    }
    Ok(body::json(StatusCode::OK, &vectors))
}

/// The inputs' token ids, checked.
fn validate(state: &AppState, req: &EmbedRequest) -> Result<Vec<Vec<u32>>, ValidationError> {
    if req.prompt_name.is_some() {
        return Err(ValidationError::Unsupported("prompt_name"));
    }
    let truncate = req.truncate.unwrap_or(false);
    inputs(state, "inputs", &req.inputs, truncate)?.into_iter().map(|ids| fit(state, ids, truncate)).collect()
}
