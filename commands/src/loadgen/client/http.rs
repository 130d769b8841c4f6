//! HTTP/1.1 over plain TCP (hyper's connection-level client): one keep-alive connection per client,
//! reconnecting when the server closes it; each body chunk is timestamped the moment it is read.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

use super::super::report::ErrorKind;
use super::api::{clip, Api, Prompt};
use super::sse::SseParser;

/// Where and how to send requests.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `host:port` to connect to.
    pub authority: String,
    /// A path prefix from the URL ("" or e.g. `/proxy`).
    pub prefix: String,
    /// The API key: `Authorization: Bearer`, or `x-api-key` for Anthropic's API.
    pub api_key: Option<String>,
    /// Speak Anthropic's headers: the key as `x-api-key`, and `anthropic-version`.
    pub anthropic: bool,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Timeout for the response head and for each body chunk.
    pub read_timeout: Duration,
    /// Tests: connections are in-memory pipes handed to a scripted server over this channel, not TCP (a
    /// paused clock then never runs ahead of bytes in flight).
    #[cfg(test)]
    pub pipes: Option<tokio::sync::mpsc::UnboundedSender<tokio::io::DuplexStream>>,
}

/// The `anthropic-version` sent to Anthropic's API.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// A failure: its kind and message.
pub type Failure = (ErrorKind, String);

impl Endpoint {
    /// Parses `http://host[:port][/prefix]`, or `host[:port][/prefix]` (as curl takes it); https is refused with
    /// a clear message.
    pub fn parse(url: &str, connect_timeout: Duration, read_timeout: Duration) -> Result<Endpoint, String> {
        let bare;
        let url = if url.contains("://") {
            url
        } else {
            bare = format!("http://{url}");
            bare.as_str()
        };
        if url.starts_with("https://") {
            return Err(format!(
                "{url}: TLS is not supported; benchmark over http:// (put a TLS-terminating proxy such as `socat` or \
                 nginx in front, or measure the server on its plain port)"
            ));
        }
        let rest = url.strip_prefix("http://").ok_or_else(|| format!("{url}: expected an http://host:port URL"))?;
        let (authority, prefix) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
        if authority.is_empty() || authority.contains('@') {
            return Err(format!("{url}: expected an http://host:port URL"));
        }
        let authority = if authority.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let prefix = prefix.trim_end_matches('/');
        let prefix = if prefix.is_empty() { String::new() } else { format!("/{prefix}") };
        Ok(Endpoint {
            authority,
            prefix,
            api_key: None,
            anthropic: false,
            connect_timeout,
            read_timeout,
            #[cfg(test)]
            pipes: None,
        })
    }

    /// Opens a connection.
    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, Failure> {
        #[cfg(test)]
        if let Some(pipes) = &self.pipes {
            let (ours, theirs) = tokio::io::duplex(1 << 16);
            pipes.send(theirs).map_err(|_| (ErrorKind::Connection, "the scripted server is gone".to_string()))?;
            return self.handshake(ours).await;
        }
        let stream = match timeout(self.connect_timeout, TcpStream::connect(&self.authority)).await {
            Err(_) => return Err((ErrorKind::Timeout, format!("connect to {} timed out", self.authority))),
            Ok(Err(e)) => return Err((ErrorKind::Connection, format!("connect to {}: {e}", self.authority))),
            Ok(Ok(s)) => s,
        };
        let _ = stream.set_nodelay(true);
        self.handshake(stream).await
    }

