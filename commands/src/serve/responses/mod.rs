//! OpenAI's Responses API: `POST /v1/responses` (answered at once, or streamed as typed events, see [`stream`]),
//! and `GET`/`DELETE /v1/responses/{id}` on the stored responses ([`store`]). A request is turned into the chat
//! request it asks for ([`input`]), continuing the conversation of its `previous_response_id`, and takes the chat
//! path (`super::openai::conversation`): the chat template, tool calls, `text.format` through the structured
//! output grammars, and the limits are the chat completions' own.

mod input;
pub mod store;
mod stream;
pub mod types;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use hyper::StatusCode;
use serde_json::Value;
use tgi_engines::sampling::FinishReason;
use tgi_engines::scheduler::Finished;
use tgi_engines::text::chat::{Content, FunctionCall, Message, ToolCall};

use super::body::{self, HttpResponse};
use super::error::ApiError;
use super::openai::common::random;
use super::openai::conversation::start;
use super::parts::Part;
use super::state::AppState;
use store::Stored;
use types::{
    CreateRequest, Deleted, InputDetails, OutputDetails, OutputItem, OutputText, ReasoningText, ResponseObject,
    ResponseUsage, TextFormat, TextOut,
};

/// `POST /v1/responses`.
pub async fn create(state: &Arc<AppState>, req: CreateRequest) -> Result<HttpResponse, ApiError> {
    let mut conversation = match &req.previous_response_id {
        Some(id) => {
            let previous = state.responses.get(id).ok_or_else(|| ApiError::ResponseNotFound(id.clone()))?;
            previous.conversation.as_ref().clone()
        }
        None => Vec::new(),
    };
    conversation.extend(req.input_messages()?);
    let chat = req.to_chat(conversation.clone())?;
    let started = start(state, &chat).await?;
    let mut draft = Draft {
        object: in_progress(state, &req),
        conversation,
        store: req.store.unwrap_or(true),
        prompt_tokens: started.valid.budget.ids.len(),
        state: state.clone(),
    };
    if started.valid.checked.stream {
        let format = stream::ResponsesStream::new(draft, started.valid.streamed());
        return Ok(started.stream(state, format));
    }
    let answer = started.answer(state).await?;
    let status = status(&answer.finished);
    let output = Part::of(answer.reasoning, answer.reply).into_iter().map(|p| item(item_id(&p), p, status)).collect();
    let cached = answer.usage.prompt_tokens_details.cached_tokens;
    let response = draft.finish(output, &answer.finished, cached, answer.usage.completion_tokens);
    let mut out = body::json(StatusCode::OK, &response);
    out.headers_mut().extend(answer.headers);
    Ok(out)
}

/// `GET /v1/responses/{id}`: a stored response.
pub fn get(state: &AppState, id: &str) -> Result<HttpResponse, ApiError> {
    let stored = state.responses.get(id).ok_or_else(|| ApiError::ResponseNotFound(id.to_string()))?;
    Ok(body::json(StatusCode::OK, &*stored.response))
}

/// `DELETE /v1/responses/{id}`: forgets a stored response.
pub fn delete(state: &AppState, id: &str) -> Result<HttpResponse, ApiError> {
    if !state.responses.delete(id) {
        return Err(ApiError::ResponseNotFound(id.to_string()));
    }
    Ok(body::json(StatusCode::OK, &Deleted { id: id.to_string(), object: "response.deleted", deleted: true }))
}

/// A response being generated.
pub struct Draft {
    /// The response as it is while in progress.
    object: ResponseObject,
    /// Its conversation (without its instructions), stored with its output once done.
    conversation: Vec<Message>,
    /// Whether to store it.
    store: bool,
    /// Its prompt's tokens.
    prompt_tokens: usize,
    state: Arc<AppState>,
}

impl Draft {
    /// The done response of `output`, which the engine ended as `f` says, of `generated` tokens after a prompt
    /// of which `cached` came from the prefix cache; stored when asked.
    fn finish(&mut self, output: Vec<OutputItem>, f: &Finished, cached: usize, generated: usize) -> ResponseObject {
        let mut response = self.object.clone();
        response.status = status(f);
        if f.reason == FinishReason::Length {
            response.incomplete_details = Some(serde_json::json!({"reason": "max_output_tokens"}));
        }
        response.usage = Some(ResponseUsage {
            input_tokens: self.prompt_tokens,
            input_tokens_details: InputDetails { cached_tokens: cached },
            output_tokens: generated,
            output_tokens_details: OutputDetails { reasoning_tokens: self.reasoning_tokens(&output) },
            total_tokens: self.prompt_tokens + generated,
        });
        response.output = output;
        if self.store {
            let mut conversation = std::mem::take(&mut self.conversation);
            conversation.push(assistant_turn(&response.output));
            let stored = Stored { response: Arc::new(to_value(&response)), conversation: Arc::new(conversation) };
            self.state.responses.put(response.id.clone(), stored);
        }
        response
    }

