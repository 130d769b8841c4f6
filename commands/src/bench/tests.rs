//! Accuracy of the measurement itself: a scripted server (raw HTTP/1.1 over tokio) emits tokens at known
//! times, fails some requests with 429/500, breaks some streams, and the client's figures must match the script.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

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

/// Starts the scripted server on its own thread and runtime; returns its port.
fn scripted_server() -> u16 {
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = std_listener.local_addr().unwrap().port();
    std_listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = TcpListener::from_std(std_listener).unwrap();
            loop {
                let (s, _) = listener.accept().await.unwrap();
                s.set_nodelay(true).unwrap();
                tokio::spawn(connection(s));
            }
        });
    });
    port
}

/// Serves requests on one keep-alive connection.
async fn connection(s: TcpStream) {
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
async fn respond(s: &mut TcpStream, prompt: &str, t0: Instant) -> bool {
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
        at(t0 + Duration::from_millis(TTFT_MS + k * ITL_MS)).await;
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

/// Waits until `deadline` to within microseconds: tokio's timer (1 ms ticks, rounding up) gets close, then
/// yielding polls the rest, so the script's times are the times the bytes go out.
async fn at(deadline: Instant) {
    tokio::time::sleep_until(deadline - Duration::from_millis(2)).await;
    while Instant::now() < deadline {
        tokio::task::yield_now().await;
    }
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
    let port = scripted_server();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let e = endpoint(port, Duration::from_secs(5));
    let api = Arc::new(Api::Tgi);
    let make = move || Client::new(e.clone(), api.clone(), false);
    let pool = prompts(&["ok", "ok", "429", "ok", "500", "ok", "drop", "ok", "err", "ok"]);
    let r = rt.block_on(run_level(make, pool, Level::Closed(16), Stop::Requests(160), 0, quiet()));
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
    // The script's times, within 2 ms: medians and means of every measure.
    for (name, d, want) in
        [("TTFT", s.ttft_ms, ttft), ("ITL", s.itl_ms, itl), ("E2E", s.e2e_ms, e2e), ("TPOT", s.tpot_ms, itl)]
    {
        assert!((d.p50 - want).abs() < 2.0 && (d.mean - want).abs() < 2.0, "{name}: {d:?} vs {want}");
    }
    // Absolute times are never early (a late token shortens the next gap, so ITL's minimum may be).
    for (name, d, want) in [("TTFT", s.ttft_ms, ttft), ("E2E", s.e2e_ms, e2e)] {
        assert!(d.min >= want - 0.5, "{name}: {d:?} vs {want}");
    }
    // Failed streams keep what they saw: the dropped ones had 3 tokens, the error events 2.
    let dropped = r.records.iter().find(|r| r.error == Some(ErrorKind::Connection)).unwrap();
    assert_eq!((dropped.output_tokens, dropped.e2e_ms), (3, None));
    let err = r.records.iter().find(|r| r.error == Some(ErrorKind::Server) && r.output_tokens > 0).unwrap();
    assert!(err.error_message.as_deref().unwrap().contains("out of memory"));
}

#[test]
fn a_keep_alive_connection_closed_by_the_server_is_not_an_error() {
    let port = scripted_server();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let e = endpoint(port, Duration::from_secs(5));
    let make = move || Client::new(e.clone(), Arc::new(Api::Tgi), false);
    let r = rt.block_on(run_level(make, prompts(&["close"]), Level::Closed(2), Stop::Requests(12), 0, quiet()));
    assert!(r.records.iter().all(|r| r.error.is_none()), "{:?}", r.records);
}

#[test]
fn non_streaming_answers_and_silence_are_errors_not_hangs() {
    let port = scripted_server();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let e = endpoint(port, Duration::from_secs(5));
    let api = Arc::new(Api::Tgi);
    let make = move || Client::new(e.clone(), api.clone(), false);
    let r = rt.block_on(run_level(make, prompts(&["json"]), Level::Closed(2), Stop::Requests(4), 0, quiet()));
    assert!(r.records.iter().all(|r| r.error == Some(ErrorKind::Protocol)));
    assert!(r.records[0].error_message.as_deref().unwrap().contains("not an event stream"));
    // A server that accepts and never answers: a timeout per request.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let e = endpoint(silent.local_addr().unwrap().port(), Duration::from_millis(200));
    let api = Arc::new(Api::Tgi);
    let make = move || Client::new(e.clone(), api.clone(), false);
    let t = std::time::Instant::now();
    let r = rt.block_on(run_level(make, prompts(&["ok"]), Level::Closed(2), Stop::Requests(2), 0, quiet()));
    assert!(r.records.iter().all(|r| r.error == Some(ErrorKind::Timeout)), "{:?}", r.records);
    assert!(t.elapsed() < Duration::from_secs(2));
    // Nothing listening: connection errors.
    let port = silent.local_addr().unwrap().port();
    drop(silent);
    let e = endpoint(port, Duration::from_millis(200));
    let make = move || Client::new(e.clone(), Arc::new(Api::Tgi), false);
    let r = rt.block_on(run_level(make, prompts(&["ok"]), Level::Closed(1), Stop::Requests(1), 0, quiet()));
    assert_eq!(r.records[0].error, Some(ErrorKind::Connection));
}
