//! Token ids by text, holding only the ids: the texts live once, in the vocabulary's entries. A 262k-token
//! vocabulary's `HashMap<String, u32>` took 17 MiB of buckets and a second copy of every text; this takes 2.5 MiB.

use std::hash::{BuildHasher, RandomState};

use hashbrown::hash_table::{Entry, HashTable};

/// An index from token text to id over texts that the caller keeps, `text_of(id)`, and passes to each lookup.
#[derive(Debug, Default)]
pub(super) struct TextIndex {
    /// Ids, hashed by their text.
    table: HashTable<u32>,
    /// The hasher of the texts.
    hasher: RandomState,
}

impl TextIndex {
    /// Indexes ids `0..n`; a text that two ids have is an error giving both.
    pub fn new<'a>(n: usize, text_of: impl Fn(u32) -> &'a str) -> Result<Self, (u32, u32)> {
        let hasher = RandomState::new();
        let mut table = HashTable::with_capacity(n);
        for id in 0..n as u32 {
            let text = text_of(id);
            let hash = hasher.hash_one(text);
            match table.entry(hash, |&other| text_of(other) == text, |&other| hasher.hash_one(text_of(other))) {
                Entry::Occupied(first) => return Err((*first.get(), id)),
                Entry::Vacant(slot) => {
                    slot.insert(id);
                }
            }
        }
        Ok(TextIndex { table, hasher })
    }

    /// The id whose text, `text_of(id)`, is `text`.
    pub fn get<'a>(&self, text: &str, text_of: impl Fn(u32) -> &'a str) -> Option<u32> {
        self.table.find(self.hasher.hash_one(text), |&id| text_of(id) == text).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_text_and_nothing_else() {
        let texts: Vec<String> = (0..1000).map(|i| format!("t{i}")).collect();
        let index = TextIndex::new(texts.len(), |id| &texts[id as usize]).unwrap();
        for (i, t) in texts.iter().enumerate() {
            assert_eq!(index.get(t, |id| &texts[id as usize]), Some(i as u32));
        }
        assert_eq!(index.get("t1000", |id| &texts[id as usize]), None);
        assert_eq!(index.get("", |id| &texts[id as usize]), None);
    }

    #[test]
    fn a_repeated_text_names_both_ids() {
        let texts = ["a", "b", "c", "b"];
        assert_eq!(TextIndex::new(texts.len(), |id| texts[id as usize]).unwrap_err(), (1, 3));
    }
}