    /// Starts HTTP/1.1 on an open connection; its driver runs as a task.
    async fn handshake(
        &self,
        stream: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    ) -> Result<SendRequest<Full<Bytes>>, Failure> {
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| (ErrorKind::Connection, format!("HTTP handshake with {}: {e}", self.authority)))?;
        tokio::spawn(conn);
        Ok(sender)
    }

    fn request(&self, method: Method, path: &str, body: impl Into<Bytes>, accept: &str) -> Request<Full<Bytes>> {
        let mut b = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.prefix))
            .header(HOST, &self.authority)
            .header(ACCEPT, accept);
        let body: Bytes = body.into();
        if !body.is_empty() {
            b = b.header(CONTENT_TYPE, "application/json");
        }
        match (&self.api_key, self.anthropic) {
            (Some(k), false) => b = b.header(AUTHORIZATION, format!("Bearer {k}")),
            (Some(k), true) => b = b.header("x-api-key", k),
            (None, _) => {}
        }
        if self.anthropic {
            b = b.header("anthropic-version", ANTHROPIC_VERSION);
        }
        b.body(Full::new(body)).expect("a valid request")
    }

    /// A one-off request on a fresh connection: status and body (at most 16 MiB).
    pub async fn call(&self, method: Method, path: &str, body: Vec<u8>) -> Result<(u16, String), Failure> {
        let mut sender = self.connect().await?;
        let resp = read_timed(self.read_timeout, sender.send_request(self.request(method, path, body, "*/*"))).await?;
        let status = resp.status().as_u16();
        let mut body = resp.into_body();
        let mut bytes = Vec::new();
        while let Some(data) = next_chunk(self.read_timeout, &mut body).await? {
            bytes.extend_from_slice(&data);
            if bytes.len() > 16 << 20 {
                return Err((ErrorKind::Protocol, format!("{path}: response over 16 MiB")));
            }
        }
        Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
    }
}

/// Awaits `f` at most `limit`; a hyper error becomes a connection failure.
async fn read_timed<T>(
    limit: Duration,
    f: impl std::future::Future<Output = Result<T, hyper::Error>>,
) -> Result<T, Failure> {
    match timeout(limit, f).await {
        Err(_) => Err((ErrorKind::Timeout, format!("no response within {:.1} s", limit.as_secs_f64()))),
        Ok(Err(e)) => Err((ErrorKind::Connection, describe(&e))),
        Ok(Ok(v)) => Ok(v),
    }
}

/// The next data chunk of `body` (empty for a trailers frame), `None` at its end.
async fn next_chunk(limit: Duration, body: &mut Incoming) -> Result<Option<Bytes>, Failure> {
    match timeout(limit, body.frame()).await {
        Err(_) => Err((ErrorKind::Timeout, format!("no data within {:.1} s", limit.as_secs_f64()))),
        Ok(None) => Ok(None),
        Ok(Some(Err(e))) => Err((ErrorKind::Connection, describe(&e))),
        Ok(Some(Ok(frame))) => Ok(Some(frame.into_data().unwrap_or_default())),
    }
}

/// A hyper error with its cause (hyper's own message alone is terse).
fn describe(e: &hyper::Error) -> String {
    match std::error::Error::source(e) {
        Some(s) => format!("{e}: {s}"),
        None => e.to_string(),
    }
}

/// One request as seen from the client.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// When the request was written (after any wait for a connection).
    pub sent: Instant,
    /// The arrival of each token-carrying event.
    pub tokens: Vec<Instant>,
    /// When the response ended (or failed).
    pub end: Instant,
    /// Generated tokens as the server counted them, when it said.
    pub output_tokens: Option<u64>,
    /// Prompt tokens as the server counted them, when it said.
    pub input_tokens: Option<u64>,
    /// The failure, if any.
    pub error: Option<Failure>,
    /// The connection failed before any response came (the request may be sent again).
    pub unanswered: bool,
}

/// A streaming client: one keep-alive connection, opened on first use and after the server closes it.
pub struct Client {
    endpoint: std::sync::Arc<Endpoint>,
    api: std::sync::Arc<Api>,
    ignore_eos: bool,
    conn: Option<SendRequest<Full<Bytes>>>,
}

impl Client {
    /// A client with no connection yet.
    pub fn new(endpoint: std::sync::Arc<Endpoint>, api: std::sync::Arc<Api>, ignore_eos: bool) -> Client {
        Client { endpoint, api, ignore_eos, conn: None }
    }

    /// Sends `p` and reads the whole stream.
    pub async fn send(&mut self, p: &Prompt) -> Outcome {
        let body = Bytes::from(self.api.body(p, self.ignore_eos));
        let reused = match self.conn.take() {
            Some(mut c) => c.ready().await.is_ok().then_some(c),
            None => None,
        };
        let retry = reused.is_some();
        let mut sender = match reused {
            Some(c) => c,
            None => match self.endpoint.connect().await {
                Ok(c) => c,
                Err(e) => return Outcome::failed(Instant::now(), e),
            },
        };
        let mut out = self.attempt(&mut sender, body.clone()).await;
        if retry && out.unanswered {
            // The server closed the idle keep-alive connection as the request went out (nothing was answered):
            // send it once more on a new connection, as HTTP clients do.
            sender = match self.endpoint.connect().await {
                Ok(c) => c,
                Err(e) => return Outcome::failed(Instant::now(), e),
            };
            out = self.attempt(&mut sender, body).await;
        }
        if out.error.is_none() {
            self.conn = Some(sender);
        }
        out
    }

