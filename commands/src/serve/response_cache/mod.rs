//! The response cache (`--response-cache-size`): the engine events of deterministic requests,
//! replayed for an identical request without touching the engine. It sits where an HTTP request's
//! candidates are submitted ([`super::generation::submit`]), so every generation route is covered,
//! each answer is rendered afresh for the route and its options, and a cached stream replays as a
//! stream. Entries are least-recently-used within the size bound and expire after
//! `--response-cache-ttl`.

mod directive;
mod key;
mod store;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tgi_engines::scheduler::{Event, Request};

pub use crate::serve::lru::CacheSize;
pub use directive::Directive;
use key::Key;
use store::Store;

/// The cache's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CacheConfig {
    /// The bound on entries or bytes.
    pub size: CacheSize,
    /// How long an entry is served after it was stored.
    pub ttl: Duration,
}

/// One HTTP request's engine events, tagged with the candidate index, in the order they came.
pub type Events = Arc<[(usize, Event)]>;

/// The cache: entries and counters.
pub struct ResponseCache {
    store: Mutex<Store>,
    counters: Counters,
}

/// Lookups by outcome.
#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    skipped: AtomicU64,
}

/// A snapshot of the cache for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Requests answered from the cache.
    pub hits: u64,
    /// Deterministic requests not found (or expired) and computed.
    pub misses: u64,
    /// Requests that could not use the cache: sampled without a seed, with a grammar, or `Cache-Control: no-cache`.
    pub skipped: u64,
    /// Entries held.
    pub entries: usize,
    /// Approximate bytes held (keys and events).
    pub bytes: usize,
    /// Entries evicted to stay within the size bound.
    pub evictions: u64,
}

/// What a lookup found.
pub enum Lookup {
    /// The events to replay.
    Hit(Events),
    /// Not there: record the answer with this recorder.
    Miss(Recorder),
    /// Not looked up; the recorder, when the answer may be stored.
    Skipped(Option<Recorder>),
}

impl ResponseCache {
    /// An empty cache.
    pub fn new(config: CacheConfig) -> Self {
        ResponseCache { store: Mutex::new(Store::new(config)), counters: Counters::default() }
    }

    /// Looks up the answer to `requests` (one HTTP request's candidates) for `model`, as `directive` allows.
    pub fn lookup(self: &Arc<Self>, model: &str, requests: &[Request], directive: Directive) -> Lookup {
        let c = &self.counters;
        let Some(key) = Key::of(model, requests) else {
            c.skipped.fetch_add(1, Ordering::Relaxed);
            return Lookup::Skipped(None);
        };
        let recorder = || Recorder { cache: self.clone(), key: key.clone(), events: Vec::new(), left: requests.len() };
        if !directive.lookup {
            c.skipped.fetch_add(1, Ordering::Relaxed);
            return Lookup::Skipped(directive.store.then(recorder));
        }
        match self.lock().get(&key) {
            Some(events) => {
                c.hits.fetch_add(1, Ordering::Relaxed);
                Lookup::Hit(events)
            }
            None => {
                c.misses.fetch_add(1, Ordering::Relaxed);
                Lookup::Miss(recorder())
            }
        }
    }

