//! The OpenAPI description stays true: it lists exactly the routes the router serves, and real
//! responses of the mock server have exactly the fields its schemas declare.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::client::{get, post, request, Reply};
use super::TestServer;
use crate::serve::openapi::OPENAPI;
use crate::serve::router::ROUTES;

fn doc() -> Value {
    serde_json::from_str(OPENAPI).unwrap()
}

/// Checks `v` against `schema` (the subset the description uses: `$ref`, `type`, `properties`,
/// `required`, `additionalProperties`, `items`, `nullable`, `enum`, `oneOf`); an object field the
/// schema does not declare is an error.
fn check(doc: &Value, schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    if v.is_null() && schema["nullable"] == true {
        return Ok(());
    }
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r.strip_prefix("#/components/schemas/").unwrap();
        return check(doc, &doc["components"]["schemas"][name], v, at);
    }
    if v.is_null() {
        return Err(format!("{at}: null"));
    }
    if let Some(options) = schema.get("oneOf").and_then(Value::as_array) {
        let errors: Vec<String> = options.iter().filter_map(|o| check(doc, o, v, at).err()).collect();
        return if errors.len() < options.len() { Ok(()) } else { Err(errors.join("; ")) };
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(v) {
            return Err(format!("{at}: {v} not in {allowed:?}"));
        }
    }
    let ok = match schema["type"].as_str() {
        Some("object") => {
            let o = v.as_object().ok_or_else(|| format!("{at}: not an object"))?;
            let empty = serde_json::Map::new();
            let props = schema["properties"].as_object().unwrap_or(&empty);
            for r in schema["required"].as_array().into_iter().flatten() {
                if !o.contains_key(r.as_str().unwrap()) {
                    return Err(format!("{at}: required `{r}` missing"));
                }
            }
            for (k, x) in o {
                match (props.get(k), schema.get("additionalProperties")) {
                    (Some(s), _) => check(doc, s, x, &format!("{at}.{k}"))?,
                    (None, Some(Value::Bool(true))) => {}
                    (None, Some(extra)) if extra.is_object() => check(doc, extra, x, &format!("{at}.{k}"))?,
                    _ => return Err(format!("{at}: undeclared field `{k}`")),
                }
            }
            true
        }
        Some("array") => {
            let a = v.as_array().ok_or_else(|| format!("{at}: not an array"))?;
            for (i, x) in a.iter().enumerate() {
                check(doc, &schema["items"], x, &format!("{at}[{i}]"))?;
            }
            true
        }
        Some("string") => v.is_string(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("number") => v.is_number(),
        Some("boolean") => v.is_boolean(),
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{at}: {v} is not a {}", schema["type"]))
    }
}

/// The schema of an event's JSON `data` (its `contentSchema`, directly or in a `oneOf` branch beside
/// `[DONE]`), from the schema of the events of a `text/event-stream` response.
fn event_payload<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    let name = schema["$ref"].as_str().unwrap().strip_prefix("#/components/schemas/").unwrap();
    let data = &doc["components"]["schemas"][name]["properties"]["data"];
    let branches = data.get("oneOf").and_then(Value::as_array).map_or(std::slice::from_ref(data), Vec::as_slice);
    let payload = branches.iter().find_map(|b| b.get("contentSchema"));
    payload.unwrap_or_else(|| panic!("{name}: no contentSchema for `data`"))
}

