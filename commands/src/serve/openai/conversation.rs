//! A chat request through the one generation path that chat completions, Anthropic's Messages API and
//! OpenAI's Responses API share: validated ([`validate`]: the chat template with the tools, the tool-call and
//! `response_format` grammars, the sampling fields, the limits), submitted ([`start`]), and its answer read
//! for tool calls, whole ([`Started::answer`]) or as it streams ([`StreamedAnswer`]).

use std::sync::Arc;

use hyper::HeaderMap;
use tgi_engines::sampling::{FinishReason, MAX_TOP_LOGPROBS};
use tgi_engines::scheduler::Finished;
use tgi_engines::text::chat::{ChatTemplate, Message};

use super::common::{usage, Checked};
use super::reasoning::{self, Part, ReasoningFormat, Splitter};
use super::tools::grammar::calls;
use super::tools::{prompt, Markers, Reading, Reply, StreamedCalls, ToolCallFormat, ToolError};
use super::types::{ChatRequest, Delta, Usage};
use crate::serve::body::{event_stream, HttpResponse};
use crate::serve::error::{ApiError, ValidationError};
use crate::serve::generation::{collect, fail, submit, Running};
use crate::serve::grammar;
use crate::serve::headers;
use crate::serve::limits::{tokenize, Budget};
use crate::serve::metrics::{RequestTimings, Tracker};
use crate::serve::state::AppState;
use crate::serve::stream::{self, StreamFormat};

/// The answer for a model without a chat template: what to start the server with instead.
const NO_TEMPLATE: &str = "the model has no chat template; start tgi serve with --chat-template NAME|FILE: a built-in \
name such as chatml, llama3, mistral-v7, phi3 or gemma (llama.cpp's names), a Jinja file, or the template text";

/// A chat request, validated.
pub struct Valid {
    /// The sampling fields, checked.
    pub checked: Checked,
    /// The prompt's tokens and the tokens left to generate.
    pub budget: Budget,
    /// Whether to return each token's log-probability.
    pub logprobs: bool,
    /// The conversation rendered through the chat template.
    pub text: String,
    /// How answers are read for tool calls, when the request offers tools.
    calls: Option<Reading>,
    /// When answers' reasoning is split out: whether the prompt opens the thinking block.
    split: Option<bool>,
}

impl Valid {
    /// The answer `text`, which the engine ended for `reason`: its reasoning, when it is split out, and the rest
    /// read for tool calls when the request offers tools.
    pub fn reply(&self, text: &str, reason: FinishReason) -> (Option<String>, Reply) {
        let (thought, text) = match self.split {
            Some(open) => reasoning::split(open, text),
            None => (None, text.to_string()),
        };
        let reply = match self.calls {
            Some(reading) => Reply::read(reading, &text, reason),
            None => Reply { content: Some(text), tool_calls: Vec::new(), finish_reason: reason.as_openai() },
        };
        (thought, reply)
    }

    /// A reader of one choice's answer as it streams.
    pub fn streamed(&self) -> StreamedAnswer {
        StreamedAnswer {
            sent: String::new(),
            calls: self.calls.map(StreamedCalls::new),
            split: self.split.map(Splitter::new),
        }
    }

    /// The prompt's length in characters (`x-compute-characters`).
    pub fn characters(&self) -> usize {
        self.text.chars().count()
    }
}

/// A chat request's conversation, checked: its messages are text, and the template and tool-call format that
/// render the tools it offers.
struct Conversation<'s> {
    template: &'s ChatTemplate,
    /// The tools offered and the format their calls are written in.
    tools: Option<(super::tools::spec::Tools, ToolCallFormat)>,
}

impl<'s> Conversation<'s> {
    /// Checks the messages and the tools, and picks the template.
    fn check(state: &'s AppState, req: &ChatRequest) -> Result<Self, ApiError> {
        if req.messages.is_empty() {
            return Err(ValidationError::EmptyMessages.into());
        }
        if let Some(kind) = req.messages.iter().find_map(Message::non_text_part) {
            return Err(ValidationError::NonTextContent(kind.to_string()).into());
        }
        let tools = req.tools.check().map_err(ValidationError::from)?;
        let template =
            state.lexicon.chat_template(tools.is_some()).ok_or_else(|| ApiError::Template(NO_TEMPLATE.into()))?;
        let tools = tools.map(|t| {
            let format = state.model.tool_call_parser.unwrap_or_else(|| ToolCallFormat::detect(template.source()));
            (t, format)
        });
        Ok(Conversation { template, tools })
    }

