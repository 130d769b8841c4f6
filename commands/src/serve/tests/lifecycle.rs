//! Cancellation, timeouts and graceful shutdown.

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::json;

use super::client::{post, send};
use super::{limits, TestServer};
use crate::serve::server::Stopped;
use crate::serve::state::Access;

fn slow(max_new_tokens: usize) -> Vec<u8> {
    serde_json::to_vec(&json!({"inputs": "slow", "parameters": {"max_new_tokens": max_new_tokens}})).unwrap()
}

/// A request the mock engine holds until its client goes away.
fn held() -> Vec<u8> {
    serde_json::to_vec(&json!({"inputs": "hold", "parameters": {"max_new_tokens": 80}})).unwrap()
}

#[test]
fn dropping_a_stream_cancels_it_in_the_engine() {
    let s = TestServer::start();
    let mut conn = send(s.addr, "POST", "/generate_stream", &[], &held());
    let mut first = [0u8; 256];
    let n = conn.read(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    drop(conn);
    assert!(s.wait_cancelled(1), "the sink was never closed");
}

#[test]
fn dropping_a_waiting_request_cancels_it_in_the_engine() {
    let s = TestServer::start();
    let conn = send(s.addr, "POST", "/generate", &[], &held());
    assert!(s.wait_submitted(1), "the request never reached the engine");
    drop(conn);
    assert!(s.wait_cancelled(1), "the sink was never closed");
}

#[test]
fn request_timeout_cancels_and_reports() {
    let l = crate::serve::limits::RequestLimits { request_timeout: Some(Duration::from_millis(150)), ..limits() };
    let s = TestServer::with(l, Access::default());
    let started = Instant::now();
    let r = post(s.addr, "/generate", &json!({"inputs": "hold", "parameters": {"max_new_tokens": 80}}));
    assert_eq!(r.status, 504, "{}", r.text());
    assert_eq!(r.json()["error_type"], "timeout");
    assert!(started.elapsed() < Duration::from_secs(30), "the held request ends only at the timeout");
    let r = post(s.addr, "/generate_stream", &json!({"inputs": "hold", "parameters": {"max_new_tokens": 80}}));
    assert_eq!(r.json_events().last().unwrap()["error_type"], "timeout");
    assert!(s.wait_cancelled(2));
}

#[test]
fn shutdown_lets_requests_in_flight_finish() {
    let s = TestServer::start();
    let mut conn = send(s.addr, "POST", "/generate_stream", &[], &slow(10));
    assert!(s.wait_submitted(1), "the request never reached the engine");
    let addr = s.addr;
    let stopped = std::thread::spawn(move || s.shutdown());
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert!(text.contains("\"generated_text\":\""), "the stream was cut: {text}");
    assert_eq!(stopped.join().unwrap(), Stopped::Drained);
    assert!(std::net::TcpStream::connect(addr).is_err(), "still accepting");
}

#[test]
fn every_route_answers_503_while_the_model_loads() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let (loaded, until) = tokio::sync::oneshot::channel::<u8>();
    let serving = rt.spawn(async move {
        let out = crate::serve::server::serve_loading(&listener, until).await;
        (out, listener)
    });
    let r = super::client::get(addr, "/health");
    assert_eq!((r.status, r.header("retry-after")), (503, Some("1")));
    assert!(r.json()["error"].as_str().unwrap().starts_with("loading"), "{}", r.text());
    let r = post(addr, "/v1/chat/completions", &json!({"messages": []}));
    assert_eq!(r.status, 503);
    assert!(r.json()["error"]["message"].as_str().unwrap().starts_with("loading"), "{}", r.text());
    loaded.send(7).unwrap();
    let (out, _listener) = rt.block_on(serving).unwrap();
    assert_eq!(out.unwrap(), 7, "the loading result comes back, and the listener with it");
}
