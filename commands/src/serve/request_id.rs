//! The id of one HTTP request: the client's `x-request-id` when it is a sensible one, else a fresh
//! one. It names the request's log span, goes back in the response's `x-request-id` header and
//! travels with the engine requests it becomes.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::future::Future;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use hyper::header::{HeaderName, HeaderValue};
use hyper::HeaderMap;

/// The header carrying the id, both ways.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Longest id taken from a client, in bytes.
pub const MAX_LEN: usize = 128;

/// A request id: 1 to [`MAX_LEN`] printable ASCII characters without spaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestId(String);

tokio::task_local! {
    /// The id of the request the current task serves.
    static CURRENT: RequestId;
}

impl RequestId {
    /// The client's id from `headers` when it is valid, else a generated one.
    pub fn of(headers: &HeaderMap) -> RequestId {
        headers.get(X_REQUEST_ID).and_then(|v| RequestId::parse(v.as_bytes())).unwrap_or_else(RequestId::generate)
    }

    /// `raw` as an id, when it is 1 to [`MAX_LEN`] printable ASCII characters without spaces.
    pub fn parse(raw: &[u8]) -> Option<RequestId> {
        let ok = !raw.is_empty() && raw.len() <= MAX_LEN && raw.iter().all(u8::is_ascii_graphic);
        ok.then(|| RequestId(String::from_utf8_lossy(raw).into_owned()))
    }

    /// A fresh id: 32 hex digits, from a per-process random key and a counter (unique within the
    /// process, unpredictable across processes).
    pub fn generate() -> RequestId {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        static KEY: OnceLock<RandomState> = OnceLock::new();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let key = KEY.get_or_init(RandomState::new);
        RequestId(format!("{:016x}{:016x}", key.hash_one((n, 0u8)), key.hash_one((n, 1u8))))
    }

    /// The id as a header value.
    pub fn header_value(&self) -> HeaderValue {
        HeaderValue::from_str(&self.0).expect("ids are printable ASCII")
    }

    /// Runs `fut` as the task serving this request ([`RequestId::current`] inside it).
    pub async fn scope<F: Future>(self, fut: F) -> F::Output {
        CURRENT.scope(self, fut).await
    }

    /// The id of the request the current task serves; empty outside a request (e.g. in tests).
    pub fn current() -> String {
        CURRENT.try_with(|id| id.0.clone()).unwrap_or_default()
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_are_validated() {
        assert_eq!(RequestId::parse(b"abc-123_X.y").map(|i| i.to_string()).as_deref(), Some("abc-123_X.y"));
        assert_eq!(RequestId::parse(&[b'a'; MAX_LEN]).map(|i| i.0.len()), Some(MAX_LEN));
        for bad in [&b""[..], &[b'a'; MAX_LEN + 1], b"a b", b"a\tb", b"caf\xc3\xa9", b"x\x7f"] {
            assert_eq!(RequestId::parse(bad), None, "{bad:?}");
        }
        let mut h = HeaderMap::new();
        h.insert(X_REQUEST_ID, HeaderValue::from_static("given"));
        assert_eq!(RequestId::of(&h).to_string(), "given");
        h.insert(X_REQUEST_ID, HeaderValue::from_static("has space"));
        assert_eq!(RequestId::of(&h).to_string().len(), 32, "an invalid id is replaced");
    }

    #[test]
    fn generated_ids_are_distinct_and_valid() {
        let (a, b) = (RequestId::generate(), RequestId::generate());
        assert_ne!(a, b);
        assert_eq!(a.0.len(), 32);
        assert_eq!(RequestId::parse(a.0.as_bytes()), Some(a.clone()));
        assert_eq!(a.header_value(), a.0.as_str());
    }

    #[tokio::test]
    async fn current_follows_the_scope() {
        assert_eq!(RequestId::current(), "");
        let id = RequestId::parse(b"r1").unwrap();
        assert_eq!(id.scope(async { RequestId::current() }).await, "r1");
    }
}
