//! Finding special tokens in text before tokenization (llama.cpp's `tokenizer_st_partition`):
//! each control, user-defined and unknown token, longest first, splits the remaining text.

use std::ops::Range;

use super::vocab::{attr, Vocab};

/// A piece of the input: text still to tokenize, or a special token found in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Fragment {
    /// A byte range of the input.
    Text(Range<usize>),
    /// A special token.
    Token(u32),
}

/// Splits `text` around the special tokens it contains. Control and unknown tokens are only
/// looked for when `parse_special`; user-defined tokens always are.
pub(super) fn partition(vocab: &Vocab, text: &str, parse_special: bool) -> Vec<Fragment> {
    let mut fragments = Vec::new();
    if !text.is_empty() {
        fragments.push(Fragment::Text(0..text.len()));
    }
    for &id in &vocab.specials {
        let token = &vocab.tokens[id as usize];
        if !parse_special && token.attr & (attr::CONTROL | attr::UNKNOWN) != 0 {
            continue;
        }
        let mut split = Vec::with_capacity(fragments.len());
        for fragment in fragments {
            match fragment {
                Fragment::Text(range) => split_text(text, range, id, vocab.text(id), token.attr, &mut split),
                token @ Fragment::Token(_) => split.push(token),
            }
        }
        fragments = split;
    }
    fragments
}

/// Splits one text fragment at every occurrence of the special token `id` (whose text is `pat`).
fn split_text(text: &str, mut range: Range<usize>, id: u32, pat: &str, attr: u8, out: &mut Vec<Fragment>) {
    while let Some(at) = text[range.clone()].find(pat) {
        let start = range.start + at;
        if start > range.start {
            out.push(Fragment::Text(range.start..start));
        }
        out.push(Fragment::Token(id));
        let mut rest = start + pat.len();
        if attr & attr::RSTRIP != 0 {
            // C isspace: space, \t, \n, \v, \f, \r.
            while rest < range.end && matches!(text.as_bytes()[rest], b' ' | b'\t'..=b'\r') {
                rest += 1;
            }
        }
        range.start = rest;
    }
    if !range.is_empty() {
        out.push(Fragment::Text(range));
    }
}

#[cfg(test)]
mod tests {
    use super::super::testvocab::{gguf, spm_metadata, spm_vocab};
    use super::*;
    use tgi_formats::gguf::Value;
    use Fragment::{Text, Token};

    #[test]
    fn control_tokens_only_when_parsing_specials() {
        let vocab = spm_vocab();
        let s = vocab.id("<s>").unwrap();
        let user = vocab.id("<|user|>").unwrap();
        let text = "a<s>b<|user|><|user|>";
        assert_eq!(partition(&vocab, text, true), [Text(0..1), Token(s), Text(4..5), Token(user), Token(user)]);
        assert_eq!(partition(&vocab, text, false), [Text(0..5), Token(user), Token(user)]);
        assert!(partition(&vocab, "", true).is_empty());
        assert_eq!(partition(&vocab, "plain", true), [Text(0..5)]);
    }

    #[test]
    fn phi3_strips_whitespace_after_specials() {
        let mut meta = spm_metadata();
        meta[0].1 = Value::String("Phi3".into());
        let vocab = Vocab::from_gguf(&gguf(meta)).unwrap();
        let user = vocab.id("<|user|>").unwrap();
        let s = vocab.id("<s>").unwrap();
        assert_eq!(partition(&vocab, "<|user|> \n x", false), [Token(user), Text(11..12)]);
        assert_eq!(partition(&vocab, "<s> x", true), [Token(s), Text(3..5)]);
    }
}
