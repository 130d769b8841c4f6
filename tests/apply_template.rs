//! Chat templates embedded in a GGUF, served: for each template of tests/llamacpp/apply-template-cases.json,
//! the bundled checkpoint carrying it is converted by `tgi quantize`, served by `tgi serve`, and each
//! conversation's prompt (`/chat_tokenize`'s `templated_text`) must equal what llama-server's `/apply-template`
//! gave for the same GGUF (tests/llamacpp/apply-template.json, recorded by apply_template_reference.py there),
//! or be refused where llama-server refused it. The template/case pairs `jinja2_differs` lists render as Jinja2
//! (transformers' engine) renders them, not as llama.cpp's own Jinja does, for the reason given there. Each case
//! pins `date_string`, which llama-server otherwise sets to today (transformers leaves it to the template's
//! default, and so does tgi). Templates that print today's date (`strftime_now`) are compared with that date, as
//! each side printed it, replaced by a placeholder: the reference's `_recorded_on` day, tgi's today.

mod common;

use chrono::NaiveDate;
use common::server::{post, Server};
use serde_json::Value;

fn read(rel: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(common::root().join(rel)).unwrap()).unwrap()
}

/// `text` with each of `days` written as the committed templates write it (`strftime_now`'s formats in
/// engines/tests/data/chat-templates) replaced by `<today>`.
fn undate(text: &str, days: &[NaiveDate]) -> String {
    let mut text = text.to_owned();
    for day in days {
        for format in ["%Y-%m-%d", "%B %d, %Y", "%d %b %Y"] {
            text = text.replace(&day.format(format).to_string(), "<today>");
        }
    }
    text
}

/// The local date (as the server's `strftime_now` reads the clock).
fn today() -> NaiveDate {
    chrono::Local::now().date_naive()
}

/// Room for the longest prompt (SmolLM3's system prompt is about 1,500 of this vocabulary's tokens).
fn long_context(hf: &std::path::Path) {
    let path = hf.join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    cfg["max_position_embeddings"] = Value::from(4096);
    std::fs::write(&path, cfg.to_string()).unwrap();
}

#[test]
fn served_prompts_equal_llama_servers() {
    let cases = read("tests/llamacpp/apply-template-cases.json");
    let reference = read("tests/llamacpp/apply-template.json");
    let recorded: NaiveDate = reference["_recorded_on"].as_str().unwrap().parse().unwrap();
    let mut failures = Vec::new();
    for name in cases["templates"].as_array().unwrap() {
        let name = name.as_str().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let hf = common::chat_model(dir.path());
        let source = common::root().join(format!("engines/tests/data/chat-templates/{name}.jinja"));
        let cfg_path = hf.join("tokenizer_config.json");
        let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
        cfg["chat_template"] = Value::from(std::fs::read_to_string(source).unwrap());
        std::fs::write(&cfg_path, cfg.to_string()).unwrap();
        long_context(&hf);
        let gguf = dir.path().join("model.gguf");
        common::quantize(&hf, "f32", &gguf);
        let server = Server::start(&["-m", gguf.to_str().unwrap()]);
        for (case, body) in cases["cases"].as_object().unwrap() {
            let want = &reference[name][case];
            let differs = cases["jinja2_differs"][format!("{name}/{case}")].as_str();
            let before = today();
            let (status, text) = post(&server.url("/chat_tokenize"), &body.to_string());
            let days = [before, today()];
            // llama.cpp drops a leading BOS the template wrote when the vocabulary adds one itself; the ids are
            // the same (ours parses the written `<s>` as BOS).
            let ours = (status == 200).then(|| {
                let answer: Value = serde_json::from_str(&text).unwrap();
                let prompt = answer["templated_text"].as_str().unwrap();
                prompt.strip_prefix("<s>").unwrap_or(prompt).to_owned()
            });
            let same = match (&ours, want.get("prompt").and_then(Value::as_str)) {
                (Some(ours), Some(theirs)) => undate(ours, &days) == undate(theirs, &[recorded]),
                (None, None) => true, // both refused it
                _ => false,
            };
            // Where llama.cpp's Jinja and Jinja2 part ways tgi renders as Jinja2 (transformers) does; such a
            // template must still differ, or it leaves the list.
            if same == differs.is_some() {
                let why = differs.map_or(String::new(), |d| format!(" (listed as differing: {d})"));
                failures
                    .push(format!("{name} / {case}{why}:\n  llama-server {want}\n  tgi          {status} {ours:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{} prompts differ:\n{}", failures.len(), failures.join("\n"));
}

/// The published Gemma 3 270M GGUF (a base model) carries no `tokenizer.chat_template`: served without
/// `--chat-template`, its chat requests use the built-in `gemma` template its `<start_of_turn>` marker names
/// (llama-server falls back to ChatML, whose markers this vocabulary does not have), and say so in the log.
#[test]
fn gguf_without_template_uses_the_builtin_its_markers_name() {
    let Some(gemma) = common::gemma3_file() else { return };
    let server = Server::start(&["-m", gemma.to_str().unwrap()]);
    let body = r#"{"messages": [{"role": "user", "content": "Hi"}]}"#;
    let (status, text) = post(&server.url("/chat_tokenize"), body);
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["templated_text"], "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
    let body = r#"{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}"#;
    let (status, text) = post(&server.url("/v1/chat/completions"), body);
    assert_eq!(status, 200, "{text}");
    assert!(server.log.lock().unwrap().contains("built-in 'gemma' template"), "no warning in the log");
}
