//! llama.cpp's WordPiece tokenizer (`llm_tokenizer_wpm`, BERT-style vocabularies): the text split into
//! words at whitespace, punctuation and Chinese characters, each word (with a `▁` before it) spelt
//! greedily with the longest tokens, a word that cannot be spelt becoming the unknown token.

use unicode_normalization::UnicodeNormalization;

use super::unicode::class;
use super::vocab::Vocab;

/// What a WordPiece vocabulary adds to a vocabulary: its special ids and BERT's normalizer options.
#[derive(Debug)]
pub(super) struct Wpm {
    /// The token of a word that cannot be spelt.
    pub unk: u32,
    /// The separator ending a sequence encoded with specials.
    pub sep: Option<u32>,
    /// Characters are lowercased (`tokenizer.ggml.normalizer.lowercase`, by default).
    pub lowercase: bool,
    /// Accents are removed (`tokenizer.ggml.normalizer.strip_accents`, by default as `lowercase`).
    pub strip_accents: bool,
    /// The longest token text, in bytes.
    pub max_len: usize,
}

/// Appends the tokens of `text` to `out`.
pub(super) fn tokenize(vocab: &Vocab, wpm: &Wpm, text: &str, out: &mut Vec<u32>) {
    for word in words(wpm, text) {
        let word = format!("▁{word}");
        let start = out.len();
        let mut i = 0;
        while i < word.len() {
            // The longest piece from byte i that is a token (llama.cpp tries one byte past the longest).
            let end = word.len().min(i + wpm.max_len + 1);
            let Some((j, id)) = (i + 1..=end).rev().find_map(|j| Some((j, vocab.id(word.get(i..j)?)?))) else {
                out.truncate(start);
                break;
            };
            out.push(id);
            i = j;
        }
        if out.len() == start {
            out.push(wpm.unk);
        }
    }
}

/// The words of `text` as llama.cpp's `preprocess` cuts them: accents stripped (each character replaced
/// by the first of its canonical decomposition, marks dropped) and characters lowercased when the
/// vocabulary asks; NUL, U+FFFD and control characters dropped; punctuation, ASCII symbols and Chinese
/// characters words of their own.
fn words(wpm: &Wpm, text: &str) -> Vec<String> {
    let mut words = vec![String::new()];
    for c in text.chars() {
        let c = if wpm.strip_accents { c.nfd().next().unwrap_or(c) } else { c };
        let cls = class(c);
        if cls.is_whitespace() {
            if !words.last().is_some_and(String::is_empty) {
                words.push(String::new());
            }
            continue;
        }
        if c == '\0' || c == '\u{FFFD}' || cls.is_control() || (wpm.strip_accents && cls.is_mark()) {
            continue;
        }
        // Unicode's simple lowercase mapping: the first character of the full one.
        let lower = if wpm.lowercase { c.to_lowercase().next().unwrap_or(c) } else { c };
        if cls.is_punctuation() || (c < '\u{7F}' && cls.is_symbol()) || is_chinese(c) {
            if !words.last().is_some_and(String::is_empty) {
                words.push(String::new());
            }
            words.push(lower.to_string());
            words.push(String::new());
        } else if let Some(word) = words.last_mut() {
            word.push(lower);
        }
    }
    words.retain(|w| !w.is_empty());
    words
}

/// BERT's Chinese characters (`is_chinese_char`, with the range Hugging Face's code has, 0x2B920 rather
/// than 0x2B820).
fn is_chinese(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wpm(lowercase: bool) -> Wpm {
        Wpm { unk: 0, sep: None, lowercase, strip_accents: lowercase, max_len: 8 }
    }

    #[test]
    fn words_split_at_spaces_punctuation_and_han() {
        assert_eq!(
            words(&wpm(false), "  Hello, wörld!我们 a$b\u{7}c"),
            ["Hello", ",", "wörld", "!", "我", "们", "a", "$", "bc"]
        );
        assert_eq!(words(&wpm(true), "Héllo ÄPFEL"), ["hello", "apfel"]);
        assert_eq!(words(&wpm(false), "€5 \u{FFFD}\0"), ["€5"]);
        assert!(words(&wpm(false), " \n\t").is_empty());
    }
}
