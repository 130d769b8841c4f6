//! `tgi serve` with LoRA adapters: a batch mixing four adapters and the base gives every request the text it
//! gets alone; TGI's `adapter_id`, OpenAI's `model` and llama-server's `lora` pick the same adapter; adapters load
//! and unload at run time behind the API key, with bad ones refused and nothing loaded.

mod common;

use common::root;
use common::server::{get, post_json, post_with, Server, Sse};
use serde_json::{json, Value};

const ADAPTERS: [&str; 4] = ["s260k-qv-r4", "s260k-all-r8-rs", "s260k-mlp-r2", "s260k-kd-r16"];

fn dir(name: &str) -> String {
    root().join("tests/reference/lora").join(name).display().to_string()
}

fn generate(server: &Server, prompt: &str, adapter: Option<&str>) -> String {
    let mut params = json!({"max_new_tokens": 24});
    if let Some(a) = adapter {
        params["adapter_id"] = json!(a);
    }
    let body = json!({"inputs": prompt, "parameters": params});
    post_json(&server.url("/generate"), &body, 200)["generated_text"].as_str().unwrap().to_string()
}

/// The stream's `generated_text`.
fn stream_text(sse: Sse) -> String {
    assert_eq!(sse.status, 200);
    let events: Vec<Value> = sse.collect().iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    events.last().expect("events")["generated_text"].as_str().unwrap().to_string()
}

