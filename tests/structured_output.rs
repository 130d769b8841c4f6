//! Structured output end to end on the bundled model: `tests/python/structured_output.py` runs the JSON-schema
//! corpus (`tests/structured/schemas.json`, made by `tests/structured/make_corpus.py`), regular expressions,
//! json_object and the openai SDK against `tgi serve`, validating every output with `jsonschema`;
//! `tests/python/bounded_output.py` checks that outputs of schemas with unbounded numbers always end.

mod common;

use common::chat_model;
use common::server::Server;

#[test]
fn every_schema_of_the_corpus_is_enforced_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let hf = chat_model(dir.path());
    let server = Server::start(&["-m", hf.to_str().unwrap()]);
    let corpus = common::root().join("tests/structured/schemas.json");
    let args = [corpus.as_os_str(), "--max-tokens".as_ref(), "400".as_ref()];
    let stdout = server.run_python("structured_output.py", &args, "all structured output checks passed");
    println!("{stdout}");
    assert!(server.metric("tgi_grammar_cache_hits") >= 16.0, "the batch identity check repeats 16 schemas");
}

#[test]
fn random_schemas_always_end_before_the_token_limit() {
    let server = Server::start(&[]);
    let args = ["--count".as_ref(), "200".as_ref(), "--max-tokens".as_ref(), "256".as_ref()];
    let stdout = server.run_python("bounded_output.py", &args, "every output ended and validated");
    println!("{stdout}");
}
