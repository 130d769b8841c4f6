//! Compiled grammars kept for reuse within a byte budget, least recently used out first. A request never
//! holds a cached parser: it gets a deep copy (its own parser state and lexer), so evicting an entry never
//! takes a grammar from a request that uses it, and using a grammar never grows the entry.

use std::collections::hash_map::DefaultHasher;
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

use llguidance::TokenParser;

/// Bytes an entry is counted for per byte of its key (the grammar's canonical text): an over-estimate of
/// the compiled rules, measured at 12 (a long `enum`) to 120 (many optional properties) bytes per byte.
const BYTES_PER_KEY_BYTE: usize = 128;

/// What the cache holds, for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Grammars kept.
    pub entries: usize,
    /// Their estimated size in bytes (see [`entry_bytes`]).
    pub bytes: usize,
}

/// The cache.
pub struct GrammarCache {
    /// Most recently used last.
    entries: VecDeque<Entry>,
    /// The sum of the entries' sizes.
    bytes: usize,
    /// The budget.
    capacity: usize,
}

/// One compiled grammar.
struct Entry {
    hash: u64,
    key: String,
    parser: TokenParser,
    bytes: usize,
}

/// The estimated memory of a compiled grammar: its lexer's automaton (measured by llguidance) and
/// [`BYTES_PER_KEY_BYTE`] per byte of its canonical text for the rest.
fn entry_bytes(key: &str, parser: &TokenParser) -> usize {
    parser.parser.lexer_stats().num_bytes.saturating_add(key.len().saturating_mul(BYTES_PER_KEY_BYTE))
}

fn hash(key: &str) -> u64 {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

impl GrammarCache {
    /// An empty cache of `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        GrammarCache { entries: VecDeque::new(), bytes: 0, capacity }
    }

    /// A fresh copy of the parser compiled for `key`, which becomes the most recently used.
    pub fn get(&mut self, key: &str) -> Option<TokenParser> {
        let h = hash(key);
        let i = self.entries.iter().position(|e| e.hash == h && e.key == key)?;
        let entry = self.entries.remove(i)?;
        let parser = entry.parser.deep_clone();
        self.entries.push_back(entry);
        Some(parser)
    }

    /// Keeps `parser` for `key`, evicting the least recently used entries over the budget; a grammar larger
    /// than the whole budget is not kept.
    pub fn insert(&mut self, key: String, parser: TokenParser) {
        let bytes = entry_bytes(&key, &parser);
        if bytes > self.capacity {
            return;
        }
        let h = hash(&key);
        if let Some(i) = self.entries.iter().position(|e| e.hash == h && e.key == key) {
            let old = self.entries.remove(i).expect("found");
            self.bytes -= old.bytes;
        }
        while self.bytes + bytes > self.capacity {
            let oldest = self.entries.pop_front().expect("the entries make up the bytes");
            self.bytes -= oldest.bytes;
        }
        self.bytes += bytes;
        self.entries.push_back(Entry { hash: h, key, parser, bytes });
    }

    /// What it holds.
    pub fn stats(&self) -> CacheStats {
        CacheStats { entries: self.entries.len(), bytes: self.bytes }
    }
}
