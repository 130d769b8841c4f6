//! `POST /invocations` (SageMaker) and `POST /chat_tokenize`: TGI's routes over the other handlers.

use serde_json::{json, Value};

use super::client::post;
use super::TestServer;

#[test]
fn invocations_answer_as_the_route_the_body_is_for() {
    let s = TestServer::start();
    let r = post(s.addr, "/invocations", &json!({"inputs": "Hi", "parameters": {"max_new_tokens": 2}}));
    assert_eq!((r.status, r.json()), (200, json!([{"generated_text": " Once upon"}])), "POST /'s answer");
    let r = post(s.addr, "/invocations", &json!({"inputs": "Hi", "parameters": {"max_new_tokens": 2}, "stream": true}));
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.json_events().last().unwrap()["generated_text"], " Once upon");

    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2});
    let v = post(s.addr, "/invocations", &chat).json();
    assert_eq!(
        (v["object"].clone(), v["choices"][0]["message"]["content"].clone()),
        (json!("chat.completion"), json!(" Once upon"))
    );
    let mut streamed = chat.clone();
    streamed["stream"] = json!(true);
    let r = post(s.addr, "/invocations", &streamed);
    assert_eq!(r.events().last().unwrap(), "[DONE]");
    assert_eq!(r.json_events()[0]["object"], "chat.completion.chunk");

    let v = post(s.addr, "/invocations", &json!({"prompt": "Hi", "max_tokens": 2})).json();
    assert_eq!((v["object"].clone(), v["choices"][0]["text"].clone()), (json!("text_completion"), json!(" Once upon")));
}

#[test]
fn invocation_errors_are_tgi_errors_of_the_route() {
    let s = TestServer::start();
    let r = post(s.addr, "/invocations", &json!({"messages": []}));
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json(),
        json!({"error": "Input validation error: `messages` cannot be empty", "error_type": "validation"})
    );
    let r = post(s.addr, "/invocations", &json!({"parameters": {"max_new_tokens": 2}}));
    assert_eq!(r.status, 422);
    assert!(r.json()["error"].as_str().unwrap().contains("missing field `inputs`"), "{}", r.text());
    let r = post(s.addr, "/invocations", &json!({"inputs": "Hi", "parameters": {"max_new_tokens": 0}}));
    assert_eq!(r.json()["error"], "Input validation error: `max_new_tokens` must be strictly positive");
}

#[test]
fn chat_tokenize_renders_and_tokenizes_as_chat_does() {
    let s = TestServer::start();
    let body = json!({"messages": [{"role": "user", "content": "Héllo"}], "max_tokens": 2});
    let r = post(s.addr, "/chat_tokenize", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let text = v["templated_text"].as_str().unwrap();
    assert_eq!(text, "user: Héllo\nassistant:");
    let tokens = v["tokenize_response"].as_array().unwrap();
    // The ids chat completions would give the model; spans in characters that tile the text.
    post(s.addr, "/v1/chat/completions", &body);
    let ids: Vec<Value> = tokens.iter().map(|t| t["id"].clone()).collect();
    assert_eq!(ids, s.submitted()[0].prompt_ids.iter().map(|&i| json!(i)).collect::<Vec<_>>());
    let chars: Vec<char> = text.chars().collect();
    let mut at = 0;
    for t in tokens {
        let (start, stop) = (t["start"].as_u64().unwrap() as usize, t["stop"].as_u64().unwrap() as usize);
        assert_eq!(start, at, "{t}");
        assert_eq!(t["text"], chars[start..stop].iter().collect::<String>());
        at = stop;
    }
    assert_eq!(at, chars.len());
    // The chat route's checks and limits.
    let r = post(s.addr, "/chat_tokenize", &json!({"messages": []}));
    assert_eq!((r.status, r.json()["error_type"].clone()), (422, json!("validation")));
    let long = json!({"messages": [{"role": "user", "content": "Once upon a time ".repeat(20)}]});
    let r = post(s.addr, "/chat_tokenize", &long);
    assert_eq!(r.status, 422);
    assert!(r.json()["error"].as_str().unwrap().contains("must have less than 64 tokens"), "{}", r.text());
}