fn model_ids(server: &Server) -> Vec<String> {
    let (status, text) = get(&server.url("/v1/models"));
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    v["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap().to_string()).collect()
}

#[test]
fn a_mixed_batch_gives_every_request_its_solo_text() {
    let spec: Vec<String> = ADAPTERS.iter().map(|a| format!("{a}={}", dir(a))).collect();
    let server = Server::start_with_env(&[], &[("LORA_ADAPTERS", &spec.join(","))]);
    assert_eq!(model_ids(&server)[1..], ADAPTERS.map(String::from));
    let jobs: Vec<(String, Option<&str>)> = (0..16)
        .map(|i| {
            (
                format!("Once upon a time, {} little", ["a", "the", "one", "some"][i % 4]),
                [None, Some(ADAPTERS[0]), Some(ADAPTERS[1]), Some(ADAPTERS[2]), Some(ADAPTERS[3])][i % 5],
            )
        })
        .collect();
    let solo: Vec<String> = jobs.iter().map(|(p, a)| generate(&server, p, *a)).collect();
    let base = generate(&server, &jobs[0].0, None);
    for (i, (p, a)) in jobs.iter().enumerate().filter(|(_, (_, a))| a.is_some()) {
        assert_ne!(solo[i], generate(&server, p, None), "adapter {a:?} changes the text of {p:?}");
    }
    assert_eq!(solo[0], base);
    let together: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .iter()
            .map(|(p, a)| {
                let url = server.url("/generate_stream");
                let mut params = json!({"max_new_tokens": 24});
                if let Some(a) = a {
                    params["adapter_id"] = json!(a);
                }
                let body = json!({"inputs": p, "parameters": params});
                s.spawn(move || stream_text(Sse::open(&url, &body)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(together, solo);
    // OpenAI's `model` and llama-server's `lora` (by name or by index) pick the same adapter.
    let completion = |extra: Value| {
        let mut body = json!({"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        post_json(&server.url("/v1/completions"), &body, 200)["choices"][0]["text"].as_str().unwrap().to_string()
    };
    let by_model = completion(json!({"model": ADAPTERS[1]}));
    assert_eq!(by_model, completion(json!({"lora": [{"id": ADAPTERS[1], "scale": 1.0}]})));
    assert_eq!(by_model, completion(json!({"lora": [{"id": 0, "scale": 0.0}, {"id": 1, "scale": 1.0}]})));
    assert_ne!(by_model, completion(json!({"model": "tgi"})), "any other model name is the base");
    assert_eq!(completion(json!({"model": "tgi"})), completion(json!({"lora": [{"id": 1, "scale": 0.0}]})));
    let (status, body) =
        post_with(&server.url("/v1/completions"), &[], r#"{"prompt":"x","lora":[{"id":"nope","scale":1}]}"#);
    assert_eq!(status, 404, "{body}");
    assert!(server.metric("tgi_lora_loaded") == 4.0);
    let (_, info) = get(&server.url("/info"));
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["lora_adapters"].as_array().unwrap().len(), 4);
    assert!(info["lora_adapters"][0]["requests"].as_u64().unwrap() > 0);
}

#[test]
fn adapters_load_and_unload_at_run_time_behind_the_key() {
    let server = Server::start(&["--api-key", "k", "--max-loras", "2", "--max-lora-rank", "8"]);
    let key = [("authorization", "Bearer k")];
    let call = |path: &str, body: Value| post_with(&server.url(path), &key, &body.to_string());
    let load = |name: &str, adapter: &str| {
        call("/v1/load_lora_adapter", json!({"lora_name": name, "lora_path": dir(adapter)}))
    };
    let (status, _) = post_with(
        &server.url("/v1/load_lora_adapter"),
        &[],
        &json!({"lora_name": "a", "lora_path": dir(ADAPTERS[0])}).to_string(),
    );
    assert_eq!(status, 401);
    assert_eq!(load("a", ADAPTERS[0]).0, 200);
    // Held back from the KV cache: 2 adapters of rank 8 on every projection of the 5 layers (q 64+64, k and v
    // 64+32, o 64+64, gate, up and down 64+172), 4 bytes each.
    let (_, info) = get(&server.url("/info"));
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["lora_reserved_bytes"], 2 * 8 * 5 * (128 + 96 + 96 + 128 + 3 * 236) * 4);
    // An adapter whose factors do not have the shapes its rank and this base imply.
    let wrong = tempfile::tempdir().unwrap();
    for f in ["adapter_config.json", "adapter_model.safetensors"] {
        std::fs::copy(root().join("tests/reference/lora/s260k-qv-r4").join(f), wrong.path().join(f)).unwrap();
    }
    let cfg = wrong.path().join("adapter_config.json");
    std::fs::write(&cfg, std::fs::read_to_string(&cfg).unwrap().replace("\"r\": 4", "\"r\": 2")).unwrap();
    let wrong = wrong.path().display().to_string();
    // Bad adapters: wrong shapes, a rank over --max-lora-rank, a missing directory, a taken name.
    for (name, path, needle) in [
        ("x", wrong.as_str(), "another base"),
        ("x", &dir("d4l-all-r16"), "rank 16 exceeds --max-lora-rank 8"),
        ("x", &dir("nowhere"), "adapter_config.json"),
        ("a", &dir(ADAPTERS[1]), "already loaded"),
    ] {
        let (status, body) = call("/v1/load_lora_adapter", json!({"lora_name": name, "lora_path": path}));
        assert_eq!(status, 422, "{body}");
        assert!(body.contains(needle), "{body}");
    }
    assert_eq!(model_ids(&server)[1..], ["a"]);
    assert_eq!(load("b", ADAPTERS[1]).0, 200);
    let b_text = |server: &Server| {
        let body = json!({"inputs": "Once upon a time", "parameters": {"max_new_tokens": 12, "adapter_id": "b"}});
        let (status, text) = post_with(&server.url("/generate"), &key, &body.to_string());
        (status, text)
    };
    let (status, solo) = b_text(&server);
    assert_eq!(status, 200, "{solo}");
    // `a` is the least recently used: loading `c` evicts it.
    assert_eq!(load("c", ADAPTERS[2]).0, 200);
    assert_eq!(model_ids(&server)[1..], ["b", "c"]);
    assert_eq!(server.metric("tgi_lora_evictions"), 1.0);
    // A stream on `b` finishes on `b` though `b` is unloaded while it may still run; then `b` is gone.
    let body = json!({"inputs": "Once upon a time", "parameters": {"max_new_tokens": 12, "adapter_id": "b"}});
    let stream = Sse::open_with(&server.url("/generate_stream"), &key, &body);
    assert_eq!(call("/v1/unload_lora_adapter", json!({"lora_name": "b"})).0, 200);
    let solo: Value = serde_json::from_str(&solo).unwrap();
    assert_eq!(stream_text(stream), solo["generated_text"].as_str().unwrap());
    let (status, text) = b_text(&server);
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("'b' does not exist"), "{text}");
    assert_eq!(call("/v1/unload_lora_adapter", json!({"lora_name": "b"})).0, 404);
    assert_eq!(server.metric("tgi_lora_loaded"), 1.0);
    // A llama.cpp GGUF adapter loads like a PEFT directory and serves requests.
    let gguf = root().join("tests/reference/lora/s260k-qv-r4.gguf").display().to_string();
    let (status, body) = call("/v1/load_lora_adapter", json!({"lora_name": "g", "lora_path": gguf}));
    assert_eq!(status, 200, "{body}");
    let body = json!({"inputs": "Once upon a time", "parameters": {"max_new_tokens": 4, "adapter_id": "g"}});
    let (status, text) = post_with(&server.url("/generate"), &key, &body.to_string());
    assert_eq!(status, 200, "{text}");
}
