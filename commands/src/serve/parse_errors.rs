//! hyper answers the requests it cannot parse itself, before any handler sees them: 400 (a malformed
//! start line or header, an invalid `Content-Length`), 431 (a header section over
//! [`super::head::MAX_HEAD_BYTES`] or with more than [`super::head::MAX_HEADERS`] fields) and 414, each
//! with an empty body, and then closes the connection; it has no hook for that answer. [`JsonParseErrors`]
//! wraps a connection's stream and replaces exactly that answer (a bodiless 400, 414 or 431 head without
//! the `x-request-id` every routed response carries) with the same status and a JSON error body, in
//! OpenAI's shape when the last request line read named a `/v1/` path and in TGI's otherwise. After
//! such an answer the stream comes back through [`Linger`] for a lingering close: closing a socket
//! with unread input (the rest of an oversized head) resets the connection, and the client would see
//! the reset instead of the answer.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::oneshot;

use super::error::ApiError;
use super::head::{MAX_HEADERS, MAX_HEAD_BYTES, MAX_URI_BYTES};

/// How long a lingering close waits for the client to stop sending.
const LINGER: Duration = Duration::from_secs(2);

/// Most bytes a lingering close reads and discards.
const LINGER_BYTES: usize = 1 << 20;

/// A connection's stream whose automatic parse-error answers carry JSON bodies.
pub struct JsonParseErrors<S> {
    /// The stream; `None` only while being dropped.
    inner: Option<S>,
    /// Whether the last request line read named a `/v1/` path.
    openai: bool,
    /// The answer being written in place of hyper's: its bytes, how many are written, and how many
    /// of hyper's bytes it stands for.
    replacing: Option<(Vec<u8>, usize, usize)>,
    /// Whether an answer was replaced (the stream then goes back for a lingering close).
    answered: bool,
    /// Where the stream goes back.
    back: Option<oneshot::Sender<S>>,
}

/// The stream of a connection whose parse error was answered, once hyper drops it.
pub struct Linger<S>(oneshot::Receiver<S>);

impl<S> JsonParseErrors<S> {
    /// Wraps `inner`; the [`Linger`] gets it back if hyper answers a parse error on it.
    pub fn new(inner: S) -> (Self, Linger<S>) {
        let (tx, rx) = oneshot::channel();
        (
            JsonParseErrors { inner: Some(inner), openai: false, replacing: None, answered: false, back: Some(tx) },
            Linger(rx),
        )
    }

    fn inner(&mut self) -> io::Result<Pin<&mut S>>
    where
        S: Unpin,
    {
        self.inner.as_mut().map(Pin::new).ok_or_else(|| io::ErrorKind::NotConnected.into())
    }
}

