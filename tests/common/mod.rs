//! Helpers shared by the end-to-end tests: run the `tgi` binary, find the bundled models.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub mod engine;
pub mod gguf_refs;
pub mod iquant;
pub mod server;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A bundled model directory under models/.
pub fn model(rel: &str) -> PathBuf {
    root().join("models").join(rel)
}

/// Runs `tgi` with `args`, capturing its output.
pub fn tgi<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    Command::new(env!("CARGO_BIN_EXE_tgi")).args(args).output().expect("run tgi")
}

/// Asserts a run failed with `code` and that stderr mentions `needle`.
pub fn assert_fails(out: &Output, code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert!(err.contains(needle), "expected '{needle}' in stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
}

/// Asserts a run succeeded, returning stdout.
pub fn assert_ok(out: &Output) -> String {
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The files in a directory (names).
pub fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// `tgi quantize INPUT --type PRESET -o OUT --json`, asserting success; returns the JSON summary.
pub fn quantize(input: &Path, preset: &str, out: &Path) -> serde_json::Value {
    let o = tgi([
        "quantize".as_ref(),
        input.as_os_str(),
        "--type".as_ref(),
        preset.as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
        "--json".as_ref(),
    ]);
    serde_json::from_str(&assert_ok(&o)).unwrap()
}

/// A TinyLlama/Zephyr-style template, as tokenizer_config.json carries it.
pub const ZEPHYR: &str = "{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + eos_token }}{% elif message['role'] == 'system' %}{{ '<|system|>\\n' + message['content'] + eos_token }}{% endif %}{% if loop.last and add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}{% endfor %}";

/// A copy of the bundled stories260k HF model in `dir/hf` with [`ZEPHYR`] as its chat template.
pub fn chat_model(dir: &Path) -> PathBuf {
    let hf = dir.join("hf");
    std::fs::create_dir(&hf).unwrap();
    for f in std::fs::read_dir(model("stories260k/hf")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), hf.join(f.file_name())).unwrap();
    }
    let cfg_path = hf.join("tokenizer_config.json");
    let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg["chat_template"] = serde_json::Value::from(ZEPHYR);
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    hf
}

/// The published Gemma 3 270M GGUF named by `TGI_GEMMA3_GGUF` (`tests/gemma/fetch.sh` downloads it and prints its
/// path). Without the variable the test says so and passes, unless `CI` is set.
pub fn gemma3_file() -> Option<PathBuf> {
    match std::env::var_os("TGI_GEMMA3_GGUF") {
        Some(p) => Some(PathBuf::from(p)),
        None if std::env::var_os("CI").is_some() => panic!("CI: set TGI_GEMMA3_GGUF=$(bash tests/gemma/fetch.sh)"),
        None => {
            eprintln!("skipped: TGI_GEMMA3_GGUF is unset (TGI_GEMMA3_GGUF=$(bash tests/gemma/fetch.sh) runs it)");
            None
        }
    }
}

/// `tgi perplexity --ctx 128 --chunks 32` of `model` on `text` (the arguments of the llama.cpp references).
pub fn perplexity_128x32(model: &Path, text: &Path) -> f64 {
    let out = assert_ok(&tgi([
        "perplexity".as_ref(),
        "-m".as_ref(),
        model.as_os_str(),
        "--ctx".as_ref(),
        "128".as_ref(),
        "--chunks".as_ref(),
        "32".as_ref(),
        "--json".as_ref(),
        text.as_os_str(),
    ]));
    serde_json::from_str::<serde_json::Value>(&out).unwrap()["perplexity"].as_f64().unwrap()
}
