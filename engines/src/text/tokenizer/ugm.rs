//! llama.cpp's Unigram tokenizer (`llm_tokenizer_ugm`, T5-style SentencePiece vocabularies): the text
//! normalized with the vocabulary's precompiled character map, spaces escaped as `▁`, then the
//! tokenization with the highest sum of token scores (Viterbi over code points), unknown code points
//! costing 10 below the lowest score.

use std::collections::HashSet;

use super::token_texts::TokenTexts;
use super::vocab::{attr, Token, Vocab};
use super::TokenizerError;

/// The escaped space.
const SPACE: &str = "▁";

/// What a Unigram vocabulary adds to a vocabulary.
#[derive(Debug)]
pub(super) struct Ugm {
    /// The precompiled normalization map, if the vocabulary has one.
    charsmap: Option<CharsMap>,
    /// The score of an unknown code point.
    unknown_score: f64,
    /// The unknown token.
    unk: u32,
    /// The longest token text, in bytes.
    max_len: usize,
    /// Every prefix of every user-defined token: llama.cpp keeps the longest such prefix of the text as it
    /// is, whether or not it is a whole token.
    user_prefixes: HashSet<Vec<u8>>,
    /// The longest user-defined token text, in bytes (0: none, nothing to look for).
    user_max_len: usize,
    /// Runs of spaces become one (`tokenizer.ggml.remove_extra_whitespaces`).
    merge_spaces: bool,
}

impl Ugm {
    /// Reads the map from `tokenizer.ggml.precompiled_charsmap` (`None`: no map) for `tokens`.
    pub(super) fn new(
        tokens: &[Token],
        texts: &TokenTexts,
        charsmap: Option<&[u8]>,
        unk: u32,
        merge_spaces: bool,
    ) -> Result<Ugm, TokenizerError> {
        let charsmap = charsmap.map(CharsMap::parse).transpose()?;
        let min_score = tokens.iter().filter(|t| t.attr & attr::NORMAL != 0).map(|t| t.score).fold(f32::MAX, f32::min);
        let user_defined = || (0..tokens.len() as u32).filter(|&id| tokens[id as usize].attr & attr::USER_DEFINED != 0);
        let user_prefixes = user_defined()
            .flat_map(|id| {
                let text = texts.get(id).as_bytes();
                (1..=text.len()).map(|n| text[..n].to_vec())
            })
            .collect();
        let unknown_score = f64::from(min_score) - 10.0;
        Ok(Ugm {
            charsmap,
            unknown_score,
            unk,
            max_len: texts.longest(0..tokens.len() as u32),
            user_prefixes,
            user_max_len: texts.longest(user_defined()),
            merge_spaces,
        })
    }
}

/// Whether token `t` takes part in the Viterbi search (normal, user-defined and unused tokens do).
fn searchable(t: &Token) -> bool {
    t.attr & (attr::NORMAL | attr::USER_DEFINED | attr::UNUSED) != 0
}

/// Appends the tokens of `text` to `out`; `add_space_prefix` puts `▁` before the first word.
pub(super) fn tokenize(vocab: &Vocab, ugm: &Ugm, text: &str, add_space_prefix: bool, out: &mut Vec<u32>) {
    let text = normalize(ugm, text, add_space_prefix);
    if text.is_empty() {
        return;
    }
    // best[end]: the best tokenization of text[..end] as (its last token, where that token starts, score).
    let mut best = vec![(ugm.unk, 0usize, f64::MIN); text.len() + 1];
    best[0].2 = 0.0;
    let mut start = 0;
    while let Some(c) = text[start..].chars().next() {
        let char_end = start + c.len_utf8();
        let base = best[start].2;
        let mut whole_char = false;
        let last = text.len().min(start + ugm.max_len);
        for end in (char_end..=last).filter(|&e| text.is_char_boundary(e)) {
            let Some(id) = vocab.id(&text[start..end]) else { continue };
            let token = &vocab.tokens[id as usize];
            if !searchable(token) {
                continue;
            }
            whole_char |= end == char_end;
            // User-defined tokens score 0, above every log probability.
            let score = base + if token.attr & attr::USER_DEFINED != 0 { 0.0 } else { f64::from(token.score) };
            if score > best[end].2 {
                best[end] = (id, start, score);
            }
        }
        if !whole_char && base + ugm.unknown_score > best[char_end].2 {
            best[char_end] = (ugm.unk, start, base + ugm.unknown_score);
        }
        start = char_end;
    }
    // Back from the end, runs of unknown tokens merged into one.
    let first = out.len();
    let mut end = text.len();
    let mut prev_unknown = false;
    loop {
        let (id, start, _) = best[end];
        let unknown = id == ugm.unk;
        if !(prev_unknown && unknown) {
            out.push(id);
        }
        if start == 0 {
            break;
        }
        prev_unknown = unknown;
        end = start;
    }
    out[first..].reverse();
}

