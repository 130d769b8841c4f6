//! `POST /invocations`, the route Amazon SageMaker sends every request to: TGI's generate request
//! (`POST /`, streamed when `stream` is true), a chat completions request or a completions request,
//! read as the first of these the body is (TGI's order), and answered by that route's handler.

use std::sync::Arc;

use serde_json::Value;

use super::body::{self, HttpResponse};
use super::error::ApiError;
use super::openai::types::{ChatRequest, CompletionRequest};
use super::state::AppState;
use super::tgi::types::GenerateRequest;
use super::{openai, tgi};

/// An `/invocations` body.
#[derive(Debug)]
pub enum Invocation {
    /// TGI's generate request, answered as `POST /` answers it.
    Generate(GenerateRequest),
    /// A chat completions request (boxed: it is the largest by far).
    Chat(Box<ChatRequest>),
    /// A completions request.
    Completion(CompletionRequest),
}

impl Invocation {
    /// Reads `raw` as a generate request, else a chat request, else a completions request. A body
    /// that is none of them is refused with the error of the one it names (`messages`: chat,
    /// `prompt`: completions, otherwise generate).
    pub fn parse(raw: &[u8]) -> Result<Self, ApiError> {
        let generate = match body::parse::<GenerateRequest>(raw) {
            Ok(req) => return Ok(Invocation::Generate(req)),
            Err(e @ ApiError::JsonSyntax(_)) => return Err(e),
            Err(e) => e,
        };
        let chat = match body::parse::<ChatRequest>(raw) {
            Ok(req) => return Ok(Invocation::Chat(Box::new(req))),
            Err(e) => e,
        };
        let completion = match body::parse::<CompletionRequest>(raw) {
            Ok(req) => return Ok(Invocation::Completion(req)),
            Err(e) => e,
        };
        let named = |key: &str| serde_json::from_slice::<Value>(raw).is_ok_and(|v| v.get(key).is_some());
        Err(if named("messages") {
            chat
        } else if named("prompt") {
            completion
        } else {
            generate
        })
    }
}

/// `POST /invocations`.
pub async fn invocations(state: &Arc<AppState>, raw: &[u8]) -> Result<HttpResponse, ApiError> {
    match Invocation::parse(raw)? {
        Invocation::Generate(req) => tgi::compat(state, req).await,
        Invocation::Chat(req) => openai::chat(state, *req).await,
        Invocation::Completion(req) => openai::completions(state, req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<Invocation, ApiError> {
        Invocation::parse(body.as_bytes())
    }

    #[test]
    fn bodies_are_read_in_tgi_order() {
        assert!(matches!(parse(r#"{"inputs": "Hi", "stream": true}"#), Ok(Invocation::Generate(r)) if r.stream));
        let chat = parse(r#"{"messages": [{"role": "user", "content": "Hi"}], "stream": true}"#);
        assert!(matches!(chat, Ok(Invocation::Chat(_))));
        assert!(matches!(parse(r#"{"prompt": "Hi"}"#), Ok(Invocation::Completion(_))));
        // Both: a generate request, as TGI reads it; a wrong `inputs` leaves the chat request.
        assert!(matches!(parse(r#"{"inputs": "Hi", "messages": []}"#), Ok(Invocation::Generate(_))));
        assert!(matches!(parse(r#"{"inputs": 1, "messages": []}"#), Ok(Invocation::Chat(_))));
    }

    #[test]
    fn a_body_of_no_kind_gets_the_error_of_the_kind_it_names() {
        let message = |body: &str| parse(body).unwrap_err().to_string();
        assert!(matches!(parse("{"), Err(ApiError::JsonSyntax(_))));
        assert!(message("{}").contains("missing field `inputs`"), "{}", message("{}"));
        assert!(message(r#"{"messages": 1}"#).contains("invalid type: integer"));
        assert!(message(r#"{"prompt": {}}"#).contains("untagged enum Prompt"), "{}", message(r#"{"prompt": {}}"#));
    }
}
