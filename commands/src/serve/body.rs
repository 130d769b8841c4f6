//! Response bodies (whole, or streamed from a channel) and reading request bodies within the limit.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;

use super::error::ApiError;
use super::state::Stopping;

/// A response body: all at once, or chunks from a channel until its sender is dropped. Dropping a
/// streamed body (the client went away) closes the channel, which the producer notices.
pub enum ResponseBody {
    /// The whole body; `None` once sent.
    Full(Option<Bytes>),
    /// Chunks as they are produced.
    Stream(mpsc::Receiver<Bytes>),
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            ResponseBody::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            ResponseBody::Stream(rx) => rx.poll_recv(cx).map(|c| c.map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, ResponseBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Full(Some(d)) => SizeHint::with_exact(d.len() as u64),
            ResponseBody::Full(None) => SizeHint::with_exact(0),
            ResponseBody::Stream(_) => SizeHint::default(),
        }
    }
}

/// A response being built.
pub type HttpResponse = Response<ResponseBody>;

/// A response with this status, content type and body.
pub fn response(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> HttpResponse {
    let mut r = Response::new(ResponseBody::Full(Some(body.into())));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// A JSON response.
pub fn json(status: StatusCode, value: &impl Serialize) -> HttpResponse {
    let body = serde_json::to_vec(value).expect("response types serialize");
    response(status, "application/json", body)
}

/// An empty 200 response.
pub fn empty() -> HttpResponse {
    let mut r = Response::new(ResponseBody::Full(None));
    *r.status_mut() = StatusCode::OK;
    r
}

/// A streamed `text/event-stream` response and the sender its events go to.
pub fn event_stream() -> (HttpResponse, mpsc::Sender<Bytes>) {
    let (tx, rx) = mpsc::channel(64);
    let mut r = Response::new(ResponseBody::Stream(rx));
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert("cache-control", HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    (r, tx)
}

/// Reads the whole request body, refusing more than `limit` bytes (413) and giving up when it has not arrived
/// within `timeout` (408) or once the server is stopping (503): a body still arriving is not a request in flight.
pub async fn read(
    body: Incoming,
    declared: Option<u64>,
    limit: usize,
    timeout: Duration,
    stopping: &Stopping,
) -> Result<Bytes, ApiError> {
    let arrival = async {
        if declared.is_some_and(|n| n > limit as u64) {
            drain(body).await;
            return Err(ApiError::PayloadTooLarge(limit));
        }
        match Limited::new(body, limit).collect().await {
            Ok(c) => Ok(c.to_bytes()),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ApiError::PayloadTooLarge(limit)),
            Err(e) => Err(ApiError::Body(e.to_string())),
        }
    };
    arriving(arrival, timeout, stopping).await?
}

/// Reads and discards a body refused before it was read, within the same bounds as [`read`].
pub async fn discard(body: Incoming, timeout: Duration, stopping: &Stopping) {
    let _ = arriving(drain(body), timeout, stopping).await;
}

/// `reading` cut after `timeout` (408) or once the server is stopping (503).
async fn arriving<T>(reading: impl Future<Output = T>, timeout: Duration, stopping: &Stopping) -> Result<T, ApiError> {
    tokio::select! {
        read = tokio::time::timeout(timeout, reading) => read.map_err(|_| ApiError::BodyTimeout(timeout)),
        () = stopping.begun() => Err(ApiError::ShuttingDown),
    }
}

/// Most bytes of a refused body read and discarded before answering.
const DRAIN_LIMIT: u64 = 16 << 20;

/// Reads and discards (up to [`DRAIN_LIMIT`] bytes) a refused body: closing the connection with unread data makes
/// TCP reset it, and a client still sending would see the reset instead of the answer. The caller bounds the time.
async fn drain(mut body: Incoming) {
    let mut seen = 0u64;
    while seen <= DRAIN_LIMIT {
        match body.frame().await {
            Some(Ok(frame)) => seen += frame.data_ref().map_or(0, |d| d.len() as u64),
            _ => break,
        }
    }
}

/// How deep serde_json lets a request body nest (its recursion limit, which keeps parsing off the stack's end).
const MAX_BODY_NESTING: usize = 128;

/// Parses a JSON request body, telling malformed JSON from JSON of the wrong shape.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => ApiError::JsonData(e.to_string()),
        _ if e.to_string().starts_with("recursion limit exceeded") => {
            ApiError::JsonSyntax(format!("{e}: the body nests more than {MAX_BODY_NESTING} levels deep"))
        }
        _ => ApiError::JsonSyntax(e.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_errors_are_classified() {
        #[derive(serde::Deserialize, Debug)]
        struct T {
            #[allow(dead_code)]
            a: u32,
        }
        assert!(matches!(parse::<T>(b"{"), Err(ApiError::JsonSyntax(_))));
        assert!(matches!(parse::<T>(b"{\"a\": \"x\"}"), Err(ApiError::JsonData(_))));
        assert!(matches!(parse::<T>(b"{}"), Err(ApiError::JsonData(_))));
        assert_eq!(parse::<T>(b"{\"a\": 3}").unwrap().a, 3);
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let Err(ApiError::JsonSyntax(msg)) = parse::<serde_json::Value>(deep.as_bytes()) else { panic!("refused") };
        assert!(msg.ends_with("the body nests more than 128 levels deep"), "{msg}");
    }
}
