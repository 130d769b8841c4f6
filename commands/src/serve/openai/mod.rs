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

/// `GET /v1/models`: the served model, then its LoRA adapters in load order (`parent`: the model).
pub fn models(state: &AppState) -> HttpResponse {
    let model = |id: String, parent: Option<String>| Model {
        id,
        object: "model",
        created: state.model.created,
        owned_by: "tgi",
        parent,
    };
    let adapters = state.loras.list().into_iter().map(|a| model(a.name, Some(state.model.id.clone())));
    let list = ModelList {
        object: "list",
        data: std::iter::once(model(state.model.id.clone(), None)).chain(adapters).collect(),
    };
    body::json(StatusCode::OK, &list)
}
