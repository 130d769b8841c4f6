//! Prompts longer in bytes than `--max-input-tokens` tokens could cover are refused before any tokenizing,
//! on every route that takes a prompt; `/tokenize` is bounded the same way, and by the token limit.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::{json, Value};

use super::client::post;
use super::{limits, new_lexicon, TestServer};
use crate::serve::limits::{PromptBytes, RequestLimits};
use crate::serve::state::Access;

/// The error message of a TGI or an OpenAI error body.
fn message(body: &Value) -> String {
    let e = &body["error"];
    e.as_str().or_else(|| e["message"].as_str()).unwrap_or_default().to_string()
}

#[test]
fn huge_prompts_are_refused_before_tokenizing() {
    let lex = Arc::new(new_lexicon());
    let bound = PromptBytes::new(64, lex.as_ref());
    let l = RequestLimits { payload_limit: 4 << 20, ..limits() };
    let s = TestServer::with_lexicon(l, Access::default(), lex.clone());
    let huge = "Once upon a time ".repeat(2_000_000 / 17);
    let bodies = [
        ("/generate", json!({"inputs": huge})),
        ("/generate_stream", json!({"inputs": huge})),
        ("/", json!({"inputs": huge})),
        ("/tokenize", json!({"inputs": huge})),
        ("/generate", json!({"inputs": huge, "parameters": {"truncate": 8}})),
        ("/v1/completions", json!({"model": "tgi", "prompt": huge})),
        ("/v1/completions", json!({"model": "tgi", "prompt": ["hi", huge]})),
        ("/v1/chat/completions", json!({"model": "tgi", "messages": [{"role": "user", "content": huge}]})),
    ];
    let want = format!("more than the {} that 64 tokens can cover", bound.max_bytes);
    for (path, body) in bodies {
        let before = lex.tokenizer_calls.load(Ordering::Relaxed);
        let reply = post(s.addr, path, &body);
        // TGI's stream answers 200 and reports validation errors as its one event.
        let (status, msg) = match path {
            "/generate_stream" => (200, message(&reply.json_events()[0])),
            _ => (422, message(&reply.json())),
        };
        assert_eq!(reply.status, status, "{path}: {}", reply.text());
        assert!(msg.contains("must have less than 64 tokens. Given: ") && msg.contains(&want), "{path}: {msg}");
        assert_eq!(lex.tokenizer_calls.load(Ordering::Relaxed), before, "{path}: the prompt was tokenized");
    }
    assert!(s.submitted().is_empty());
}

#[test]
fn tokenize_answers_at_most_max_input_tokens() {
    let s = TestServer::start();
    let long = "Once upon a time ".repeat(30);
    let reply = post(s.addr, "/tokenize", &json!({"inputs": long}));
    assert_eq!(reply.status, 422, "{}", reply.text());
    assert!(
        message(&reply.json()).starts_with("Input validation error: `inputs` must have less than 64 tokens. Given: ")
    );
    let reply = post(s.addr, "/tokenize", &json!({"inputs": long, "parameters": {"truncate": 10}}));
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json().as_array().unwrap().len(), 10);
    let reply = post(s.addr, "/tokenize", &json!({"inputs": "Once upon a time"}));
    assert_eq!(reply.status, 200, "{}", reply.text());
}
