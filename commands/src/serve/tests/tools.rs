//! Tool calling in `/v1/chat/completions`: tools in the prompt, forced calls as a grammar, calls read
//! out of the answer whole and streamed (the mock answers a prompt about the weather with a Hermes call).

use serde_json::{json, Value};

use super::client::post;
use super::TestServer;
use crate::serve::limits::RequestLimits;
use crate::serve::state::Access;

/// A mock server whose limits fit the default tool prompt in the bundled model's small vocabulary.
pub(super) fn server() -> TestServer {
    let limits = RequestLimits {
        max_input_tokens: 4000,
        max_total_tokens: 4400,
        max_batch_total_tokens: 8800,
        ..super::limits()
    };
    TestServer::with(limits, Access::default())
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})
}

/// A chat request offering two tools, with `extra` fields.
pub(super) fn chat(extra: Value) -> Value {
    let mut body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 300,
                          "tools": [weather_tool(), {"type": "function", "function": {"name": "now"}}]});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

#[test]
fn auto_reads_calls_out_of_the_answer() {
    let s = server();
    let r = post(s.addr, "/v1/chat/completions", &chat(json!({})));
    assert_eq!(r.status, 200, "{}", r.text());
    let choice = &r.json()["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], " Let me check.");
    let call = &choice["message"]["tool_calls"][0];
    assert!(call["id"].as_str().unwrap().starts_with("call_"), "{call}");
    assert_eq!((&call["type"], &call["function"]["name"]), (&json!("function"), &json!("get_weather")));
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "Paris"}));
    // The test template reads no `tools`: the default prompt lists them in a system turn.
    let req = &s.submitted()[0];
    let prompt = super::lexicon().tokenizer.decode(&req.prompt_ids, false).unwrap();
    assert!(prompt.starts_with("system: You may call one or more functions"), "{prompt}");
    assert!(prompt.contains("\"name\":\"get_weather\"") && prompt.contains("<tool_call>"), "{prompt}");
}

#[test]
fn auto_calls_follow_the_schema_once_their_marker_appears() {
    let s = server();
    let rome = json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"enum": ["Rome"]}}, "required": ["city"], "additionalProperties": false}}});
    assert_eq!(post(s.addr, "/v1/chat/completions", &chat(json!({"tools": [rome]}))).status, 200);
    let constraint = s.submitted()[0].constraint.clone().expect("auto answers carry the lazy grammar");
    // Whether the grammar lets the model write `text` (in the bundled vocabulary's tokens).
    let writes = |text: &str| {
        let c = constraint.clone();
        let ids = super::lexicon().tokenizer.encode(text, false, false).unwrap();
        ids.iter().all(|&id| c.mask().unwrap().allows(id) && c.commit(id).is_ok())
    };
    let call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
    assert!(writes("Once upon a time, a <tool and a {\"city\": 1}."), "free text");
    assert!(writes(&format!("Let me check.\n{call}")));
    assert!(
        !writes(&format!("Let me check.\n{}", call.replace("Rome", "Paris"))),
        "the schema, once the marker appears"
    );
    assert!(!writes("Let me check.\n<tool_call>\nthe weather"), "a call, once the marker appears");
    // With a `response_format`, the answer follows it, and calls are read as written.
    let format = json!({"tools": [rome], "response_format": {"type": "json_object"}});
    assert_eq!(post(s.addr, "/v1/chat/completions", &chat(format)).status, 200);
}

#[test]
fn streamed_calls_come_as_openai_deltas() {
    let s = server();
    let r = post(s.addr, "/v1/chat/completions", &chat(json!({"stream": true})));
    assert_eq!(r.status, 200);
    let events = r.json_events();
    let deltas: Vec<&Value> = events.iter().filter_map(|e| e["choices"].get(0)).map(|c| &c["delta"]).collect();
    let content: String = deltas.iter().filter_map(|d| d["content"].as_str()).collect();
    assert_eq!(content, " Let me check.");
    let parts: Vec<&Value> = deltas.iter().filter_map(|d| d.get("tool_calls")).map(|t| &t[0]).collect();
    let first = parts[0];
    assert_eq!(first["index"], 0);
    assert!(first["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(
        (&first["type"], &first["function"]),
        (&json!("function"), &json!({"name": "get_weather", "arguments": ""}))
    );
    assert!(parts.len() > 2, "arguments come in fragments: {parts:?}");
    for part in &parts[1..] {
        assert_eq!(part.as_object().unwrap().keys().collect::<Vec<_>>(), ["index", "function"], "{part}");
        assert_eq!(part["function"].as_object().unwrap().len(), 1, "{part}");
    }
    let args: String = parts.iter().map(|p| p["function"]["arguments"].as_str().unwrap()).collect();
    assert_eq!(serde_json::from_str::<Value>(&args).unwrap(), json!({"city": "Paris"}));
    let last = events.iter().rev().find(|e| e["choices"].get(0).is_some()).unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "tool_calls");
    assert!(!r.text().contains("tool_call>"), "no markup is streamed as content");
}

