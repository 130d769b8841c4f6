//! End-to-end tests of `tgi serve` on the bundled model: real clients (the openai and anthropic SDKs and
//! huggingface_hub, from tests/python), greedy outputs equal to `tgi generate`'s, tool calls, batching under
//! concurrency, bad input, overload, dropped clients, API keys, config files, SIGTERM draining (with a drain delay) and
//! JSON logs with request ids, and clients that hold connections (slow bodies, floods).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::server::{get, post, post_json, post_with, Server, Sse};
use common::{assert_ok, chat_model, tgi};
use serde_json::{json, Value};

/// `tgi generate --json` greedy on `model` (None: bundled).
fn generate(model: Option<&str>, prompt: &str, n: usize, chat: bool) -> Value {
    let n = n.to_string();
    let mut args = vec!["generate", "--temperature", "0", "-n", &n, "--json"];
    if let Some(m) = model {
        args.extend(["-m", m]);
    }
    if chat {
        args.push("--chat");
    }
    args.push(prompt);
    serde_json::from_str(&assert_ok(&tgi(&args))).unwrap()
}

#[test]
fn python_clients_get_the_same_greedy_text_as_generate() {
    let dir = tempfile::tempdir().unwrap();
    let hf = chat_model(dir.path());
    let m = hf.to_str().unwrap();
    let (prompt, n) = ("Once upon a time, there was a little dog", 40);
    let plain = generate(Some(m), prompt, n, false);
    let chat = generate(Some(m), "Tell me a story about a cat.", n, true);
    let expected = json!({
        "prompt": prompt,
        "max_tokens": n,
        "completion": plain["text"],
        "completion_tokens": plain["generated_token_ids"].as_array().unwrap().len(),
        "tgi_finish_reason": plain["finish_reason"],
        "finish_reason": if plain["finish_reason"] == "length" { "length" } else { "stop" },
        "chat_messages": [{"role": "user", "content": "Tell me a story about a cat."}],
        "chat": chat["text"],
    });
    let exp_path = dir.path().join("expected.json");
    std::fs::write(&exp_path, expected.to_string()).unwrap();
    let server = Server::start(&["-m", m]);
    server.run_python("serve_clients.py", &[exp_path.as_os_str()], "all client checks passed");
}

#[test]
fn python_clients_call_tools_forced_by_the_grammar() {
    let template = common::root().join("tests/chat_templates/hermes_tools.jinja");
    let server = Server::start(&["--chat-template", template.to_str().unwrap()]);
    server.run_python("serve_tools.py", &[], "all tool checks passed");
}

#[test]
fn agent_sdks_speak_anthropic_messages_and_openai_responses() {
    let template = common::root().join("tests/chat_templates/hermes_tools.jinja");
    let server = Server::start(&["--chat-template", template.to_str().unwrap(), "--api-key", "secret"]);
    server.run_python("serve_agent_apis.py", &["secret".as_ref()], "all agent API checks passed");
}

#[test]
fn a_forced_tool_call_cut_at_every_length_has_one_shape_in_every_family() {
    let template = common::root().join("tests/chat_templates/hermes_tools.jinja");
    for family in ["hermes", "llama3_json", "mistral"] {
        let server = Server::start(&["--chat-template", template.to_str().unwrap(), "--tool-call-parser", family]);
        server.run_python("serve_tools_cut.py", &[family.as_ref()], "all cut tool call checks passed");
    }
}

/// The generated text of a TGI stream, checking its shape on the way.
fn stream_text(sse: Sse) -> String {
    assert_eq!(sse.status, 200);
    let events: Vec<Value> = sse.collect().iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    let last = events.last().expect("events");
    assert!(last["details"]["finish_reason"].is_string(), "{last}");
    let tokens: String = events.iter().map(|e| e["token"]["text"].as_str().unwrap()).collect();
    let text = last["generated_text"].as_str().unwrap().to_string();
    assert!(tokens.starts_with(&text), "token texts {tokens:?} vs generated_text {text:?}");
    text
}

