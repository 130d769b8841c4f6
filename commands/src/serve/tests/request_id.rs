//! Request ids: echoed when the client sends a valid one, generated otherwise, and carried by the
//! engine requests.

use serde_json::json;

use super::client::{request, Reply};
use super::TestServer;

/// `POST path` of a two-token generation, with `best_of` candidates.
fn generate(s: &TestServer, path: &str, best_of: usize, headers: &[(&str, &str)]) -> Reply {
    let parameters = json!({"max_new_tokens": 2, "best_of": best_of, "do_sample": best_of > 1});
    let body = serde_json::to_vec(&json!({"inputs": "hello", "parameters": parameters})).unwrap();
    let mut h = vec![("Content-Type", "application/json")];
    h.extend_from_slice(headers);
    request(s.addr, "POST", path, &h, &body)
}

#[test]
fn a_valid_client_id_is_echoed_and_reaches_the_engine() {
    let s = TestServer::start();
    let r = generate(&s, "/generate", 2, &[("x-request-id", "client-42")]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-request-id"), Some("client-42"));
    let ids: Vec<String> = s.submitted().into_iter().map(|q| q.request_id).collect();
    assert_eq!(ids, ["client-42", "client-42"], "both best_of candidates carry the id");
    let r = generate(&s, "/generate_stream", 1, &[("x-request-id", "stream-7")]);
    assert_eq!(r.header("x-request-id"), Some("stream-7"));
    assert_eq!(s.submitted().last().map(|q| q.request_id.as_str()), Some("stream-7"));
}

#[test]
fn missing_or_invalid_ids_are_replaced() {
    let s = TestServer::start();
    let long = "x".repeat(129);
    for headers in [vec![], vec![("x-request-id", "has space")], vec![("x-request-id", long.as_str())]] {
        let r = generate(&s, "/generate", 1, &headers);
        let id = r.header("x-request-id").unwrap_or_default().to_string();
        assert_eq!(id.len(), 32, "{headers:?}: {id}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        assert_eq!(s.submitted().last().map(|q| q.request_id.clone()), Some(id));
    }
    // Errors and routes that run nothing get an id too.
    let r = request(s.addr, "GET", "/nope", &[("x-request-id", "lost")], b"");
    assert_eq!((r.status, r.header("x-request-id")), (404, Some("lost")));
}
