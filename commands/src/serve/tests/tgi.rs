//! TGI's routes: shapes, headers, streams.

use serde_json::json;

use super::client::{get, post};
use super::TestServer;

#[test]
fn generate_returns_text_details_and_headers() {
    let s = TestServer::start();
    let r = post(s.addr, "/generate", &json!({"inputs": "Hello", "parameters": {"max_new_tokens": 3}}));
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v, json!({"generated_text": " Once upon a"}));
    for h in [
        "x-compute-type",
        "x-compute-time",
        "x-compute-characters",
        "x-total-time",
        "x-validation-time",
        "x-queue-time",
        "x-inference-time",
        "x-time-per-token",
        "x-prompt-tokens",
        "x-generated-tokens",
    ] {
        assert!(r.header(h).is_some(), "missing {h}");
    }
    assert_eq!(r.header("x-compute-type"), Some("cpu"));
    assert_eq!(r.header("x-compute-characters"), Some("5"));
    assert_eq!(r.header("x-generated-tokens"), Some("3"));
    assert_eq!(r.header("content-type"), Some("application/json"));

    let body = json!({"inputs": "Hello", "parameters": {
        "max_new_tokens": 4, "details": true, "decoder_input_details": true, "top_n_tokens": 2, "stop": [" a"],
        "return_full_text": true, "seed": 3, "do_sample": true}});
    let v = post(s.addr, "/generate", &body).json();
    assert_eq!(v["generated_text"], "Hello Once upon");
    let d = &v["details"];
    assert_eq!(d["finish_reason"], "stop_sequence");
    assert_eq!(d["generated_tokens"], 3);
    assert_eq!(d["seed"], 3);
    assert_eq!(d["tokens"].as_array().unwrap().len(), 3);
    assert_eq!(d["tokens"][0]["text"], " Once");
    assert_eq!(d["tokens"][0]["special"], false);
    assert_eq!(d["top_tokens"][0].as_array().unwrap().len(), 2);
    assert_eq!(d["prefill"][0]["logprob"], serde_json::Value::Null);
    assert_eq!(d["prefill"][1]["logprob"], -0.25);
    assert!(d.get("best_of_sequences").is_none());

    // Greedy by default once `parameters` is given; sampling when the parameters are absent (TGI).
    let reqs = s.submitted();
    assert_eq!(reqs[0].params.temperature, 0.0);
    assert_eq!(reqs[1].params.temperature, 1.0);
    assert_eq!(reqs[1].params.top_logprobs, 2);
    assert!(reqs[1].prompt_logprobs);
    post(s.addr, "/generate", &json!({"inputs": "Hello"}));
    assert_eq!(s.submitted()[2].params.temperature, 1.0);
    // Greedy decoding reports no seed; a finished script ends with EOS.
    let v = post(s.addr, "/generate", &json!({"inputs": "Hi", "parameters": {"details": true, "max_new_tokens": 40}}))
        .json();
    assert_eq!(v["details"]["seed"], serde_json::Value::Null);
    assert_eq!(v["details"]["finish_reason"], "eos_token");
    assert!(v["details"]["tokens"].as_array().unwrap().last().unwrap()["special"].as_bool().unwrap());
}

#[test]
fn best_of_returns_the_most_likely_and_the_others() {
    let s = TestServer::start();
    let body =
        json!({"inputs": "Hi", "parameters": {"best_of": 2, "do_sample": true, "details": true, "max_new_tokens": 2}});
    let r = post(s.addr, "/generate", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let others = v["details"]["best_of_sequences"].as_array().unwrap();
    assert_eq!(others.len(), 1);
    let sum = |tokens: &serde_json::Value| {
        tokens.as_array().unwrap().iter().map(|t| t["logprob"].as_f64().unwrap()).sum::<f64>()
    };
    assert!(sum(&v["details"]["tokens"]) >= sum(&others[0]["tokens"]));
    assert_eq!(s.submitted().len(), 2);
}

#[test]
fn generate_stream_sends_tokens_then_text_and_details() {
    let s = TestServer::start();
    let body = json!({"inputs": "Hello", "parameters": {"max_new_tokens": 3, "details": true, "top_n_tokens": 1}});
    let r = post(s.addr, "/generate_stream", &body);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.header("x-compute-type"), Some("cpu"));
    assert_eq!(r.header("x-accel-buffering"), Some("no"));
    let events = r.json_events();
    let input_length = super::lexicon().tokenizer.encode("Hello", true, true).unwrap().len();
    assert_eq!(events.len(), 3);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["index"], i + 1);
        assert_eq!(e["top_tokens"].as_array().unwrap().len(), 1);
    }
    assert_eq!(events[0]["generated_text"], serde_json::Value::Null);
    assert_eq!(events[0]["details"], serde_json::Value::Null);
    assert_eq!(events[2]["generated_text"], " Once upon a");
    assert_eq!(
        events[2]["details"],
        json!({"finish_reason": "length", "generated_tokens": 3, "seed": null, "input_length": input_length})
    );
    assert!(!r.text().contains("[DONE]"));
}