    /// Whether the template writes a thinking block (a reasoning model's).
    fn thinks(&self) -> bool {
        reasoning::thinks(self.template)
    }

    /// The conversation and its tools through the template (with the reasoning settings' template arguments),
    /// and its tokens.
    fn render(&self, state: &AppState, req: &ChatRequest) -> Result<(String, Vec<u32>), ApiError> {
        let offered = self.tools.as_ref().map(|(t, f)| (t, *f));
        let switch = reasoning::switches_thinking(self.template);
        let kwargs = state.model.reasoning.kwargs(req.chat_template_kwargs.as_ref(), switch);
        let text = prompt::render(self.template, &req.messages, offered, kwargs.as_ref())
            .map_err(|e| ApiError::Template(e.to_string()))?;
        let ids = tokenize(state.lexicon.as_ref(), &state.prompt_bytes, &text, false)?;
        Ok((text, ids))
    }
}

/// The tokens of the request's prompt, rendered as [`validate`] renders it (its messages and tools checked,
/// the sampling fields and limits not).
pub fn prompt_tokens(state: &AppState, req: &ChatRequest) -> Result<usize, ApiError> {
    let conversation = Conversation::check(state, req)?;
    Ok(conversation.render(state, req)?.1.len())
}

/// Checks the request, renders the conversation and fits it into the limits.
pub async fn validate(state: &AppState, req: &ChatRequest) -> Result<Valid, ApiError> {
    let conversation = Conversation::check(state, req)?;
    let logprobs = req.logprobs.unwrap_or(false);
    let top = req.top_logprobs.unwrap_or(0);
    if top > 0 && !logprobs {
        return Err(ValidationError::TopLogprobsWithoutLogprobs.into());
    }
    if top > MAX_TOP_LOGPROBS {
        return Err(ValidationError::Logprobs { name: "top_logprobs", max: MAX_TOP_LOGPROBS, given: top }.into());
    }
    let mut checked = req.sampling.check(&state.limits, logprobs, top)?;
    checked.adapt(state, &req.sampling)?;
    let format = req.response_format.as_ref().map(|f| grammar::parse("response_format", f)).transpose()?.flatten();
    if let Some(g) = &format {
        checked.constrain(state, "response_format", g.clone()).await?;
    }
    if let Some((t, f)) = &conversation.tools {
        match (&format, t.forced()) {
            (Some(_), true) => return Err(ValidationError::from(ToolError::WithGrammar).into()),
            // The answer follows `response_format`; its calls, if any, are read unforced.
            (Some(_), false) => {}
            (None, _) => {
                let markers = Markers::find(*f, state.lexicon.tokenizer());
                checked.constrain(state, "tools", calls(*f, t, &markers)).await?;
            }
        }
    }
    let (text, ids) = conversation.render(state, req)?;
    let max_new = req.max_completion_tokens.or(req.max_tokens).map(|n| n as usize);
    let budget = state.limits.fit(ids, None, max_new)?;
    let settings = state.model.reasoning;
    let thinks = conversation.thinks();
    if thinks {
        checked.thinking = Some(reasoning::thinking(&text, settings.budget, state.lexicon.tokenizer()));
    }
    let split = (thinks && settings.format == ReasoningFormat::Deepseek).then(|| reasoning::opens(&text));
    let calls = conversation.tools.map(|(t, format)| Reading { format, forced: t.forced() });
    Ok(Valid { checked, budget, logprobs, text, calls, split })
}

/// A validated chat request in the engine.
pub struct Started {
    /// The request.
    pub valid: Valid,
    /// Its candidates' events.
    pub running: Running,
    /// Its metrics.
    pub tracker: Tracker,
}

/// Validates `req` and submits its choices (a permit first: 429 at once when `--max-concurrent-requests` are in
/// flight); a refusal is counted in the metrics.
pub async fn start(state: &AppState, req: &ChatRequest) -> Result<Started, ApiError> {
    let mut tracker = Tracker::new(state.metrics.clone());
    let permit = state.permit().map_err(|e| fail(state, &mut tracker, e))?;
    let valid = validate(state, req).await.map_err(|e| fail(state, &mut tracker, e))?;
    let requests = valid.checked.requests(state, std::slice::from_ref(&valid.budget), valid.checked.n, false);
    tracker.queued(valid.budget.ids.len(), valid.budget.max_new_tokens, requests.len());
    let running = submit(state, requests, permit).map_err(|e| fail(state, &mut tracker, e))?;
    Ok(Started { valid, running, tracker })
}

