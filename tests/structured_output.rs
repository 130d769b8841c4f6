//! Structured output end to end on the bundled model: `tests/python/structured_output.py` runs the JSON-schema
//! corpus (`tests/structured/schemas.json`, made by `tests/structured/make_corpus.py`), regular expressions,
//! json_object and the openai SDK against `tgi serve`, validating every output with `jsonschema`.

mod common;

use common::chat_model;
use common::server::Server;

#[test]
fn every_schema_of_the_corpus_is_enforced_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let hf = chat_model(dir.path());
    let server = Server::start(&["-m", hf.to_str().unwrap()]);
    let out = std::process::Command::new("python3")
        .arg(common::root().join("tests/python/structured_output.py"))
        .arg(server.url(""))
        .arg(common::root().join("tests/structured/schemas.json"))
        .args(["--max-tokens", "400"])
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "structured output checks failed:\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log.lock().unwrap()
    );
    assert!(stdout.contains("all structured output checks passed"), "{stdout}");
    assert!(server.metric("tgi_grammar_cache_hits") >= 16.0, "the batch identity check repeats 16 schemas");
}
