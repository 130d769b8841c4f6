//! Where each token's text lies in a text (what `/tokenize` and `/chat_tokenize` report, and
//! completions' `text_offset`): the tokens' pieces matched left to right against the text.

use std::ops::Range;

use super::backend::Lexicon;

/// The byte range of `text` each of `ids` covers. A leading space the tokenizer added at the start
/// (SentencePiece's dummy prefix) is not part of the range; a token that matches nothing where it
/// stands (BOS, EOS, the tokens of a stop string left out of the text) gets an empty range there.
pub fn spans(lex: &dyn Lexicon, text: &str, ids: &[u32]) -> Vec<Range<usize>> {
    let bytes = text.as_bytes();
    let mut at = 0;
    ids.iter()
        .map(|&id| {
            let piece = lex.tokenizer().token_to_piece(id);
            let rest = &bytes[at..];
            let len = if lex.is_special(id) && !rest.starts_with(&piece) {
                0
            } else if rest.starts_with(&piece) {
                piece.len()
            } else if at == 0 && piece.first() == Some(&b' ') && rest.starts_with(&piece[1..]) {
                piece.len() - 1
            } else {
                0
            };
            let span = at..at + len;
            at = span.end;
            span
        })
        .collect()
}

/// The offset in characters of byte `at` of `text`: the characters that start before it (a byte
/// inside a character counts that character as begun).
pub fn char_offset(text: &str, at: usize) -> usize {
    text.as_bytes()[..at].iter().filter(|&&b| !is_continuation(b)).count()
}

/// Whether `b` continues a UTF-8 character rather than starting one.
fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::tests::lexicon;

    #[test]
    fn pieces_are_matched_left_to_right() {
        let lex = lexicon();
        let tok = lex.tokenizer();
        let text = "Once upon a time";
        let mut ids = tok.encode(text, true, false).unwrap();
        ids.extend(tok.eos_ids().first());
        let got = spans(lex.as_ref(), text, &ids);
        assert_eq!(got[0], 0..0, "BOS covers nothing");
        assert_eq!(got.last().unwrap().clone(), text.len()..text.len(), "EOS covers nothing");
        let joined: String = got.iter().map(|r| &text[r.clone()]).collect();
        assert_eq!(joined, text, "the dummy prefix space is not part of the first word");
        assert!(got.windows(2).all(|w| w[0].end == w[1].start));
    }

    #[test]
    fn char_offsets_count_characters_begun() {
        let text = "aé€b";
        assert_eq!([0, 1, 2, 3, 6, 7].map(|b| char_offset(text, b)), [0, 1, 2, 2, 3, 4]);
        assert_eq!(char_offset(text, text.len()), text.chars().count());
    }
}