#[test]
fn concurrent_streams_equal_solo_runs_and_are_batched() {
    let server = Server::start(&[]);
    let prompts: Vec<(String, usize)> = (0..32)
        .map(|i| {
            (
                format!(
                    "Once upon a time, {} little {}",
                    ["a", "the", "one"][i % 3],
                    ["cat", "dog", "bird", "girl"][i % 4]
                ),
                8 + 7 * i,
            )
        })
        .collect();
    let body = |p: &str, n: usize| json!({"inputs": p, "parameters": {"max_new_tokens": n, "details": true}});
    let solo: Vec<String> = prompts
        .iter()
        .map(|(p, n)| {
            post_json(&server.url("/generate"), &body(p, *n), 200)["generated_text"].as_str().unwrap().to_string()
        })
        .collect();
    // The API's greedy output is `tgi generate`'s.
    let g = generate(None, &prompts[5].0, prompts[5].1, false);
    assert_eq!(solo[5], g["text"].as_str().unwrap());

    let batch_sizes = |server: &Server| {
        let (_, metrics) = get(&server.url("/metrics"));
        let v = |name| common::server::metric_value(&metrics, name).unwrap();
        (v("tgi_batch_next_size_sum"), v("tgi_batch_next_size_count"))
    };
    let (sum0, count0) = batch_sizes(&server);
    let together: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = prompts
            .iter()
            .map(|(p, n)| {
                let url = server.url("/generate_stream");
                let b = body(p, *n);
                s.spawn(move || stream_text(Sse::open(&url, &b)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(together, solo);
    let (sum, count) = batch_sizes(&server);
    let mean = (sum - sum0) / (count - count0);
    assert!(mean > 4.0, "mean batch size {mean} while 32 streams ran: they were not batched");
    assert_eq!(server.metric("tgi_kv_blocks_used"), 0.0);
}

#[test]
fn bad_requests_get_json_errors_and_the_server_keeps_serving() {
    let server = Server::start(&["--max-input-tokens", "64", "--max-total-tokens", "128", "--payload-limit", "10000"]);
    let gen = server.url("/generate");
    let long = format!(r#"{{"inputs": "{}"}}"#, "word ".repeat(200));
    let huge = format!(r#"{{"inputs": "{}"}}"#, "x".repeat(20000));
    let cases: Vec<(String, &str, u16)> = vec![
        (gen.clone(), "{not json", 422),
        (gen.clone(), r#"{"inputs": 5}"#, 422),
        (gen.clone(), r#"{"inputs": "hi", "parameters": {"max_new_tokens": "ten"}}"#, 422),
        (gen.clone(), r#"{"inputs": "hi", "parameters": {"temperature": -1}}"#, 422),
        (gen.clone(), r#"{"inputs": "hi", "parameters": {"top_p": 1.5}}"#, 422),
        (gen.clone(), r#"{"inputs": "hi", "parameters": {"max_new_tokens": 0}}"#, 422),
        (gen.clone(), r#"{"inputs": "", "parameters": {}}"#, 422),
        (gen.clone(), r#"{"inputs": "hi", "parameters": {"max_new_tokens": 1000}}"#, 422),
        (gen.clone(), &long, 422),
        (gen.clone(), &huge, 413),
        (server.url("/v1/chat/completions"), r#"{"messages": "nope"}"#, 422),
        (server.url("/v1/completions"), r#"{"prompt": "hi", "max_tokens": -3}"#, 422),
        (server.url("/no/such/route"), "{}", 404),
    ];
    for (url, body, status) in cases {
        let (s, text) = post(&url, body);
        assert_eq!(s, status, "{url} {body:.80}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("error body is not JSON: {text}"));
        assert!(v["error"].is_string() || v["error"]["message"].is_string(), "{text}");
    }
    let ok = post_json(&gen, &json!({"inputs": "Once", "parameters": {"max_new_tokens": 4}}), 200);
    assert!(ok["generated_text"].is_string());
    assert_eq!(get(&server.url("/health")).0, 200);
}

#[test]
fn overload_answers_429_at_once() {
    let server = Server::start(&["--max-concurrent-requests", "2"]);
    let body = json!({"inputs": "Once upon a time", "parameters": {"max_new_tokens": 400}});
    // Two streams hold the two slots only while the server still generates them: on the tiny model that
    // is a fraction of a second, which a loaded machine can let pass before the third request arrives.
    // Such a try shows nothing (both held streams ran to their end) and is made again; the in-process
    // tests check the same refusal with a request the mock engine holds for as long as needed.
    let mut refused = None;
    for _ in 0..20 {
        let mut held: Vec<Sse> = (0..2).map(|_| Sse::open(&server.url("/generate_stream"), &body)).collect();
        for s in &mut held {
            assert_eq!(s.status, 200);
            assert!(s.next_data().is_some());
        }
        let (status, text) = post(&server.url("/generate"), &body.to_string());
        if status == 429 {
            refused = Some((text, held));
            break;
        }
        assert_eq!(status, 200, "{text}");
        for s in held {
            let last: Value = serde_json::from_str(s.collect().last().expect("events")).unwrap();
            assert!(last["generated_text"].is_string(), "a slot was free only once a held stream had ended: {last}");
        }
    }
    let (text, held) = refused.expect("20 tries, and the held streams always ended before the third request came");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error_type"], "overloaded");
    drop(held);
    // Slots come back once the dropped streams are cancelled.
    let t = Instant::now();
    loop {
        let (s, _) =
            post(&server.url("/generate"), &json!({"inputs": "Once", "parameters": {"max_new_tokens": 2}}).to_string());
        if s == 200 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(120), "slots never came back");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn dropped_streams_free_their_kv_blocks() {
    let server = Server::start(&[]);
    let body = json!({"inputs": "Once upon a time, there was a big", "parameters": {"max_new_tokens": 400}});
    std::thread::scope(|s| {
        for _ in 0..100 {
            let url = server.url("/generate_stream");
            let b = body.clone();
            s.spawn(move || {
                let mut sse = Sse::open(&url, &b);
                assert_eq!(sse.status, 200);
                assert!(sse.next_data().is_some());
                // Dropped here, mid-stream.
            });
        }
    });
    let t = Instant::now();
    while server.metric("tgi_kv_blocks_used") > 0.0 {
        assert!(t.elapsed() < Duration::from_secs(120), "KV blocks still used after the clients left");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(server.metric("tgi_request_cancelled") > 0.0);
    let ok = post_json(&server.url("/generate"), &json!({"inputs": "Once", "parameters": {"max_new_tokens": 4}}), 200);
    assert!(ok["generated_text"].is_string());
}

#[test]
fn api_key_guards_generation_routes() {
    let server = Server::start_with_env(&[], &[("TGI_API_KEY", "s3cret")]);
    let body = json!({"inputs": "Once", "parameters": {"max_new_tokens": 2}}).to_string();
    assert_eq!(post(&server.url("/generate"), &body).0, 401);
    assert_eq!(post_with(&server.url("/generate"), &[("Authorization", "Bearer nope")], &body).0, 401);
    assert_eq!(post_with(&server.url("/generate"), &[("Authorization", "Bearer s3cret")], &body).0, 200);
    let chat = json!({"prompt": "Once", "max_tokens": 2}).to_string();
    assert_eq!(post(&server.url("/v1/completions"), &chat).0, 401);
    assert_eq!(get(&server.url("/health")).0, 200, "health needs no key");
}

#[test]
fn config_file_sets_flags_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("serve.toml");
    std::fs::write(&cfg, "max_concurrent_requests = 7\nmax_best_of = 1\n").unwrap();
    let c = cfg.to_str().unwrap();
    let server = Server::start(&["--config", c, "--max-best-of", "2", "--kv-cache-dtype", "bf16"]);
    let (s, info) = get(&server.url("/info"));
    assert_eq!(s, 200);
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["max_concurrent_requests"], 7);
    assert_eq!(info["max_best_of"], 2);
    assert_eq!((&info["kv_cache_dtype"], &info["kv_cache_rotation"]), (&json!("bf16"), &json!(false)));
    drop(server);
    std::fs::write(&cfg, "no_such_setting = 1\n").unwrap();
    let out = tgi(["serve", "--config", c]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no_such_setting"));
}

#[test]
fn sigterm_drains_in_flight_requests_then_exits_0() {
    let server = Server::start(&[]);
    let body = json!({"inputs": "Once upon a time", "parameters": {"max_new_tokens": 300, "details": true}});
    let mut sse = Sse::open(&server.url("/generate_stream"), &body);
    assert!(sse.next_data().is_some());
    server.sigterm();
    let rest = sse.collect();
    let last: Value = serde_json::from_str(rest.last().expect("the stream went on")).unwrap();
    assert!(last["generated_text"].is_string(), "the in-flight request finished: {last}");
    let url = server.url("/health");
    assert!(server.wait(Duration::from_secs(30)).success());
    assert!(ureq::get(&url).call().is_err(), "nothing listens after shutdown");
}

#[test]
fn sigterm_with_a_drain_delay_keeps_serving_while_health_answers_503() {
    let drain = Duration::from_secs(8);
    let server = Server::start(&["--drain-delay", "8"]);
    assert_eq!(get(&server.url("/health")).0, 200);
    let signalled = Instant::now();
    server.sigterm();
    // The signal is handled on its own time: wait until /health says so.
    let (status, body) = loop {
        let (status, body) = get(&server.url("/health"));
        if status != 200 || signalled.elapsed() > Duration::from_secs(60) {
            break (status, body);
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status, 503, "draining within a minute of SIGTERM: {body}");
    assert!(body.contains("draining"), "{body}");
    let (status, body) = post(&server.url("/generate"), r#"{"inputs": "Once", "parameters": {"max_new_tokens": 3}}"#);
    assert_eq!(status, 200, "requests are still served while draining: {body}");
    assert!(server.wait(Duration::from_secs(120)).success());
    assert!(signalled.elapsed() >= drain, "it stopped before the drain delay ran out");
}

#[test]
fn chat_template_flag_gives_a_model_without_one_a_chat_route() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("zephyr.jinja");
    std::fs::write(&file, common::ZEPHYR).unwrap();
    let f = file.to_str().unwrap();
    let prompt = "Tell me a story.";
    let args = ["generate", "--temperature", "0", "-n", "24", "--json", "--chat", "--chat-template", f, prompt];
    let want: Value = serde_json::from_str(&assert_ok(&tgi(args))).unwrap();
    let server = Server::start(&["--chat-template", f]);
    let body = json!({"messages": [{"role": "user", "content": prompt}], "max_tokens": 24, "temperature": 0});
    let r = post_json(&server.url("/v1/chat/completions"), &body, 200);
    assert_eq!(r["choices"][0]["message"]["content"], want["text"]);
}

/// A model whose tokenizer_config carries a default and a `tool_use` template, served from its checkpoint
/// and from the GGUF `tgi quantize` writes of it (as `tokenizer.chat_template.tool_use`): a request that
/// offers tools is rendered with the tool-use template, as llama-server does, and others with the default.
#[test]
fn requests_with_tools_are_rendered_with_the_tool_use_template() {
    let dir = tempfile::tempdir().unwrap();
    let hf = chat_model(dir.path());
    let cfg_path = hf.join("tokenizer_config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    let tool_use = "{% for t in tools %}[{{ t.function.name }}]{% endfor %}{{ messages[0].content }}";
    cfg["chat_template"] =
        json!([{"name": "default", "template": common::ZEPHYR}, {"name": "tool_use", "template": tool_use}]);
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let gguf = dir.path().join("model.gguf");
    common::quantize(&hf, "f32", &gguf);
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]);
    let user = json!([{"role": "user", "content": "Hi"}]);
    for model in [&hf, &gguf] {
        let server = Server::start(&["-m", model.to_str().unwrap()]);
        let url = server.url("/chat_tokenize");
        let plain = post_json(&url, &json!({"messages": user}), 200);
        assert_eq!(plain["templated_text"], "<|user|>\nHi</s><|assistant|>", "{}", model.display());
        let with_tools = post_json(&url, &json!({"messages": user, "tools": tools}), 200);
        assert_eq!(with_tools["templated_text"], "[get_weather]Hi", "{}", model.display());
    }
}

#[test]
fn json_logs_carry_the_request_id_it_echoes() {
    let server = Server::start(&["--log-format", "json"]);
    let body = json!({"inputs": "Once", "parameters": {"max_new_tokens": 2}}).to_string();
    let reply = ureq::post(&server.url("/generate"))
        .set("Content-Type", "application/json")
        .set("x-request-id", "e2e-log-1")
        .send_string(&body)
        .unwrap();
    assert_eq!(reply.header("x-request-id"), Some("e2e-log-1"));
    let generated =
        ureq::post(&server.url("/generate")).set("Content-Type", "application/json").send_string(&body).unwrap();
    let fresh = generated.header("x-request-id").expect("a generated id").to_string();
    assert_eq!(fresh.len(), 32, "{fresh}");
    let log = server.log.clone();
    server.sigterm();
    assert!(server.wait(Duration::from_secs(30)).success());
    // The reader thread drains the closed pipe.
    for _ in 0..100 {
        if log.lock().unwrap().contains("\"stopped\"") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = log.lock().unwrap().clone();
    let lines: Vec<Value> =
        log.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect();
    let message = |v: &Value| v["fields"]["message"].as_str().unwrap_or_default().to_string();
    assert!(lines.iter().any(|v| message(v).starts_with("listening on http://")), "{log}");
    assert!(lines.iter().any(|v| message(v) == "stopped"), "{log}");
    for id in ["e2e-log-1", fresh.as_str()] {
        let done = lines.iter().find(|v| v["span"]["request_id"] == id && message(v) == "response");
        let done = done.unwrap_or_else(|| panic!("no response line for {id}:\n{log}"));
        assert_eq!((done["level"].as_str(), done["fields"]["status"].as_u64()), (Some("INFO"), Some(200)));
        assert_eq!(done["span"]["path"], "/generate");
    }
}

/// Opens a raw connection to `server` and sends `head`.
fn raw_open(server: &Server, head: &str) -> TcpStream {
    let mut c = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    c.write_all(head.as_bytes()).unwrap();
    c
}

/// Reads a connection until the server closes it.
fn raw_rest(mut c: TcpStream) -> String {
    let mut out = Vec::new();
    c.read_to_end(&mut out).unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads one response head (and the empty body of a 100 or a `/health`).
fn raw_head(c: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(c.read(&mut byte).unwrap(), 1, "closed early: {}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

#[test]
fn slow_bodies_time_out_and_connection_floods_leave_health_reachable() {
    let server = Server::start_with_env(&["--max-connections", "3"], &[("TGI_BODY_TIMEOUT", "0.3")]);
    let head = "POST /generate HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n";
    let mut slow = raw_open(&server, head);
    slow.write_all(b"{\"inputs\": ").unwrap();
    let answer = raw_rest(slow);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.ends_with(r#"{"error":"The request body did not arrive within 0.3 s","error_type":"timeout"}"#));
    // Three connections served once and kept open fill --max-connections: on a server of their own, where
    // no connection that just closed can still hold a slot.
    drop(server);
    let server = Server::start(&["--max-connections", "3"]);
    let held: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut c = raw_open(&server, "GET /health HTTP/1.1\r\nHost: t\r\n\r\n");
            assert!(raw_head(&mut c).starts_with("HTTP/1.1 200"));
            c
        })
        .collect();
    let (status, text) = get(&server.url("/info"));
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("Too many open connections"), "{text}");
    assert_eq!(get(&server.url("/health")).0, 200, "health checks are answered beyond the bound");
    drop(held);
}

#[test]
fn sigterm_does_not_wait_for_a_body_that_never_comes() {
    let server = Server::start(&["--shutdown-timeout", "600", "--body-timeout", "600"]);
    let head = "POST /generate HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\
                Expect: 100-continue\r\n\r\n";
    let mut stuck = raw_open(&server, head);
    assert!(raw_head(&mut stuck).starts_with("HTTP/1.1 100"), "the handler is reading the body");
    let log = server.log.clone();
    server.sigterm();
    // Without the cut, the stop waits out --shutdown-timeout (600 s).
    assert!(server.wait(Duration::from_secs(120)).success());
    let answer = raw_rest(stuck);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("The server is shutting down"), "{answer}");
    assert!(!log.lock().unwrap().contains("still in flight"), "{}", log.lock().unwrap());
}

/// A copy of the bundled HF model with `key` of config.json set to `value`.
fn mutated_model(dir: &std::path::Path, key: &str, value: Value) -> std::path::PathBuf {
    let hf = chat_model(dir);
    let cfg_path = hf.join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg[key] = value;
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    hf
}

#[test]
fn hostile_hyperparameters_are_refused_at_load_with_exit_2() {
    let cases = [
        ("sliding_window", json!(0), "field 'sliding_window': 0 must be positive"),
        ("rms_norm_eps", json!(0), "field 'rms_norm_eps': 0 must be a number between 0 and 1"),
        ("max_position_embeddings", json!(1u64 << 40), "field 'max_position_embeddings': 1099511627776 is larger"),
        ("num_hidden_layers", json!(3), "has more than the 3 layers its configuration states"),
    ];
    for (key, value, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let hf = mutated_model(dir.path(), key, value);
        // The port is never bound: the model is refused before.
        let out = tgi(["serve", "-m", hf.to_str().unwrap(), "--port", "1"]);
        common::assert_fails(&out, 2, want);
    }
}
