//! A bounded map whose entries expire, shared by the response cache and the Responses API's store: the least
//! recently used entries go first once the entry or byte bound ([`CacheSize`]) is passed, and an entry is
//! served until its time to live runs out. The caller passes the time (`now`), so tests script the clock.

mod size;

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use size::CacheSize;

/// One entry.
struct Entry<V> {
    value: V,
    bytes: usize,
    stored: Instant,
    /// Its place in the recency order.
    tick: u64,
}

/// Entries with their recency order and the bytes they hold.
pub struct Lru<K, V> {
    size: CacheSize,
    ttl: Duration,
    entries: HashMap<Arc<K>, Entry<V>>,
    /// Least recently used first.
    recency: BTreeMap<u64, Arc<K>>,
    next_tick: u64,
    bytes: usize,
    evictions: u64,
}

impl<K: Hash + Eq, V: Clone> Lru<K, V> {
    /// An empty map holding at most `size`, each entry for `ttl`.
    pub fn new(size: CacheSize, ttl: Duration) -> Self {
        Lru { size, ttl, entries: HashMap::new(), recency: BTreeMap::new(), next_tick: 0, bytes: 0, evictions: 0 }
    }

    /// The value under `key` at `now`, when there and not expired (an expired entry is dropped); the entry
    /// becomes the most recently used.
    pub fn get(&mut self, key: &K, now: Instant) -> Option<V> {
        let entry = self.entries.get(key)?;
        if now.saturating_duration_since(entry.stored) > self.ttl {
            self.remove(key);
            return None;
        }
        let value = entry.value.clone();
        let tick = self.tick();
        let entry = self.entries.get_mut(key).expect("checked above");
        let k = self.recency.remove(&entry.tick).expect("every entry has a tick");
        entry.tick = tick;
        self.recency.insert(tick, k);
        Some(value)
    }

    /// Stores `value`, of about `bytes` in memory, under `key` at `now` (replacing what was there), then evicts
    /// the least recently used entries until the bound holds. A value larger than a byte bound is not stored.
    pub fn insert(&mut self, key: K, value: V, bytes: usize, now: Instant) {
        if matches!(self.size, CacheSize::Bytes(max) if bytes > max) {
            return;
        }
        self.remove(&key);
        let key = Arc::new(key);
        let tick = self.tick();
        self.recency.insert(tick, key.clone());
        self.entries.insert(key, Entry { value, bytes, stored: now, tick });
        self.bytes += bytes;
        while self.over_bound() {
            let (_, oldest) = self.recency.pop_first().expect("over the bound with entries");
            let entry = self.entries.remove(&oldest).expect("every tick has an entry");
            self.bytes -= entry.bytes;
            self.evictions += 1;
        }
    }

    /// Removes the entry under `key`; whether there was one.
    pub fn remove(&mut self, key: &K) -> bool {
        let Some(entry) = self.entries.remove(key) else { return false };
        self.recency.remove(&entry.tick);
        self.bytes -= entry.bytes;
        true
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
        match self.size {
            CacheSize::Entries(max) => self.entries.len() > max,
            CacheSize::Bytes(max) => self.bytes > max,
        }
    }

    fn tick(&mut self) -> u64 {
        self.next_tick += 1;
        self.next_tick
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn least_recently_used_goes_first() {
        let (mut s, now) = (Lru::new(CacheSize::Entries(2), HOUR), Instant::now());
        s.insert(1, "a", 1, now);
        s.insert(2, "b", 1, now);
        assert!(s.get(&1, now).is_some());
        s.insert(3, "c", 1, now);
        assert!(s.get(&2, now).is_none(), "2 was the least recently used");
        assert!(s.get(&1, now).is_some() && s.get(&3, now).is_some());
        assert_eq!((s.len(), s.evictions()), (2, 1));
        s.insert(3, "d", 1, now);
        assert_eq!((s.len(), s.get(&3, now)), (2, Some("d")), "a replaced entry is not counted twice");
        assert!(s.remove(&3) && !s.remove(&3));
        assert_eq!((s.len(), s.bytes()), (1, 1));
    }

    #[test]
    fn byte_bound_holds_under_many_distinct_entries() {
        let (max, now) = (64 << 10, Instant::now());
        let mut s = Lru::new(CacheSize::Bytes(max), HOUR);
        for i in 0..10_000usize {
            s.insert(i, (), 100 + i % 300, now);
            assert!(s.bytes() <= max);
        }
        assert!(s.len() > 50 && s.evictions() > 9_000, "{} entries", s.len());
        let held: usize = s.entries.values().map(|e| e.bytes).sum();
        assert_eq!(held, s.bytes(), "the byte count matches the entries");
        assert_eq!(s.entries.len(), s.recency.len());
        s.insert(99_999, (), max + 1, now);
        assert!(s.get(&99_999, now).is_none(), "an entry over the bound is not stored");
    }

    #[test]
    fn entries_expire_after_their_time_to_live() {
        let (mut s, t0) = (Lru::new(CacheSize::Entries(8), HOUR), Instant::now());
        s.insert(1, "a", 10, t0);
        s.insert(2, "b", 10, t0 + HOUR);
        assert_eq!(s.get(&1, t0 + HOUR), Some("a"), "served until its time to live runs out");
        assert_eq!(s.get(&1, t0 + HOUR + Duration::from_millis(1)), None);
        assert_eq!((s.len(), s.bytes()), (1, 10), "the expired entry is dropped");
        assert_eq!(s.get(&2, t0 + 2 * HOUR), Some("b"), "each entry's time runs from its own insert");
        // A clock read before the insert (another thread's `now`) does not expire anything.
        assert_eq!(s.get(&2, t0), Some("b"));
    }
}