#[test]
fn stream_errors_are_events_of_a_200_stream() {
    let s = TestServer::start();
    for (parameters, message) in [
        (json!({"best_of": 2, "do_sample": true}), "`best_of` != 1 is not supported when streaming tokens"),
        (
            json!({"decoder_input_details": true}),
            "`decoder_input_details` == true is not supported when streaming tokens",
        ),
        (json!({"max_new_tokens": 0}), "`max_new_tokens` must be strictly positive"),
    ] {
        let r = post(s.addr, "/generate_stream", &json!({"inputs": "Hi", "parameters": parameters}));
        assert_eq!(r.status, 200);
        let events = r.json_events();
        assert_eq!(
            events,
            vec![json!({"error": format!("Input validation error: {message}"), "error_type": "validation"})]
        );
    }
    let r = post(s.addr, "/generate_stream", &json!({"inputs": "please fail", "parameters": {"max_new_tokens": 5}}));
    let events = r.json_events();
    assert_eq!(events.last().unwrap()["error_type"], "generation");
    assert_eq!(events.last().unwrap()["error"], "Request failed during generation: mock failure");
}

#[test]
fn compat_wraps_in_a_list_and_streams_on_request() {
    let s = TestServer::start();
    let r = post(s.addr, "/", &json!({"inputs": "Hi", "parameters": {"max_new_tokens": 2}}));
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), json!([{"generated_text": " Once upon"}]));
    assert!(r.header("x-total-time").is_some());
    let r = post(s.addr, "/", &json!({"inputs": "Hi", "parameters": {"max_new_tokens": 2}, "stream": true}));
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.json_events()[1]["generated_text"], " Once upon");
    assert_eq!(get(s.addr, "/").status, 200, "GET / is the health check");
}

#[test]
fn tokenize_returns_spans() {
    let s = TestServer::start();
    let r = post(s.addr, "/tokenize", &json!({"inputs": "Once upon"}));
    assert_eq!(r.status, 200, "{}", r.text());
    let tokens = r.json();
    let tokens = tokens.as_array().unwrap();
    assert_eq!(tokens[0], json!({"id": 1, "text": "", "start": 0, "stop": 0}), "BOS");
    let joined: String = tokens.iter().map(|t| t["text"].as_str().unwrap()).collect();
    assert_eq!(joined, "Once upon");
    assert_eq!(tokens.last().unwrap()["stop"], 9);
    let r = post(s.addr, "/tokenize", &json!({"inputs": "Once upon", "parameters": {"truncate": 1}}));
    assert_eq!(r.json().as_array().unwrap().len(), 1);
}

#[test]
fn info_health_and_metrics() {
    let s = TestServer::start();
    let v = get(s.addr, "/info").json();
    assert_eq!(v["model_id"], "stories260k");
    assert_eq!(v["max_total_tokens"], 96);
    assert_eq!(v["max_input_tokens"], 64);
    assert_eq!(v["max_best_of"], 2);
    assert_eq!(v["model_sha"], serde_json::Value::Null);
    assert_eq!((&v["kv_cache_dtype"], &v["kv_cache_rotation"]), (&json!("f16"), &json!(false)));
    let h = get(s.addr, "/health");
    assert_eq!((h.status, h.body.len()), (200, 0));
    assert_eq!(s.submitted().len(), 1, "the first health check generates one token");
    assert_eq!(get(s.addr, "/health").status, 200);
    assert_eq!(s.submitted().len(), 1, "later checks trust the last generation");
    assert_eq!(get(s.addr, "/ping").status, 200);

    post(s.addr, "/generate", &json!({"inputs": "Hi", "parameters": {"max_new_tokens": 2}}));
    post(s.addr, "/generate", &json!({"inputs": "Hi", "parameters": {"max_new_tokens": 0}}));
    let m = get(s.addr, "/metrics");
    assert_eq!(m.status, 200);
    assert!(m.header("content-type").unwrap().starts_with("text/plain"));
    let text = m.text();
    for name in [
        "tgi_request_count 2",
        "tgi_request_success 1",
        "tgi_request_failure{err=\"validation\"} 1",
        "tgi_request_duration_count 1",
        "tgi_request_queue_duration_bucket",
        "tgi_request_validation_duration_sum",
        "tgi_request_inference_duration_count 1",
        "tgi_request_mean_time_per_token_duration_count 1",
        "tgi_request_generated_tokens_sum 2",
        "tgi_request_input_length_count 1",
        "tgi_request_max_new_tokens_sum 2",
        "tgi_request_time_to_first_token_duration_count 1",
        "tgi_request_inter_token_latency_duration_count 1",
        "tgi_batch_current_size 1",
        "tgi_batch_current_max_tokens 12",
        "tgi_queue_size 0",
        "tgi_batch_total_tokens 1024",
        "tgi_batch_inference_duration_bucket{method=\"prefill\",le=\"+Inf\"} 0",
        "tgi_batch_inference_count{method=\"decode\"} 9",
        "tgi_kv_blocks_used 2",
        "tgi_kv_blocks_free 62",
        "tgi_kv_blocks_total 64",
        "tgi_prefix_cache_queries 10",
        "tgi_prefix_cache_hits 4",
        "tgi_request_preemptions 0",
        "tgi_request_cancelled 0",
    ] {
        assert!(text.contains(name), "{name} missing from\n{text}");
    }
    // Every line is a comment or `name[{labels}] value`.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (_, value) = line.rsplit_once(' ').unwrap();
        assert!(value == "+Inf" || value.parse::<f64>().is_ok(), "{line}");
    }
}
