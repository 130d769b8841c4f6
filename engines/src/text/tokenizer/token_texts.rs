//! Every token's text in one buffer. A 262k-token vocabulary held as one `String` a token took 8.4 MiB of
//! `String` headers and 262k heap chunks of at least 32 bytes for 2.3 MiB of text; this takes the text and 1 MiB.

/// The texts of tokens `0..len()`, end to end, and where each ends.
#[derive(Debug, Default)]
pub(super) struct TokenTexts {
    /// All texts, in id order.
    all: String,
    /// The end of each id's text in `all`.
    ends: Vec<u32>,
}

impl TokenTexts {
    /// An empty set with room for `n` texts.
    pub fn with_capacity(n: usize) -> Self {
        TokenTexts { all: String::new(), ends: Vec::with_capacity(n) }
    }

    /// Appends the text of the next id; `false` (and nothing appended) once the texts would pass 4 GiB.
    pub fn push(&mut self, text: &str) -> bool {
        let Ok(end) = u32::try_from(self.all.len() + text.len()) else { return false };
        self.all.push_str(text);
        self.ends.push(end);
        true
    }

    /// How many texts there are.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Frees the room reserved past the texts.
    pub fn shrink_to_fit(&mut self) {
        self.all.shrink_to_fit();
        self.ends.shrink_to_fit();
    }

    /// The text of `id`; panics past the end, like indexing.
    pub fn get(&self, id: u32) -> &str {
        let i = id as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.all[start..self.ends[i] as usize]
    }

    /// The length in bytes of the longest text of `ids` (0 for none).
    pub fn longest(&self, ids: impl Iterator<Item = u32>) -> usize {
        ids.map(|id| self.get(id).len()).max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_come_back_by_id() {
        let mut texts = TokenTexts::with_capacity(3);
        for t in ["▁the", "", "<0x0A>"] {
            assert!(texts.push(t));
        }
        assert_eq!(texts.len(), 3);
        texts.shrink_to_fit();
        assert_eq!([texts.get(0), texts.get(1), texts.get(2)], ["▁the", "", "<0x0A>"]);
        assert_eq!(texts.longest(0..3), 6);
        assert_eq!(texts.longest(1..2), 0);
    }
}
