//! The cache's entries: each answer's events under its key in an [`Lru`], weighed by their size in memory.

use std::time::Instant;

use tgi_engines::scheduler::Event;

use super::key::Key;
use super::{CacheConfig, Events};
use crate::serve::lru::Lru;

/// Bytes an entry costs beyond its key and events (map slots, the recency index, the allocation).
const ENTRY_OVERHEAD: usize = 128;

/// The cached answers.
pub struct Store(Lru<Key, Events>);

impl Store {
    /// An empty store.
    pub fn new(config: CacheConfig) -> Self {
        Store(Lru::new(config.size, config.ttl))
    }

    /// The events stored under `key`, when there and not expired.
    pub fn get(&mut self, key: &Key) -> Option<Events> {
        self.0.get(key, Instant::now())
    }

    /// Stores `events` under `key` (replacing what was there); an answer larger than a byte bound is not stored.
    pub fn insert(&mut self, key: Key, events: Events) {
        let bytes = entry_bytes(&key, &events);
        self.0.insert(key, events, bytes, Instant::now());
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Approximate bytes held.
    pub fn bytes(&self) -> usize {
        self.0.bytes()
    }

    /// Entries evicted so far.
    pub fn evictions(&self) -> u64 {
        self.0.evictions()
    }
}

/// An entry's approximate size in memory.
fn entry_bytes(key: &Key, events: &Events) -> usize {
    key.len() + ENTRY_OVERHEAD + events.iter().map(|(_, e)| event_bytes(e)).sum::<usize>()
}

/// An event's approximate size in memory.
fn event_bytes(e: &Event) -> usize {
    let pair = std::mem::size_of::<(u32, f32)>();
    std::mem::size_of::<(usize, Event)>()
        + match e {
            Event::Token(t) => t.piece.len() + t.text.len() + t.top.len() * pair,
            Event::PromptLogprobs(lp) => lp.iter().map(|p| 16 + p.as_ref().map_or(0, |p| p.top.len() * pair)).sum(),
            Event::Finished(f) => f.text.len(),
            Event::Failed(m) => m.len(),
            Event::Started { .. } => 0,
        }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::key::tests::request;
    use super::*;
    use crate::serve::lru::CacheSize;

    fn key(i: u32) -> Key {
        Key::of("m", &[request(&[i, i + 1])]).unwrap()
    }

    fn events(text: &str) -> Events {
        vec![(0, Event::Failed(text.into()))].into()
    }

    #[test]
    fn answers_are_weighed_by_their_key_and_events() {
        let mut s = Store::new(CacheConfig { size: CacheSize::Bytes(64 << 10), ttl: Duration::from_secs(60) });
        s.insert(key(1), events("abc"));
        assert_eq!(s.bytes(), entry_bytes(&key(1), &events("abc")));
        assert_eq!(s.bytes(), key(1).len() + ENTRY_OVERHEAD + std::mem::size_of::<(usize, Event)>() + 3);
        s.insert(key(2), events(&"y".repeat(64 << 10)));
        assert!(s.get(&key(2)).is_none() && s.get(&key(1)).is_some(), "an answer over the bound is not stored");
        assert_eq!((s.len(), s.evictions()), (1, 0));
    }
}