#[test]
fn required_and_named_choices_force_calls_with_a_grammar() {
    let s = server();
    let r = post(s.addr, "/v1/chat/completions", &chat(json!({"tool_choice": "required"})));
    assert_eq!(r.json()["choices"][0]["finish_reason"], "tool_calls", "{}", r.text());
    let named = json!({"tool_choice": {"type": "function", "function": {"name": "now"}}, "parallel_tool_calls": false});
    assert_eq!(post(s.addr, "/v1/chat/completions", &chat(named)).status, 200);
    // Which calls each grammar allows is tested beside it (tools/grammar.rs); here, that the engine gets one.
    assert!(s.submitted().iter().all(|r| r.constraint.is_some()));
}

#[test]
fn tool_choice_none_answers_text_without_tools() {
    let s = server();
    let r = post(s.addr, "/v1/chat/completions", &chat(json!({"tool_choice": "none"})));
    let choice = &r.json()["choices"][0];
    assert_eq!(
        choice["message"],
        json!({"role": "assistant", "content": " Once upon a time there was a little friend named Lily."})
    );
    assert_eq!(choice["finish_reason"], "stop");
    let req = &s.submitted()[0];
    assert!(!super::lexicon().tokenizer.decode(&req.prompt_ids, false).unwrap().contains("get_weather"));
    assert!(req.constraint.is_none());
}

#[test]
fn bad_tools_are_refused_naming_the_param() {
    let s = server();
    let cases = [
        (json!({"tools": {"a": 1}}), "tools"),
        (json!({"tools": [{"type": "function"}]}), "tools"),
        (json!({"tools": [{"type": "retrieval", "function": {"name": "f"}}]}), "tools"),
        (json!({"tools": [{"type": "function", "function": {"name": ""}}]}), "tools"),
        (json!({"tools": [{"type": "function", "function": {"name": "a b"}}]}), "tools"),
        (json!({"tools": [weather_tool(), weather_tool()]}), "tools"),
        (json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": [1]}}]}), "tools"),
        (json!({"tool_choice": "always"}), "tool_choice"),
        (json!({"tool_choice": {"type": "function", "function": {"name": "nope"}}}), "tool_choice"),
        (json!({"tool_choice": {"function": {}}}), "tool_choice"),
        (json!({"tools": [], "tool_choice": "required"}), "tool_choice"),
        (json!({"tool_choice": "required", "response_format": {"type": "json_object"}}), "tool_choice"),
        // A parameters schema the grammar engine refuses, once a call is forced.
        (
            json!({"tool_choice": "required", "tools": [{"type": "function", "function": {"name": "f",
                "parameters": {"type": "object", "properties": {"a": {"type": "nonsense"}}}}}]}),
            "tools",
        ),
    ];
    for (extra, param) in cases {
        let r = post(s.addr, "/v1/chat/completions", &chat(extra.clone()));
        assert_eq!(r.status, 422, "{extra}: {}", r.text());
        let e = r.json();
        assert_eq!(
            (&e["error"]["param"], &e["error"]["type"]),
            (&json!(param), &json!("invalid_request_error")),
            "{extra}"
        );
    }
    // No tools, or an empty list, is a plain chat.
    let plain = post(s.addr, "/v1/chat/completions", &chat(json!({"tools": [], "tool_choice": "auto"})));
    assert_eq!(plain.json()["choices"][0]["finish_reason"], "stop", "{}", plain.text());
}

#[test]
fn every_choice_reads_its_own_calls_and_a_cut_call_is_length() {
    let s = server();
    let r = post(s.addr, "/v1/chat/completions", &chat(json!({"n": 2, "stream": true})));
    let events = r.json_events();
    for index in 0..2 {
        let mine: Vec<&Value> =
            events.iter().filter_map(|e| e["choices"].get(0)).filter(|c| c["index"] == index).collect();
        let starts = mine.iter().filter(|c| c["delta"]["tool_calls"][0]["id"].is_string()).count();
        assert_eq!(starts, 1, "choice {index}: one call");
        assert_eq!(mine.last().unwrap()["finish_reason"], "tool_calls");
    }
    // Cut inside the call's arguments: the call is there, but the answer ends for its length.
    let cut = post(s.addr, "/v1/chat/completions", &chat(json!({"max_tokens": 40})));
    let choice = &cut.json()["choices"][0];
    assert_eq!(choice["finish_reason"], "length", "{choice}");
    assert_eq!(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather", "{choice}");
}

#[test]
fn the_openai_sdk_reads_an_auto_call_and_its_stream() {
    let s = server();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/serve_tools_auto.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg(format!("http://{}", s.addr))
        .output()
        .expect("python3 with the openai SDK (pip install -r tests/python/requirements.txt)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("all auto tool checks passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
