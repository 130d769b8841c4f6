//! `POST /v1/embeddings`, as OpenAI's API and its `openai` SDK have it: `input` as a text, texts, token ids or
//! lists of them; vectors of unit length (OpenAI's are), as floats or as base64 of little-endian f32 (what the SDK
//! asks for by default); `dimensions` only as the model's own size, since these embeddings cannot be shortened.

use std::sync::Arc;

use base64::Engine as _;
use hyper::StatusCode;
use serde::{Deserialize, Serialize};
use tgi_engines::pooling::l2_normalize;

use super::{fit, inputs, run};
use crate::serve::body::{self, HttpResponse};
use crate::serve::error::{ApiError, ValidationError};
use crate::serve::generation::fail;
use crate::serve::metrics::Tracker;
use crate::serve::openai::types::Prompt;
use crate::serve::state::AppState;

/// How vectors are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EncodingFormat {
    /// JSON numbers.
    #[default]
    Float,
    /// Base64 of the little-endian f32 values.
    Base64,
}

/// `POST /v1/embeddings` (`model` and `user` are ignored).
#[derive(Debug, Deserialize)]
pub struct EmbeddingRequest {
    /// What to embed.
    pub input: Prompt,
    /// How vectors are written [default: float].
    #[serde(default)]
    pub encoding_format: Option<EncodingFormat>,
    /// The vectors' size: only the model's own is supported.
    #[serde(default)]
    pub dimensions: Option<u64>,
}

/// One vector as written.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Vector {
    Float(Vec<f32>),
    Base64(String),
}

/// One input's embedding.
#[derive(Debug, Serialize)]
struct Embedding {
    object: &'static str,
    index: usize,
    embedding: Vector,
}

/// Token counts.
#[derive(Debug, Serialize)]
struct Usage {
    prompt_tokens: usize,
    total_tokens: usize,
}

/// The answer.
#[derive(Debug, Serialize)]
struct EmbeddingList {
    object: &'static str,
    data: Vec<Embedding>,
    model: String,
    usage: Usage,
}

/// `POST /v1/embeddings`.
pub async fn embeddings(state: &Arc<AppState>, req: EmbeddingRequest) -> Result<HttpResponse, ApiError> {
    let mut tracker = Tracker::new(state.metrics.clone());
    let permit = state.permit().map_err(|e| fail(state, &mut tracker, e))?;
    let ids = validate(state, &req).map_err(|e| fail(state, &mut tracker, e.into()))?;
    let prompt_tokens = ids.iter().map(Vec::len).sum();
    let vectors = run(state, permit, ids, &mut tracker).await?;
    let format = req.encoding_format.unwrap_or_default();
    let data = vectors
        .into_iter()
        .enumerate()
        .map(|(index, mut v)| {
            l2_normalize(&mut v);
            Embedding { object: "embedding", index, embedding: write(format, v) }
        })
        .collect();
    let answer = EmbeddingList {
        object: "list",
        data,
        model: state.model.id.clone(),
        usage: Usage { prompt_tokens, total_tokens: prompt_tokens },
    };
    Ok(body::json(StatusCode::OK, &answer))
}

/// The inputs' token ids, checked.
fn validate(state: &AppState, req: &EmbeddingRequest) -> Result<Vec<Vec<u32>>, ValidationError> {
    let size = state.model.embedding_size;
    if let Some(given) = req.dimensions.filter(|&d| d != size as u64) {
        return Err(ValidationError::Dimensions { size, given });
    }
    inputs(state, "input", &req.input, false)?.into_iter().map(|ids| fit(state, ids, false)).collect()
}

/// `v` in `format`.
fn write(format: EncodingFormat, v: Vec<f32>) -> Vector {
    match format {
        EncodingFormat::Float => Vector::Float(v),
        EncodingFormat::Base64 => {
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            Vector::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_little_endian_f32() {
        let Vector::Base64(text) = write(EncodingFormat::Base64, vec![1.0, -2.5]) else { panic!("base64") };
        let bytes = base64::engine::general_purpose::STANDARD.decode(text).unwrap();
        assert_eq!(bytes, [1.0f32.to_le_bytes(), (-2.5f32).to_le_bytes()].concat());
        let json = serde_json::to_value(write(EncodingFormat::Float, vec![0.5])).unwrap();
        assert_eq!(json, serde_json::json!([0.5]));
    }
}