/// SentencePiece's normalization as llama.cpp does it: user-defined tokens kept as they are, the
/// longest prefix the character map knows replaced, spaces escaped (one before the text when
/// `add_space_prefix`, runs merged when the vocabulary asks).
fn normalize(ugm: &Ugm, text: &str, add_space_prefix: bool) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    let (mut prepended, mut in_word) = (false, false);
    let mut at = 0;
    while at < text.len() {
        let (piece, consumed) = normalize_prefix(ugm, &text[at..]);
        for c in piece.chars() {
            if c == ' ' {
                in_word = false;
                if !ugm.merge_spaces {
                    out.push_str(SPACE);
                }
            } else {
                if !in_word {
                    in_word = true;
                    if (add_space_prefix && !prepended) || ugm.merge_spaces {
                        out.push_str(SPACE);
                        prepended = true;
                    }
                }
                out.push(c);
            }
        }
        at += consumed;
    }
    out
}

/// The normalized text of the start of `text` and how many bytes of it that consumed.
fn normalize_prefix<'a>(ugm: &'a Ugm, text: &'a str) -> (&'a str, usize) {
    // (Cut at a character boundary, where llama.cpp would go on mid-character.)
    let user_defined = (1..=text.len().min(ugm.user_max_len))
        .rev()
        .find(|&n| text.is_char_boundary(n) && ugm.user_prefixes.contains(&text.as_bytes()[..n]));
    if let Some(n) = user_defined {
        return (&text[..n], n);
    }
    if let Some((replacement, n)) = ugm.charsmap.as_ref().and_then(|m| m.longest_prefix(text.as_bytes())) {
        return (replacement, n);
    }
    let n = text.chars().next().map_or(0, char::len_utf8);
    (&text[..n], n)
}

/// SentencePiece's precompiled character map: an XOR-compressed compact double array (XCDA) of the
/// input sequences it rewrites, each leaf pointing at a NUL-terminated replacement.
#[derive(Debug)]
struct CharsMap {
    /// Bit-packed nodes: BASE in bits 10-30 (shifted by bit 9), LCHECK in bits 0-7 and 31, LEAF in bit 8.
    nodes: Vec<u32>,
    /// The replacements, NUL-terminated, one after another.
    replacements: Vec<u8>,
}

impl CharsMap {
    /// Splits the map into nodes and replacements: a little-endian u32 of the nodes' size in bytes, the
    /// nodes, the replacements.
    fn parse(raw: &[u8]) -> Result<CharsMap, TokenizerError> {
        let bad = |problem: &str| TokenizerError::Metadata {
            key: "tokenizer.ggml.precompiled_charsmap".into(),
            problem: problem.into(),
        };
        let size = raw.get(..4).ok_or_else(|| bad("is shorter than its 4-byte header"))?;
        let size = u32::from_le_bytes(size.try_into().expect("4 bytes")) as usize;
        if !size.is_multiple_of(4) || raw.len() - 4 <= size {
            return Err(bad("has a node array that does not fit it"));
        }
        let nodes =
            raw[4..4 + size].chunks_exact(4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes"))).collect();
        Ok(CharsMap { nodes, replacements: raw[4 + size..].to_vec() })
    }

    /// Node `i`, 0 past the end (which matches no byte).
    fn node(&self, i: usize) -> u32 {
        self.nodes.get(i).copied().unwrap_or(0)
    }

    /// The replacement of the longest prefix of `input` the map knows, and that prefix's length.
    fn longest_prefix(&self, input: &[u8]) -> Option<(&str, usize)> {
        let base = |n: u32| (n >> 10) << ((n & (1 << 9)) >> 6);
        let mut index = base(self.node(0)) as usize;
        let mut found = None;
        for (i, &c) in input.iter().enumerate() {
            if c == 0 {
                break;
            }
            index ^= c as usize;
            let node = self.node(index);
            if node & ((1 << 31) | 0xFF) != u32::from(c) {
                break;
            }
            index ^= base(node) as usize;
            if (node >> 8) & 1 == 1 {
                found = Some((self.node(index) & ((1 << 31) - 1), i + 1));
            }
        }
        let (offset, len) = found?;
        let rest = self.replacements.get(offset as usize..)?;
        let text = &rest[..rest.iter().position(|&b| b == 0)?];
        Some((std::str::from_utf8(text).ok()?, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ugm(merge_spaces: bool) -> Ugm {
        let user_prefixes = HashSet::new();
        Ugm { charsmap: None, unknown_score: -10.0, unk: 0, max_len: 4, user_prefixes, user_max_len: 0, merge_spaces }
    }

    #[test]
    fn spaces_are_escaped_and_runs_merged_when_asked() {
        assert_eq!(normalize(&ugm(false), "a  b ", true), "▁a▁▁b▁");
        assert_eq!(normalize(&ugm(true), "  a  b ", true), "▁a▁b");
        assert_eq!(normalize(&ugm(false), "a", false), "a");
        assert_eq!(normalize(&ugm(true), " \n", true), "▁\n");
    }

    #[test]
    fn character_maps_are_checked() {
        assert!(CharsMap::parse(&[1, 0]).is_err());
        assert!(CharsMap::parse(&[8, 0, 0, 0, 1, 2, 3, 4]).is_err());
        let empty = CharsMap::parse(&[0, 0, 0, 0, b'a', 0]).unwrap();
        assert_eq!(empty.longest_prefix(b"abc"), None);
    }
}