    /// The counters and the size held.
    pub fn stats(&self) -> CacheStats {
        let c = &self.counters;
        let s = self.lock();
        CacheStats {
            hits: c.hits.load(Ordering::Relaxed),
            misses: c.misses.load(Ordering::Relaxed),
            skipped: c.skipped.load(Ordering::Relaxed),
            entries: s.len(),
            bytes: s.bytes(),
            evictions: s.evictions(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Records one request's events as they arrive and stores them once every candidate finished
/// (never after a failure). Timings are zeroed: a replay waited in no queue and ran no inference.
pub struct Recorder {
    cache: Arc<ResponseCache>,
    key: Key,
    events: Vec<(usize, Event)>,
    left: usize,
}

impl Recorder {
    /// Notes candidate `index`'s `event`; `false` once the recording is over (stored or abandoned).
    pub fn observe(&mut self, index: usize, event: &Event) -> bool {
        let mut event = event.clone();
        match &mut event {
            Event::Started { queue_time, .. } => *queue_time = Duration::ZERO,
            Event::Finished(f) => f.inference_time = Duration::ZERO,
            Event::Failed(_) => return false,
            Event::Token(_) | Event::PromptLogprobs(_) => {}
        }
        let finished = matches!(event, Event::Finished(_));
        self.events.push((index, event));
        if finished {
            self.left -= 1;
            if self.left == 0 {
                let events = std::mem::take(&mut self.events);
                self.cache.lock().insert(self.key.clone(), events.into());
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use tgi_engines::sampling::FinishReason;
    use tgi_engines::scheduler::Finished;

    use super::key::tests::request;
    use super::*;

    fn finished() -> Event {
        Event::Finished(Finished {
            reason: FinishReason::Length,
            generated_tokens: 1,
            text: "x".into(),
            stop_sequence: None,
            seed: 1,
            inference_time: Duration::from_secs(1),
            preemptions: 0,
            speculated_tokens: 0,
            accepted_tokens: 0,
            embedding: Vec::new(),
        })
    }

    fn cache(size: CacheSize) -> Arc<ResponseCache> {
        Arc::new(ResponseCache::new(CacheConfig { size, ttl: Duration::from_secs(60) }))
    }

    /// Runs a lookup and, on a miss, records a finished answer; whether it was a hit.
    fn ask(c: &Arc<ResponseCache>, requests: &[Request], d: Directive) -> bool {
        match c.lookup("m", requests, d) {
            Lookup::Hit(_) => true,
            Lookup::Miss(mut r) | Lookup::Skipped(Some(mut r)) => {
                for i in 0..requests.len() {
                    r.observe(i, &Event::Started { queue_time: Duration::from_secs(1), cached_tokens: 0 });
                    r.observe(i, &finished());
                }
                false
            }
            Lookup::Skipped(None) => false,
        }
    }

    #[test]
    fn hits_after_a_recorded_answer_with_timings_zeroed() {
        let c = cache(CacheSize::Entries(4));
        let r = [request(&[1]), request(&[1])];
        assert!(!ask(&c, &r, Directive::default()));
        let Lookup::Hit(events) = c.lookup("m", &r, Directive::default()) else { panic!("no hit") };
        assert_eq!(events.len(), 4);
        assert!(events.iter().all(|(_, e)| match e {
            Event::Started { queue_time, .. } => queue_time.is_zero(),
            Event::Finished(f) => f.inference_time.is_zero(),
            _ => false,
        }));
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.skipped, s.entries), (1, 1, 0, 1));
        assert!(s.bytes > 0);
    }

    #[test]
    fn failures_and_partial_answers_are_not_stored() {
        let c = cache(CacheSize::Entries(4));
        let r = [request(&[2]), request(&[2])];
        let Lookup::Miss(mut rec) = c.lookup("m", &r, Directive::default()) else { panic!() };
        assert!(rec.observe(0, &finished()), "one candidate of two is not an answer");
        drop(rec);
        let Lookup::Miss(mut rec) = c.lookup("m", &r, Directive::default()) else { panic!() };
        assert!(!rec.observe(0, &Event::Failed("boom".into())));
        assert_eq!(c.stats().entries, 0);
    }

    #[test]
    fn directives_and_nondeterminism() {
        let c = cache(CacheSize::Entries(4));
        let r = [request(&[3])];
        let no_cache = Directive { lookup: false, store: true };
        let no_store = Directive { lookup: false, store: false };
        assert!(!ask(&c, &r, no_store));
        assert_eq!(c.stats().entries, 0, "no-store stores nothing");
        assert!(!ask(&c, &r, no_cache));
        assert_eq!(c.stats().entries, 1, "no-cache refreshes the entry");
        assert!(!ask(&c, &r, no_cache), "no-cache is never answered from the cache");
        assert!(ask(&c, &r, Directive::default()));
        let mut sampled = request(&[3]);
        sampled.params.temperature = 1.0;
        assert!(!ask(&c, &[sampled.clone()], Directive::default()));
        assert!(!ask(&c, &[sampled], Directive::default()));
        assert_eq!(c.stats().skipped, 5);
    }

    #[test]
    fn salts_never_share_an_entry() {
        let c = cache(CacheSize::Entries(4));
        let (a, b) = (Request { cache_salt: 1, ..request(&[4]) }, Request { cache_salt: 2, ..request(&[4]) });
        assert!(!ask(&c, std::slice::from_ref(&a), Directive::default()));
        assert!(!ask(&c, std::slice::from_ref(&b), Directive::default()));
        assert!(ask(&c, &[a], Directive::default()));
        assert!(ask(&c, &[b], Directive::default()));
    }
}
