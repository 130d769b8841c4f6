//! The cache's entries: a map from key to events, least recently used first out when the entry or
//! byte bound is passed, each entry served until its time to live runs out.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use tgi_engines::scheduler::Event;

use super::key::Key;
use super::{CacheConfig, CacheSize, Events};

/// Bytes an entry costs beyond its key and events (map slots, the recency index, the allocation).
const ENTRY_OVERHEAD: usize = 128;

/// One cached answer.
struct Entry {
    events: Events,
    bytes: usize,
    stored: Instant,
    /// Its place in the recency order.
    tick: u64,
}

/// Entries with their recency order and the bytes they hold.
pub struct Store {
    config: CacheConfig,
    entries: HashMap<Arc<Key>, Entry>,
    /// Least recently used first.
    recency: BTreeMap<u64, Arc<Key>>,
    next_tick: u64,
    bytes: usize,
    evictions: u64,
}

impl Store {
    /// An empty store.
    pub fn new(config: CacheConfig) -> Self {
        Store { config, entries: HashMap::new(), recency: BTreeMap::new(), next_tick: 0, bytes: 0, evictions: 0 }
    }

    /// The events stored under `key`, when there and not expired (an expired entry is dropped);
    /// the entry becomes the most recently used.
    pub fn get(&mut self, key: &Key) -> Option<Events> {
        let entry = self.entries.get(key)?;
        if entry.stored.elapsed() > self.config.ttl {
            self.remove(key);
            return None;
        }
        let events = entry.events.clone();
        let tick = self.tick();
        let entry = self.entries.get_mut(key).expect("checked above");
        let k = self.recency.remove(&entry.tick).expect("every entry has a tick");
        entry.tick = tick;
        self.recency.insert(tick, k);
        Some(events)
    }

    /// Stores `events` under `key` (replacing what was there), then evicts the least recently used
    /// entries until the bound holds. An answer larger than a byte bound is not stored.
    pub fn insert(&mut self, key: Key, events: Events) {
        let bytes = key.len() + ENTRY_OVERHEAD + events.iter().map(|(_, e)| event_bytes(e)).sum::<usize>();
        if matches!(self.config.size, CacheSize::Bytes(max) if bytes > max) {
            return;
        }
        self.remove(&key);
        let key = Arc::new(key);
        let tick = self.tick();
        self.recency.insert(tick, key.clone());
        self.entries.insert(key, Entry { events, bytes, stored: Instant::now(), tick });
        self.bytes += bytes;
        while self.over_bound() {
            let (_, oldest) = self.recency.pop_first().expect("over the bound with entries");
            let entry = self.entries.remove(&oldest).expect("every tick has an entry");
            self.bytes -= entry.bytes;
            self.evictions += 1;
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Approximate bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Entries evicted so far.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    fn over_bound(&self) -> bool {
        match self.config.size {
            CacheSize::Entries(max) => self.entries.len() > max,
            CacheSize::Bytes(max) => self.bytes > max,
        }
    }

    fn remove(&mut self, key: &Key) {
        if let Some(entry) = self.entries.remove(key) {
            self.recency.remove(&entry.tick);
            self.bytes -= entry.bytes;
        }
    }

    fn tick(&mut self) -> u64 {
        self.next_tick += 1;
        self.next_tick
    }
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

    fn key(i: u32) -> Key {
        Key::of("m", &[request(&[i, i + 1])]).unwrap()
    }

    fn events(text: &str) -> Events {
        vec![(0, Event::Failed(text.into()))].into()
    }

    fn store(size: CacheSize, ttl: Duration) -> Store {
        Store::new(CacheConfig { size, ttl })
    }

    #[test]
    fn least_recently_used_goes_first() {
        let mut s = store(CacheSize::Entries(2), Duration::from_secs(60));
        s.insert(key(1), events("a"));
        s.insert(key(2), events("b"));
        assert!(s.get(&key(1)).is_some());
        s.insert(key(3), events("c"));
        assert!(s.get(&key(2)).is_none(), "2 was the least recently used");
        assert!(s.get(&key(1)).is_some() && s.get(&key(3)).is_some());
        assert_eq!((s.len(), s.evictions()), (2, 1));
        s.insert(key(3), events("d"));
        assert_eq!(s.len(), 2, "a replaced entry is not counted twice");
    }

    #[test]
    fn byte_bound_holds_under_many_distinct_answers() {
        let max = 64 << 10;
        let mut s = store(CacheSize::Bytes(max), Duration::from_secs(60));
        for i in 0..10_000 {
            s.insert(key(i), events(&"x".repeat(i as usize % 300)));
            assert!(s.bytes() <= max);
        }
        assert!(s.len() > 50 && s.evictions() > 9_000, "{} entries", s.len());
        let held: usize = s.entries.values().map(|e| e.bytes).sum();
        assert_eq!(held, s.bytes(), "the byte count matches the entries");
        assert_eq!(s.entries.len(), s.recency.len());
        s.insert(key(99_999), events(&"y".repeat(max)));
        assert!(s.get(&key(99_999)).is_none(), "an answer over the bound is not stored");
    }

    #[test]
    fn entries_expire() {
        let ttl = Duration::from_secs(3600);
        let mut s = store(CacheSize::Entries(8), ttl);
        s.insert(key(1), events("a"));
        assert!(s.get(&key(1)).is_some());
        // Stored a little over its time to live ago (no sleeping: the test does not depend on the clock's pace).
        s.entries.values_mut().for_each(|e| e.stored -= ttl + Duration::from_millis(1));
        assert!(s.get(&key(1)).is_none());
        assert_eq!((s.len(), s.bytes()), (0, 0));
    }
}
