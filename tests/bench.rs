//! End-to-end tests of `tgi bench`: against a running `tgi serve` on the bundled model (over OpenAI's API,
//! Anthropic's Messages and OpenAI's Responses), in-process, and against servers that do not stream or do not
//! answer (errors, never a hang).

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::server::Server;
use common::{assert_fails, assert_ok, tgi};
use serde_json::Value;

fn read_json(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `--endpoint chat` measures the chat route even where `--api auto` finds TGI's routes (the bundled model is
/// served with a chat template), and a URL without a scheme is http.
#[test]
fn endpoint_chat_is_measured_under_api_auto_at_a_bare_url() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let bare = format!("127.0.0.1:{}", server.port);
    let args = ["bench", "--url", &bare, "--endpoint", "chat", "-c", "1", "--requests", "2", "-p", "8", "-n", "4"];
    assert_ok(&tgi(args.iter().copied().chain(["--json", json.to_str().unwrap()])));
    let r = read_json(&json);
    assert_eq!(
        (r["target"]["api"].as_str(), r["target"]["route"].as_str()),
        (Some("openai"), Some("/v1/chat/completions"))
    );
    assert_eq!(r["runs"][0]["summary"]["requests_ok"], 2, "{}", r["runs"][0]["summary"]);
    assert_fails(&tgi(args.iter().copied().chain(["--api", "tgi"])), 2, "--endpoint chat is OpenAI's");
}

#[test]
fn measures_tgi_serve_over_openai_with_ignore_eos() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let (json, csv) = (dir.path().join("run.json"), dir.path().join("run.csv"));
    let out = tgi([
        "bench",
        "--url",
        &server.url(""),
        "--ignore-eos",
        "-c",
        "1,4",
        "--requests",
        "12",
        "--input-tokens",
        "24",
        "--output-tokens",
        "10",
        "--warmup",
        "2",
        "--slo",
        "ttft=10s,tpot=1s",
        "--scrape-metrics",
        "--json",
        json.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
    ]);
    let table = assert_ok(&out);
    assert!(table.contains("concurrency 4") && table.contains("TTFT"), "{table}");
    let r = read_json(&json);
    assert_eq!((r["target"]["api"].as_str(), r["target"]["model"].as_str()), (Some("openai"), Some("stories260k")));
    let runs = r["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for run in runs {
        let s = &run["summary"];
        assert_eq!(s["requests_ok"], 12, "{s}");
        assert!(s["errors"].as_object().unwrap().is_empty());
        assert_eq!(s["slo_attainment"], 1.0);
        // The server's counters, before and after: exactly the tokens the client counted.
        assert_eq!(s["server"]["tgi_batch_generated_tokens:delta"], 120.0, "{}", s["server"]);
        assert!(s["server"]["tgi_batch_next_size:mean"].as_f64().unwrap() >= 1.0);
        for req in run["requests"].as_array().unwrap() {
            // ignore_eos: every answer has exactly the tokens asked for, counted by usage and by chunks.
            assert_eq!(req["output_tokens"], 10, "{req}");
            assert_eq!(req["itl_ms"].as_array().unwrap().len(), 9);
            // The prompt is 24 tokens by the server's tokenizer (the server's usage adds BOS).
            assert!((24..=25).contains(&req["input_tokens"].as_u64().unwrap()), "{req}");
            assert!(req["ttft_ms"].as_f64().unwrap() > 0.0);
        }
    }
    assert_eq!(runs[1]["summary"]["peak_concurrency"], 4);
    let rows = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(rows.lines().count(), 1 + 24);
    assert!(rows.lines().nth(1).unwrap().starts_with("1,,0,"));
}

