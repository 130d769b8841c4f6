//! `POST /v1/chat/completions`: the conversation (and its tools, see [`super::tools`]) through the model's
//! chat template, `n` choices, streamed as `chat.completion.chunk` events ending with `data: [DONE]`, or
//! answered at once; a thinking model's reasoning apart from its answer (see [`super::reasoning`]).

use std::sync::Arc;

use hyper::StatusCode;
use tgi_engines::scheduler::{Finished, TokenEvent};

use super::common::{token_logprob, usage, Meta};
use super::conversation::{response_headers, start, StreamedAnswer};
use super::types::{
    AssistantMessage, ChatChoice, ChatChunk, ChatCompletion, ChatLogprobs, ChatRequest, ChunkChoice, Delta, Usage,
};
use crate::serve::backend::Lexicon;
use crate::serve::body::{self, HttpResponse};
use crate::serve::error::ApiError;
use crate::serve::generation::collect;
use crate::serve::state::AppState;
use crate::serve::stream::StreamFormat;

/// `POST /v1/chat/completions`.
pub async fn chat(state: &Arc<AppState>, req: ChatRequest) -> Result<HttpResponse, ApiError> {
    let mut started = start(state, &req).await?;
    let meta = Meta::new(state, "chatcmpl");
    let valid = &started.valid;
    let prompt_tokens = valid.budget.ids.len();
    if valid.checked.stream {
        let format = ChatStream {
            meta,
            lexicon: state.lexicon.clone(),
            logprobs: valid.logprobs,
            include_usage: valid.checked.include_usage,
            usage: Usage { prompt_tokens, ..Usage::default() },
            answers: (0..valid.checked.n).map(|_| valid.streamed()).collect(),
        };
        return Ok(started.stream(state, format));
    }
    let (candidates, timings) = collect(state, started.running, &mut started.tracker).await?;
    let (valid, lex) = (&started.valid, state.lexicon.as_ref());
    let choices = candidates
        .iter()
        .enumerate()
        .map(|(index, c)| {
            let (thought, reply) = valid.reply(&c.finished.text, c.finished.reason);
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
    let mut out = body::json(StatusCode::OK, &answer);
    out.headers_mut().extend(response_headers(state, valid, &timings, &usage));
    Ok(out)
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
    /// Per choice, its answer so far.
    answers: Vec<StreamedAnswer>,
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
}

impl StreamFormat for ChatStream {
    type Event = String;

    fn started(&mut self, index: usize, cached_tokens: usize) -> Vec<String> {
        let cached = &mut self.usage.prompt_tokens_details.cached_tokens;
        *cached = (*cached).max(cached_tokens);
        vec![self.chunk(vec![Self::choice(index, Delta::content(String::new()), None)], None)]
    }

    fn token(&mut self, index: usize, token: TokenEvent) -> Vec<String> {
        if token.text.is_empty() && !self.logprobs {
            return Vec::new();
        }
        let mut choices: Vec<ChunkChoice> =
            self.answers[index].feed(&token.text).into_iter().map(|d| Self::choice(index, d, None)).collect();
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
        let (deltas, reason) = self.answers[index].finish(&f);
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