/// Checks a response against the description of `method path` for its status and content type.
fn conforms(doc: &Value, method: &str, path: &str, r: &Reply) {
    let op = &doc["paths"][path][method.to_ascii_lowercase()];
    let described = &op["responses"][r.status.to_string()];
    assert!(described.is_object(), "{method} {path}: status {} undocumented: {}", r.status, r.text());
    let Some(kind) = r.header("content-type").map(|c| c.split(';').next().unwrap().to_string()) else {
        assert!(described.get("content").is_none() || r.body.is_empty(), "{method} {path}: no content type");
        return;
    };
    let schema = &described["content"][&kind]["schema"];
    assert!(schema.is_object(), "{method} {path}: {kind} undocumented for {}", r.status);
    let (schema, values) = match kind.as_str() {
        "text/event-stream" => (event_payload(doc, schema), r.json_events()),
        "application/json" => (schema, vec![r.json()]),
        _ => return,
    };
    for v in values {
        if let Err(e) = check(doc, schema, &v, "$") {
            panic!("{method} {path} ({}): {e}\n{v:#}", r.status);
        }
    }
}

#[test]
fn openapi_lists_every_route_and_nothing_else() {
    let doc = doc();
    let served: BTreeSet<(String, String)> =
        ROUTES.iter().map(|r| (r.method.to_ascii_lowercase(), r.path.to_string())).collect();
    let mut described = BTreeSet::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            described.insert((method.clone(), path.clone()));
        }
    }
    assert_eq!(served, described);
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
}

/// `/info`'s `kv_cache_dtype` lists every KV cache type, in the flag's order.
#[test]
fn openapi_lists_every_kv_cache_type() {
    let listed = &doc()["components"]["schemas"]["Info"]["properties"]["kv_cache_dtype"]["enum"];
    let names: Vec<&str> = tgi_engines::kv::KvDType::ALL.iter().map(|t| t.name()).collect();
    assert_eq!(listed, &json!(names));
}

