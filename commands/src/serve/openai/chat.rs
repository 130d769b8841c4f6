//! `POST /v1/chat/completions`: the conversation (and its tools, see [`super::tools`]) through the model's
//! chat template, `n` choices, streamed as `chat.completion.chunk` events ending with `data: [DONE]`, or
//! answered at once; a thinking model's reasoning apart from its answer (see [`super::reasoning`]).

use std::sync::Arc;

use hyper::{HeaderMap, StatusCode};
use tgi_engines::sampling::MAX_TOP_LOGPROBS;
use tgi_engines::scheduler::{Finished, TokenEvent};
use tgi_engines::text::chat::Message;

use super::common::{token_logprob, usage, Checked, Meta};
use super::reasoning::{self, Part, ReasoningFormat, Splitter};
use super::tools::grammar::calls;
use super::tools::{prompt, Markers, Reading, Reply, StreamedCalls, ToolCallFormat, ToolError};
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
    /// How answers are read for tool calls, when the request offers tools.
    calls: Option<Reading>,
    /// When answers' reasoning is split out: whether the prompt opens the thinking block.
    split: Option<bool>,
}

/// `POST /v1/chat/completions`.
pub async fn chat(state: &Arc<AppState>, req: ChatRequest) -> Result<HttpResponse, ApiError> {
    let mut tracker = Tracker::new(state.metrics.clone());
    let permit = state.permit().map_err(|e| fail(state, &mut tracker, e))?;
    let valid = validate(state, &req).await.map_err(|e| fail(state, &mut tracker, e))?;
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
            calls: (0..valid.checked.n).map(|_| valid.calls.map(StreamedCalls::new)).collect(),
            splits: (0..valid.checked.n).map(|_| valid.split.map(Splitter::new)).collect(),
        };
        stream::spawn(state.clone(), running, tracker, format, tx);
        return Ok(response);
    }
    let (candidates, timings) = collect(state, running, &mut tracker).await?;
    let lex = state.lexicon.as_ref();
    let choices = candidates
        .iter()
        .enumerate()
        .map(|(index, c)| {
            let reason = c.finished.reason;
            let (thought, text) = match valid.split {
                Some(open) => reasoning::split(open, &c.finished.text),
                None => (None, c.finished.text.clone()),
            };
            let reply = match valid.calls {
                Some(reading) => Reply::read(reading, &text, reason),
                None => Reply { content: Some(text), tool_calls: Vec::new(), finish_reason: reason.as_openai() },
            };
            let tool_calls = (!reply.tool_calls.is_empty()).then_some(reply.tool_calls);
            ChatChoice {
                index,
                message: AssistantMessage {
                    role: "assistant",
                    content: reply.content,
                    reasoning_content: thought.clone(),
                    reasoning: thought,
                    tool_calls,
                },
                logprobs: valid
                    .logprobs
                    .then(|| ChatLogprobs { content: c.tokens.iter().map(|t| token_logprob(lex, t)).collect() }),
                finish_reason: reply.finish_reason,
            }
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
pub(super) async fn validate(state: &AppState, req: &ChatRequest) -> Result<Valid, ApiError> {
    if req.messages.is_empty() {
        return Err(ValidationError::EmptyMessages.into());
    }
    if let Some(kind) = req.messages.iter().find_map(Message::non_text_part) {
        return Err(ValidationError::NonTextContent(kind.to_string()).into());
    }
    let tools = req.tools.check().map_err(ValidationError::from)?;
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
        checked.constrain(state, "response_format", g.clone()).await?;
    }
    let template = state
        .lexicon
        .chat_template(tools.is_some())
        .ok_or_else(|| ApiError::Template("the model has no chat template".into()))?;
    let family = tools
        .as_ref()
        .map(|_| state.model.tool_call_parser.unwrap_or_else(|| ToolCallFormat::detect(template.source())));
    let offered = tools.as_ref().zip(family);
    if let Some((t, f)) = offered {
        match (&format, t.forced()) {
            (Some(_), true) => return Err(ValidationError::from(ToolError::WithGrammar).into()),
            // The answer follows `response_format`; its calls, if any, are read unforced.
            (Some(_), false) => {}
            (None, _) => {
                let markers = Markers::find(f, state.lexicon.tokenizer());
                checked.constrain(state, "tools", calls(f, t, &markers)).await?;
            }
        }
    }
    let settings = state.model.reasoning;
    let thinks = reasoning::thinks(template);
    let kwargs = settings.kwargs(req.chat_template_kwargs.as_ref(), thinks);
    let text = prompt::render(template, &req.messages, offered, kwargs.as_ref())
        .map_err(|e| ApiError::Template(e.to_string()))?;
    let ids = tokenize(state.lexicon.as_ref(), &state.prompt_bytes, &text, false)?;
    let max_new = req.max_completion_tokens.or(req.max_tokens).map(|n| n as usize);
    let budget = state.limits.fit(ids, None, max_new)?;
    let calls = offered.map(|(t, format)| Reading { format, forced: t.forced() });
    if thinks {
        checked.thinking = Some(reasoning::thinking(&text, settings.budget, state.lexicon.tokenizer()));
    }
    let split = (thinks && settings.format == ReasoningFormat::Deepseek).then(|| reasoning::opens(&text));
    Ok(Valid { checked, budget, logprobs, text, calls, split })
}

/// The chat stream: a role chunk per choice when it starts, a chunk per token with new text (or
/// log-probabilities), or per part of a tool call when the request offers tools, a finish chunk per choice,
/// the usage chunk when asked for, then `[DONE]`.
struct ChatStream {
    meta: Meta,
    lexicon: Arc<dyn Lexicon>,
    logprobs: bool,
    include_usage: bool,
    usage: Usage,
    /// Text streamed so far per choice.
    sent: Vec<String>,
    /// Per choice, its tool calls when the request offers tools.
    calls: Vec<Option<StreamedCalls>>,
    /// Per choice, its reasoning split out when it is.
    splits: Vec<Option<Splitter>>,
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

    fn choice(index: usize, delta: Delta, finish_reason: Option<&'static str>) -> ChunkChoice {
        ChunkChoice { index, delta, logprobs: None, finish_reason }
    }

    /// The deltas of more of choice `index`'s text: reasoning, content, or its tool calls' parts.
    fn deltas(&mut self, index: usize, text: &str) -> Vec<Delta> {
        let parts = match &mut self.splits[index] {
            Some(s) => s.feed(text),
            None => vec![Part::Content(text.to_string())],
        };
        self.parts(index, parts)
    }

    /// The deltas of parts of choice `index`'s text.
    fn parts(&mut self, index: usize, parts: Vec<Part>) -> Vec<Delta> {
        let mut out = Vec::new();
        for part in parts {
            match part {
                Part::Reasoning(text) => out.push(Delta::reasoning(text)),
                Part::Content(text) => out.extend(self.content(index, &text)),
            }
        }
        out
    }

    /// The deltas of more of choice `index`'s answer proper: content, or its tool calls' parts.
    fn content(&mut self, index: usize, text: &str) -> Vec<Delta> {
        match &mut self.calls[index] {
            Some(calls) => calls.feed(text),
            None if text.is_empty() => Vec::new(),
            None => vec![Delta::content(text.to_string())],
        }
    }
}

impl StreamFormat for ChatStream {
    fn started(&mut self, index: usize, cached_tokens: usize) -> Vec<String> {
        let cached = &mut self.usage.prompt_tokens_details.cached_tokens;
        *cached = (*cached).max(cached_tokens);
        vec![self.chunk(vec![Self::choice(index, Delta::content(String::new()), None)], None)]
    }

    fn token(&mut self, index: usize, token: TokenEvent) -> Vec<String> {
        if token.text.is_empty() && !self.logprobs {
            return Vec::new();
        }
        self.sent[index].push_str(&token.text);
        let mut choices: Vec<ChunkChoice> =
            self.deltas(index, &token.text).into_iter().map(|d| Self::choice(index, d, None)).collect();
        if self.logprobs {
            if choices.is_empty() {
                choices.push(Self::choice(index, Delta::content(String::new()), None));
            }
            choices[0].logprobs = Some(ChatLogprobs { content: vec![token_logprob(self.lexicon.as_ref(), &token)] });
        }
        choices.into_iter().map(|c| self.chunk(vec![c], None)).collect()
    }

    fn finished(&mut self, index: usize, f: Finished) -> Vec<String> {
        self.usage.completion_tokens += f.generated_tokens;
        let rest = f.text.strip_prefix(self.sent[index].as_str()).unwrap_or_default().to_string();
        let mut deltas = self.deltas(index, &rest);
        let held = self.splits[index].as_mut().map(Splitter::finish).unwrap_or_default();
        deltas.extend(self.parts(index, held));
        let mut reason = f.reason.as_openai();
        if let Some(calls) = &mut self.calls[index] {
            let (last, calls_reason) = calls.finish(f.reason);
            deltas.extend(last);
            reason = calls_reason;
        }
        let mut out: Vec<String> =
            deltas.into_iter().map(|d| self.chunk(vec![Self::choice(index, d, None)], None)).collect();
        // The finish delta carries (empty) content, as TGI's schema and the clients following it require.
        out.push(self.chunk(vec![Self::choice(index, Delta::content(String::new()), Some(reason))], None));
        out
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
