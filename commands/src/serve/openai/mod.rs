//! OpenAI's API: `/v1/chat/completions`, `/v1/completions` and `/v1/models`; and TGI's
//! `/chat_tokenize`, which takes a chat request. The chat request's path ([`conversation`]) is the one the
//! Messages and Responses APIs (`super::anthropic`, `super::responses`) take too.

mod chat;
mod chat_tokenize;
pub mod common;
mod completions;
pub mod conversation;
pub mod reasoning;
pub mod tools;
pub mod types;

use hyper::StatusCode;

pub use chat::chat;
pub use chat_tokenize::chat_tokenize;
pub use completions::completions;

use super::body::{self, HttpResponse};
use super::state::AppState;
use types::{Model, ModelList};

/// `GET /v1/models`: the one served model.
pub fn models(state: &AppState) -> HttpResponse {
    let list = ModelList {
        object: "list",
        data: vec![Model {
            id: state.model.id.clone(),
            object: "model",
            created: state.model.created,
            owned_by: "tgi",
        }],
    };
    body::json(StatusCode::OK, &list)
}
