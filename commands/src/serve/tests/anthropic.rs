//! Anthropic's Messages API over the mock engine: answers whole and streamed as Anthropic's events, tool use
//! read out of the answer (the mock answers a prompt about the weather with a Hermes call), stop reasons,
//! `count_tokens`, and errors in Anthropic's shape.

use serde_json::{json, Value};

use super::client::{post, request};
use super::{TestServer, SCRIPT};
use crate::serve::state::Access;

/// A Messages request asking `prompt`, with `extra` fields.
fn messages(prompt: &str, extra: Value) -> Value {
    let mut body = json!({"model": "tgi", "max_tokens": 30, "messages": [{"role": "user", "content": prompt}]});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

/// The weather tool, as Anthropic writes tools.
fn weather() -> Value {
    json!([{"name": "get_weather", "description": "The weather in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}])
}

#[test]
fn a_whole_answer_is_an_anthropic_message() {
    let s = TestServer::start();
    let r = post(s.addr, "/v1/messages", &messages("Hi", json!({"system": "Be brief.", "temperature": 0})));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("x-compute-type").is_some(), "TGI's headers too");
    let m = r.json();
    assert!(m["id"].as_str().unwrap().starts_with("msg_"), "{m}");
    assert_eq!((&m["type"], &m["role"], &m["model"]), (&json!("message"), &json!("assistant"), &json!("stories260k")));
    assert_eq!(m["content"], json!([{"type": "text", "text": format!(" {SCRIPT}")}]));
    assert_eq!((&m["stop_reason"], &m["stop_sequence"]), (&json!("end_turn"), &Value::Null));
    let usage = &m["usage"];
    assert_eq!(
        (usage["cache_read_input_tokens"].as_u64(), usage["cache_creation_input_tokens"].as_u64()),
        (Some(2), Some(0))
    );
    let prompt = super::lexicon().tokenizer.decode(&s.submitted()[0].prompt_ids, false).unwrap();
    assert!(prompt.starts_with("system: Be brief.\nuser: Hi\nassistant:"), "{prompt}");
    let count = post(
        s.addr,
        "/v1/messages/count_tokens",
        &json!({"model": "tgi", "system": "Be brief.",
        "messages": [{"role": "user", "content": "Hi"}]}),
    );
    assert_eq!(count.status, 200, "{}", count.text());
    assert_eq!(count.json(), json!({"input_tokens": usage["input_tokens"]}), "the tokens /v1/messages used");
    assert_eq!(usage["input_tokens"].as_u64(), Some(s.submitted()[0].prompt_ids.len() as u64));
}

#[test]
fn stop_sequences_and_max_tokens_are_stop_reasons() {
    let s = TestServer::start();
    let m = post(s.addr, "/v1/messages", &messages("Hi", json!({"stop_sequences": ["xyz", "little"]}))).json();
    assert_eq!((&m["stop_reason"], &m["stop_sequence"]), (&json!("stop_sequence"), &json!("little")));
    assert_eq!(m["content"][0]["text"], " Once upon a time there was a ");
    let m = post(s.addr, "/v1/messages", &messages("Hi", json!({"max_tokens": 3}))).json();
    assert_eq!((&m["stop_reason"], m["usage"]["output_tokens"].as_u64()), (&json!("max_tokens"), Some(3)));
}

#[test]
fn tool_use_is_read_out_of_the_answer_whole_and_streamed() {
    let s = super::tools::server();
    let body = messages("Weather in Paris?", json!({"tools": weather(), "max_tokens": 300}));
    let m = post(s.addr, "/v1/messages", &body).json();
    assert_eq!(m["stop_reason"], "tool_use", "{m}");
    assert_eq!(m["content"][0], json!({"type": "text", "text": " Let me check."}));
    let call = &m["content"][1];
    assert_eq!(
        (&call["type"], &call["name"], &call["input"]),
        (&json!("tool_use"), &json!("get_weather"), &json!({"city": "Paris"}))
    );
    // The stream carries the same blocks, as Anthropic's events.
    let mut body = body;
    body["stream"] = json!(true);
    let r = post(s.addr, "/v1/messages", &body);
    assert_eq!((r.status, r.header("content-type")), (200, Some("text/event-stream")));
    let events = r.named_events();
    for (name, data) in &events {
        assert_eq!(data["type"], name.as_str(), "every event's type is its name");
    }
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).filter(|n| *n != "content_block_delta").collect();
    assert_eq!(
        names,
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_stop",
            "content_block_start",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let start = &events[0].1["message"];
    assert_eq!((&start["content"], &start["stop_reason"]), (&json!([]), &Value::Null));
    assert_eq!(start["usage"]["input_tokens"], m["usage"]["input_tokens"]);
    let (mut text, mut json_text, mut blocks) = (String::new(), String::new(), Vec::new());
    for (name, data) in &events {
        match name.as_str() {
            "content_block_start" => blocks.push(data["content_block"].clone()),
            "content_block_delta" => {
                assert_eq!(data["index"].as_u64(), Some(blocks.len() as u64 - 1), "deltas of the open block");
                match data["delta"]["type"].as_str().unwrap() {
                    "text_delta" => text.push_str(data["delta"]["text"].as_str().unwrap()),
                    "input_json_delta" => json_text.push_str(data["delta"]["partial_json"].as_str().unwrap()),
                    other => panic!("delta type {other}"),
                }
            }
            _ => {}
        }
    }
    assert_eq!(text, " Let me check.");
    assert_eq!(serde_json::from_str::<Value>(&json_text).unwrap(), json!({"city": "Paris"}));
    assert_eq!(
        (&blocks[1]["type"], &blocks[1]["name"], &blocks[1]["input"]),
        (&json!("tool_use"), &json!("get_weather"), &json!({}))
    );
    let delta = &events[events.len() - 2].1;
    assert_eq!(delta["delta"], json!({"stop_reason": "tool_use", "stop_sequence": null}));
    assert_eq!(delta["usage"]["output_tokens"], m["usage"]["output_tokens"]);
}

#[test]
fn a_conversation_with_tool_results_renders_through_the_template() {
    let s = super::tools::server();
    let body = json!({"max_tokens": 5, "tools": weather(), "tool_choice": {"type": "none"}, "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
            "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"}]}]});
    let r = post(s.addr, "/v1/messages", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let prompt = super::lexicon().tokenizer.decode(&s.submitted()[0].prompt_ids, false).unwrap();
    assert!(prompt.contains("tool: Sunny\nassistant:"), "{prompt}");
}

