//! `POST /v1/completions`: one or more prompts (texts or token ids), `n` choices each (the most
//! likely of `best_of`), `echo`, legacy `logprobs`, streamed or answered at once.

use std::sync::Arc;

use hyper::{HeaderMap, StatusCode};
use serde_json::{Map, Value};
use tgi_engines::scheduler::{Finished, PromptLogprob, TokenEvent};

use super::common::{best, usage, Checked, Meta};
use super::types::{Completion, CompletionChoice, CompletionLogprobs, CompletionRequest, Prompt, Usage};
use crate::serve::backend::Lexicon;
use crate::serve::body::{self, event_stream, HttpResponse};
use crate::serve::error::{ApiError, ValidationError};
use crate::serve::generation::{collect, fail, submit};
use crate::serve::headers;
use crate::serve::limits::{tokenize, Budget};
use crate::serve::metrics::Tracker;
use crate::serve::spans::{char_offset, spans};
use crate::serve::state::AppState;
use crate::serve::stream::{self, StreamFormat};

/// OpenAI's default `max_tokens` for completions.
const DEFAULT_MAX_TOKENS: usize = 16;

/// A completions request, validated.
struct Valid {
    checked: Checked,
    /// Per prompt: its text (for `echo`) and budget.
    prompts: Vec<(String, Budget)>,
    /// Candidates per prompt.
    per_prompt: usize,
    /// Alternatives per token, when `logprobs` was asked for.
    logprobs: Option<usize>,
    echo: bool,
}

/// `POST /v1/completions`.
pub async fn completions(state: &Arc<AppState>, req: CompletionRequest) -> Result<HttpResponse, ApiError> {
    let mut tracker = Tracker::new(state.metrics.clone());
    let permit = state.permit().map_err(|e| fail(state, &mut tracker, e))?;
    let mut v = validate(state, &req).map_err(|e| fail(state, &mut tracker, e.into()))?;
    v.checked.adapt(state, &req.sampling).map_err(|e| fail(state, &mut tracker, e))?;
    let budgets: Vec<Budget> = v.prompts.iter().map(|(_, b)| b.clone()).collect();
    let lengths: Vec<usize> = budgets.iter().map(|b| b.ids.len()).collect();
    let requests = v.checked.requests(state, &budgets, v.per_prompt, v.echo && v.logprobs.is_some());
    let max_new = budgets.iter().map(|b| b.max_new_tokens).max().unwrap_or(0);
    tracker.queued(lengths.iter().sum(), max_new, requests.len());
    let running = submit(state, requests, permit).map_err(|e| fail(state, &mut tracker, e))?;
    let meta = Meta::new(state, "cmpl");
    let characters = v.prompts.iter().map(|(t, _)| t.chars().count()).sum();
    if v.checked.stream {
        let (mut response, tx) = event_stream();
        headers::start(response.headers_mut(), &state.model.compute_type, characters);
        let format = CompletionStream {
            meta,
            lexicon: state.lexicon.clone(),
            echo: if v.echo { v.prompts.iter().map(|(t, b)| (t.clone(), b.ids.clone())).collect() } else { Vec::new() },
            per_prompt: v.per_prompt,
            logprobs: v.logprobs.is_some(),
            include_usage: v.checked.include_usage,
            usage: Usage { prompt_tokens: lengths.iter().sum(), ..Usage::default() },
            sent: vec![String::new(); budgets.len() * v.per_prompt],
        };
        stream::spawn(state.clone(), running, tracker, format, tx);
        return Ok(response);
    }
    let (candidates, timings) = collect(state, running, &mut tracker).await?;
    let lex = state.lexicon.as_ref();
    let mut choices = Vec::new();
    for (p, chunk) in candidates.chunks(v.per_prompt).enumerate() {
        for i in best(chunk, v.checked.n) {
            let c = &chunk[i];
            let (prompt, budget) = &v.prompts[p];
            let head = if v.echo { prompt.as_str() } else { "" };
            let text = format!("{head}{}", c.finished.text);
            let echoed = if v.echo { &budget.ids[..] } else { &[] };
            let generated = c.tokens.iter().map(|t| (t.id, Some((t.logprob, &t.top[..]))));
            let tokens = prompt_tokens(echoed, &c.prompt_logprobs).chain(generated);
            let logprobs = v.logprobs.map(|_| legacy_logprobs(lex, &text, tokens));
            choices.push(CompletionChoice {
                index: choices.len(),
                text,
                logprobs,
                finish_reason: Some(c.finished.reason.as_openai()),
            });
        }
    }
    let usage = usage(&lengths, &candidates);
    let answer = Completion {
        id: meta.id,
        object: "text_completion",
        created: meta.created,
        model: meta.model,
        system_fingerprint: meta.fingerprint,
        choices,
        usage: Some(usage),
    };
    let mut h = HeaderMap::new();
    headers::start(&mut h, &state.model.compute_type, characters);
    headers::timings(&mut h, &timings, usage.prompt_tokens, usage.completion_tokens);
    let mut out = body::json(StatusCode::OK, &answer);
    out.headers_mut().extend(h);
    Ok(out)
}

