//! `POST /chat_tokenize` (TGI's route): a chat request rendered through the chat template and
//! tokenized exactly as `/v1/chat/completions` does (same checks and limits), answered with the
//! rendered text and its tokens.

use hyper::StatusCode;

use super::conversation::validate;
use super::types::ChatRequest;
use crate::serve::body::{self, HttpResponse};
use crate::serve::error::ApiError;
use crate::serve::spans::{char_offset, spans};
use crate::serve::state::AppState;
use crate::serve::tgi::types::{ChatTokenizeResponse, SimpleToken};

/// `POST /chat_tokenize`: each token of the templated text with its span in characters (TGI's
/// offsets), and the text itself.
pub async fn chat_tokenize(state: &AppState, req: ChatRequest) -> Result<HttpResponse, ApiError> {
    let valid = validate(state, &req).await?;
    let (text, ids) = (&valid.text, &valid.budget.ids);
    let tokens = ids
        .iter()
        .zip(spans(state.lexicon.as_ref(), text, ids))
        .map(|(&id, r)| {
            let (start, stop) = (char_offset(text, r.start), char_offset(text, r.end));
            SimpleToken { id, text: text.chars().skip(start).take(stop - start).collect(), start, stop }
        })
        .collect();
    let answer = ChatTokenizeResponse { tokenize_response: tokens, templated_text: valid.text };
    Ok(body::json(StatusCode::OK, &answer))
}
