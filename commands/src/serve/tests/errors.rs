//! Bad requests: the right 4xx with a JSON error, and the server keeps serving.

use serde_json::json;

use super::client::{get, post, request};
use super::{limits, TestServer};
use crate::serve::state::Access;

#[test]
fn malformed_json_and_wrong_shapes_are_422() {
    let s = TestServer::start();
    let r = request(s.addr, "POST", "/generate", &[], b"{\"inputs\": ");
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["error_type"], "validation");
    assert!(r.json()["error"].as_str().unwrap().starts_with("Failed to parse the request body as JSON"));
    for body in
        [json!({"inputs": 3}), json!({"parameters": {}}), json!({"inputs": "x", "parameters": {"max_new_tokens": -1}})]
    {
        let r = post(s.addr, "/generate", &body);
        assert_eq!(r.status, 422, "{body}");
        assert!(r.json()["error"].as_str().unwrap().starts_with("Failed to deserialize the JSON body"));
    }
    let r = request(s.addr, "POST", "/v1/chat/completions", &[], b"nope");
    assert_eq!(r.status, 422);
    assert!(r.json()["error"]["message"].is_string());
    assert_eq!(post(s.addr, "/generate", &json!({"inputs": "Hi", "parameters": {"max_new_tokens": 1}})).status, 200);
}

#[test]
fn out_of_range_parameters_are_422_with_tgi_messages() {
    let s = TestServer::start();
    let hi = super::lexicon().tokenizer.encode("Hi", true, true).unwrap().len();
    let total = format!(
        "`inputs` tokens + `max_new_tokens` must be <= 96. Given: {hi} `inputs` tokens and 95 `max_new_tokens`"
    );
    let cases = [
        (json!({"temperature": 0.0}), "`temperature` must be strictly positive"),
        (json!({"top_k": 0}), "`top_k` must be strictly positive"),
        (json!({"top_p": 1.5}), "`top_p` must be > 0.0 and <= 1.0"),
        (json!({"repetition_penalty": 0.0}), "`repetition_penalty` must be strictly positive"),
        (json!({"frequency_penalty": 3.0}), "`frequency_penalty` must be >= -2.0 and <= 2.0"),
        (json!({"best_of": 3, "do_sample": true}), "`best_of` must be > 0 and <= 2. Given: 3"),
        (json!({"best_of": 2}), "you must use sampling when `best_of` is > 1"),
        (json!({"best_of": 2, "do_sample": true, "seed": 1}), "`seed` must not be set when `best_of` > 1"),
        (json!({"top_n_tokens": 6}), "`top_n_tokens` must be >= 0 and <= 5. Given: 6"),
        (json!({"stop": ["a", "b", "c", "d", "e"]}), "`stop` supports up to 4 stop sequences. Given: 5"),
        (json!({"truncate": 65}), "`truncate` must be strictly positive and less than 64. Given: 65"),
        (json!({"max_new_tokens": 95}), total.as_str()),
        (
            json!({"grammar": {"type": "yaml", "value": {}}}),
            "`grammar`: unknown type `yaml` (expected text, json_object, json, json_schema, regex or lark)",
        ),
    ];
    for (parameters, message) in cases {
        let r = post(s.addr, "/generate", &json!({"inputs": "Hi", "parameters": parameters}));
        assert_eq!(r.status, 422, "{parameters}");
        assert_eq!(
            r.json(),
            json!({"error": format!("Input validation error: {message}"), "error_type": "validation"})
        );
    }
    let long = "Once upon a time ".repeat(30);
    let r = post(s.addr, "/generate", &json!({"inputs": long, "parameters": {"max_new_tokens": 1}}));
    assert_eq!(r.status, 422);
    let msg = r.json()["error"].as_str().unwrap().to_string();
    assert!(msg.starts_with("Input validation error: `inputs` tokens + `max_new_tokens` must be <= 96"), "{msg}");
    // truncate keeps the last tokens, so the same prompt fits.
    let r = post(s.addr, "/generate", &json!({"inputs": long, "parameters": {"max_new_tokens": 1, "truncate": 10}}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-prompt-tokens"), Some("10"));
    let r = post(s.addr, "/generate", &json!({"inputs": "", "parameters": {}}));
    assert_eq!(r.json()["error"], "Input validation error: `inputs` cannot be empty");
}

/// Values an f32 cannot hold that rounding would carry onto a documented bound (schemathesis found
/// `top_p: 1.0000000000000002` and `temperature: 3.4028234663852894e+38` accepted).
#[test]
fn floats_just_outside_a_range_are_422_on_both_apis() {
    let s = TestServer::start();
    let above_one = 1.0000000000000002_f64;
    let above_max = f64::from_bits(f64::from(f32::MAX).to_bits() + 1);
    let below_tiny = f64::from_bits(f64::from(f32::from_bits(1)).to_bits() - 1);
    let tgi = [
        (json!({"top_p": above_one}), "top_p"),
        (json!({"temperature": above_max}), "temperature"),
        (json!({"temperature": below_tiny}), "temperature"),
        (json!({"typical_p": 0.99999997}), "typical_p"),
        (json!({"repetition_penalty": above_max}), "repetition_penalty"),
        (json!({"frequency_penalty": 2.0000000000000004}), "frequency_penalty"),
    ];
    for (parameters, param) in tgi {
        let r = post(s.addr, "/generate", &json!({"inputs": "Hi", "parameters": parameters}));
        assert_eq!(r.status, 422, "{parameters}");
        assert!(r.json()["error"].as_str().unwrap().contains(&format!("`{param}`")), "{}", r.text());
    }
    let openai = [
        (json!({"top_p": above_one, "temperature": 3.4028234663852894e+38}), "temperature"),
        (json!({"top_p": above_one}), "top_p"),
        (json!({"min_p": above_one}), "min_p"),
        (json!({"presence_penalty": -2.0000000000000004}), "presence_penalty"),
    ];
    for (fields, param) in openai {
        let mut body = json!({"prompt": "0", "max_tokens": 1});
        body.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
        let r = post(s.addr, "/v1/completions", &body);
        assert_eq!((r.status, r.json()["error"]["param"].clone()), (422, json!(param)), "{body}");
    }
    let ok = json!({"prompt": "0", "max_tokens": 1, "top_p": 1.0, "temperature": f64::from(f32::MAX)});
    assert_eq!(post(s.addr, "/v1/completions", &ok).status, 200);
}

#[test]
fn oversized_body_is_413() {
    let s = TestServer::start();
    let big = json!({"inputs": "x".repeat(5000)});
    let r = post(s.addr, "/generate", &big);
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["error_type"], "validation");
    let r = post(s.addr, "/v1/completions", &json!({"prompt": "x".repeat(5000)}));
    assert_eq!(r.status, 413);
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("4096 bytes"));
}

