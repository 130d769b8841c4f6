//! OpenAI's routes: shapes as the openai SDK and huggingface_hub parse them.

use serde_json::{json, Value};

use super::client::{get, post};
use super::TestServer;

#[test]
fn chat_completion_shape_usage_and_choices() {
    let s = TestServer::start();
    let body = json!({"model": "x", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "n": 2, "seed": 5,
                      "logprobs": true, "top_logprobs": 2});
    let r = post(s.addr, "/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "stories260k");
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2);
    assert_eq!(choices[1]["index"], 1);
    assert_eq!(choices[0]["message"], json!({"role": "assistant", "content": " Once upon a"}));
    assert_eq!(choices[0]["finish_reason"], "length");
    let lp = &choices[0]["logprobs"]["content"];
    assert_eq!(lp.as_array().unwrap().len(), 3);
    assert_eq!(lp[0]["token"], " Once");
    assert_eq!(lp[0]["bytes"], json!(" Once".bytes().collect::<Vec<u8>>()));
    assert_eq!(lp[0]["top_logprobs"].as_array().unwrap().len(), 2);
    let u = &v["usage"];
    assert_eq!(u["completion_tokens"], 6);
    assert_eq!(u["total_tokens"], u["prompt_tokens"].as_u64().unwrap() + 6);
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 2);
    assert!(r.header("x-prompt-tokens").is_some());
    // The template rendered the conversation; choice i uses seed + i; temperature defaults to 1.
    let reqs = s.submitted();
    let prompt = super::lexicon().tokenizer.decode(&reqs[0].prompt_ids, false).unwrap();
    assert!(prompt.contains("user: Hi") && prompt.ends_with("assistant:"), "{prompt}");
    assert_eq!((reqs[0].params.seed, reqs[1].params.seed), (Some(5), Some(6)));
    assert_eq!(reqs[0].params.temperature, 1.0);

    let v = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}],
        "max_completion_tokens": 40, "temperature": 0, "stop": "Lily"}),
    )
    .json();
    assert_eq!(v["choices"][0]["message"]["content"], " Once upon a time there was a little friend named ");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["choices"][0]["logprobs"], Value::Null);
    assert_eq!(s.submitted()[2].params.temperature, 0.0);
}

#[test]
fn chat_stream_ends_with_done_and_usage() {
    let s = TestServer::start();
    let body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "stream": true,
                      "stream_options": {"include_usage": true}});
    let r = post(s.addr, "/v1/chat/completions", &body);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let events = r.events();
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks = r.json_events();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"], json!({"role": "assistant", "content": ""}));
    let text: String = chunks
        .iter()
        .flat_map(|c| c["choices"].as_array().unwrap())
        .filter_map(|c| c["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, " Once upon a");
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "length");
    // TGI's schema (and clients that follow it) need `content` in every delta, the last one's too.
    assert_eq!(finish["choices"][0]["delta"], json!({"role": "assistant", "content": ""}));
    assert!(chunks[..chunks.len() - 1].iter().all(|c| c["choices"][0]["delta"]["content"].is_string()));
    assert_eq!(finish["usage"], Value::Null);
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 3);

    let r = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 2, "stream": true, "n": 2}),
    );
    let chunks = r.json_events();
    assert!(chunks.iter().all(|c| c["usage"].is_null()));
    let finishes: Vec<&Value> = chunks
        .iter()
        .flat_map(|c| c["choices"].as_array().unwrap())
        .filter(|c| !c["finish_reason"].is_null())
        .collect();
    assert_eq!(finishes.len(), 2);
}

#[test]
fn completions_prompts_echo_logprobs_and_best_of() {
    let s = TestServer::start();
    let r = post(
        s.addr,
        "/v1/completions",
        &json!({"prompt": ["Hi", "Ho"], "max_tokens": 2, "n": 2, "echo": true,
        "logprobs": 1}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "text_completion");
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 4);
    assert_eq!(choices[0]["text"], "Hi Once upon");
    assert_eq!(choices[2]["text"], "Ho Once upon");
    assert_eq!(choices[3]["index"], 3);
    let lp = &choices[0]["logprobs"];
    let n = lp["tokens"].as_array().unwrap().len();
    assert_eq!(lp["token_logprobs"][0], Value::Null, "the echoed prompt's first token");
    assert_eq!(lp["top_logprobs"][n - 1].as_object().unwrap().len(), 1);
    assert_eq!(lp["text_offset"][0], 0);
    assert!(s.submitted().iter().all(|r| r.prompt_logprobs));
    // Every prompt token but the first has its alternatives, as the generated tokens do.
    assert_eq!(lp["top_logprobs"][0], Value::Null);
    assert!((1..n).all(|i| lp["top_logprobs"][i].as_object().unwrap().len() == 1), "{lp}");
    let prompt_len = s.submitted()[0].prompt_ids.len();
    assert_eq!(lp["token_logprobs"][1], json!(-0.25));
    // Offsets are into the echoed text: BOS covers nothing, the generated tokens follow the prompt.
    assert_eq!(lp["text_offset"][1], 0);
    assert_eq!(lp["text_offset"].as_array().unwrap()[prompt_len..], [json!(2), json!(7)]);
    assert_eq!(lp["tokens"][prompt_len], " Once");
    // Default max_tokens is 16; token ids are prompts too; best_of keeps the most likely.
    let v = post(s.addr, "/v1/completions", &json!({"prompt": [1, 100], "best_of": 2, "temperature": 0.5})).json();
    assert_eq!(v["choices"].as_array().unwrap().len(), 1);
    let each = super::lexicon().tokenizer.encode(super::SCRIPT, false, false).unwrap().len() + 1;
    assert_eq!(v["usage"]["completion_tokens"], 2 * each, "both candidates count");
    assert_eq!(s.submitted().last().unwrap().max_new_tokens, 16);
}