    /// The tokens of `output`'s thinking, as the tokenizer counts its text.
    fn reasoning_tokens(&self, output: &[OutputItem]) -> usize {
        let tokenizer = self.state.lexicon.tokenizer();
        let count = |text: &str| tokenizer.encode(text, false, false).map_or(0, |ids| ids.len());
        output
            .iter()
            .filter_map(|item| match item {
                OutputItem::Reasoning { content, .. } => Some(content.iter().map(|c| count(&c.text)).sum::<usize>()),
                _ => None,
            })
            .sum()
    }
}

/// `value` as JSON.
fn to_value(value: &ResponseObject) -> Value {
    serde_json::to_value(value).expect("responses serialize")
}

/// The response to `req` as it is before any output.
fn in_progress(state: &AppState, req: &CreateRequest) -> ResponseObject {
    let format = req.text.as_ref().and_then(|t| t.format.clone()).unwrap_or(TextFormat::Text {});
    ResponseObject {
        id: format!("resp_{:016x}{:016x}", random(), random()),
        object: "response",
        created_at: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        status: "in_progress",
        error: None,
        incomplete_details: None,
        instructions: req.instructions.clone(),
        max_output_tokens: req.max_output_tokens,
        model: state.model.id.clone(),
        output: Vec::new(),
        parallel_tool_calls: req.parallel_tool_calls.unwrap_or(true),
        previous_response_id: req.previous_response_id.clone(),
        store: req.store.unwrap_or(true),
        temperature: req.temperature,
        top_p: req.top_p,
        text: TextOut { format },
        tool_choice: req.tool_choice.clone().unwrap_or_else(|| Value::from("auto")),
        tools: req.tools.clone().unwrap_or_default(),
        truncation: "disabled",
        usage: None,
        metadata: req.metadata.clone().unwrap_or_default(),
    }
}

/// A response's status once the engine ended it as `f` says: `incomplete` when cut by its length.
fn status(f: &Finished) -> &'static str {
    if f.reason == FinishReason::Length {
        "incomplete"
    } else {
        "completed"
    }
}

/// A fresh id for the item of `part`: `rs_...` for thinking, `msg_...` for text, `fc_...` for a call.
fn item_id(part: &Part) -> String {
    let prefix = match part {
        Part::Thinking(_) => "rs",
        Part::Text(_) => "msg",
        Part::Call { .. } => "fc",
    };
    format!("{prefix}_{:016x}", random())
}

/// `part` as the output item `id` of this `status`; thinking and text in progress have no content part yet.
fn item(id: String, part: Part, status: &'static str) -> OutputItem {
    match part {
        Part::Thinking(text) => {
            let content = if status == "in_progress" { Vec::new() } else { vec![ReasoningText::new(text)] };
            OutputItem::Reasoning { id, summary: Vec::new(), content, status }
        }
        Part::Text(text) => {
            let content = if status == "in_progress" { Vec::new() } else { vec![OutputText::new(text)] };
            OutputItem::Message { id, status, role: "assistant", content }
        }
        Part::Call { id: call_id, name, arguments } => {
            OutputItem::FunctionCall { id, call_id, name, arguments, status }
        }
    }
}

/// The output as the assistant turn of the stored conversation: its reasoning, its text, and its calls.
fn assistant_turn(output: &[OutputItem]) -> Message {
    let (mut reasoning, mut text, mut calls) = (String::new(), String::new(), Vec::new());
    for item in output {
        match item {
            OutputItem::Reasoning { content, .. } => content.iter().for_each(|c| reasoning.push_str(&c.text)),
            OutputItem::Message { content, .. } => content.iter().for_each(|c| text.push_str(&c.text)),
            OutputItem::FunctionCall { call_id, name, arguments, .. } => calls.push(ToolCall {
                id: Some(call_id.clone()),
                kind: "function".into(),
                function: FunctionCall { name: name.clone(), arguments: Value::String(arguments.clone()) },
            }),
        }
    }
    Message {
        role: "assistant".into(),
        content: (!text.is_empty() || calls.is_empty()).then_some(Content::Text(text)),
        tool_calls: (!calls.is_empty()).then_some(calls),
        reasoning_content: (!reasoning.is_empty()).then_some(reasoning),
        ..Message::default()
    }
}