#[test]
fn responses_match_the_openapi_schemas() {
    let doc = doc();
    let s = TestServer::start();
    let chat = |extra: Value| {
        let mut b = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3});
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        b
    };
    let posts = [
        ("/generate", json!({"inputs": "Hi", "parameters": {"max_new_tokens": 2}})),
        (
            "/generate",
            json!({"inputs": "Hi", "parameters": {"max_new_tokens": 2, "details": true, "top_n_tokens": 2,
            "decoder_input_details": true, "best_of": 2, "do_sample": true}}),
        ),
        ("/generate", json!({"inputs": "Hi", "parameters": {"max_new_tokens": 0}})),
        ("/generate", json!({"inputs": 1})),
        (
            "/generate_stream",
            json!({"inputs": "Hi", "parameters": {"max_new_tokens": 2, "details": true, "top_n_tokens": 1}}),
        ),
        ("/generate_stream", json!({"inputs": "Hi", "parameters": {"best_of": 2}})),
        ("/", json!({"inputs": "Hi", "parameters": {"max_new_tokens": 2, "details": true}})),
        ("/", json!({"inputs": "Hi", "parameters": {"max_new_tokens": 2}, "stream": true})),
        ("/", json!({"inputs": "please fail", "parameters": {"max_new_tokens": 4}})),
        ("/tokenize", json!({"inputs": "Hi"})),
        ("/v1/chat/completions", chat(json!({"logprobs": true, "top_logprobs": 1, "n": 2}))),
        (
            "/v1/chat/completions",
            chat(json!({"stream": true, "logprobs": true, "stream_options": {"include_usage": true}})),
        ),
        ("/v1/chat/completions", chat(json!({"n": 0}))),
        ("/v1/completions", json!({"prompt": ["Hi", "Ho"], "max_tokens": 2, "logprobs": 2, "echo": true})),
        (
            "/v1/completions",
            json!({"prompt": "Hi", "max_tokens": 2, "stream": true, "stream_options": {"include_usage": true}}),
        ),
        ("/v1/completions", json!({"prompt": "Hi", "max_tokens": 0})),
        ("/chat_tokenize", chat(json!({}))),
        ("/chat_tokenize", json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})),
        ("/invocations", json!({"inputs": "Hi", "parameters": {"max_new_tokens": 2, "details": true}})),
        ("/invocations", json!({"inputs": "Hi", "parameters": {"max_new_tokens": 2}, "stream": true})),
        ("/invocations", chat(json!({"logprobs": true}))),
        ("/invocations", chat(json!({"stream": true, "stream_options": {"include_usage": true}}))),
        ("/invocations", json!({"prompt": "Hi", "max_tokens": 2, "logprobs": 1, "echo": true})),
        ("/invocations", json!({"prompt": "Hi", "max_tokens": 2, "stream": true})),
        ("/invocations", json!({"messages": []})),
    ];
    for (path, body) in posts {
        conforms(&doc, "POST", path, &post(s.addr, path, &body));
    }
    conforms(&doc, "POST", "/generate", &request(s.addr, "POST", "/generate", &[], b"{"));
    conforms(&doc, "POST", "/generate", &post(s.addr, "/generate", &json!({"inputs": "x".repeat(5000)})));
    let anthropic = json!({"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]});
    let with = |base: &Value, extra: Value| {
        let mut b = base.clone();
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        b
    };
    let responses = json!({"model": "m", "max_output_tokens": 3, "input": "Hi"});
    let new_apis = [
        ("/v1/messages", anthropic.clone()),
        ("/v1/messages", with(&anthropic, json!({"stream": true, "stop_sequences": ["upon"], "max_tokens": 9}))),
        ("/v1/messages", with(&anthropic, json!({"max_tokens": 0}))),
        ("/v1/messages", with(&anthropic, json!({"stream": true, "messages": [{"role": "user", "content": "fail"}]}))),
        ("/v1/messages/count_tokens", json!({"messages": [{"role": "user", "content": "Hi"}], "system": "Be brief."})),
        ("/v1/messages/count_tokens", json!({"messages": []})),
        ("/v1/responses", with(&responses, json!({"metadata": {"k": "v"}, "instructions": "Be brief."}))),
        ("/v1/responses", with(&responses, json!({"stream": true}))),
        ("/v1/responses", with(&responses, json!({"max_output_tokens": 40, "stream": true}))),
        ("/v1/responses", with(&responses, json!({"input": "please fail", "stream": true}))),
        ("/v1/responses", with(&responses, json!({"previous_response_id": "resp_none"}))),
        ("/v1/responses", with(&responses, json!({"input": 1}))),
    ];
    for (path, body) in new_apis {
        conforms(&doc, "POST", path, &post(s.addr, path, &body));
    }
    let stored = post(s.addr, "/v1/responses", &responses).json();
    let at = format!("/v1/responses/{}", stored["id"].as_str().unwrap());
    let template = "/v1/responses/{response_id}";
    conforms(&doc, "GET", template, &get(s.addr, &at));
    conforms(&doc, "DELETE", template, &request(s.addr, "DELETE", &at, &[], b""));
    conforms(&doc, "DELETE", template, &request(s.addr, "DELETE", &at, &[], b""));
    for r in ROUTES.iter().filter(|r| r.method == "GET") {
        conforms(&doc, "GET", r.path, &get(s.addr, r.path));
    }
    let t = super::tools::server();
    for extra in
        [json!({}), json!({"stream": true}), json!({"tool_choice": "required", "stream": true, "logprobs": true})]
    {
        conforms(
            &doc,
            "POST",
            "/v1/chat/completions",
            &post(t.addr, "/v1/chat/completions", &super::tools::chat(extra.clone())),
        );
        let tools = json!({"tools": [{"name": "get_weather", "input_schema": {"type": "object"}}], "max_tokens": 300,
            "messages": [{"role": "user", "content": "weather?"}], "stream": extra.get("stream").is_some()});
        conforms(&doc, "POST", "/v1/messages", &post(t.addr, "/v1/messages", &tools));
        let tools = json!({"tools": [{"type": "function", "name": "get_weather"}], "max_output_tokens": 300,
            "input": "weather?", "stream": extra.get("stream").is_some()});
        conforms(&doc, "POST", "/v1/responses", &post(t.addr, "/v1/responses", &tools));
    }
}
