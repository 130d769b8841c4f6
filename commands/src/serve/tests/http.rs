//! The HTTP layer under hostile clients: slow bodies, connection floods, non-JSON bodies, HEAD, and
//! the heads hyper refuses itself.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::json;

use super::client::{get, parse, raw, request, Reply};
use super::{limits, TestServer};
use crate::serve::server::Stopped;
use crate::serve::state::Access;

/// Opens a connection and sends `head` (and nothing more).
fn open(addr: SocketAddr, head: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    s
}

/// Reads until the end of a response head (a response without a body, or whose body is not needed).
fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "closed before the end of the head: {head:?}");
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

/// Reads the rest of a connection, which the server closes.
fn read_to_close(mut s: TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    out
}

/// A request head with a JSON body of `len` bytes announced.
fn post_head(path: &str, len: usize, extra: &str) -> String {
    format!("POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n{extra}\r\n")
}

#[test]
fn a_body_that_stops_arriving_gets_408_and_the_connection_closes() {
    let l = crate::serve::limits::RequestLimits { body_timeout: Duration::from_millis(200), ..limits() };
    let s = TestServer::with(l, Access::default());
    // Part of the body, then nothing.
    let mut c = open(s.addr, &post_head("/generate", 100, ""));
    c.write_all(b"{\"inputs\": \"Once").unwrap();
    let r = parse(&read_to_close(c));
    assert_eq!(r.status, 408);
    assert_eq!(r.header("connection"), Some("close"));
    assert_eq!(r.json(), json!({"error": "The request body did not arrive within 0.2 s", "error_type": "timeout"}));
    // Headers only, on an OpenAI route.
    let r = parse(&read_to_close(open(s.addr, &post_head("/v1/completions", 50, ""))));
    assert_eq!((r.status, r.json()["error"]["type"].clone()), (408, json!("timeout_error")));
    // An announced oversized body trickling in is cut by the same deadline.
    let r = parse(&read_to_close(open(s.addr, &post_head("/generate", 1 << 30, ""))));
    assert_eq!(r.status, 408);
    assert!(s.submitted().is_empty());
    assert_eq!(get(s.addr, "/health").status, 200);
}

#[test]
fn stopping_cuts_bodies_still_arriving_instead_of_waiting_for_them() {
    let s = TestServer::start();
    // `Expect: 100-continue` makes the server say when the handler starts reading the body.
    let mut c = open(s.addr, &post_head("/generate", 100, "Expect: 100-continue\r\n"));
    assert!(read_head(&mut c).starts_with("HTTP/1.1 100 Continue"));
    assert_eq!(s.shutdown(), Stopped::Drained, "the stop waited for a body still arriving");
    let r = parse(&read_to_close(c));
    assert_eq!(r.status, 503);
    assert_eq!(r.json(), json!({"error": "The server is shutting down", "error_type": "unavailable"}));
}

/// A keep-alive connection that has been served once (so the server holds it), left open.
fn held(addr: SocketAddr) -> TcpStream {
    let mut c = open(addr, "GET /health HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(read_head(&mut c).starts_with("HTTP/1.1 200"));
    c
}

#[test]
fn beyond_max_connections_only_health_checks_are_served() {
    let s = TestServer::bounded(limits(), Access::default(), 2);
    let mut conns: Vec<TcpStream> = (0..2).map(|_| held(s.addr)).collect();
    let r = get(s.addr, "/info");
    assert_eq!(r.status, 503);
    assert_eq!((r.header("retry-after"), r.header("connection")), (Some("1"), Some("close")));
    assert_eq!(r.json(), json!({"error": "Too many open connections; retry shortly", "error_type": "overloaded"}));
    let r = get(s.addr, "/v1/models");
    assert_eq!((r.status, r.json()["error"]["type"].clone()), (503, json!("server_error")));
    assert_eq!(get(s.addr, "/health").status, 200);
    assert_eq!(request(s.addr, "HEAD", "/ping", &[], b"").status, 200);
    assert!(s.submitted().iter().all(|r| r.max_new_tokens == 1), "only health checks reached the engine");
    // A freed slot serves again (once the server has seen the close).
    drop(conns.pop());
    let served = (0..250).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        get(s.addr, "/info").status == 200
    });
    assert!(served, "the freed connection slot never came back");
}