/// The whole answer of a one-choice request.
pub struct Answer {
    /// Its thinking block's text, when the reasoning is split out.
    pub reasoning: Option<String>,
    /// Its text and tool calls.
    pub reply: Reply,
    /// How the engine ended it.
    pub finished: Finished,
    /// Its token counts.
    pub usage: Usage,
    /// TGI's headers: compute type, characters, timings.
    pub headers: HeaderMap,
}

impl Started {
    /// Waits for the answer of the request's one choice.
    pub async fn answer(mut self, state: &AppState) -> Result<Answer, ApiError> {
        let (mut candidates, timings) = collect(state, self.running, &mut self.tracker).await?;
        let usage = usage(&[self.valid.budget.ids.len()], &candidates);
        let headers = response_headers(state, &self.valid, &timings, &usage);
        let finished = candidates.swap_remove(0).finished;
        let (reasoning, reply) = self.valid.reply(&finished.text, finished.reason);
        Ok(Answer { reasoning, reply, finished, usage, headers })
    }

    /// Streams the request's events as `format` writes them.
    pub fn stream(self, state: &Arc<AppState>, format: impl StreamFormat) -> HttpResponse {
        let (mut response, tx) = event_stream();
        headers::start(response.headers_mut(), &state.model.compute_type, self.valid.characters());
        stream::spawn(state.clone(), self.running, self.tracker, format, tx);
        response
    }
}

/// TGI's headers of a whole answer.
pub fn response_headers(state: &AppState, valid: &Valid, timings: &RequestTimings, usage: &Usage) -> HeaderMap {
    let mut h = HeaderMap::new();
    headers::start(&mut h, &state.model.compute_type, valid.characters());
    headers::timings(&mut h, timings, usage.prompt_tokens, usage.completion_tokens);
    h
}

/// One choice's answer as it streams: its text so far, its reasoning when it is split out, and its tool calls
/// when the request offers tools, as OpenAI's deltas (reasoning, content, a call's start, more of its arguments).
#[derive(Debug)]
pub struct StreamedAnswer {
    /// Text streamed so far.
    sent: String,
    calls: Option<StreamedCalls>,
    split: Option<Splitter>,
}

impl StreamedAnswer {
    /// The deltas of a token's new text.
    pub fn feed(&mut self, text: &str) -> Vec<Delta> {
        self.sent.push_str(text);
        let parts = match &mut self.split {
            Some(s) => s.feed(text),
            None => vec![Part::Content(text.to_string())],
        };
        self.parts(parts)
    }

    /// The deltas of parts of the answer's text.
    fn parts(&mut self, parts: Vec<Part>) -> Vec<Delta> {
        let mut out = Vec::new();
        for part in parts {
            match part {
                Part::Reasoning(text) => out.push(Delta::reasoning(text)),
                Part::Content(text) => out.extend(self.content(&text)),
            }
        }
        out
    }

    /// The deltas of more of the answer proper: content, or its tool calls' parts.
    fn content(&mut self, text: &str) -> Vec<Delta> {
        match &mut self.calls {
            Some(calls) => calls.feed(text),
            None if text.is_empty() => Vec::new(),
            None => vec![Delta::content(text.to_string())],
        }
    }

    /// The deltas of the answer's end (text the stream has not carried yet, what the call reader held back)
    /// and its finish reason (`tool_calls`, or the engine's).
    pub fn finish(&mut self, f: &Finished) -> (Vec<Delta>, &'static str) {
        let rest = f.text.strip_prefix(self.sent.as_str()).unwrap_or_default().to_string();
        let mut deltas = self.feed(&rest);
        let held = self.split.as_mut().map(Splitter::finish).unwrap_or_default();
        deltas.extend(self.parts(held));
        let mut reason = f.reason.as_openai();
        if let Some(calls) = &mut self.calls {
            let (last, calls_reason) = calls.finish(f.reason);
            deltas.extend(last);
            reason = calls_reason;
        }
        (deltas, reason)
    }
}