#[test]
fn errors_take_anthropics_shape() {
    let s = TestServer::start();
    let shape = |r: &super::client::Reply, status: u16, kind: &str| {
        assert_eq!(r.status, status, "{}", r.text());
        let e = r.json();
        assert_eq!((&e["type"], &e["error"]["type"]), (&json!("error"), &json!(kind)), "{e}");
        assert!(e["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
    };
    shape(&post(s.addr, "/v1/messages", &json!({"max_tokens": 4, "messages": []})), 400, "invalid_request_error");
    shape(
        &post(s.addr, "/v1/messages", &json!({"messages": [{"role": "user", "content": "Hi"}]})),
        400,
        "invalid_request_error",
    );
    let image = json!([{"type": "image", "source": {"type": "url", "url": "http://x"}}]);
    let r = post(s.addr, "/v1/messages", &messages("", json!({"messages": [{"role": "user", "content": image}]})));
    shape(&r, 400, "invalid_request_error");
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("text only"));
    shape(&post(s.addr, "/v1/messages", &messages("Hi", json!({"max_tokens": 100_000}))), 400, "invalid_request_error");
    shape(&request(s.addr, "GET", "/v1/messages", &[], b""), 405, "invalid_request_error");
    shape(&request(s.addr, "POST", "/v1/messages/nope", &[], b"{}"), 404, "not_found_error");
    // A failure mid-stream is an `error` event.
    let r = post(s.addr, "/v1/messages", &messages("please fail", json!({"stream": true})));
    let (name, data) = r.named_events().pop().unwrap();
    assert_eq!((name.as_str(), &data["type"], &data["error"]["type"]), ("error", &json!("error"), &json!("api_error")));
}

#[test]
fn the_api_key_is_taken_as_x_api_key_or_bearer() {
    let s = TestServer::with(super::limits(), Access { api_key: Some("k".into()), ..Access::default() });
    let body = serde_json::to_vec(&messages("Hi", json!({}))).unwrap();
    let send = |headers: &[(&str, &str)]| request(s.addr, "POST", "/v1/messages", headers, &body);
    let r = send(&[]);
    assert_eq!((r.status, &r.json()["error"]["type"]), (401, &json!("authentication_error")));
    assert_eq!(send(&[("x-api-key", "nope")]).status, 401);
    assert_eq!(send(&[("x-api-key", "k"), ("anthropic-version", "2023-06-01")]).status, 200);
    assert_eq!(send(&[("Authorization", "Bearer k")]).status, 200);
    let r = request(
        s.addr,
        "POST",
        "/v1/chat/completions",
        &[("x-api-key", "k")],
        br#"{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}"#,
    );
    assert_eq!(r.status, 200, "x-api-key opens every route");
}
