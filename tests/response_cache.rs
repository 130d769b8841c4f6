//! The response cache end to end on the bundled model (`tgi serve --response-cache-size`): repeated
//! deterministic requests are answered without the engine (its step and token counters stay put),
//! sampled ones without a seed never are, and 10,000 distinct requests (from `tgi bench`) leave the
//! cache within its byte bound.

mod common;

use std::process::Command;

use common::server::{post, post_with, Server, Sse};
use serde_json::json;

/// The engine's work so far: steps with prompt tokens, and tokens generated.
fn engine_work(s: &Server) -> (f64, f64) {
    (s.metric("tgi_batch_inference_count"), s.metric("tgi_batch_generated_tokens"))
}

#[test]
fn repeated_deterministic_requests_skip_the_engine_and_sampled_ones_never_do() {
    let s = Server::start(&["--response-cache-size", "100"]);
    let body = json!({"inputs": "Once upon a time", "parameters": {"max_new_tokens": 12, "details": true}}).to_string();
    let (status, first) = post(&s.url("/generate"), &body);
    assert_eq!(status, 200, "{first}");
    let work = engine_work(&s);
    let (_, second) = post(&s.url("/generate"), &body);
    assert_eq!(first, second, "identical bodies");
    assert_eq!(engine_work(&s), work, "the second never reached the engine");

    // The same engine request as a stream: the answer /generate stored replays as events.
    let stream = json!({"inputs": "Once upon a time", "parameters": {"max_new_tokens": 12}});
    let a = Sse::open(&s.url("/generate_stream"), &stream).collect();
    let b = Sse::open(&s.url("/generate_stream"), &stream).collect();
    assert_eq!(a.len(), 12, "one event per token, the last with the text: {a:?}");
    let text = |events: &[String]| -> Vec<serde_json::Value> {
        events.iter().map(|e| serde_json::from_str::<serde_json::Value>(e).unwrap()["token"]["text"].clone()).collect()
    };
    assert_eq!(text(&a), text(&b), "a cached stream replays as a stream");
    assert_eq!(engine_work(&s), work);

    let (_, fresh) = post_with(&s.url("/generate"), &[("Cache-Control", "no-cache")], &body);
    assert_eq!(fresh, first, "greedy is greedy");
    assert!(engine_work(&s).1 > work.1, "no-cache went to the engine");

    let sampled = json!({"inputs": "Once upon a time", "parameters": {"max_new_tokens": 12, "do_sample": true}});
    let entries = s.metric("tgi_response_cache_entries");
    for _ in 0..2 {
        let work = engine_work(&s);
        assert_eq!(post(&s.url("/generate"), &sampled.to_string()).0, 200);
        assert!(engine_work(&s).1 > work.1, "an unseeded sampled request is computed every time");
    }
    assert_eq!(s.metric("tgi_response_cache_entries"), entries, "and never stored");
    assert_eq!(s.metric("tgi_response_cache_hits"), 3.0);
}

#[test]
fn ten_thousand_distinct_requests_leave_the_cache_within_its_bound() {
    let bound = 256 * 1024;
    let s = Server::start(&["--response-cache-size", "256KiB"]);
    let out = Command::new(env!("CARGO_BIN_EXE_tgi"))
        .args(["bench", "--url", &s.url(""), "--api", "tgi", "--quiet", "--requests", "10000", "--concurrency", "8"])
        .args(["--input-tokens", "8", "--output-tokens", "2"])
        .args(["--tokenizer", common::model("stories260k/stories260k-f32.gguf").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (misses, bytes) = (s.metric("tgi_response_cache_misses"), s.metric("tgi_response_cache_bytes"));
    let (entries, evictions) = (s.metric("tgi_response_cache_entries"), s.metric("tgi_response_cache_evictions"));
    println!("{misses} misses, {entries} entries, {bytes} bytes, {evictions} evictions");
    assert!(misses >= 9_000.0, "the requests were distinct and cacheable: {misses} misses");
    assert!(bytes <= bound as f64 && bytes > 0.0, "{bytes} bytes held, bound {bound}");
    assert!(evictions > 0.0 && entries + evictions <= misses, "{entries} entries, {evictions} evictions");
}

#[test]
fn bad_cache_sizes_are_refused_with_exit_2() {
    for (flags, needle) in [
        (&["--response-cache-size", "0"][..], "not a positive number of entries"),
        (&["--response-cache-size", "12parsecs"][..], "not a positive number of entries"),
        (&["--response-cache-size", "8", "--response-cache-ttl", "0"][..], "--response-cache-ttl"),
        (&["--response-cache-ttl", "5"][..], "--response-cache-size"),
    ] {
        let out = common::tgi(["serve"].iter().chain(flags));
        common::assert_fails(&out, 2, needle);
    }
}