#[test]
fn unknown_route_is_404_and_wrong_method_405() {
    let s = TestServer::start();
    let r = get(s.addr, "/nope");
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error_type"], "not_found");
    let r = get(s.addr, "/v1/nope");
    assert_eq!(r.status, 404);
    assert!(r.json()["error"]["message"].is_string());
    let r = get(s.addr, "/generate");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("POST, OPTIONS"));
    let r = request(s.addr, "DELETE", "/", &[], b"");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD, POST, OPTIONS"));
    assert_eq!(get(s.addr, "/health").status, 200);
}

#[test]
fn api_key_guards_generation_routes() {
    let access = Access { api_key: Some("s3cret".into()), ..Access::default() };
    let s = TestServer::with(limits(), access);
    let body = serde_json::to_vec(&json!({"inputs": "Hi", "parameters": {"max_new_tokens": 1}})).unwrap();
    let r = request(s.addr, "POST", "/generate", &[], &body);
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error_type"], "authentication");
    let r = request(s.addr, "POST", "/generate", &[("Authorization", "Bearer wrong")], &body);
    assert_eq!(r.status, 401);
    let r = request(s.addr, "POST", "/v1/completions", &[], b"{}");
    assert_eq!(r.json()["error"]["code"], "invalid_api_key");
    let r = request(s.addr, "POST", "/generate", &[("Authorization", "Bearer s3cret")], &body);
    assert_eq!(r.status, 200);
    assert_ne!(s.submitted()[0].cache_salt, 0, "the key salts the prefix cache");
    for open in ["/health", "/info", "/metrics", "/v1/models", "/api-doc/openapi.json"] {
        assert_eq!(get(s.addr, open).status, 200, "{open}");
    }
}

#[test]
fn overload_is_429_at_once() {
    let s = TestServer::with(
        crate::serve::limits::RequestLimits { max_concurrent_requests: 1, ..limits() },
        Access::default(),
    );
    let hold = serde_json::to_vec(&json!({"inputs": "hold", "parameters": {"max_new_tokens": 20}})).unwrap();
    let _held = super::client::send(s.addr, "POST", "/generate_stream", &[], &hold);
    assert!(s.wait_submitted(1), "the held request never reached the engine");
    let r = post(s.addr, "/generate", &json!({"inputs": "Hi", "parameters": {"max_new_tokens": 1}}));
    assert_eq!(r.status, 429);
    assert_eq!(s.submitted().len(), 1, "refused before the engine");
    assert_eq!(r.json(), json!({"error": "Model is overloaded", "error_type": "overloaded"}));
    let r = post(s.addr, "/generate_stream", &json!({"inputs": "Hi"}));
    assert_eq!(r.json_events(), vec![json!({"error": "Model is overloaded", "error_type": "overloaded"})]);
    let r = post(s.addr, "/v1/chat/completions", &json!({"messages": [{"role": "user", "content": "Hi"}]}));
    assert_eq!((r.status, r.json()["error"]["type"].clone()), (429, json!("rate_limit_error")));
}

#[test]
fn generation_failure_is_424() {
    let s = TestServer::start();
    let r = post(s.addr, "/generate", &json!({"inputs": "please fail", "parameters": {"max_new_tokens": 5}}));
    assert_eq!(r.status, 424);
    assert_eq!(
        r.json(),
        json!({"error": "Request failed during generation: mock failure", "error_type": "generation"})
    );
    assert!(get(s.addr, "/metrics").text().contains("tgi_request_failure{err=\"generation\"} 1"));
}

#[test]
fn cors_preflight_and_headers() {
    let access = Access { cors_allow_origin: vec!["http://app.example".into()], ..Access::default() };
    let s = TestServer::with(limits(), access);
    let r = request(
        s.addr,
        "OPTIONS",
        "/v1/chat/completions",
        &[("Origin", "http://app.example"), ("Access-Control-Request-Method", "POST")],
        b"",
    );
    assert_eq!(r.status, 204);
    assert_eq!(r.header("access-control-allow-origin"), Some("http://app.example"));
    assert_eq!(r.header("access-control-allow-methods"), Some("POST, OPTIONS"));
    assert!(r.header("access-control-allow-headers").unwrap().contains("authorization"));
    let r = request(s.addr, "GET", "/info", &[("Origin", "http://app.example")], b"");
    assert_eq!(r.header("access-control-allow-origin"), Some("http://app.example"));
    let r = request(s.addr, "GET", "/info", &[("Origin", "http://evil.example")], b"");
    assert_eq!(r.header("access-control-allow-origin"), None);
}
