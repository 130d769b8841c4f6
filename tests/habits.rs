//! A llama.cpp or TGI user's first hour (issue 34): memory defaults that fit the machine, TGI's launcher
//! variables, the demo model's chat template, and GPU hints that name what exists.

mod common;

use std::time::Instant;

use common::server::{get, post, Server};
use common::{assert_fails, gemma3_file, model, tgi};
use serde_json::Value;

/// `tgi serve` on a 270M-class GGUF with the defaults sizes its KV cache from the batch and the request size
/// (16 sequences of 4096 tokens on the CPU), says so before allocating, and stays small. The start time is
/// printed, not asserted.
#[test]
fn a_small_model_serves_with_a_small_kv_cache_by_default() {
    let Some(gemma) = gemma3_file() else { return };
    let started = Instant::now();
    let server = Server::start(&["-m", gemma.to_str().unwrap()]);
    let ready = started.elapsed();
    let rss = server.peak_rss().expect("/proc");
    eprintln!("gemma 3 270m: listening after {:.2} s, peak RSS {:.0} MiB", ready.as_secs_f64(), rss as f64 / 1048576.0);
    let log = server.log.lock().unwrap().clone();
    let allocating = log.find("KV cache: allocating 65536 tokens").unwrap_or_else(|| panic!("{log}"));
    assert!(log[allocating..].contains("--max-batch-size times --max-total-tokens"), "{log}");
    let summary = log.find("KV cache: 65536 tokens").unwrap_or_else(|| panic!("{log}"));
    assert!(allocating < summary, "logged before the cache is allocated and the summary follows: {log}");
    assert!(rss < 2 << 30, "peak RSS {rss} bytes");
    let (status, info) = get(&server.url("/info"));
    assert_eq!(status, 200);
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!((info["max_total_tokens"].as_u64(), info["max_input_tokens"].as_u64()), (Some(4096), Some(4095)));
}

/// TGI's launcher variables reach the server (MODEL_ID names the model), and TGI_<FLAG> variables are read for
/// every flag: a bad TGI_QUANTIZE is refused naming the flag, as a bad TGI's QUANTIZE is naming the variable.
#[test]
fn tgi_launcher_variables_and_tgi_flag_variables_are_read() {
    let gguf = model("stories260k/stories260k-f32.gguf");
    let server = Server::start_with_env(&[], &[("MODEL_ID", gguf.to_str().unwrap()), ("MAX_TOTAL_TOKENS", "256")]);
    let (_, info) = get(&server.url("/info"));
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!((info["model_id"].as_str(), info["max_total_tokens"].as_u64()), (gguf.to_str(), Some(256)));
    assert!(server.log.lock().unwrap().contains("TGI's variables (MODEL_ID, MAX_TOTAL_TOKENS)"));
    drop(server);
    let run = |var: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_tgi"))
            .args(["serve", "--port", "0"])
            .env(var, "bogus")
            .output()
            .unwrap()
    };
    assert_fails(&run("TGI_QUANTIZE"), 2, "--quantize");
    assert_fails(&run("QUANTIZE"), 2, "TGI's variables (QUANTIZE)");
}

/// The bundled demo model is served with a chat template, so that a newcomer's first OpenAI chat request works;
/// a model without one gets a 422 that names --chat-template, and a built-in name gives it one.
#[test]
fn chat_works_on_the_demo_model_and_the_422_names_the_flag() {
    let chat = r#"{"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 8}"#;
    let demo = Server::start(&[]);
    let (status, body) = post(&demo.url("/v1/chat/completions"), chat);
    assert_eq!(status, 200, "{body}");
    drop(demo);
    let plain = model("stories260k/hf");
    let bare = Server::start(&["-m", plain.to_str().unwrap()]);
    let (status, body) = post(&bare.url("/v1/chat/completions"), chat);
    assert_eq!(status, 422);
    assert!(body.contains("--chat-template NAME|FILE"), "{body}");
    drop(bare);
    let named = Server::start(&["-m", plain.to_str().unwrap(), "--chat-template", "llama3"]);
    assert_eq!(post(&named.url("/v1/chat/completions"), chat).0, 200);
}

/// The GPU hints name a cargo feature the root package has, never the bundled model's temporary file, and
/// `--device gpu` and `-ngl` speak of GPUs, not of CUDA only.
#[test]
fn gpu_hints_name_real_features() {
    let manifest: toml::Table = std::fs::read_to_string(common::root().join("Cargo.toml")).unwrap().parse().unwrap();
    let features = manifest["features"].as_table().unwrap();
    assert_eq!(features["cuda"].as_array().unwrap()[0].as_str(), Some("tgi-commands/cuda"));
    assert_eq!(features["metal"].as_array().unwrap()[0].as_str(), Some("tgi-commands/metal"));
    if cfg!(any(feature = "cuda", feature = "metal")) {
        return;
    }
    let out = tgi(["generate", "--device", "cuda", "hi"]);
    assert_fails(&out, 2, "cargo build --release --features cuda");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the bundled stories260k demo model") && !err.contains("/tmp"), "{err}");
    assert_fails(&tgi(["generate", "--device", "gpu", "hi"]), 2, "without GPU support");
    assert_fails(&tgi(["generate", "-ngl", "99", "hi"]), 2, "--features metal");
    assert!(tgi(["generate", "-ngl", "0", "-n", "2", "hi"]).status.success(), "-ngl 0 is the CPU");
}
