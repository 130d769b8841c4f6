//! Accuracy of the measurement itself: a scripted server (raw HTTP/1.1 over tokio) emits tokens at known
//! times, fails some requests with 429/500, breaks some streams, and the client's figures must match the script.
//!
//! The server and the client share one current-thread runtime whose clock is paused: it moves only when
//! every task waits on a timer, straight to the earliest one. The client reaches the scripted server through
//! in-memory pipes (`Endpoint::pipes`), not loopback TCP: a write there wakes the reader before any timer can
//! fire, whereas the kernel may deliver a loopback packet later (in a softirq thread, on a loaded machine), and
//! the paused clock would then run ahead to the next timer while the bytes are in flight. So the client reads
//! each token at the instant the script sent it, however loaded the machine is: the figures are exact, not
//! "within scheduling noise". Only the tests of network failures (refused, silent) use real sockets.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};

use super::client::api::{Api, Prompt};
use super::client::http::{Client, Endpoint};
use super::load::{run_level, Level, OnDone, Prompts, Stop};
use super::report::ErrorKind;
use super::summary::summarize;

/// First token this long after the request is read.
const TTFT_MS: u64 = 40;
/// Then one token every this long.
const ITL_MS: u64 = 10;
/// Tokens per successful answer.
const TOKENS: u64 = 8;

/// Runs `test` on a current-thread runtime with a paused clock (see the module's comment).
fn paused<F: Future>(test: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
    rt.block_on(test)
}

/// Starts the scripted server on the current runtime; returns an endpoint whose connections are pipes to it.
fn scripted_server(read_timeout: Duration) -> Arc<Endpoint> {
    let (tx, mut rx) = mpsc::unbounded_channel::<DuplexStream>();
    tokio::spawn(async move {
        while let Some(s) = rx.recv().await {
            tokio::spawn(connection(s));
        }
    });
    let mut e = Endpoint::parse("http://scripted:1", Duration::from_secs(2), read_timeout).unwrap();
    e.pipes = Some(tx);
    Arc::new(e)
}

/// Serves requests on one keep-alive connection.
async fn connection(s: impl AsyncRead + AsyncWrite + Unpin) {
    let mut r = BufReader::new(s);
    loop {
        let mut len = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body).await.unwrap();
        let t0 = Instant::now();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let prompt = v["inputs"].as_str().unwrap().to_string();
        if !respond(r.get_mut(), &prompt, t0).await {
            return;
        }
    }
}

/// Answers one request as its prompt scripts; `false` when the connection is to be dropped.
async fn respond(s: &mut (impl AsyncWrite + Unpin), prompt: &str, t0: Instant) -> bool {
    let plain = |status: &str, ctype: &str, body: &str| {
        format!("HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\n\r\n{body}", body.len())
    };
    match prompt {
        "429" => {
            return s
                .write_all(plain("429 Too Many Requests", "application/json", "{\"error\":\"busy\"}").as_bytes())
                .await
                .is_ok()
        }
        "500" => {
            return s
                .write_all(plain("500 Internal Server Error", "application/json", "{\"error\":\"boom\"}").as_bytes())
                .await
                .is_ok()
        }
        "json" => {
            return s
                .write_all(plain("200 OK", "application/json", "{\"generated_text\":\"x\"}").as_bytes())
                .await
                .is_ok()
        }
        _ => {}
    }
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    if s.write_all(head.as_bytes()).await.is_err() {
        return false;
    }
    let chunk = |data: String| {
        let event = format!("data:{data}\n\n");
        format!("{:x}\r\n{event}\r\n", event.len())
    };
    for k in 0..TOKENS {
        sleep_until(t0 + Duration::from_millis(TTFT_MS + k * ITL_MS)).await;
        let last = k + 1 == TOKENS;
        let event = match prompt {
            "drop" if k == 3 => return false,
            "err" if k == 2 => "{\"error\":\"out of memory\",\"error_type\":\"generation\"}".to_string(),
            _ if last => format!(
                "{{\"index\":{k},\"token\":{{\"id\":2,\"text\":\"\",\"special\":true}},\"generated_text\":\"abc\",\
                 \"details\":{{\"finish_reason\":\"length\",\"generated_tokens\":{TOKENS}}}}}"
            ),
            _ => format!(
                "{{\"index\":{k},\"token\":{{\"id\":5,\"text\":\"a\",\"special\":false}},\"generated_text\":null}}"
            ),
        };
        if s.write_all(chunk(event).as_bytes()).await.is_err() {
            return false;
        }
        if prompt == "err" && k == 2 {
            break;
        }
    }
    // "close": a server that drops idle keep-alive connections right after answering.
    s.write_all(b"0\r\n\r\n").await.is_ok() && prompt != "close"
}

/// A loopback port that refuses connections: bound, so that nothing else takes it while the socket lives,
/// and never listening.
fn refusing_port() -> (tokio::net::TcpSocket, u16) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    (socket, port)
}

