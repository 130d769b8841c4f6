//! Hostile grammars against `tgi serve` on the bundled model (issue 31: one request must not crash the server).
//! Each is refused with a 422 that names what is at fault, through TGI's `grammar`, OpenAI's `response_format`
//! and a forced tool call; a bound refuses before anything compiles (its flag is in the message); none stalls
//! `/health`, and the server lives through all of them.

mod common;

use std::time::{Duration, Instant};

use common::chat_model;
use common::server::{get, post, Server};
use serde_json::{json, Value};

/// A JSON schema of `n` integer properties, named from `prefix`; all required when `required`.
fn properties(prefix: &str, n: usize, required: bool) -> Value {
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    let props: serde_json::Map<String, Value> = names.iter().map(|k| (k.clone(), json!({"type": "integer"}))).collect();
    let required = if required { names } else { Vec::new() };
    json!({"type": "object", "properties": props, "required": required})
}

/// `depth` objects nested in one another, as text (a `serde_json::Value` that deep cannot be dropped safely).
fn nested_text(depth: usize) -> String {
    format!(
        "{}{{\"type\": \"integer\"}}{}",
        "{\"type\": \"object\", \"properties\": {\"a\": ".repeat(depth),
        "}}".repeat(depth)
    )
}

/// A grammar in TGI's shape: `kind` and its value as JSON text.
struct Hostile {
    name: &'static str,
    kind: &'static str,
    value: String,
    /// What the 422's message must contain.
    names: &'static str,
}

fn hostile() -> Vec<Hostile> {
    let alternatives: Vec<String> = (0..100_000).map(|i| format!("\"w{i}\"")).collect();
    let cycle = json!({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}});
    vec![
        Hostile {
            name: "8,000 properties",
            kind: "json",
            value: properties("p", 8000, false).to_string(),
            names: "--grammar-max-choices",
        },
        Hostile {
            name: "a 10 MB schema",
            kind: "json",
            value: json!({"type": "string", "description": "x".repeat(10_000_000)}).to_string(),
            names: "--grammar-max-bytes",
        },
        Hostile { name: "100 levels", kind: "json", value: nested_text(50), names: "--grammar-max-depth" },
        Hostile { name: "a $ref cycle", kind: "json", value: cycle.to_string(), names: "leads back to itself" },
        Hostile {
            name: "100,000 Lark alternatives",
            kind: "lark",
            value: Value::from(format!("start: {}", alternatives.join(" | "))).to_string(),
            names: "--grammar-max-",
        },
        Hostile {
            name: "a 2 MB regex",
            kind: "regex",
            value: Value::from("(a+)+".repeat(400_000)).to_string(),
            names: "--grammar-max-bytes",
        },
    ]
}

