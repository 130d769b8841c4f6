//! `POST /v1/chat/completions`: the conversation through the model's chat template, `n` choices,
//! streamed as `chat.completion.chunk` events ending with `data: [DONE]`, or answered at once.

use std::sync::Arc;

use hyper::{HeaderMap, StatusCode};
use tgi_engines::sampling::MAX_TOP_LOGPROBS;
use tgi_engines::scheduler::{Finished, TokenEvent};
use tgi_engines::text::chat::Message;

use super::common::{token_logprob, usage, Checked, Meta};
use super::types::{
    AssistantMessage, ChatChoice, ChatChunk, ChatCompletion, ChatLogprobs, ChatRequest, ChunkChoice, Delta, Usage,
};
use crate::serve::backend::Lexicon;
use crate::serve::body::{self, event_stream, HttpResponse};
use crate::serve::error::{ApiError, ValidationError};
use crate::serve::generation::{collect, fail, submit};
use crate::serve::grammar;
use crate::serve::headers;
use crate::serve::limits::{tokenize, Budget};
use crate::serve::metrics::Tracker;
use crate::serve::state::AppState;
use crate::serve::stream::{self, StreamFormat};

/// A chat request, validated.
pub(super) struct Valid {
    checked: Checked,
    /// The prompt's tokens and the tokens left to generate.
    pub budget: Budget,
    logprobs: bool,
    /// The conversation rendered through the chat template.
    pub text: String,
}

/// `POST /v1/chat/completions`.
pub async fn chat(state: &Arc<AppState>, req: ChatRequest) -> Result<HttpResponse, ApiError> {
    let mut tracker = Tracker::new(state.metrics.clone());
    let permit = state.permit().map_err(|e| fail(state, &mut tracker, e))?;
    let valid = validate(state, &req).map_err(|e| fail(state, &mut tracker, e))?;
    let requests = valid.checked.requests(state, std::slice::from_ref(&valid.budget), valid.checked.n, false);
    tracker.queued(valid.budget.ids.len(), valid.budget.max_new_tokens, requests.len());
    let running = submit(state, requests, permit).map_err(|e| fail(state, &mut tracker, e))?;
    let meta = Meta::new(state, "chatcmpl");
    let prompt_tokens = valid.budget.ids.len();
    let characters = valid.text.chars().count();
    if valid.checked.stream {
        let (mut response, tx) = event_stream();
        headers::start(response.headers_mut(), &state.model.compute_type, characters);
        let format = ChatStream {
            meta,
            lexicon: state.lexicon.clone(),
            logprobs: valid.logprobs,
            include_usage: valid.checked.include_usage,
            usage: Usage { prompt_tokens, ..Usage::default() },
            sent: vec![String::new(); valid.checked.n],
        };
        stream::spawn(state.clone(), running, tracker, format, tx);
        return Ok(response);
    }
    let (candidates, timings) = collect(state, running, &mut tracker).await?;
    let lex = state.lexicon.as_ref();
    let choices = candidates
        .iter()
        .enumerate()
        .map(|(index, c)| ChatChoice {
            index,
            message: AssistantMessage { role: "assistant", content: c.finished.text.clone() },
            logprobs: valid
                .logprobs
                .then(|| ChatLogprobs { content: c.tokens.iter().map(|t| token_logprob(lex, t)).collect() }),
            finish_reason: c.finished.reason.as_openai(),
        })
        .collect();
    let usage = usage(&[prompt_tokens], &candidates);
    let answer = ChatCompletion {
        id: meta.id,
        object: "chat.completion",
        created: meta.created,
        model: meta.model,
        system_fingerprint: meta.fingerprint,
        choices,
        usage,
    };
    let mut h = HeaderMap::new();
    headers::start(&mut h, &state.model.compute_type, characters);
    headers::timings(&mut h, &timings, prompt_tokens, usage.completion_tokens);
    let mut out = body::json(StatusCode::OK, &answer);
    out.headers_mut().extend(h);
    Ok(out)
}

