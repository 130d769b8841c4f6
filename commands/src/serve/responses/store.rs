//! Stored responses (`store: true`, the default): each response's object, which `GET /v1/responses/{id}`
//! answers, and the conversation it ends, which a request naming it as `previous_response_id` continues. The
//! store is bounded (`--responses-store-size`, least recently used out first) and each response expires
//! (`--responses-store-ttl`); it reads the time from a [`Clock`], which tests script.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tgi_engines::text::chat::Message;

use crate::serve::lru::{CacheSize, Lru};

/// The store's bounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StoreConfig {
    /// Most responses, or most bytes of them.
    pub size: CacheSize,
    /// How long a response is kept after it was made.
    pub ttl: Duration,
}

impl Default for StoreConfig {
    /// `--responses-store-size`'s and `--responses-store-ttl`'s defaults.
    fn default() -> Self {
        StoreConfig { size: CacheSize::Bytes(64 << 20), ttl: Duration::from_secs(3600) }
    }
}

/// Where the store reads the time.
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> Instant;
}

/// The system's monotonic clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// What is kept of a response.
#[derive(Clone, Debug)]
pub struct Stored {
    /// The response object.
    pub response: Arc<Value>,
    /// Its conversation as chat messages: the earlier turns, its input and its output (not its instructions,
    /// which a continuation does not inherit).
    pub conversation: Arc<Vec<Message>>,
}

/// Bytes a response costs beyond its object's and conversation's JSON text (the map slot, the indexes).
const ENTRY_OVERHEAD: usize = 256;

/// The stored responses.
pub struct ResponseStore {
    entries: Mutex<Lru<String, Stored>>,
    clock: Arc<dyn Clock>,
}

impl ResponseStore {
    /// An empty store with these bounds, reading `clock`.
    pub fn new(config: StoreConfig, clock: Arc<dyn Clock>) -> Self {
        ResponseStore { entries: Mutex::new(Lru::new(config.size, config.ttl)), clock }
    }

    /// The response `id`, unless it was never stored, expired or was evicted or deleted.
    pub fn get(&self, id: &str) -> Option<Stored> {
        let now = self.clock.now();
        self.lock().get(&id.to_string(), now)
    }

    /// Keeps `stored` as response `id` (a response larger than a byte bound is not kept).
    pub fn put(&self, id: String, stored: Stored) {
        let bytes = id.len() + ENTRY_OVERHEAD + json_len(&*stored.response) + json_len(&*stored.conversation);
        let now = self.clock.now();
        self.lock().insert(id, stored, bytes, now);
    }

    /// Forgets response `id`; whether it was there.
    pub fn delete(&self, id: &str) -> bool {
        self.lock().remove(&id.to_string())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru<String, Stored>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Default for ResponseStore {
    fn default() -> Self {
        ResponseStore::new(StoreConfig::default(), Arc::new(SystemClock))
    }
}

/// The length of `v`'s JSON text.
fn json_len(v: &impl serde::Serialize) -> usize {
    serde_json::to_vec(v).map_or(0, |t| t.len())
}

#[cfg(test)]
pub mod tests {
    use serde_json::json;

    use super::*;

    /// A clock the test moves.
    pub struct ScriptedClock(Mutex<Instant>);

    impl ScriptedClock {
        /// A clock at some instant.
        pub fn new() -> Arc<Self> {
            Arc::new(ScriptedClock(Mutex::new(Instant::now())))
        }

        /// Moves the clock `by` forward.
        pub fn advance(&self, by: Duration) {
            *self.0.lock().unwrap() += by;
        }
    }

    impl Clock for ScriptedClock {
        fn now(&self) -> Instant {
            *self.0.lock().unwrap()
        }
    }

    fn stored(text: &str) -> Stored {
        Stored { response: Arc::new(json!({"id": text})), conversation: Arc::new(vec![Message::new("user", text)]) }
    }

    #[test]
    fn responses_expire_after_the_ttl_on_the_scripted_clock() {
        let clock = ScriptedClock::new();
        let config = StoreConfig { size: CacheSize::Entries(8), ttl: Duration::from_secs(60) };
        let store = ResponseStore::new(config, clock.clone());
        store.put("a".into(), stored("a"));
        clock.advance(Duration::from_secs(60));
        assert_eq!(store.get("a").unwrap().response["id"], "a", "kept for its whole time to live");
        store.put("b".into(), stored("b"));
        clock.advance(Duration::from_millis(1));
        assert!(store.get("a").is_none(), "expired");
        assert!(store.get("b").is_some(), "each response's time runs from when it was made");
        assert!(store.delete("b") && !store.delete("b") && store.get("b").is_none());
    }

    #[test]
    fn the_bound_evicts_the_least_recently_used() {
        let clock = ScriptedClock::new();
        let store = ResponseStore::new(StoreConfig { size: CacheSize::Entries(2), ttl: Duration::MAX }, clock);
        for id in ["a", "b"] {
            store.put(id.into(), stored(id));
        }
        assert!(store.get("a").is_some());
        store.put("c".into(), stored("c"));
        assert!(store.get("b").is_none() && store.get("a").is_some() && store.get("c").is_some());
        let small = StoreConfig { size: CacheSize::Bytes(300), ttl: Duration::MAX };
        let store = ResponseStore::new(small, ScriptedClock::new());
        store.put("x".into(), stored(&"x".repeat(100)));
        assert!(store.get("x").is_none(), "a response over the byte bound is not kept");
    }
}