    /// One try of a request on `sender`.
    async fn attempt(&self, sender: &mut SendRequest<Full<Bytes>>, body: Bytes) -> Outcome {
        let req = self.endpoint.request(Method::POST, self.api.path(), body, "text/event-stream");
        let sent = Instant::now();
        let mut out = Outcome::failed(sent, (ErrorKind::Protocol, String::new()));
        let limit = self.endpoint.read_timeout;
        out.error = match read_timed(limit, sender.send_request(req)).await {
            Ok(resp) => self.stream(resp, &mut out).await.err(),
            Err(e) => {
                out.unanswered = e.0 == ErrorKind::Connection;
                Some(e)
            }
        };
        out.end = Instant::now();
        out
    }

    /// Reads the response `resp` into `out`.
    async fn stream(&self, resp: hyper::Response<Incoming>, out: &mut Outcome) -> Result<(), Failure> {
        let limit = self.endpoint.read_timeout;
        let status = resp.status();
        let ctype = resp.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let mut body = resp.into_body();
        if status != StatusCode::OK || !ctype.starts_with("text/event-stream") {
            let mut bytes = Vec::new();
            while let Some(d) = next_chunk(limit, &mut body).await? {
                bytes.extend_from_slice(&d);
                if bytes.len() > 64 << 10 {
                    break;
                }
            }
            let text = clip(String::from_utf8_lossy(&bytes).trim());
            let kind = match status.as_u16() {
                200..=299 => {
                    return Err((
                        ErrorKind::Protocol,
                        format!("the server answered {ctype:?}, not an event stream (does it stream?): {text}"),
                    ))
                }
                429 => ErrorKind::Overloaded,
                400..=499 => ErrorKind::Client,
                500..=599 => ErrorKind::Server,
                _ => ErrorKind::Protocol,
            };
            return Err((kind, format!("HTTP {status}: {text}")));
        }
        let mut sse = SseParser::default();
        let mut done = false;
        loop {
            let chunk = next_chunk(limit, &mut body).await?;
            let now = Instant::now();
            let events = match chunk {
                None => match sse.finish() {
                    None => break,
                    Some(last) => vec![last],
                },
                Some(data) => sse.feed(&data),
            };
            for data in events {
                let ev = self.api.event(&data).map_err(|m| (ErrorKind::Protocol, m))?;
                if let Some(e) = ev.error {
                    return Err((ErrorKind::Server, format!("error event in the stream: {e}")));
                }
                if ev.token {
                    out.tokens.push(now);
                }
                out.output_tokens = ev.output_tokens.or(out.output_tokens);
                out.input_tokens = ev.input_tokens.or(out.input_tokens);
                done |= ev.done;
            }
        }
        if !done {
            return Err((ErrorKind::Protocol, "the stream ended before its final event".into()));
        }
        if out.tokens.is_empty() {
            return Err((ErrorKind::Protocol, "the stream carried no tokens".into()));
        }
        Ok(())
    }
}

impl Outcome {
    /// An outcome that failed at `at` before anything was sent.
    fn failed(at: Instant, e: Failure) -> Outcome {
        Outcome {
            sent: at,
            tokens: Vec::new(),
            end: at,
            output_tokens: None,
            input_tokens: None,
            error: Some(e),
            unanswered: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let d = Duration::from_secs(1);
        let e = Endpoint::parse("http://localhost:8080/", d, d).unwrap();
        assert_eq!((e.authority.as_str(), e.prefix.as_str()), ("localhost:8080", ""));
        let e = Endpoint::parse("http://example.com/api/", d, d).unwrap();
        assert_eq!((e.authority.as_str(), e.prefix.as_str()), ("example.com:80", "/api"));
        assert!(Endpoint::parse("https://x:1", d, d).unwrap_err().contains("TLS is not supported"));
        let e = Endpoint::parse("localhost:3101", d, d).unwrap();
        assert_eq!((e.authority.as_str(), e.prefix.as_str()), ("localhost:3101", ""), "a bare host:port is http");
        assert!(Endpoint::parse("ftp://x:1", d, d).unwrap_err().contains("expected an http://host:port URL"));
        assert!(Endpoint::parse("", d, d).is_err());
    }
}