fn endpoint(port: u16, read_timeout: Duration) -> Arc<Endpoint> {
    Arc::new(Endpoint::parse(&format!("http://127.0.0.1:{port}"), Duration::from_secs(2), read_timeout).unwrap())
}

fn prompts(texts: &[&str]) -> Prompts {
    let pool =
        texts.iter().map(|t| Prompt { text: t.to_string(), input_tokens: Some(3), max_tokens: TOKENS }).collect();
    Prompts { pool: Arc::new(pool), first: 0 }
}

fn quiet() -> OnDone {
    Arc::new(|_| {})
}

#[test]
fn measures_match_the_script_at_concurrency_16() {
    let r = paused(async {
        let e = scripted_server(Duration::from_secs(5));
        let api = Arc::new(Api::Tgi);
        let make = move || Client::new(e.clone(), api.clone(), false);
        let pool = prompts(&["ok", "ok", "429", "ok", "500", "ok", "drop", "ok", "err", "ok"]);
        run_level(make, pool, Level::Closed(16), Stop::Requests(160), 0, quiet()).await
    });
    let s = summarize(&r, None);
    assert_eq!(s.requests_ok, 96);
    let count = |k| s.errors.get(&k).copied().unwrap_or(0);
    assert_eq!((count(ErrorKind::Overloaded), count(ErrorKind::Server), count(ErrorKind::Connection)), (16, 32, 16));
    assert_eq!(s.errors.len(), 3, "{:?}", s.errors);
    assert_eq!(r.peak_concurrency, 16);
    let (ttft, itl, e2e) = (TTFT_MS as f64, ITL_MS as f64, (TTFT_MS + (TOKENS - 1) * ITL_MS) as f64);
    for rec in r.records.iter().filter(|r| r.error.is_none()) {
        assert_eq!((rec.output_tokens, rec.itl_ms.len()), (TOKENS, TOKENS as usize - 1));
    }
    // The script's times exactly (to float rounding): every quantile of every measure.
    for (name, d, want) in
        [("TTFT", s.ttft_ms, ttft), ("ITL", s.itl_ms, itl), ("E2E", s.e2e_ms, e2e), ("TPOT", s.tpot_ms, itl)]
    {
        let all = [d.min, d.p50, d.mean, d.max];
        assert!(all.iter().all(|v| (v - want).abs() < 1e-6), "{name}: {d:?} vs {want}");
    }
    // Failed streams keep what they saw: the dropped ones had 3 tokens, the error events 2.
    let dropped = r.records.iter().find(|r| r.error == Some(ErrorKind::Connection)).unwrap();
    assert_eq!((dropped.output_tokens, dropped.e2e_ms), (3, None));
    let err = r.records.iter().find(|r| r.error == Some(ErrorKind::Server) && r.output_tokens > 0).unwrap();
    assert!(err.error_message.as_deref().unwrap().contains("out of memory"));
}

#[test]
fn a_keep_alive_connection_closed_by_the_server_is_not_an_error() {
    let r = paused(async {
        let e = scripted_server(Duration::from_secs(5));
        let make = move || Client::new(e.clone(), Arc::new(Api::Tgi), false);
        run_level(make, prompts(&["close"]), Level::Closed(2), Stop::Requests(12), 0, quiet()).await
    });
    assert!(r.records.iter().all(|r| r.error.is_none()), "{:?}", r.records);
}

#[test]
fn non_streaming_answers_and_silence_are_errors_not_hangs() {
    paused(async {
        let e = scripted_server(Duration::from_secs(5));
        let api = Arc::new(Api::Tgi);
        let make = move || Client::new(e.clone(), api.clone(), false);
        let r = run_level(make, prompts(&["json"]), Level::Closed(2), Stop::Requests(4), 0, quiet()).await;
        assert!(r.records.iter().all(|r| r.error == Some(ErrorKind::Protocol)));
        assert!(r.records[0].error_message.as_deref().unwrap().contains("not an event stream"));
        // A server that accepts and never answers: a timeout per request, at the read timeout.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let e = endpoint(silent.local_addr().unwrap().port(), Duration::from_millis(200));
        let api = Arc::new(Api::Tgi);
        let make = move || Client::new(e.clone(), api.clone(), false);
        let t = Instant::now();
        let r = run_level(make, prompts(&["ok"]), Level::Closed(2), Stop::Requests(2), 0, quiet()).await;
        assert!(r.records.iter().all(|r| r.error == Some(ErrorKind::Timeout)), "{:?}", r.records);
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        // Nothing listening: connection errors.
        let (_reserved, refused) = refusing_port();
        let e = endpoint(refused, Duration::from_millis(200));
        let make = move || Client::new(e.clone(), Arc::new(Api::Tgi), false);
        let r = run_level(make, prompts(&["ok"]), Level::Closed(1), Stop::Requests(1), 0, quiet()).await;
        assert_eq!(r.records[0].error, Some(ErrorKind::Connection));
    });
}
