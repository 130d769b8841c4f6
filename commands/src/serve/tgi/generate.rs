//! `POST /generate`, `POST /generate_stream` and `POST /` (TGI's compat route: a list of one answer,
//! or the stream when `stream` is true).

use std::sync::Arc;

use hyper::{HeaderMap, StatusCode};
use tgi_engines::scheduler::{Finished, TokenEvent};

use super::types::{
    BestOfSequence, Details, GenerateRequest, GenerateResponse, PrefillToken, StreamDetails, StreamResponse, Token,
};
use super::validate::{validate, ValidGenerate};
use crate::serve::backend::Lexicon;
use crate::serve::body::{self, event_stream, HttpResponse};
use crate::serve::error::ApiError;
use crate::serve::generation::{collect, fail, submit, Candidate};
use crate::serve::headers;
use crate::serve::metrics::Tracker;
use crate::serve::state::AppState;
use crate::serve::stream::{self, StreamFormat};

/// `POST /generate`.
pub async fn generate(state: &Arc<AppState>, req: GenerateRequest) -> Result<HttpResponse, ApiError> {
    let (response, h) = run(state, &req).await?;
    let mut out = body::json(StatusCode::OK, &response);
    out.headers_mut().extend(h);
    Ok(out)
}

/// `POST /generate_stream`.
pub async fn generate_stream(state: &Arc<AppState>, req: GenerateRequest) -> HttpResponse {
    start_stream(state, &req).await
}

/// `POST /`: `/generate` wrapped in a list, or `/generate_stream` when `stream` is true.
pub async fn compat(state: &Arc<AppState>, req: GenerateRequest) -> Result<HttpResponse, ApiError> {
    if req.stream {
        return Ok(start_stream(state, &req).await);
    }
    let (response, h) = run(state, &req).await?;
    let mut out = body::json(StatusCode::OK, &[response]);
    out.headers_mut().extend(h);
    Ok(out)
}

/// Runs a non-streaming request; the answer and its headers.
async fn run(state: &Arc<AppState>, req: &GenerateRequest) -> Result<(GenerateResponse, HeaderMap), ApiError> {
    let mut tracker = Tracker::new(state.metrics.clone());
    let permit = state.permit().map_err(|e| fail(state, &mut tracker, e))?;
    let valid = validate(state, req, false).await.map_err(|e| fail(state, &mut tracker, e))?;
    tracker.queued(valid.input_ids.len(), valid.max_new_tokens, valid.requests.len());
    let running = submit(state, valid.requests.clone(), permit).map_err(|e| fail(state, &mut tracker, e))?;
    let (mut candidates, timings) = collect(state, running, &mut tracker).await?;
    let best = (0..candidates.len())
        .max_by(|&a, &b| candidates[a].logprob().total_cmp(&candidates[b].logprob()).then(b.cmp(&a)))
        .expect("at least one candidate");
    let winner = candidates.remove(best);
    let lex = state.lexicon.as_ref();
    let generated = winner.finished.generated_tokens;
    let speculating = state.model.speculate.is_some();
    let details = valid.details.then(|| {
        let others =
            (valid.requests.len() > 1).then(|| candidates.iter().map(|c| best_of_sequence(lex, &valid, c)).collect());
        let seq = best_of_sequence(lex, &valid, &winner);
        Details {
            finish_reason: seq.finish_reason,
            generated_tokens: seq.generated_tokens,
            seed: seq.seed,
            prefill: seq.prefill,
            tokens: seq.tokens,
            best_of_sequences: others,
            top_tokens: seq.top_tokens,
            speculated_tokens: speculating.then_some(winner.finished.speculated_tokens as u32),
            accepted_tokens: speculating.then_some(winner.finished.accepted_tokens as u32),
        }
    });
    let response = GenerateResponse { generated_text: text(&valid, &winner.finished), details };
    let mut h = HeaderMap::new();
    headers::start(&mut h, &state.model.compute_type, req.inputs.chars().count());
    headers::timings(&mut h, &timings, valid.input_ids.len(), generated);
    Ok((response, h))
}

/// The output text, after the prompt when `return_full_text`.
fn text(valid: &ValidGenerate, finished: &Finished) -> String {
    match &valid.prefix {
        Some(p) => format!("{p}{}", finished.text),
        None => finished.text.clone(),
    }
}