/// Checks the request and tokenizes and fits every prompt.
fn validate(state: &AppState, req: &CompletionRequest) -> Result<Valid, ValidationError> {
    if req.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
        return Err(ValidationError::Unsupported("suffix"));
    }
    let max_top = state.limits.max_top_n_tokens as usize;
    if let Some(k) = req.logprobs.filter(|&k| k > max_top) {
        return Err(ValidationError::Logprobs { name: "logprobs", max: max_top, given: k });
    }
    let checked = req.sampling.check(&state.limits, req.logprobs.is_some(), req.logprobs.unwrap_or(0))?;
    let per_prompt = match req.best_of {
        None => checked.n,
        Some(b) if b == checked.n => b,
        Some(b) if b < checked.n || b > state.limits.max_best_of => {
            return Err(ValidationError::CompletionBestOf { n: checked.n, max: state.limits.max_best_of, given: b })
        }
        Some(_) if checked.stream => return Err(ValidationError::BestOfStream),
        Some(b) => b,
    };
    let (lex, bound) = (state.lexicon.as_ref(), &state.prompt_bytes);
    let texts: Vec<(String, Vec<u32>)> = match &req.prompt {
        Prompt::Text(t) => vec![(t.clone(), tokenize(lex, bound, t, true)?)],
        Prompt::Texts(ts) => {
            // Every prompt's bytes before any prompt's tokens, so that a huge one costs no tokenizing.
            ts.iter().try_for_each(|t| bound.check(t))?;
            ts.iter()
                .map(|t| Ok((t.clone(), tokenize(lex, bound, t, true)?)))
                .collect::<Result<_, ValidationError>>()?
        }
        Prompt::Ids(ids) => vec![(decode(lex, ids)?, ids.clone())],
        Prompt::IdLists(lists) => {
            lists.iter().map(|ids| Ok((decode(lex, ids)?, ids.clone()))).collect::<Result<_, ValidationError>>()?
        }
    };
    if texts.is_empty() {
        return Err(ValidationError::EmptyInput);
    }
    let max_new = Some(req.max_tokens.map_or(DEFAULT_MAX_TOKENS, |n| n as usize));
    let prompts = texts
        .into_iter()
        .map(|(text, ids)| Ok((text, state.limits.fit(ids, None, max_new)?)))
        .collect::<Result<_, ValidationError>>()?;
    Ok(Valid { checked, prompts, per_prompt, logprobs: req.logprobs, echo: req.echo.unwrap_or(false) })
}

/// The text of a prompt given as token ids (which must be in the vocabulary).
fn decode(lex: &dyn Lexicon, ids: &[u32]) -> Result<String, ValidationError> {
    lex.tokenizer().decode(ids, false).map_err(|e| ValidationError::Tokenizer(e.to_string()))
}

/// A token as legacy log-probabilities list it: its id, and its log-probability and alternatives
/// (`None` for the first prompt token).
type Scored<'a> = (u32, Option<(f32, &'a [(u32, f32)])>);

/// The prompt's tokens with their log-probabilities, as the engine reported them.
fn prompt_tokens<'a>(ids: &'a [u32], logprobs: &'a [Option<PromptLogprob>]) -> impl Iterator<Item = Scored<'a>> {
    let scored = |i: usize| logprobs.get(i).and_then(Option::as_ref).map(|p| (p.logprob, &p.top[..]));
    ids.iter().enumerate().map(move |(i, &id)| (id, scored(i)))
}

