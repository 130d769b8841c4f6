//! The response cache over the mock engine: what is answered without the engine, what never is.

use std::time::Duration;

use serde_json::{json, Value};

use super::client::{get, post, request, Reply};
use super::TestServer;
use crate::serve::response_cache::{CacheConfig, CacheSize};
use crate::serve::state::Access;

fn server(size: CacheSize) -> TestServer {
    TestServer::cached(Access::default(), CacheConfig { size, ttl: Duration::from_secs(60) })
}

fn post_with(s: &TestServer, path: &str, headers: &[(&str, &str)], body: &Value) -> Reply {
    request(s.addr, "POST", path, headers, &serde_json::to_vec(body).unwrap())
}

fn metric(s: &TestServer, name: &str) -> f64 {
    let text = get(s.addr, "/metrics").text();
    let line = text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{name}: {text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn identical_greedy_requests_are_answered_once_by_the_engine() {
    let s = server(CacheSize::Entries(16));
    let body = json!({"inputs": "Hello", "parameters": {"max_new_tokens": 5, "details": true}});
    let first = post(s.addr, "/generate", &body);
    let second = post(s.addr, "/generate", &body);
    assert_eq!((first.status, second.status), (200, 200), "{}", second.text());
    assert_eq!(first.body, second.body, "identical bodies");
    assert_eq!(s.submitted().len(), 1, "the second never reached the engine");
    assert_eq!(second.header("x-inference-time"), Some("0"), "a replay ran no inference");
    // OpenAI's answers are rendered afresh (their own id), from the cached events.
    let completion = json!({"prompt": "Hello", "max_tokens": 5, "temperature": 0});
    let (a, b) = (post(s.addr, "/v1/completions", &completion), post(s.addr, "/v1/completions", &completion));
    assert_eq!(b.status, 200, "{}", b.text());
    assert_eq!(a.json()["choices"], b.json()["choices"]);
    assert_eq!(s.submitted().len(), 2);
    assert_eq!(metric(&s, "tgi_response_cache_hits"), 2.0);
    assert_eq!(metric(&s, "tgi_response_cache_misses"), 2.0);
    assert!(metric(&s, "tgi_response_cache_bytes") > 0.0);
}

#[test]
fn cached_streams_replay_as_streams() {
    let s = server(CacheSize::Entries(16));
    let body = json!({"inputs": "Hello", "parameters": {"max_new_tokens": 6}});
    let tokens = |r: &Reply| -> Vec<Value> { r.json_events().iter().map(|e| e["token"]["text"].clone()).collect() };
    let (a, b) = (post(s.addr, "/generate_stream", &body), post(s.addr, "/generate_stream", &body));
    assert_eq!(b.header("content-type"), Some("text/event-stream"));
    assert_eq!(tokens(&a).len(), 6);
    assert_eq!(tokens(&a), tokens(&b));
    assert_eq!(a.json_events().last().unwrap()["generated_text"], b.json_events().last().unwrap()["generated_text"]);
    assert_eq!(s.submitted().len(), 1);
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "seed": 5, "stream": true});
    let (a, b) = (post(s.addr, "/v1/chat/completions", &chat), post(s.addr, "/v1/chat/completions", &chat));
    let deltas = |r: &Reply| -> Vec<Value> {
        r.json_events().iter().map(|e| e["choices"][0]["delta"]["content"].clone()).collect()
    };
    assert_eq!(deltas(&a), deltas(&b));
    assert_eq!(s.submitted().len(), 2, "seeded chat streams are cached too");
}

#[test]
fn sampled_requests_without_a_seed_are_never_cached() {
    let s = server(CacheSize::Entries(16));
    let body = json!({"inputs": "Hello", "parameters": {"max_new_tokens": 3, "do_sample": true}});
    for _ in 0..3 {
        assert_eq!(post(s.addr, "/generate", &body).status, 200);
    }
    assert_eq!(s.submitted().len(), 3);
    assert_eq!(metric(&s, "tgi_response_cache_entries"), 0.0);
    assert_eq!(metric(&s, "tgi_response_cache_skipped"), 3.0);
    let seeded = json!({"inputs": "Hello", "parameters": {"max_new_tokens": 3, "do_sample": true, "seed": 9}});
    let (a, b) = (post(s.addr, "/generate", &seeded), post(s.addr, "/generate", &seeded));
    assert_eq!(a.body, b.body);
    assert_eq!(s.submitted().len(), 4, "a seeded one is");
    let other_seed = json!({"inputs": "Hello", "parameters": {"max_new_tokens": 3, "do_sample": true, "seed": 10}});
    post(s.addr, "/generate", &other_seed);
    assert_eq!(s.submitted().len(), 5, "the seed is part of the key");
}

#[test]
fn cache_control_bypasses_the_cache() {
    let s = server(CacheSize::Entries(16));
    let body = json!({"inputs": "Hello", "parameters": {"max_new_tokens": 3}});
    post(s.addr, "/generate", &body);
    post_with(&s, "/generate", &[("Cache-Control", "no-cache")], &body);
    assert_eq!(s.submitted().len(), 2, "no-cache computes a fresh answer");
    post(s.addr, "/generate", &body);
    assert_eq!(s.submitted().len(), 2, "without it the entry is used");
    let other = json!({"inputs": "Hello", "parameters": {"max_new_tokens": 4}});
    post_with(&s, "/generate", &[("Cache-Control", "no-store")], &other);
    post(s.addr, "/generate", &other);
    assert_eq!(s.submitted().len(), 4, "no-store kept nothing");
}

#[test]
fn api_keys_salt_the_key() {
    let key = |k: &str| Access { api_key: Some(k.into()), ..Access::default() };
    let cfg = CacheConfig { size: CacheSize::Entries(16), ttl: Duration::from_secs(60) };
    let (a, b) = (TestServer::cached(key("alpha"), cfg), TestServer::cached(key("beta"), cfg));
    let body = json!({"inputs": "Hello", "parameters": {"max_new_tokens": 3}});
    for (s, k) in [(&a, "alpha"), (&b, "beta")] {
        let auth = format!("Bearer {k}");
        for _ in 0..2 {
            assert_eq!(post_with(s, "/generate", &[("Authorization", &auth)], &body).status, 200);
        }
        assert_eq!(post_with(s, "/generate", &[], &body).status, 401, "no key, no answer, cached or not");
        assert_eq!(s.submitted().len(), 1);
    }
    assert_ne!(a.submitted()[0].cache_salt, b.submitted()[0].cache_salt, "keys never share an entry");
}

#[test]
fn the_cache_stays_within_its_bound_under_many_distinct_requests() {
    let s = server(CacheSize::Entries(50));
    for i in 0..300 {
        let body = json!({"inputs": format!("Hello {i}"), "parameters": {"max_new_tokens": 2}});
        assert_eq!(post(s.addr, "/generate", &body).status, 200);
    }
    assert_eq!(metric(&s, "tgi_response_cache_entries"), 50.0);
    assert_eq!(metric(&s, "tgi_response_cache_evictions"), 250.0);
}