#[test]
fn echoed_offsets_count_characters_of_the_text() {
    let s = TestServer::start();
    let prompt = "Été";
    let body = json!({"prompt": prompt, "max_tokens": 2, "echo": true, "logprobs": 0});
    let v = post(s.addr, "/v1/completions", &body).json();
    let choice = &v["choices"][0];
    let text = choice["text"].as_str().unwrap();
    assert_eq!(text, "Été Once upon");
    let offsets: Vec<usize> =
        choice["logprobs"]["text_offset"].as_array().unwrap().iter().map(|o| o.as_u64().unwrap() as usize).collect();
    let prompt_len = s.submitted()[0].prompt_ids.len();
    assert_eq!(offsets[prompt_len..], [3, 8], "characters, not bytes: {offsets:?}");
    assert!(offsets.windows(2).all(|w| w[0] <= w[1]) && offsets[prompt_len - 1] < 3, "{offsets:?}");
    let top = &choice["logprobs"]["top_logprobs"];
    assert_eq!((top[0].clone(), top[1].clone()), (Value::Null, json!({})), "logprobs 0: no alternatives");

    // Streamed: the echoed prompt first, with its tokens' log-probabilities; the offsets after it
    // count it too.
    let body = json!({"prompt": prompt, "max_tokens": 2, "echo": true, "logprobs": 0, "stream": true});
    let chunks = post(s.addr, "/v1/completions", &body).json_events();
    let echoed = &chunks[0]["choices"][0];
    let (lp, all) = (&echoed["logprobs"], choice["logprobs"]["tokens"].as_array().unwrap());
    assert_eq!(echoed["text"], prompt);
    assert_eq!(lp["tokens"], Value::from(all[..prompt_len].to_vec()));
    assert_eq!(lp["text_offset"], json!(offsets[..prompt_len]));
    assert_eq!((lp["token_logprobs"][0].clone(), lp["token_logprobs"][1].clone()), (Value::Null, json!(-0.25)));
    let streamed: Vec<&Value> =
        chunks[1..].iter().filter_map(|c| c["choices"][0]["logprobs"]["text_offset"].get(0)).collect();
    assert_eq!(streamed, [&json!(3), &json!(8)]);
}

#[test]
fn completions_stream() {
    let s = TestServer::start();
    let r = post(s.addr, "/v1/completions", &json!({"prompt": "Hi", "max_tokens": 3, "stream": true, "echo": true}));
    let events = r.events();
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks = r.json_events();
    let text: String = chunks.iter().map(|c| c["choices"][0]["text"].as_str().unwrap()).collect();
    assert_eq!(text, "Hi Once upon a");
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "length");
    assert!(chunks.iter().all(|c| c["object"] == "text_completion" && c["usage"].is_null()));
}

#[test]
fn models_lists_the_served_model() {
    let s = TestServer::start();
    let v = get(s.addr, "/v1/models").json();
    assert_eq!(
        v,
        json!({"object": "list", "data": [{"id": "stories260k", "object": "model", "created": 1, "owned_by": "tgi"}]})
    );
}

#[test]
fn openai_errors_have_openai_shape() {
    let s = TestServer::start();
    let r = post(s.addr, "/v1/chat/completions", &json!({"messages": [], "max_tokens": 3}));
    assert_eq!(r.status, 422);
    let e = r.json();
    assert_eq!(e["error"]["param"], "messages");
    assert_eq!(e["error"]["type"], "invalid_request_error");
    assert_eq!(e["error"]["code"], Value::Null);
    let r = post(s.addr, "/v1/chat/completions", &json!({"messages": [{"role": "user", "content": "Hi"}], "n": 9}));
    assert_eq!(r.json()["error"]["message"], "Input validation error: `n` must be >= 1 and <= 4. Given: 9");
    let r = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "top_logprobs": 2}),
    );
    assert_eq!(r.json()["error"]["param"], "logprobs");
    let r = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}],
        "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "sometimes"}),
    );
    assert_eq!((r.status, r.json()["error"]["param"].clone()), (422, json!("tool_choice")));
    let image = json!({"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}});
    let content = json!([{"type": "text", "text": "What is this?"}, image]);
    let r = post(s.addr, "/v1/chat/completions", &json!({"messages": [{"role": "user", "content": content}]}));
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["error"]["message"],
        "Input validation error: this model takes text only: `messages` has a content part of type `image_url`"
    );
    assert_eq!(r.json()["error"]["param"], "messages");
    let r = post(s.addr, "/v1/completions", &json!({"prompt": "Hi", "max_tokens": 500}));
    assert_eq!(r.json()["error"]["code"], "context_length_exceeded");
    let r = post(s.addr, "/v1/completions", &json!({"prompt": [100000]}));
    assert_eq!(r.status, 422, "a token outside the vocabulary");
    let r = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "please fail"}],
        "stream": true}),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.json_events().last().unwrap()["error"]["type"], "server_error");
    assert!(!r.text().contains("[DONE]"));
}