/// Legacy log-probabilities of `tokens`, whose text is `text`: each token's offset is where its text
/// starts in `text`, in characters (OpenAI's `text_offset`).
fn legacy_logprobs<'a>(lex: &dyn Lexicon, text: &str, tokens: impl Iterator<Item = Scored<'a>>) -> CompletionLogprobs {
    let (ids, scored): (Vec<u32>, Vec<_>) = tokens.unzip();
    let top = |alternatives: &[(u32, f32)]| -> Map<String, Value> {
        alternatives.iter().map(|&(id, l)| (lex.piece(id), Value::from(l))).collect()
    };
    let (token_logprobs, top_logprobs) = scored.into_iter().map(|s| s.map(|(l, alts)| (l, top(alts))).unzip()).unzip();
    CompletionLogprobs {
        tokens: ids.iter().map(|&id| lex.piece(id)).collect(),
        token_logprobs,
        top_logprobs,
        text_offset: spans(lex, text, &ids).into_iter().map(|r| char_offset(text, r.start)).collect(),
    }
}

/// The completions stream: the echoed prompt first (with its tokens' log-probabilities when asked
/// for), a chunk per token with new text, a finish chunk per choice, the usage chunk when asked for,
/// then `[DONE]`.
struct CompletionStream {
    meta: Meta,
    lexicon: Arc<dyn Lexicon>,
    /// Per prompt, its text and tokens when echoed.
    echo: Vec<(String, Vec<u32>)>,
    per_prompt: usize,
    logprobs: bool,
    include_usage: bool,
    usage: Usage,
    /// Text streamed so far per choice.
    sent: Vec<String>,
}

impl CompletionStream {
    fn chunk(&self, choices: Vec<CompletionChoice>, usage: Option<Usage>) -> String {
        let chunk = Completion {
            id: self.meta.id.clone(),
            object: "text_completion",
            created: self.meta.created,
            model: self.meta.model.clone(),
            system_fingerprint: self.meta.fingerprint.clone(),
            choices,
            usage,
        };
        serde_json::to_string(&chunk).expect("chunks serialize")
    }

    fn text(&self, index: usize, text: String, finish_reason: Option<&'static str>) -> String {
        self.chunk(vec![CompletionChoice { index, text, logprobs: None, finish_reason }], None)
    }
}

impl StreamFormat for CompletionStream {
    type Event = String;

    fn started(&mut self, index: usize, cached_tokens: usize) -> Vec<String> {
        let cached = &mut self.usage.prompt_tokens_details.cached_tokens;
        *cached = (*cached).max(cached_tokens);
        // With log-probabilities, the echoed prompt waits for its tokens' (they come next).
        match self.echo.get(index / self.per_prompt).filter(|_| !self.logprobs) {
            Some((prompt, _)) => vec![self.text(index, prompt.clone(), None)],
            None => Vec::new(),
        }
    }

    fn prompt_logprobs(&mut self, index: usize, logprobs: Vec<Option<PromptLogprob>>) -> Vec<String> {
        let Some((prompt, ids)) = self.echo.get(index / self.per_prompt) else { return Vec::new() };
        let logprobs = legacy_logprobs(self.lexicon.as_ref(), prompt, prompt_tokens(ids, &logprobs));
        let choice = CompletionChoice { index, text: prompt.clone(), logprobs: Some(logprobs), finish_reason: None };
        vec![self.chunk(vec![choice], None)]
    }

    fn token(&mut self, index: usize, token: TokenEvent) -> Vec<String> {
        if token.text.is_empty() && !self.logprobs {
            return Vec::new();
        }
        self.sent[index].push_str(&token.text);
        let echoed = self.echo.get(index / self.per_prompt).map_or(0, |(p, _)| p.chars().count());
        let logprobs = self.logprobs.then(|| {
            let lex = self.lexicon.as_ref();
            CompletionLogprobs {
                tokens: vec![lex.piece(token.id)],
                token_logprobs: vec![Some(token.logprob)],
                top_logprobs: vec![Some(token.top.iter().map(|&(id, l)| (lex.piece(id), Value::from(l))).collect())],
                // Offsets count the echoed prompt too: they are into the choice's whole text.
                text_offset: vec![echoed + self.sent[index].chars().count() - token.text.chars().count()],
            }
        });
        let choice = CompletionChoice { index, text: token.text, logprobs, finish_reason: None };
        vec![self.chunk(vec![choice], None)]
    }

    fn finished(&mut self, index: usize, f: Finished) -> Vec<String> {
        self.usage.completion_tokens += f.generated_tokens;
        let rest = f.text.strip_prefix(self.sent[index].as_str()).unwrap_or_default().to_string();
        vec![self.text(index, rest, Some(f.reason.as_openai()))]
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
