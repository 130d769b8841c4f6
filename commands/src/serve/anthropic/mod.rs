//! Anthropic's Messages API: `POST /v1/messages` (answered at once, or streamed as Anthropic's events, see
//! [`stream`]) and `POST /v1/messages/count_tokens`. A request is turned into the chat request it asks for
//! ([`request`]) and takes the chat path (`super::openai::conversation`): the chat template, the tool-call
//! grammar and parser, stop sequences and limits are the chat completions' own. Errors take Anthropic's shape
//! (`super::error::Family`).

mod request;
mod stream;
pub mod types;

use std::sync::Arc;

use hyper::StatusCode;
use serde_json::Value;
use tgi_engines::sampling::FinishReason;
use tgi_engines::scheduler::Finished;

use super::body::{self, HttpResponse};
use super::error::ApiError;
use super::openai::common::random;
use super::openai::conversation::{prompt_tokens, start};
use super::parts::Part;
use super::state::AppState;
use types::{MessageResponse, MessagesRequest, OutBlock, Prompt, TokenCount, Usage};

/// `POST /v1/messages`.
pub async fn messages(state: &Arc<AppState>, req: MessagesRequest) -> Result<HttpResponse, ApiError> {
    let chat = req.to_chat()?;
    let started = start(state, &chat).await?;
    let message = MessageResponse {
        id: format!("msg_{:016x}{:08x}", random(), random() as u32),
        kind: "message",
        role: "assistant",
        model: state.model.id.clone(),
        content: Vec::new(),
        stop_reason: None,
        stop_sequence: None,
        usage: Usage { input_tokens: started.valid.budget.ids.len(), ..Usage::default() },
    };
    if started.valid.checked.stream {
        let format = stream::MessagesStream::new(message, started.valid.streamed());
        return Ok(started.stream(state, format));
    }
    let answer = started.answer(state).await?;
    let reason = stop_reason(answer.reply.finish_reason, &answer.finished);
    let message = MessageResponse {
        content: Part::of(answer.reasoning, answer.reply).into_iter().map(block).collect(),
        stop_reason: Some(reason),
        stop_sequence: stop_sequence(reason, answer.finished),
        usage: Usage {
            output_tokens: answer.usage.completion_tokens,
            cache_read_input_tokens: answer.usage.prompt_tokens_details.cached_tokens,
            ..message.usage
        },
        ..message
    };
    let mut out = body::json(StatusCode::OK, &message);
    out.headers_mut().extend(answer.headers);
    Ok(out)
}

/// `POST /v1/messages/count_tokens`: the prompt's tokens, rendered as `/v1/messages` renders it.
pub fn count_tokens(state: &AppState, req: Prompt) -> Result<HttpResponse, ApiError> {
    let input_tokens = prompt_tokens(state, &req.to_chat()?)?;
    Ok(body::json(StatusCode::OK, &TokenCount { input_tokens }))
}

/// Anthropic's `stop_reason` for an answer of OpenAI finish reason `openai` that the engine ended as `f` says.
fn stop_reason(openai: &str, f: &Finished) -> &'static str {
    match (openai, f.reason) {
        ("tool_calls", _) => "tool_use",
        (_, FinishReason::Length) => "max_tokens",
        (_, FinishReason::StopSequence) => "stop_sequence",
        (_, FinishReason::EosToken) => "end_turn",
    }
}

/// The stop sequence that ended an answer of `stop_reason`.
fn stop_sequence(stop_reason: &str, f: Finished) -> Option<String> {
    f.stop_sequence.filter(|_| stop_reason == "stop_sequence")
}

/// A part as a content block: a call's arguments parsed (`{}` when cut short before they were whole).
fn block(part: Part) -> OutBlock {
    match part {
        Part::Thinking(thinking) => OutBlock::Thinking { thinking, signature: String::new() },
        Part::Text(text) => OutBlock::Text { text },
        Part::Call { id, name, arguments } => {
            let input = serde_json::from_str::<Value>(&arguments).ok().filter(Value::is_object);
            OutBlock::ToolUse { id, name, input: input.unwrap_or_else(|| Value::Object(Default::default())) }
        }
    }
}
