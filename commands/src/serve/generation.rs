//! Running validated requests: submitting an HTTP request's candidates (best_of, n, prompts) with
//! one shared event channel, then either collecting every candidate's result or streaming events.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tgi_engines::scheduler::{Event, Finished, PromptLogprob, Request, TokenEvent};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::backend::ChannelSink;
use super::error::ApiError;
use super::metrics::{RequestTimings, Tracker};
use super::response_cache::{Directive, Lookup, Recorder};
use super::state::AppState;

/// One candidate's complete result.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// Generated tokens in order.
    pub tokens: Vec<TokenEvent>,
    /// Each prompt token's log-probability (and alternatives), when asked for.
    pub prompt_logprobs: Vec<Option<PromptLogprob>>,
    /// How it ended.
    pub finished: Finished,
    /// Time spent queued.
    pub queue_time: Duration,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: usize,
}

impl Candidate {
    /// The summed log-probability of the generated tokens (how best_of ranks candidates).
    pub fn logprob(&self) -> f32 {
        self.tokens.iter().map(|t| t.logprob).sum()
    }
}

/// Requests in the engine: their events arrive tagged with the candidate index. Dropping this
/// cancels every candidate still running.
pub struct Running {
    rx: UnboundedReceiver<(usize, Event)>,
    /// When `--request-timeout` runs out.
    deadline: Option<(Instant, Duration)>,
    /// How many candidates were submitted.
    pub candidates: usize,
    /// Stores the answer in the response cache once complete, when it may be.
    recorder: Option<Recorder>,
    /// Held until the request is over.
    _permit: OwnedSemaphorePermit,
}

/// Submits every candidate; if one is refused, those already submitted are cancelled. With the
/// response cache on, a deterministic request found there is replayed from it instead (the engine
/// sees nothing), and one not found is recorded for the next.
pub fn submit(state: &AppState, requests: Vec<Request>, permit: OwnedSemaphorePermit) -> Result<Running, ApiError> {
    let (tx, rx) = unbounded_channel();
    let candidates = requests.len();
    let deadline = state.limits.request_timeout.map(|t| (Instant::now() + t, t));
    let lookup = state.response_cache.as_ref().map(|c| c.lookup(&state.model.id, &requests, Directive::current()));
    let recorder = match lookup {
        Some(Lookup::Hit(events)) => {
            tracing::debug!(candidates, "answered from the response cache");
            for e in events.iter() {
                let _ = tx.send(e.clone());
            }
            return Ok(Running { rx, deadline, candidates, recorder: None, _permit: permit });
        }
        Some(Lookup::Miss(r)) | Some(Lookup::Skipped(Some(r))) => Some(r),
        Some(Lookup::Skipped(None)) | None => None,
    };
    tracing::debug!(candidates, "submitted");
    for (i, req) in requests.into_iter().enumerate() {
        if let Err(e) = state.backend.submit(req, Box::new(ChannelSink::new(i, tx.clone()))) {
            return Err(e.into());
        }
    }
    Ok(Running { rx, deadline, candidates, recorder, _permit: permit })
}

impl Running {
    /// The next event; `None` when the engine dropped every sink without finishing.
    pub async fn next(&mut self) -> Result<Option<(usize, Event)>, ApiError> {
        let next = match self.deadline {
            Some((at, limit)) => {
                tokio::time::timeout_at(at, self.rx.recv()).await.map_err(|_| ApiError::Timeout(limit))?
            }
            None => self.rx.recv().await,
        };
        if let (Some((i, event)), Some(r)) = (&next, &mut self.recorder) {
            if !r.observe(*i, event) {
                self.recorder = None;
            }
        }
        Ok(next)
    }
}

/// Waits for every candidate to finish, feeding `tracker`; the first failure ends the request.
pub async fn collect(
    state: &AppState,
    mut running: Running,
    tracker: &mut Tracker,
) -> Result<(Vec<Candidate>, RequestTimings), ApiError> {
    let n = running.candidates;
    let mut tokens = vec![Vec::new(); n];
    let mut prompt = vec![Vec::new(); n];
    let mut started = vec![(Duration::ZERO, 0); n];
    let mut done: Vec<Option<Finished>> = vec![None; n];
    let mut left = n;
    while left > 0 {
        let event = running.next().await;
        let (i, event) = match event {
            Ok(Some(e)) => e,
            Ok(None) => return Err(fail(state, tracker, ApiError::Incomplete)),
            Err(e) => return Err(fail(state, tracker, e)),
        };
        match event {
            Event::Started { queue_time, cached_tokens } => started[i] = (queue_time, cached_tokens),
            Event::PromptLogprobs(lp) => prompt[i] = lp,
            Event::Token(t) => {
                tracker.token(i);
                tokens[i].push(t);
            }
            Event::Finished(f) => {
                done[i] = Some(f);
                left -= 1;
            }
            Event::Failed(msg) => return Err(fail(state, tracker, ApiError::Generation(msg))),
        }
    }
    state.healthy.store(true, Ordering::Relaxed);
    let out: Vec<Candidate> = (0..n)
        .map(|i| Candidate {
            tokens: std::mem::take(&mut tokens[i]),
            prompt_logprobs: std::mem::take(&mut prompt[i]),
            finished: done[i].take().expect("every candidate finished"),
            queue_time: started[i].0,
            cached_tokens: started[i].1,
        })
        .collect();
    let queue = out.iter().map(|c| c.queue_time).min().unwrap_or_default();
    let inference = out.iter().map(|c| c.finished.inference_time).max().unwrap_or_default();
    let generated = out.iter().map(|c| c.finished.generated_tokens).sum();
    let timings = tracker.succeed(queue, inference, generated);
    Ok((out, timings))
}

/// Records a failure (and marks the engine unhealthy when it failed); returns the error.
pub fn fail(state: &AppState, tracker: &mut Tracker, err: ApiError) -> ApiError {
    if matches!(err, ApiError::Generation(_) | ApiError::NotRunning | ApiError::Incomplete) {
        state.healthy.store(false, Ordering::Relaxed);
    }
    tracker.fail(&err);
    err
}
