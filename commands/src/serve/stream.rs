//! Server-sent events: a task reads a request's engine events and writes them, formatted by the
//! route's [`StreamFormat`] (as `data:` payloads, or named events where the API names them), into the
//! response body (with a comment line when idle for 15 s). When the client goes away the body is
//! dropped, the task stops, and dropping its [`Running`] cancels the request inside the engine.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use tgi_engines::scheduler::{Event, Finished, PromptLogprob, TokenEvent};
use tokio::sync::mpsc::Sender;
use tracing::Instrument;

use super::error::ApiError;
use super::generation::{fail, Running};
use super::metrics::Tracker;
use super::state::AppState;

/// One server-sent event: a `data:` payload, named (`event:`) where the API names its events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sse {
    /// The `event:` field, when the API sends one.
    pub name: Option<&'static str>,
    /// The `data:` payload.
    pub data: String,
}

impl Sse {
    /// An event named `name` (Anthropic's and OpenAI Responses' typed events).
    pub fn named(name: &'static str, data: String) -> Self {
        Sse { name: Some(name), data }
    }

    /// The event on the wire.
    fn bytes(&self) -> Bytes {
        match self.name {
            Some(name) => Bytes::from(format!("event: {name}\ndata: {}\n\n", self.data)),
            None => event(&self.data),
        }
    }
}

impl From<String> for Sse {
    fn from(data: String) -> Self {
        Sse { name: None, data }
    }
}

/// Turns one route's events into server-sent events.
pub trait StreamFormat: Send + Sync + 'static {
    /// One event: a `data:` payload (`String`) or an [`Sse`].
    type Event: Into<Sse> + Send;
    /// Candidate `index` left the queue.
    fn started(&mut self, _index: usize, _cached_tokens: usize) -> Vec<Self::Event> {
        Vec::new()
    }
    /// Candidate `index`'s prompt log-probabilities (once, before its first token, when asked for).
    fn prompt_logprobs(&mut self, _index: usize, _logprobs: Vec<Option<PromptLogprob>>) -> Vec<Self::Event> {
        Vec::new()
    }
    /// Candidate `index` generated a token.
    fn token(&mut self, index: usize, token: TokenEvent) -> Vec<Self::Event>;
    /// Candidate `index` finished.
    fn finished(&mut self, index: usize, finished: Finished) -> Vec<Self::Event>;
    /// Every candidate finished (OpenAI's usage chunk and `[DONE]`).
    fn end(&mut self) -> Vec<Self::Event>;
    /// The event reporting a failure; the stream ends after it.
    fn error(&self, err: &ApiError) -> Self::Event;
}

/// How often an idle stream sends a comment line, so proxies keep the connection (axum's default).
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// One SSE event carrying `payload`.
pub fn event(payload: &str) -> Bytes {
    Bytes::from(format!("data: {payload}\n\n"))
}

/// Streams `running`'s events to `tx` in a task of its own, inside the request's span.
pub fn spawn(
    state: std::sync::Arc<AppState>,
    running: Running,
    tracker: Tracker,
    format: impl StreamFormat,
    tx: Sender<Bytes>,
) {
    tokio::spawn(drive(state, running, tracker, format, tx).in_current_span());
}

/// Sends `events`; false once the client is gone.
async fn send_all(tx: &Sender<Bytes>, events: Vec<impl Into<Sse>>) -> bool {
    for e in events {
        if tx.send(e.into().bytes()).await.is_err() {
            return false;
        }
    }
    true
}

async fn drive(
    state: std::sync::Arc<AppState>,
    mut running: Running,
    mut tracker: Tracker,
    mut format: impl StreamFormat,
    tx: Sender<Bytes>,
) {
    let mut left = running.candidates;
    let mut queue = None::<Duration>;
    let mut inference = Duration::ZERO;
    let mut generated = 0;
    let mut keep_alive = tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    loop {
        let next = tokio::select! {
            biased;
            _ = tx.closed() => {
                tracing::info!("stream closed by the client");
                return;
            }
            next = running.next() => next,
            _ = keep_alive.tick() => {
                if tx.send(Bytes::from_static(b":\n\n")).await.is_err() {
                    return;
                }
                continue;
            }
        };
        keep_alive.reset();
        let (i, ev) = match next {
            Ok(Some(e)) => e,
            Ok(None) => return report(&state, &mut tracker, &format, &tx, ApiError::Incomplete).await,
            Err(e) => return report(&state, &mut tracker, &format, &tx, e).await,
        };
        let out = match ev {
            Event::Started { queue_time, cached_tokens } => {
                queue = Some(queue.map_or(queue_time, |q| q.min(queue_time)));
                format.started(i, cached_tokens)
            }
            Event::PromptLogprobs(lp) => format.prompt_logprobs(i, lp),
            Event::Token(t) => {
                tracker.token(i);
                format.token(i, t)
            }
            Event::Finished(f) => {
                left -= 1;
                inference = inference.max(f.inference_time);
                generated += f.generated_tokens;
                format.finished(i, f)
            }
            Event::Failed(msg) => return report(&state, &mut tracker, &format, &tx, ApiError::Generation(msg)).await,
        };
        if !send_all(&tx, out).await {
            return;
        }
        if left == 0 {
            state.healthy.store(true, Ordering::Relaxed);
            tracker.succeed(queue.unwrap_or_default(), inference, generated);
            send_all(&tx, format.end()).await;
            tracing::info!(generated_tokens = generated, "stream finished");
            return;
        }
    }
}

/// Records a failure and sends it as the stream's last event.
async fn report(
    state: &AppState,
    tracker: &mut Tracker,
    format: &impl StreamFormat,
    tx: &Sender<Bytes>,
    err: ApiError,
) {
    let err = fail(state, tracker, err);
    tracing::warn!(error = %err, "stream failed");
    let _ = tx.send(format.error(&err).into().bytes()).await;
}