/// A candidate in TGI's shape (the winner's fields become `details`).
fn best_of_sequence(lex: &dyn Lexicon, valid: &ValidGenerate, c: &Candidate) -> BestOfSequence {
    let prefill = if valid.decoder_input_details {
        valid
            .input_ids
            .iter()
            .enumerate()
            .map(|(i, &id)| PrefillToken {
                id,
                text: lex.piece(id),
                logprob: c.prompt_logprobs.get(i).and_then(|p| p.as_ref().map(|p| p.logprob)),
            })
            .collect()
    } else {
        Vec::new()
    };
    let with_top = valid.requests[0].params.top_logprobs > 0;
    BestOfSequence {
        generated_text: text(valid, &c.finished),
        finish_reason: c.finished.reason.as_tgi(),
        generated_tokens: c.finished.generated_tokens as u32,
        seed: valid.sampling.then_some(c.finished.seed),
        prefill,
        tokens: c.tokens.iter().map(token).collect(),
        top_tokens: if with_top { c.tokens.iter().map(|t| top_tokens(lex, &t.top)).collect() } else { Vec::new() },
    }
}

/// A generated token in TGI's shape.
fn token(t: &TokenEvent) -> Token {
    Token { id: t.id, text: t.piece.clone(), logprob: t.logprob, special: t.special }
}

/// A token's alternatives in TGI's shape.
fn top_tokens(lex: &dyn Lexicon, top: &[(u32, f32)]) -> Vec<Token> {
    top.iter().map(|&(id, logprob)| Token { id, text: lex.piece(id), logprob, special: lex.is_special(id) }).collect()
}

/// Starts a TGI stream: failures before generation (overload, validation) are its only event.
async fn start_stream(state: &Arc<AppState>, req: &GenerateRequest) -> HttpResponse {
    let (mut response, tx) = event_stream();
    headers::start(response.headers_mut(), &state.model.compute_type, req.inputs.chars().count());
    let mut tracker = Tracker::new(state.metrics.clone());
    let started = async {
        let permit = state.permit()?;
        let valid = validate(state, req, true).await?;
        tracker.queued(valid.input_ids.len(), valid.max_new_tokens, 1);
        let running = submit(state, valid.requests.clone(), permit)?;
        Ok::<_, ApiError>((valid, running))
    }
    .await;
    match started {
        Ok((valid, running)) => {
            let format = TgiStream {
                lexicon: state.lexicon.clone(),
                index: 0,
                held: None,
                details: valid.details,
                speculating: state.model.speculate.is_some(),
                sampling: valid.sampling,
                input_length: valid.input_ids.len() as u32,
                prefix: valid.prefix,
            };
            stream::spawn(state.clone(), running, tracker, format, tx);
        }
        Err(e) => {
            let e = fail(state, &mut tracker, e);
            let _ = tx.try_send(stream::event(&e.tgi_body().to_string()));
        }
    }
    response
}

/// TGI's stream: one event per token; the last carries `generated_text` and `details`.
struct TgiStream {
    lexicon: Arc<dyn Lexicon>,
    /// Events sent so far.
    index: u32,
    /// The latest token, held back until we know whether it is the last.
    held: Option<TokenEvent>,
    details: bool,
    /// Whether the server speculates (`details` then counts drafted and accepted tokens).
    speculating: bool,
    sampling: bool,
    input_length: u32,
    prefix: Option<String>,
}

impl TgiStream {
    fn event(&mut self, t: TokenEvent, generated_text: Option<String>, details: Option<StreamDetails>) -> String {
        self.index += 1;
        let event = StreamResponse {
            index: self.index,
            token: token(&t),
            top_tokens: top_tokens(self.lexicon.as_ref(), &t.top),
            generated_text,
            details,
        };
        serde_json::to_string(&event).expect("stream events serialize")
    }
}

impl StreamFormat for TgiStream {
    type Event = String;

    fn token(&mut self, _index: usize, token: TokenEvent) -> Vec<String> {
        match self.held.replace(token) {
            Some(prev) => vec![self.event(prev, None, None)],
            None => Vec::new(),
        }
    }

    fn finished(&mut self, _index: usize, f: Finished) -> Vec<String> {
        let Some(last) = self.held.take() else { return vec![self.error(&ApiError::Incomplete)] };
        let details = self.details.then(|| StreamDetails {
            finish_reason: f.reason.as_tgi(),
            generated_tokens: f.generated_tokens as u32,
            seed: self.sampling.then_some(f.seed),
            input_length: self.input_length,
            speculated_tokens: self.speculating.then_some(f.speculated_tokens as u32),
            accepted_tokens: self.speculating.then_some(f.accepted_tokens as u32),
        });
        let text = match &self.prefix {
            Some(p) => format!("{p}{}", f.text),
            None => f.text,
        };
        vec![self.event(last, Some(text), details)]
    }

    fn end(&mut self) -> Vec<String> {
        Vec::new()
    }

    fn error(&self, err: &ApiError) -> String {
        err.tgi_body().to_string()
    }
}
