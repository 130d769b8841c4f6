//! Grammars in requests: TGI's `parameters.grammar` and OpenAI's `response_format` reach the engine compiled,
//! one independent constraint per candidate; malformed or unenforceable grammars are 422s naming the field.

use serde_json::json;

use super::client::{get, post};
use super::TestServer;

#[test]
fn tgi_grammars_and_openai_formats_reach_the_engine_compiled() {
    let s = TestServer::start();
    let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    let grammars = [
        json!({"type": "json", "value": schema}),
        json!({"type": "json_object", "value": schema}),
        json!({"type": "regex", "value": "(yes|no)"}),
        json!({"type": "json_schema", "value": {"name": "x", "schema": schema}}),
    ];
    for g in &grammars {
        let body =
            json!({"inputs": "Hi", "parameters": {"max_new_tokens": 2, "grammar": g, "best_of": 2, "do_sample": true}});
        assert_eq!(post(s.addr, "/generate", &body).status, 200, "{g}");
    }
    let formats = [
        json!({"type": "json_object"}),
        json!({"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": true}}),
        json!({"type": "json", "value": schema}),
    ];
    for f in &formats {
        let body =
            json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "n": 2, "response_format": f});
        assert_eq!(post(s.addr, "/v1/chat/completions", &body).status, 200, "{f}");
    }
    let text =
        json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "response_format": {"type": "text"}});
    assert_eq!(post(s.addr, "/v1/chat/completions", &text).status, 200);
    let reqs = s.submitted();
    assert_eq!(reqs.len(), 2 * (grammars.len() + formats.len()) + 1);
    assert!(reqs[..reqs.len() - 1].iter().all(|r| r.constraint.is_some()));
    assert!(reqs.last().unwrap().constraint.is_none(), "text is no grammar");
    let metrics = get(s.addr, "/metrics").text();
    let compiled = (grammars.len() + formats.len()).to_string();
    assert!(metrics.contains(&format!("tgi_grammar_compile_duration_seconds_count {compiled}\n")), "{metrics}");
    assert!(metrics.contains("tgi_grammar_cache_hits 4\n"), "the schema repeated: {metrics}");
}

#[test]
fn bad_and_unenforceable_grammars_are_422_naming_the_field() {
    let s = TestServer::start();
    let tgi = |g: serde_json::Value| {
        let r = post(s.addr, "/generate", &json!({"inputs": "Hi", "parameters": {"grammar": g}}));
        (r.status, r.json()["error"].as_str().unwrap_or_default().to_string())
    };
    let (status, msg) = tgi(json!({"type": "regex", "value": "(ab"}));
    assert_eq!(status, 422);
    assert!(msg.starts_with("Input validation error: `grammar`: invalid regex grammar: "), "{msg}");
    let (status, msg) = tgi(json!({"type": "json", "value": {"type": "array", "uniqueItems": true}}));
    assert_eq!(status, 422);
    assert!(msg.contains("uniqueItems"), "the unsupported feature is named: {msg}");
    let (status, msg) = tgi(json!({"type": "json", "value": {"type": "integer", "minimum": 5, "maximum": 1}}));
    assert_eq!(status, 422, "an unsatisfiable schema: {msg}");
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}],
                      "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}});
    let r = post(s.addr, "/v1/chat/completions", &chat);
    assert_eq!((r.status, r.json()["error"]["param"].clone()), (422, json!("response_format")));
    assert!(s.submitted().is_empty(), "nothing reached the engine");
}
