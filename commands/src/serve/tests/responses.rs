//! OpenAI's Responses API over the mock engine: responses whole and streamed as typed events, function calls
//! read out of the answer, `previous_response_id` continuing a stored conversation, `GET` and `DELETE`, and the
//! store's bounds on a scripted clock.

use std::time::Duration;

use serde_json::{json, Value};

use super::client::{get, post, request, Reply};
use super::{TestServer, SCRIPT};
use crate::serve::lru::CacheSize;
use crate::serve::responses::store::tests::ScriptedClock;
use crate::serve::responses::store::{ResponseStore, StoreConfig};

/// A Responses request with `extra` fields.
fn create(input: Value, extra: Value) -> Value {
    let mut body = json!({"model": "tgi", "input": input, "max_output_tokens": 30});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

/// The weather tool, as the Responses API writes tools.
fn weather() -> Value {
    json!([{"type": "function", "name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}])
}

/// The prompt the mock received for request `i`.
fn prompt(s: &TestServer, i: usize) -> String {
    super::lexicon().tokenizer.decode(&s.submitted()[i].prompt_ids, false).unwrap()
}

/// Asserts an OpenAI error of `status`.
fn openai_error(r: &Reply, status: u16) -> Value {
    assert_eq!(r.status, status, "{}", r.text());
    let e = r.json()["error"].clone();
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()) && e["type"].is_string(), "{e}");
    e
}

#[test]
fn a_whole_response_is_stored_and_continued() {
    let s = TestServer::start();
    let r = post(
        s.addr,
        "/v1/responses",
        &create(json!("Hi"), json!({"instructions": "Be brief.", "metadata": {"k": "v"}})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("x-compute-type").is_some());
    let first = r.json();
    let id = first["id"].as_str().unwrap();
    assert!(id.starts_with("resp_"));
    assert_eq!(
        (&first["object"], &first["status"], &first["model"]),
        (&json!("response"), &json!("completed"), &json!("stories260k"))
    );
    let item = &first["output"][0];
    assert_eq!(
        (&item["type"], &item["role"], &item["status"]),
        (&json!("message"), &json!("assistant"), &json!("completed"))
    );
    assert_eq!(
        item["content"],
        json!([{"type": "output_text", "text": format!(" {SCRIPT}"), "annotations": [], "logprobs": []}])
    );
    let usage = &first["usage"];
    assert_eq!(usage["input_tokens"].as_u64(), Some(s.submitted()[0].prompt_ids.len() as u64));
    assert_eq!(usage["input_tokens_details"]["cached_tokens"], 2);
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(usage["input_tokens"].as_u64().unwrap() + usage["output_tokens"].as_u64().unwrap())
    );
    assert_eq!(
        (&first["metadata"], &first["instructions"], &first["text"]),
        (&json!({"k": "v"}), &json!("Be brief."), &json!({"format": {"type": "text"}}))
    );
    assert!(prompt(&s, 0).starts_with("system: Be brief.\nuser: Hi\nassistant:"), "{}", prompt(&s, 0));
    // GET answers the stored response.
    assert_eq!(get(s.addr, &format!("/v1/responses/{id}")).json(), first);
    // A continuation sees the earlier turns (not the instructions, which it does not inherit).
    let next = post(s.addr, "/v1/responses", &create(json!("More?"), json!({"previous_response_id": id}))).json();
    assert_eq!(next["previous_response_id"], id);
    let p = prompt(&s, 1);
    assert!(p.starts_with("user: Hi\nassistant:") && p.ends_with(" named Lily.\nuser: More?\nassistant:"), "{p}");
    // DELETE forgets it.
    let r = request(s.addr, "DELETE", &format!("/v1/responses/{id}"), &[], b"");
    assert_eq!((r.status, r.json()), (200, json!({"id": id, "object": "response.deleted", "deleted": true})));
    openai_error(&get(s.addr, &format!("/v1/responses/{id}")), 404);
    openai_error(&request(s.addr, "DELETE", &format!("/v1/responses/{id}"), &[], b""), 404);
    let e = openai_error(&post(s.addr, "/v1/responses", &create(json!("x"), json!({"previous_response_id": id}))), 404);
    assert!(e["message"].as_str().unwrap().contains(id), "{e}");
    // `store: false` keeps nothing.
    let unstored = post(s.addr, "/v1/responses", &create(json!("Hi"), json!({"store": false}))).json();
    assert_eq!(unstored["store"], false);
    openai_error(&get(s.addr, &format!("/v1/responses/{}", unstored["id"].as_str().unwrap())), 404);
}

#[test]
fn function_calls_round_trip() {
    let s = super::tools::server();
    let r = post(
        s.addr,
        "/v1/responses",
        &create(json!("Weather in Paris?"), json!({"tools": weather(), "max_output_tokens": 300})),
    );
    let first = r.json();
    assert_eq!(first["status"], "completed", "{first}");
    assert_eq!(first["output"][0]["content"][0]["text"], " Let me check.");
    let call = &first["output"][1];
    assert_eq!(
        (&call["type"], &call["name"], &call["status"]),
        (&json!("function_call"), &json!("get_weather"), &json!("completed"))
    );
    assert!(call["id"].as_str().unwrap().starts_with("fc_") && call["call_id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(), json!({"city": "Paris"}));
    assert_eq!(first["tools"], weather(), "the tools are echoed as given");
    // The call's output continues the stored conversation.
    let output = json!([{"type": "function_call_output", "call_id": call["call_id"], "output": "Sunny"}]);
    let body = create(output, json!({"tools": weather(), "tool_choice": "none", "previous_response_id": first["id"]}));
    assert_eq!(post(s.addr, "/v1/responses", &body).status, 200);
    let p = prompt(&s, 1);
    assert!(p.contains("Let me check.") && p.ends_with("tool: Sunny\nassistant:"), "{p}");
}

#[test]
fn a_streamed_response_has_typed_events_and_is_stored() {
    let s = super::tools::server();
    let body =
        create(json!("Weather in Paris?"), json!({"tools": weather(), "max_output_tokens": 300, "stream": true}));
    let r = post(s.addr, "/v1/responses", &body);
    assert_eq!((r.status, r.header("content-type")), (200, Some("text/event-stream")));
    let events = r.named_events();
    for (i, (name, data)) in events.iter().enumerate() {
        assert_eq!((data["type"].as_str(), data["sequence_number"].as_u64()), (Some(name.as_str()), Some(i as u64)));
    }
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).filter(|n| !n.ends_with(".delta")).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let created = &events[0].1["response"];
    assert_eq!((&created["status"], &created["output"]), (&json!("in_progress"), &json!([])));
    let (mut text, mut arguments) = (String::new(), String::new());
    for (name, data) in &events {
        match name.as_str() {
            "response.output_text.delta" => text.push_str(data["delta"].as_str().unwrap()),
            "response.function_call_arguments.delta" => {
                assert_eq!(data["output_index"], 1);
                arguments.push_str(data["delta"].as_str().unwrap())
            }
            _ => {}
        }
    }
    let done = &events.last().unwrap().1["response"];
    assert_eq!(done["output"][0]["content"][0]["text"], text);
    assert_eq!(done["output"][1]["arguments"], arguments);
    let added = events.iter().filter(|(n, _)| n == "response.output_item.added").nth(1).unwrap();
    assert_eq!(done["output"][1]["id"], added.1["item"]["id"], "an item keeps its id from added to done");
    assert_eq!(get(s.addr, &format!("/v1/responses/{}", done["id"].as_str().unwrap())).json(), *done);
}

#[test]
fn cut_responses_are_incomplete_and_formats_constrain_the_answer() {
    let s = TestServer::start();
    let r = post(s.addr, "/v1/responses", &create(json!("Hi"), json!({"max_output_tokens": 3}))).json();
    assert_eq!(
        (&r["status"], &r["incomplete_details"]),
        (&json!("incomplete"), &json!({"reason": "max_output_tokens"}))
    );
    assert_eq!(r["output"][0]["status"], "incomplete");
    let streamed = post(s.addr, "/v1/responses", &create(json!("Hi"), json!({"max_output_tokens": 3, "stream": true})));
    assert_eq!(streamed.named_events().last().unwrap().0, "response.incomplete");
    let format = json!({"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}, "strict": true}});
    let r = post(s.addr, "/v1/responses", &create(json!("Hi"), json!({"text": format})));
    assert_eq!(r.json()["text"], format, "{}", r.text());
    assert!(s.submitted()[2].constraint.is_some(), "text.format is a grammar");
    let e = openai_error(
        &post(s.addr, "/v1/responses", &create(json!("Hi"), json!({"tools": [{"type": "web_search"}]}))),
        422,
    );
    assert_eq!(e["param"], "tools");
    openai_error(&post(s.addr, "/v1/responses", &json!({"input": 3})), 422);
    // A failure mid-stream is an `error` event.
    let r = post(s.addr, "/v1/responses", &create(json!("please fail"), json!({"stream": true})));
    let (name, data) = r.named_events().pop().unwrap();
    assert_eq!((name.as_str(), data["message"].as_str().is_some()), ("error", true));
}

#[test]
fn stored_responses_expire_and_are_bounded_on_a_scripted_clock() {
    let clock = ScriptedClock::new();
    let config = StoreConfig { size: CacheSize::Entries(2), ttl: Duration::from_secs(600) };
    let s = TestServer::with_store(super::limits(), ResponseStore::new(config, clock.clone()));
    let id = |r: Value| r["id"].as_str().unwrap().to_string();
    let a = id(post(s.addr, "/v1/responses", &create(json!("Hi"), json!({}))).json());
    clock.advance(Duration::from_secs(600));
    assert_eq!(get(s.addr, &format!("/v1/responses/{a}")).status, 200, "kept for the whole time to live");
    clock.advance(Duration::from_secs(1));
    openai_error(&get(s.addr, &format!("/v1/responses/{a}")), 404);
    openai_error(&post(s.addr, "/v1/responses", &create(json!("x"), json!({"previous_response_id": a}))), 404);
    let ids: Vec<String> =
        (0..3).map(|_| id(post(s.addr, "/v1/responses", &create(json!("Hi"), json!({}))).json())).collect();
    openai_error(&get(s.addr, &format!("/v1/responses/{}", ids[0])), 404);
    for kept in &ids[1..] {
        assert_eq!(get(s.addr, &format!("/v1/responses/{kept}")).status, 200, "the two most recent are kept");
    }
}