impl<S> Drop for JsonParseErrors<S> {
    fn drop(&mut self) {
        if let (true, Some(back), Some(inner)) = (self.answered, self.back.take(), self.inner.take()) {
            let _ = back.send(inner);
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Linger<S> {
    /// After the connection ended: if a parse error was answered, closes the stream's sending side
    /// and reads what the client still sends (up to [`LINGER_BYTES`], for up to [`LINGER`]).
    pub async fn close(self) {
        let Ok(mut stream) = self.0.await else { return };
        let _ = stream.shutdown().await;
        let _ = tokio::time::timeout(LINGER, async {
            let (mut buf, mut seen) = ([0u8; 4096], 0);
            while seen < LINGER_BYTES {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => seen += n,
                }
            }
        })
        .await;
    }
}

/// The status of hyper's automatic answer when `buf` is exactly one: a whole bodiless response head
/// with status 400, 414 or 431 that no handler wrote.
fn automatic(buf: &[u8]) -> Option<ApiError> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = &buf[..end + 2];
    if end + 4 != buf.len() || !contains(head, b"\r\ncontent-length: 0\r\n") || contains(head, b"\r\nx-request-id:") {
        return None;
    }
    match head.get(..13)? {
        b"HTTP/1.1 400 " => Some(ApiError::BadRequest("the request is not valid HTTP/1.1".into())),
        b"HTTP/1.1 414 " => Some(ApiError::UriTooLong(MAX_URI_BYTES)),
        b"HTTP/1.1 431 " => Some(ApiError::HeadersTooLarge { bytes: MAX_HEAD_BYTES, fields: MAX_HEADERS }),
        _ => None,
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Whether `bytes` start with a request line naming a `/v1/` path (`None`: not a request line).
fn request_line_family(bytes: &[u8]) -> Option<bool> {
    let space = bytes.iter().take(16).position(|&b| b == b' ')?;
    if space == 0 || !bytes[..space].iter().all(u8::is_ascii_uppercase) {
        return None;
    }
    let target = &bytes[space + 1..];
    target.starts_with(b"/").then(|| target.starts_with(b"/v1/"))
}

/// The whole JSON answer for `e`.
fn answer(e: &ApiError, openai: bool) -> Vec<u8> {
    tracing::info!(status = e.class().status.as_u16(), error = %e, "request refused by the HTTP parser");
    let body = if openai { e.openai_body() } else { e.tgi_body() }.to_string();
    let status = e.class().status;
    let mut out = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or_default(),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

impl<S: AsyncRead + Unpin> AsyncRead for JsonParseErrors<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(self.inner()?.poll_read(cx, buf))?;
        if let Some(openai) = request_line_family(&buf.filled()[before..]) {
            self.openai = openai;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for JsonParseErrors<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.replacing.is_none() {
            let Some(e) = automatic(buf) else { return this.inner()?.poll_write(cx, buf) };
            this.replacing = Some((answer(&e, this.openai), 0, buf.len()));
            this.answered = true;
        }
        let inner = this.inner.as_mut().map(Pin::new);
        if let (Some((bytes, written, _)), Some(mut inner)) = (&mut this.replacing, inner) {
            while *written < bytes.len() {
                match ready!(inner.as_mut().poll_write(cx, &bytes[*written..]))? {
                    0 => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    n => *written += n,
                }
            }
        }
        Poll::Ready(Ok(this.replacing.take().map_or(0, |(_, _, stands_for)| stands_for)))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let first = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| &b[..]);
        if self.replacing.is_some() || automatic(first).is_some() {
            return self.poll_write(cx, first);
        }
        self.inner()?.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(S::is_write_vectored)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner()?.poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner()?.poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    const HYPER_431: &[u8] =
        b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: Tue, 01 Dec 2026 03:00:00 GMT\r\n\r\n";

    #[test]
    fn recognizes_only_hyper_automatic_answers() {
        assert!(matches!(automatic(HYPER_431), Some(ApiError::HeadersTooLarge { .. })));
        assert!(automatic(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n").is_some());
        let routed = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nx-request-id: a\r\n\r\n";
        assert!(automatic(routed).is_none());
        let with_body = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\n\r\n{}";
        assert!(automatic(with_body).is_none());
        assert!(automatic(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n").is_none());
        assert!(automatic(&HYPER_431[..20]).is_none());
    }

    #[test]
    fn request_lines_name_the_family() {
        assert_eq!(request_line_family(b"POST /v1/chat/completions HTTP/1.1\r\n"), Some(true));
        assert_eq!(request_line_family(b"GET /info HTTP/1.1\r\n"), Some(false));
        assert_eq!(request_line_family(b"{\"inputs\": \"GET /v1/\"}"), None);
        assert_eq!(request_line_family(b"x"), None);
    }

    #[tokio::test]
    async fn replaces_the_answer_in_the_family_shape() {
        let (client, server) = tokio::io::duplex(64);
        let (mut wrapped, linger) = JsonParseErrors::new(server);
        let (mut client_read, mut client_write) = tokio::io::split(client);
        client_write.write_all(b"GET /v1/models HTTP/1.1\r\n").await.unwrap();
        let mut got = [0u8; 64];
        let n = wrapped.read(&mut got).await.unwrap();
        assert!(n > 0 && wrapped.openai);
        client_write.write_all(b"X-Rest: of an oversized head\r\n").await.unwrap();
        let writer = tokio::spawn(async move {
            wrapped.write_all(HYPER_431).await.unwrap();
            drop(wrapped);
            // The client's unread request bytes are read before the stream closes.
            linger.close().await;
        });
        let mut out = Vec::new();
        client_read.read_to_end(&mut out).await.unwrap();
        drop((client_read, client_write));
        writer.await.unwrap();
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"), "{head}");
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
}
