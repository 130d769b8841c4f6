//! `tgi serve`'s embeddings against transformers: `/v1/embeddings` and `/embed` on the bundled models with mean and
//! last pooling give the pooled final hidden states that transformers' `LlamaModel` gives
//! (tests/reference/embeddings/, made by its script), within [`TOLERANCE`] of the vector's largest component;
//! the `openai` SDK's embeddings (base64, its default, and float) give the same; bad input is refused.

mod common;

use common::server::{post, post_json, Server};
use serde_json::{json, Value};

/// The largest difference allowed, relative to the reference vector's largest component.
const TOLERANCE: f64 = 1e-4;

/// The recorded reference.
fn reference() -> Value {
    let path = common::root().join("tests/reference/embeddings/transformers_embeddings.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A JSON array of numbers.
fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

/// `v` at unit length.
fn unit(v: &[f64]) -> Vec<f64> {
    let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    v.iter().map(|x| x / norm).collect()
}

/// Asserts `got` is `want` within [`TOLERANCE`].
fn close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: size");
    let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let err = got.iter().zip(want).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(err <= TOLERANCE * scale, "{what}: max |diff| {err} over a largest component of {scale}");
}

#[test]
fn embeddings_match_transformers_on_the_bundled_models() {
    let reference = reference();
    for (name, entry) in reference["models"].as_object().unwrap() {
        let dir = common::root().join(entry["dir"].as_str().unwrap());
        let inputs = entry["inputs"].as_array().unwrap();
        let texts: Vec<&str> = inputs.iter().map(|i| i["input"].as_str().unwrap()).collect();
        let tokens: usize = inputs.iter().map(|i| i["ids"].as_array().unwrap().len()).sum();
        for pooling in ["mean", "last"] {
            let server = Server::start(&["-m", dir.to_str().unwrap(), "--pooling", pooling]);
            let what = |i: usize, route: &str| format!("{name} {pooling} {route} {:?}", texts[i]);
            // Every input in one request: batched, in order, at unit length.
            let all = post_json(&server.url("/v1/embeddings"), &json!({"input": texts, "model": "x"}), 200);
            assert_eq!(all["usage"], json!({"prompt_tokens": tokens, "total_tokens": tokens}), "{name}");
            assert_eq!((all["object"].as_str(), all["data"].as_array().unwrap().len()), (Some("list"), texts.len()));
            for (i, input) in inputs.iter().enumerate() {
                let d = &all["data"][i];
                assert_eq!((d["object"].as_str(), d["index"].as_u64()), (Some("embedding"), Some(i as u64)));
                close(&floats(&d["embedding"]), &unit(&floats(&input[pooling])), &what(i, "/v1/embeddings"));
                // TGI's route, not normalized: the raw pooled state.
                let raw = post_json(&server.url("/embed"), &json!({"inputs": texts[i], "normalize": false}), 200);
                close(&floats(&raw[0]), &floats(&input[pooling]), &what(i, "/embed"));
                // Token ids embed as their text does.
                let by_ids = post_json(&server.url("/v1/embeddings"), &json!({"input": input["ids"]}), 200);
                close(&floats(&by_ids["data"][0]["embedding"]), &unit(&floats(&input[pooling])), &what(i, "ids"));
            }
        }
    }
}

#[test]
fn the_openai_sdk_gets_the_reference_vectors() {
    let server = Server::start(&[]);
    let path = common::root().join("tests/reference/embeddings/transformers_embeddings.json");
    server.run_python("serve_embeddings.py", &[path.as_os_str()], "all embedding checks passed");
}

#[test]
fn bad_embedding_requests_are_refused_clearly() {
    let server = Server::start(&["--max-input-tokens", "8", "--max-total-tokens", "16"]);
    let long = "Once upon a time there was a little girl who liked to play in the park with her dog";
    let cases = [
        ("/v1/embeddings", json!({"input": "Hi", "dimensions": 3}), "`dimensions` is not supported"),
        ("/v1/embeddings", json!({"input": []}), "cannot be empty"),
        ("/v1/embeddings", json!({"input": [""]}), "cannot be empty"),
        ("/v1/embeddings", json!({"input": [[1, 2], []]}), "cannot be empty"),
        ("/v1/embeddings", json!({"input": [1, 100000]}), "outside the vocabulary"),
        ("/v1/embeddings", json!({"input": "Hi", "encoding_format": "hex"}), "hex"),
        ("/v1/embeddings", json!({"input": long}), "must have less than 8 tokens"),
        ("/embed", json!({"inputs": long}), "must have less than 8 tokens"),
        ("/embed", json!({"inputs": "Hi", "prompt_name": "query"}), "`prompt_name` is not supported"),
        ("/embed", json!({"input": "Hi"}), "missing field `inputs`"),
    ];
    for (route, body, needle) in cases {
        let (status, text) = post(&server.url(route), &body.to_string());
        assert_eq!(status, 422, "{route} {body}: {text}");
        assert!(text.contains(needle), "{route} {body}: {text}");
    }
    // The model's own size is accepted; truncation cuts a long input to the limit instead of refusing it.
    let size = post_json(&server.url("/v1/embeddings"), &json!({"input": "Hi", "dimensions": 64}), 200);
    assert_eq!(size["data"][0]["embedding"].as_array().unwrap().len(), 64);
    let cut = post_json(&server.url("/embed"), &json!({"inputs": [long, "Hi"], "truncate": true}), 200);
    assert_eq!(cut.as_array().unwrap().len(), 2);
    let norm = floats(&cut[0]).iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "normalized by default: {norm}");
}
