//! Byte-level BPE pre-tokenizers: llama.cpp's splitting of text into words before merging, for the
//! split regexes of GPT-2, Llama 3 and Qwen2 and llama.cpp's `default` set, written as hand-made
//! matchers over code points (llama.cpp's own fast paths do the same for GPT-2 and Llama 3).

use super::unicode::{byte_char, class, CharClass};

/// How a byte-level BPE vocabulary splits text into words (`tokenizer.ggml.pre`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PreTokenizer {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
    Gpt2,
    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`.
    Llama3,
    /// Llama 3's regex with `\p{N}` in place of `\p{N}{1,3}`: one digit a word.
    Qwen2,
    /// llama.cpp's fallback: runs of punctuation (and `$+<=>^~|`), then GPT-2's split, then runs of
    /// numbers, then groups of three ASCII digits.
    Default,
}

impl PreTokenizer {
    /// Splits `text` into words, each in GPT-2's byte encoding (every UTF-8 byte one character).
    pub(super) fn split(self, text: &str) -> Vec<String> {
        let cps: Vec<char> = text.chars().collect();
        let mut lens = vec![cps.len()];
        let stages: &[Stage] = match self {
            PreTokenizer::Gpt2 => &[gpt2],
            PreTokenizer::Llama3 => &[llama3],
            PreTokenizer::Qwen2 => &[qwen2],
            PreTokenizer::Default => &[punctuation_runs, gpt2, number_runs, digit_triples],
        };
        for stage in stages {
            let mut start = 0;
            lens = lens
                .iter()
                .flat_map(|&len| {
                    let seg = &cps[start..start + len];
                    start += len;
                    stage(seg)
                })
                .collect();
        }
        let (mut start, mut offset) = (0, 0);
        lens.iter()
            .map(|&len| {
                let bytes: usize = cps[start..start + len].iter().map(|c| c.len_utf8()).sum();
                let word = &text[offset..offset + bytes];
                (start, offset) = (start + len, offset + bytes);
                word.bytes().map(byte_char).collect()
            })
            .collect()
    }
}

/// One split step: the word lengths of a segment, adding up to its length.
type Stage = fn(&[char]) -> Vec<usize>;

/// Collects word lengths: `emit(end)` closes the word running from the previous end.
struct Words {
    lens: Vec<usize>,
    prev: usize,
}

impl Words {
    /// No words yet.
    fn new() -> Self {
        Words { lens: Vec::new(), prev: 0 }
    }

    /// Ends the current word at `end` (nothing if it would be empty).
    fn emit(&mut self, end: usize) {
        if end > self.prev {
            self.lens.push(end - self.prev);
        }
        self.prev = end;
    }
}

/// The class at `i`, or `None` past the end of the segment (which matches no class).
fn class_at(s: &[char], i: usize) -> Option<CharClass> {
    s.get(i).map(|&c| class(c))
}

/// Whether the code point at `i` exists and has `pred`.
fn is(s: &[char], i: usize, pred: fn(CharClass) -> bool) -> bool {
    class_at(s, i).is_some_and(pred)
}

/// The end of the run of code points with `pred` starting at `start`.
fn run_end(s: &[char], mut start: usize, pred: fn(CharClass) -> bool) -> usize {
    while is(s, start, pred) {
        start += 1;
    }
    start
}

/// The length of an English contraction (`'s`, `'t`, `'re`, `'ve`, `'m`, `'ll`, `'d`) at `pos`.
fn contraction(s: &[char], pos: usize, fold_case: bool) -> Option<usize> {
    let at = |i: usize| s.get(i).map(|&c| if fold_case { c.to_ascii_lowercase() } else { c });
    if at(pos) != Some('\'') {
        return None;
    }
    match (at(pos + 1)?, at(pos + 2)) {
        ('s' | 't' | 'm' | 'd', _) => Some(2),
        ('r', Some('e')) | ('v', Some('e')) | ('l', Some('l')) => Some(3),
        _ => None,
    }
}

/// Whitespace at `pos`: `\s+(?!\S)` (all but the last of a run followed by more text), else `\s+`.
fn whitespace_end(s: &[char], pos: usize) -> usize {
    let end = run_end(s, pos, CharClass::is_whitespace);
    debug_assert!(end > pos, "every code point matches some alternative");
    if end - pos > 1 && end < s.len() {
        end - 1
    } else {
        end
    }
}

/// GPT-2's split regex.
fn gpt2(s: &[char]) -> Vec<usize> {
    let mut words = Words::new();
    let mut pos = 0;
    while pos < s.len() {
        if let Some(len) = contraction(s, pos, false) {
            pos += len;
        } else {
            // ` ?X+` for X in letters, numbers, others: the optional space leads into the run.
            let start = pos + usize::from(s[pos] == ' ');
            let run: Option<fn(CharClass) -> bool> = match class_at(s, start) {
                Some(c) if c.is_letter() => Some(CharClass::is_letter),
                Some(c) if c.is_number() => Some(CharClass::is_number),
                Some(c) if c.is_other() => Some(CharClass::is_other),
                _ => None,
            };
            pos = match run {
                Some(pred) => run_end(s, start, pred),
                None => whitespace_end(s, pos),
            };
        }
        words.emit(pos);
    }
    words.lens
}