/// The bodies that carry `g`: TGI's `/generate`, OpenAI's `response_format`, and (for schemas) a forced
/// call of one tool whose parameters are the schema; with the field the error must name.
fn bodies(g: &Hostile) -> Vec<(&'static str, String, &'static str)> {
    let grammar = format!(r#"{{"type": "{}", "value": {}}}"#, g.kind, g.value);
    let generate = format!(r#"{{"inputs": "Once", "parameters": {{"max_new_tokens": 2, "grammar": {grammar}}}}}"#);
    let messages = r#""messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2"#;
    let chat = format!(r#"{{{messages}, "response_format": {grammar}}}"#);
    let mut out = vec![("/generate", generate, "grammar"), ("/v1/chat/completions", chat, "response_format")];
    if g.kind == "json" {
        let tool = format!(r#"{{"type": "function", "function": {{"name": "f", "parameters": {}}}}}"#, g.value);
        let call = format!(r#"{{{messages}, "tools": [{tool}], "tool_choice": "required"}}"#);
        out.push(("/v1/chat/completions", call, "tools"));
    }
    out
}

#[test]
fn hostile_grammars_are_refused_with_422_and_the_server_lives() {
    let dir = tempfile::tempdir().unwrap();
    let model = chat_model(dir.path());
    let server = Server::start(&["-m", model.to_str().unwrap(), "--payload-limit", "30000000"]);
    for g in hostile() {
        for (route, body, field) in bodies(&g) {
            let start = Instant::now();
            let (status, text) = post(&server.url(route), &body);
            let took = start.elapsed();
            assert_eq!(status, 422, "{} on {route} ({field}): {text}", g.name);
            assert!(text.contains(field) && text.contains(g.names), "{} on {route}: {text}", g.name);
            assert_eq!(get(&server.url("/health")).0, 200, "alive after {} on {route}", g.name);
            println!("{} on {route} ({field}): 422 in {:.0} ms", g.name, took.as_secs_f64() * 1e3);
        }
    }
    // Deeper than a request body may nest: serde_json's own limit, a 422 that says so.
    let deep = format!(
        r#"{{"inputs": "Once", "parameters": {{"grammar": {{"type": "json", "value": {}}}}}}}"#,
        nested_text(10_000)
    );
    let (status, text) = post(&server.url("/generate"), &deep);
    assert_eq!(status, 422, "{text}");
    assert!(text.contains("nests more than 128 levels"), "{text}");
    // Every one was refused at the pre-check: nothing was compiled.
    assert_eq!(server.metric("tgi_grammar_compile_duration_seconds_count"), 0.0);
    // A regex that backtracking engines take exponential time on is no work for llguidance's derivatives.
    let regex =
        json!({"inputs": "Once", "parameters": {"max_new_tokens": 4, "grammar": {"type": "regex", "value": "(a+)+$"}}});
    assert_eq!(post(&server.url("/generate"), &regex.to_string()).0, 200);
}

#[test]
fn health_answers_while_eight_heavy_grammars_compile() {
    let server = Server::start(&[]);
    let url = server.url("/generate");
    let senders: Vec<_> = (0..8)
        .map(|i| {
            let url = url.clone();
            // Distinct, within the bounds, and slow to compile (each unbounded integer costs its own lexeme).
            let schema = if i % 2 == 0 { properties(&format!("k{i}_"), 700, true) } else { properties("p", 8000 + i, true) };
            let body = json!({"inputs": "Once", "parameters": {"max_new_tokens": 2, "grammar": {"type": "json", "value": schema}}});
            std::thread::spawn(move || post(&url, &body.to_string()))
        })
        .collect();
    let mut slowest = Duration::ZERO;
    while senders.iter().any(|s| !s.is_finished()) {
        let start = Instant::now();
        assert_eq!(get(&server.url("/health")).0, 200);
        slowest = slowest.max(start.elapsed());
        std::thread::sleep(Duration::from_millis(20));
    }
    let statuses: Vec<u16> = senders
        .into_iter()
        .map(|s| s.join().unwrap())
        .map(|(status, text)| {
            assert!([200, 422, 429].contains(&status), "{status}: {text}");
            status
        })
        .collect();
    println!("statuses of the 8: {statuses:?}");
    assert!(slowest < Duration::from_secs(5), "/health took {slowest:?} while grammars compiled");
    println!("slowest /health while 8 grammars arrived: {:.1} ms", slowest.as_secs_f64() * 1e3);
    assert_eq!(get(&server.url("/health")).0, 200, "the server lives");
}

#[test]
fn a_grammar_slower_than_the_compile_timeout_is_a_422_naming_it() {
    // 700 required properties compile in about 0.2 s on a quiet Zen 5 core (the most the bounds let through),
    // four times the timeout; load only makes compiling slower.
    let server = Server::start(&["--grammar-compile-timeout", "0.05"]);
    let url = server.url("/generate");
    let body = |schema: Value| {
        json!({"inputs": "Once", "parameters": {"max_new_tokens": 2, "grammar": {"type": "json", "value": schema}}})
            .to_string()
    };
    // The compile threads and the vocabulary are ready before the slow grammar comes: a trivial grammar is
    // admitted once they are (the first may still be building them when its 0.05 s are up).
    let ready = (0..20).any(|_| post(&url, &body(json!({"type": "boolean"}))).0 == 200);
    assert!(ready, "a boolean grammar was never admitted within 0.05 s");
    let (status, text) = post(&url, &body(properties("slow", 700, true)));
    assert_eq!(status, 422, "{text}");
    assert!(text.contains("--grammar-compile-timeout") && text.contains("0.05 s"), "{text}");
}