#[test]
fn post_bodies_must_be_declared_as_json() {
    let s = TestServer::start();
    let body = serde_json::to_vec(&json!({"inputs": "Hi", "parameters": {"max_new_tokens": 1}})).unwrap();
    for ct in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/json"] {
        let r = request(s.addr, "POST", "/generate", &[("Content-Type", ct)], &body);
        assert_eq!(r.status, 415, "{ct}");
        let message = format!("Expected `Content-Type: application/json`, got `{ct}`");
        assert_eq!(r.json(), json!({"error": message, "error_type": "unsupported_media_type"}));
    }
    let r = request(s.addr, "POST", "/v1/chat/completions", &[("Content-Type", "text/plain")], b"{}");
    assert_eq!((r.status, r.json()["error"]["type"].clone()), (415, json!("invalid_request_error")));
    // No Content-Type at all: what a browser sends for a Blob or ArrayBuffer body, without a preflight.
    let head =
        format!("POST /generate HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: {}\r\n\r\n", body.len());
    let r = raw(s.addr, &[head.as_bytes(), &body].concat());
    assert_eq!(
        (r.status, r.json()["error"].clone()),
        (415, json!("Expected `Content-Type: application/json`, got no `Content-Type`"))
    );
    assert!(s.submitted().is_empty(), "a refused body reached the engine");
    for ct in ["application/json; charset=utf-8", "application/vnd.api+json"] {
        let r = request(s.addr, "POST", "/generate", &[("Content-Type", ct)], &body);
        assert_eq!(r.status, 200, "{ct}: {}", r.text());
    }
}

#[test]
fn head_answers_like_get_without_a_body() {
    let s = TestServer::start();
    for path in ["/health", "/ping", "/", "/info", "/metrics", "/v1/models", "/api-doc/openapi.json"] {
        let r = request(s.addr, "HEAD", path, &[], b"");
        assert_eq!(r.status, 200, "{path}");
        assert!(r.body.is_empty(), "{path}: {}", r.text());
    }
    assert_eq!(request(s.addr, "HEAD", "/info", &[], b"").header("content-type"), Some("application/json"));
    let r = request(s.addr, "HEAD", "/generate", &[], b"");
    assert_eq!((r.status, r.header("allow")), (405, Some("POST, OPTIONS")));
    let r = request(s.addr, "DELETE", "/info", &[], b"");
    assert_eq!((r.status, r.header("allow")), (405, Some("GET, HEAD, OPTIONS")));
}

#[test]
fn errors_of_the_http_layer_carry_json_bodies() {
    let s = TestServer::start();
    let tgi = |r: &Reply, status: u16| {
        assert_eq!(r.status, status, "{}", r.text());
        assert!(r.json()["error"].is_string() && r.json()["error_type"].is_string(), "{}", r.text());
    };
    let openai = |r: &Reply, status: u16| {
        assert_eq!(r.status, status, "{}", r.text());
        assert!(r.json()["error"]["message"].is_string(), "{}", r.text());
    };
    // A request target over 8 KiB: 414.
    let long = format!("/info?q={}", "a".repeat(9000));
    tgi(&get(s.addr, &long), 414);
    openai(&get(s.addr, &format!("/v1/models?q={}", "a".repeat(9000))), 414);
    // A header section over 64 KiB, or with more than 100 fields: 431 (hyper's answer, given a body).
    let big = format!("GET /info HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\nConnection: close\r\n\r\n", "b".repeat(70_000));
    let r = raw(s.addr, big.as_bytes());
    tgi(&r, 431);
    assert!(r.json()["error"].as_str().unwrap().contains("65536 bytes"), "{}", r.text());
    let many: String = (0..120).map(|i| format!("X-H{i}: v\r\n")).collect();
    let big = format!("POST /v1/completions HTTP/1.1\r\nHost: t\r\n{many}Connection: close\r\n\r\n");
    openai(&raw(s.addr, big.as_bytes()), 431);
    // What hyper cannot parse: 400.
    tgi(&raw(s.addr, b"GET /info HTTP/1.1\r\nHost: t\r\nBad Header: x\r\n\r\n"), 400);
    let bad_length =
        "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: ten\r\n\r\n";
    openai(&raw(s.addr, bad_length.as_bytes()), 400);
    // Host: exactly one on HTTP/1.1.
    let r = raw(s.addr, b"GET /info HTTP/1.1\r\nConnection: close\r\n\r\n");
    tgi(&r, 400);
    assert_eq!(r.json()["error"], "Bad request: an HTTP/1.1 request needs a `Host` header");
    let r = raw(s.addr, b"GET /info HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n");
    assert_eq!(r.json()["error"], "Bad request: more than one `Host` header");
    openai(&raw(s.addr, b"GET /v1/models HTTP/1.1\r\nHost: \r\nConnection: close\r\n\r\n"), 400);
    assert_eq!(raw(s.addr, b"GET /health HTTP/1.0\r\n\r\n").status, 200, "HTTP/1.0 needs no Host");
    assert_eq!(get(s.addr, "/health").status, 200);
}
