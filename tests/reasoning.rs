//! Reasoning split on `tgi serve` with real chat templates (tests/chat_templates/): DeepSeek-R1's, whose prompt
//! opens the thinking block, with a budget that ends it (the bundled story model never does), split and unsplit;
//! Qwen3's, whose model opens no block here; and a template without thinking, whose answers carry no reasoning
//! field. The `openai` SDK reads them (tests/python/serve_reasoning.py).

mod common;

use common::server::{post_json, Server};
use serde_json::json;

/// `tests/chat_templates/NAME`.
fn template(name: &str) -> String {
    common::root().join("tests/chat_templates").join(name).to_str().unwrap().to_string()
}

#[test]
fn a_budget_ends_the_thinking_and_the_answer_follows_split_out() {
    let r1 = template("deepseek_r1_distill.jinja");
    let server = Server::start(&["--chat-template", &r1, "--reasoning-budget", "6"]);
    server.run_python("serve_reasoning.py", &["budget".as_ref()], "all reasoning checks passed");
    let server = Server::start(&["--chat-template", &r1, "--reasoning-budget", "6", "--reasoning-format", "none"]);
    server.run_python("serve_reasoning.py", &["none".as_ref()], "all reasoning checks passed");
}

#[test]
fn a_template_whose_model_opens_no_block_answers_in_content() {
    let server = Server::start(&["--chat-template", &template("qwen3.jinja")]);
    server.run_python("serve_reasoning.py", &["plain".as_ref()], "all reasoning checks passed");
}

#[test]
fn a_budget_of_zero_renders_no_thinking() {
    let server = Server::start(&["--chat-template", &template("deepseek_r1_distill.jinja"), "--reasoning-budget", "0"]);
    let body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "temperature": 0});
    let text = post_json(&server.url("/chat_tokenize"), &body, 200)["templated_text"].as_str().unwrap().to_string();
    assert!(text.ends_with("<think>\n</think>"), "{text:?}");
    let answer = post_json(&server.url("/v1/chat/completions"), &body, 200);
    let message = &answer["choices"][0]["message"];
    assert!(message.get("reasoning_content").is_none() && message["content"].as_str().is_some_and(|c| !c.is_empty()));
}

#[test]
fn templates_without_thinking_send_no_reasoning_field() {
    let dir = tempfile::tempdir().unwrap();
    let hf = common::chat_model(dir.path());
    let server = Server::start(&["-m", hf.to_str().unwrap(), "--reasoning-budget", "2"]);
    let body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "temperature": 0});
    let answer = post_json(&server.url("/v1/chat/completions"), &body, 200);
    let message = answer["choices"][0]["message"].as_object().unwrap();
    let mut keys: Vec<&String> = message.keys().collect();
    keys.sort();
    assert_eq!(keys, ["content", "role"], "{message:?}");
}