/// Llama 3's split regex.
fn llama3(s: &[char]) -> Vec<usize> {
    llama3_family(s, 3)
}

/// Qwen2's split regex.
fn qwen2(s: &[char]) -> Vec<usize> {
    llama3_family(s, 1)
}

/// Llama 3's split regex with at most `digits` number characters a word.
fn llama3_family(s: &[char], digits: usize) -> Vec<usize> {
    let mut words = Words::new();
    let mut pos = 0;
    while pos < s.len() {
        let c = s[pos];
        let cls = class(c);
        if let Some(len) = contraction(s, pos, true) {
            pos += len;
            words.emit(pos);
            continue;
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if !(c == '\r' || c == '\n' || cls.is_number()) && (cls.is_letter() || is(s, pos + 1, CharClass::is_letter)) {
            pos = run_end(s, pos + 1, CharClass::is_letter);
            words.emit(pos);
            continue;
        }
        // \p{N}{1,digits}
        if cls.is_number() {
            let mut start = pos;
            while is(s, pos, CharClass::is_number) {
                pos += 1;
                if pos - start >= digits {
                    words.emit(pos);
                    start = pos;
                }
            }
            words.emit(pos);
            continue;
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
        let start = pos + usize::from(c == ' ');
        if is(s, start, CharClass::is_other) {
            pos = run_end(s, start, CharClass::is_other);
            while matches!(s.get(pos), Some('\r' | '\n')) {
                pos += 1;
            }
            words.emit(pos);
            continue;
        }
        // \s*[\r\n]+ ends at the last line break of the whitespace run, if it has one.
        let end = run_end(s, pos, CharClass::is_whitespace);
        pos = match s[pos..end].iter().rposition(|&c| c == '\r' || c == '\n') {
            Some(last_break) => pos + last_break + 1,
            None => whitespace_end(s, pos),
        };
        words.emit(pos);
    }
    words.lens
}

/// Splits a segment into the matches of `matcher` (leftmost, longest as it reports) and the text
/// between them, as llama.cpp's regex splitting keeps both.
fn split_matches(s: &[char], matcher: impl Fn(&[char], usize) -> usize) -> Vec<usize> {
    let mut words = Words::new();
    let mut pos = 0;
    while pos < s.len() {
        match matcher(s, pos) {
            0 => pos += 1,
            len => {
                words.emit(pos);
                pos += len;
                words.emit(pos);
            }
        }
    }
    words.emit(s.len());
    words.lens
}

/// The length of the run of code points with `pred` at `pos`.
fn run(s: &[char], pos: usize, pred: impl Fn(char) -> bool) -> usize {
    s[pos..].iter().take_while(|&&c| pred(c)).count()
}

/// `[\p{P}\$\+<=>\^~\|]+`.
fn punctuation_runs(s: &[char]) -> Vec<usize> {
    split_matches(s, |s, pos| run(s, pos, |c| class(c).is_punctuation() || "$+<=>^~|".contains(c)))
}

/// `\p{N}+`.
fn number_runs(s: &[char]) -> Vec<usize> {
    split_matches(s, |s, pos| run(s, pos, |c| class(c).is_number()))
}

/// `[0-9][0-9][0-9]`.
fn digit_triples(s: &[char]) -> Vec<usize> {
    split_matches(s, |s, pos| if run(s, pos, |c| c.is_ascii_digit()) >= 3 { 3 } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits and undoes the byte encoding, for readable expectations.
    fn words(pre: PreTokenizer, text: &str) -> Vec<String> {
        pre.split(text)
            .iter()
            .map(|w| {
                let bytes: Vec<u8> = w.chars().map(|c| super::super::unicode::char_byte(c).unwrap()).collect();
                String::from_utf8(bytes).unwrap()
            })
            .collect()
    }

    #[test]
    fn gpt2_split() {
        let got = words(PreTokenizer::Gpt2, "Hello, y'all!  It's 2024\t\n  ok   x 🦙 ");
        let want =
            ["Hello", ",", " y", "'", "all", "!", " ", " It", "'s", " 2024", "\t\n ", " ok", "  ", " x", " 🦙", " "];
        assert_eq!(got, want);
        // Contractions are case-sensitive in GPT-2's regex.
        assert_eq!(words(PreTokenizer::Gpt2, "I'M"), ["I", "'", "M"]);
    }

    #[test]
    fn llama3_split() {
        let got = words(PreTokenizer::Llama3, "Hello, Y'ALL!\n\n (test) 1234567 \t\n  x  ");
        let want =
            ["Hello", ",", " Y", "'ALL", "!\n\n", " (", "test", ")", " ", "123", "456", "7", " \t\n", " ", " x", "  "];
        assert_eq!(got, want);
    }

    #[test]
    fn qwen2_splits_single_digits() {
        assert_eq!(words(PreTokenizer::Qwen2, "a 123"), ["a", " ", "1", "2", "3"]);
    }

    #[test]
    fn default_split_stages() {
        assert_eq!(
            words(PreTokenizer::Default, "ab...cd 12345 x+=y"),
            ["ab", "...", "cd", " ", "123", "45", " x", "+=", "y"]
        );
    }

    #[test]
    fn empty_text_has_no_words() {
        for pre in [PreTokenizer::Gpt2, PreTokenizer::Llama3, PreTokenizer::Default] {
            assert!(pre.split("").is_empty());
        }
    }
}