/// Checks the request, renders the conversation and fits it into the limits.
pub(super) fn validate(state: &AppState, req: &ChatRequest) -> Result<Valid, ApiError> {
    if req.messages.is_empty() {
        return Err(ValidationError::EmptyMessages.into());
    }
    if let Some(kind) = req.messages.iter().find_map(Message::non_text_part) {
        return Err(ValidationError::NonTextContent(kind.to_string()).into());
    }
    if req.tools.as_ref().is_some_and(|t| !t.is_null() && t.as_array().is_none_or(|a| !a.is_empty())) {
        return Err(ValidationError::Unsupported("tools").into());
    }
    let logprobs = req.logprobs.unwrap_or(false);
    let top = req.top_logprobs.unwrap_or(0);
    if top > 0 && !logprobs {
        return Err(ValidationError::TopLogprobsWithoutLogprobs.into());
    }
    if top > MAX_TOP_LOGPROBS {
        return Err(ValidationError::Logprobs { name: "top_logprobs", max: MAX_TOP_LOGPROBS, given: top }.into());
    }
    let mut checked = req.sampling.check(&state.limits, logprobs, top)?;
    let format = req.response_format.as_ref().map(|f| grammar::parse("response_format", f)).transpose()?.flatten();
    if let Some(g) = &format {
        checked.constrain(state, "response_format", g)?;
    }
    let template =
        state.lexicon.chat_template().ok_or_else(|| ApiError::Template("the model has no chat template".into()))?;
    let extra = req.chat_template_kwargs.clone().unwrap_or(serde_json::Value::Null);
    let text = template.render(&req.messages, true, &extra).map_err(|e| ApiError::Template(e.to_string()))?;
    let ids = tokenize(state.lexicon.as_ref(), &state.prompt_bytes, &text, false)?;
    let max_new = req.max_completion_tokens.or(req.max_tokens).map(|n| n as usize);
    let budget = state.limits.fit(ids, None, max_new)?;
    Ok(Valid { checked, budget, logprobs, text })
}

/// The chat stream: a role chunk per choice when it starts, a chunk per token with new text (or
/// log-probabilities), a finish chunk per choice with the text held back until the end, the usage
/// chunk when asked for, then `[DONE]`.
struct ChatStream {
    meta: Meta,
    lexicon: Arc<dyn Lexicon>,
    logprobs: bool,
    include_usage: bool,
    usage: Usage,
    /// Text streamed so far per choice.
    sent: Vec<String>,
}

impl ChatStream {
    fn chunk(&self, choices: Vec<ChunkChoice>, usage: Option<Usage>) -> String {
        let chunk = ChatChunk {
            id: self.meta.id.clone(),
            object: "chat.completion.chunk",
            created: self.meta.created,
            model: self.meta.model.clone(),
            system_fingerprint: self.meta.fingerprint.clone(),
            choices,
            usage,
        };
        serde_json::to_string(&chunk).expect("chunks serialize")
    }

    fn choice(index: usize, content: String, finish_reason: Option<&'static str>) -> ChunkChoice {
        ChunkChoice { index, delta: Delta { role: "assistant", content }, logprobs: None, finish_reason }
    }
}

impl StreamFormat for ChatStream {
    fn started(&mut self, index: usize, cached_tokens: usize) -> Vec<String> {
        let cached = &mut self.usage.prompt_tokens_details.cached_tokens;
        *cached = (*cached).max(cached_tokens);
        vec![self.chunk(vec![Self::choice(index, String::new(), None)], None)]
    }

    fn token(&mut self, index: usize, token: TokenEvent) -> Vec<String> {
        if token.text.is_empty() && !self.logprobs {
            return Vec::new();
        }
        self.sent[index].push_str(&token.text);
        let mut choice = Self::choice(index, token.text.clone(), None);
        if self.logprobs {
            choice.logprobs = Some(ChatLogprobs { content: vec![token_logprob(self.lexicon.as_ref(), &token)] });
        }
        vec![self.chunk(vec![choice], None)]
    }

    fn finished(&mut self, index: usize, f: Finished) -> Vec<String> {
        self.usage.completion_tokens += f.generated_tokens;
        // The last chunk carries content (what was held back, often nothing) as TGI's schema and the
        // clients that follow it require.
        let rest = f.text.strip_prefix(self.sent[index].as_str()).unwrap_or_default().to_string();
        vec![self.chunk(vec![Self::choice(index, rest, Some(f.reason.as_openai()))], None)]
    }

    fn end(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        if self.include_usage {
            self.usage.total_tokens = self.usage.prompt_tokens + self.usage.completion_tokens;
            out.push(self.chunk(Vec::new(), Some(self.usage)));
        }
        out.push("[DONE]".to_string());
        out
    }

    fn error(&self, err: &ApiError) -> String {
        err.openai_body().to_string()
    }
}