#[test]
fn measures_tgi_serve_over_anthropic_messages_and_openai_responses() {
    let template = common::root().join("tests/chat_templates/hermes_tools.jinja");
    let server = Server::start(&["--chat-template", template.to_str().unwrap(), "--api-key", "k"]);
    let dir = tempfile::tempdir().unwrap();
    for api in ["anthropic", "responses"] {
        let json = dir.path().join(format!("{api}.json"));
        let out = tgi([
            "bench",
            "--url",
            &server.url(""),
            "--api",
            api,
            "--api-key",
            "k",
            "--ignore-eos",
            "-c",
            "2",
            "--requests",
            "6",
            "--input-tokens",
            "16",
            "--output-tokens",
            "8",
            "--quiet",
            "--json",
            json.to_str().unwrap(),
        ]);
        assert_eq!(assert_ok(&out), "", "{api}");
        let r = read_json(&json);
        assert_eq!((r["target"]["api"].as_str(), r["target"]["model"].as_str()), (Some(api), Some("stories260k")));
        let s = &r["runs"][0]["summary"];
        assert_eq!(s["requests_ok"], 6, "{api}: {s}");
        assert!(s["errors"].as_object().unwrap().is_empty(), "{api}: {s}");
        for req in r["runs"][0]["requests"].as_array().unwrap() {
            // ignore_eos: every answer has the tokens asked for, by the server's count and by the delta events.
            assert_eq!(req["output_tokens"], 8, "{api}: {req}");
            assert_eq!(req["itl_ms"].as_array().unwrap().len(), 7, "{api}: {req}");
            // The prompt is one user message: the chat template's tokens come with it.
            assert!(req["input_tokens"].as_u64().unwrap() > 16, "{api}: {req}");
            assert!(req["ttft_ms"].as_f64().unwrap() > 0.0);
        }
    }
}

#[test]
fn serves_the_bundled_model_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let out = tgi([
        "bench",
        "--requests",
        "4",
        "-c",
        "2",
        "--output-tokens",
        "8",
        "--input-tokens",
        "16",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
        "--serve-arg=--max-batch-size=2",
    ]);
    assert_eq!(assert_ok(&out), "");
    let r = read_json(&json);
    assert_eq!((r["target"]["api"].as_str(), r["runs"][0]["summary"]["requests_ok"].as_u64()), (Some("tgi"), Some(4)));
}

/// A server answering every request with `response`, or never answering when it is `None`.
fn fake_server(response: Option<&'static str>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming() {
            let mut s = s.unwrap();
            if let Some(r) = response {
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while s.read(&mut buf).is_ok_and(|n| n > 0) {
                        if s.write_all(r.as_bytes()).is_err() {
                            break;
                        }
                    }
                });
            } else {
                held.push(s);
            }
        }
    });
    port
}

#[test]
fn a_server_that_does_not_stream_is_a_protocol_error() {
    let json = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
    let port = fake_server(Some(json));
    let url = format!("http://127.0.0.1:{port}");
    let out = tgi(["bench", "--url", &url, "--api", "tgi", "--requests", "3", "--prompt-file", "/dev/null"]);
    assert_fails(&out, 2, "no prompts");
    let dir = tempfile::tempdir().unwrap();
    let prompts = dir.path().join("p.txt");
    std::fs::write(&prompts, "hello\nworld\n").unwrap();
    let out =
        tgi(["bench", "--url", &url, "--api", "tgi", "--requests", "3", "--prompt-file", prompts.to_str().unwrap()]);
    assert_fails(&out, 1, "all 3 requests failed: protocol");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an event stream"));
    // Probing a server that speaks neither API.
    let out = tgi(["bench", "--url", &url, "--requests", "1", "--prompt-file", prompts.to_str().unwrap()]);
    assert_fails(&out, 1, "cannot tell what the server speaks");
}

#[test]
fn a_silent_server_times_out() {
    let port = fake_server(None);
    let dir = tempfile::tempdir().unwrap();
    let prompts = dir.path().join("p.jsonl");
    std::fs::write(&prompts, "{\"prompt\": \"hi\", \"max_tokens\": 4}\n").unwrap();
    let t = Instant::now();
    let out = tgi([
        "bench",
        "--url",
        &format!("http://127.0.0.1:{port}"),
        "--api",
        "openai",
        "--model-name",
        "m",
        "--requests",
        "2",
        "-c",
        "2",
        "--timeout",
        "0.5",
        "--prompt-file",
        prompts.to_str().unwrap(),
    ]);
    assert_fails(&out, 1, "all 2 requests failed: timeout");
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[test]
fn refuses_https_and_bad_flags() {
    assert_fails(&tgi(["bench", "--url", "https://127.0.0.1:1"]), 2, "TLS is not supported");
    assert_fails(&tgi(["bench", "--url", "http://127.0.0.1:1", "--model", "m"]), 2, "in-process");
    assert_fails(&tgi(["bench", "--rate", "0"]), 2, "positive request rate");
    assert_fails(&tgi(["bench", "--slo", "ttft=fast"]), 2, "not a duration");
}
