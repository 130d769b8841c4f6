//! llama.cpp's custom pre-tokenizer splits (`unicode_regex_split_custom_*`): hand-made matchers over code
//! points for the regexes it does not hand to a regex engine (GPT-2's, Llama 3's, Qwen2's, Kimi K2's) and for
//! AFMoE's digit groups.

use super::super::unicode::{class, is_han, CharClass};
use super::Words;

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
pub(super) fn gpt2(s: &[char]) -> Vec<usize> {
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
pub(super) fn llama3(s: &[char]) -> Vec<usize> {
    llama3_family(s, 3)
}

/// Qwen2's split regex.
pub(super) fn qwen2(s: &[char]) -> Vec<usize> {
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
        pos = numbers_or_rest(s, pos, digits, &mut words);
    }
    words.lens
}

/// Kimi K2's split: Han runs, then Llama 3's alternatives with Han characters taken out of the letters and
/// an optional English contraction after a word.
pub(super) fn kimi_k2(s: &[char]) -> Vec<usize> {
    let letter = |i: usize| is(s, i, CharClass::is_letter) && !is_han(s[i]);
    let mut words = Words::new();
    let mut pos = 0;
    while pos < s.len() {
        let c = s[pos];
        let cls = class(c);
        if is_han(c) {
            while s.get(pos).is_some_and(|&c| is_han(c)) {
                pos += 1;
            }
            words.emit(pos);
            continue;
        }
        // [^\r\n\p{L}\p{N}]?[letters other than Han]+ and a contraction.
        let leads = !(c == '\r' || c == '\n' || cls.is_letter() || cls.is_number());
        if letter(pos) || (leads && letter(pos + 1)) {
            pos = run_end_while(pos + usize::from(leads), letter);
            if let Some(len) = contraction(s, pos, true) {
                pos += len;
            }
            words.emit(pos);
            continue;
        }
        pos = numbers_or_rest(s, pos, 3, &mut words);
    }
    words.lens
}

/// AFMoE's digit split: each run of numbers in groups of three counted from its end (`1234567` is `1`, `234`,
/// `567`); everything else is left as it is.
pub(super) fn afmoe_digits(s: &[char]) -> Vec<usize> {
    let mut words = Words::new();
    let mut pos = 0;
    while pos < s.len() {
        if !is(s, pos, CharClass::is_number) {
            pos += 1;
            continue;
        }
        words.emit(pos);
        let end = run_end(s, pos, CharClass::is_number);
        let mut at = pos + (end - pos) % 3;
        words.emit(at);
        while at < end {
            at += 3;
            words.emit(at);
        }
        pos = end;
    }
    words.emit(s.len());
    words.lens
}

/// The end of the run of positions from `start` that `pred` accepts.
fn run_end_while(mut start: usize, pred: impl Fn(usize) -> bool) -> usize {
    while pred(start) {
        start += 1;
    }
    start
}

/// Llama 3's last alternatives at `pos`: `\p{N}{1,digits}`, ` ?[^\s\p{L}\p{N}]+[\r\n]*`, then whitespace. Emits
/// the words and returns where the next one starts.
fn numbers_or_rest(s: &[char], pos: usize, digits: usize, words: &mut Words) -> usize {
    if is(s, pos, CharClass::is_number) {
        return number_groups(s, pos, digits, words);
    }
    let end = other_run(s, pos).unwrap_or_else(|| whitespace_with_breaks(s, pos));
    words.emit(end);
    end
}

/// `\p{N}{1,digits}` repeated from `pos`: emits each group and returns the end of the numbers.
fn number_groups(s: &[char], mut pos: usize, digits: usize, words: &mut Words) -> usize {
    let mut start = pos;
    while is(s, pos, CharClass::is_number) {
        pos += 1;
        if pos - start >= digits {
            words.emit(pos);
            start = pos;
        }
    }
    words.emit(pos);
    pos
}

/// ` ?[^\s\p{L}\p{N}]+[\r\n]*` at `pos`: its end, if it matches.
fn other_run(s: &[char], pos: usize) -> Option<usize> {
    let start = pos + usize::from(s[pos] == ' ');
    if !is(s, start, CharClass::is_other) {
        return None;
    }
    let mut end = run_end(s, start, CharClass::is_other);
    while matches!(s.get(end), Some('\r' | '\n')) {
        end += 1;
    }
    Some(end)
}

/// `\s*[\r\n]+|\s+(?!\S)|\s+` at `pos`: up to the last line break of the whitespace run if it has one.
fn whitespace_with_breaks(s: &[char], pos: usize) -> usize {
    let end = run_end(s, pos, CharClass::is_whitespace);
    match s[pos..end].iter().rposition(|&c| c == '\r' || c == '\n') {
        Some(last_break) => pos + last_break + 1,
        None => whitespace_end(s, pos),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::words;
    use super::*;

    #[test]
    fn gpt2_split() {
        let got = words(gpt2, "Hello, y'all!  It's 2024\t\n  ok   x 🦙 ");
        let want =
            ["Hello", ",", " y", "'", "all", "!", " ", " It", "'s", " 2024", "\t\n ", " ok", "  ", " x", " 🦙", " "];
        assert_eq!(got, want);
        // Contractions are case-sensitive in GPT-2's regex.
        assert_eq!(words(gpt2, "I'M"), ["I", "'", "M"]);
    }

    #[test]
    fn llama3_split() {
        let got = words(llama3, "Hello, Y'ALL!\n\n (test) 1234567 \t\n  x  ");
        let want =
            ["Hello", ",", " Y", "'ALL", "!\n\n", " (", "test", ")", " ", "123", "456", "7", " \t\n", " ", " x", "  "];
        assert_eq!(got, want);
    }

    #[test]
    fn qwen2_splits_single_digits() {
        assert_eq!(words(qwen2, "a 123"), ["a", " ", "1", "2", "3"]);
    }

    #[test]
    fn kimi_k2_keeps_han_apart() {
        assert_eq!(
            words(kimi_k2, "我们apple's 12345 ok\n\n x"),
            ["我们", "apple's", " ", "123", "45", " ok", "\n\n", " x"]
        );
        assert_eq!(words(kimi_k2, " 我"), [" ", "我"]);
    }

    #[test]
    fn afmoe_groups_digits_from_the_end() {
        assert_eq!(words(afmoe_digits, "a1234567b12"), ["a", "1", "234", "567", "b", "12"]);
        assert_eq!(words(afmoe_digits, "123"), ["123"]);
    }

    #[test]
    fn empty_text_has_no_words() {
        for split in [gpt2, llama3, kimi_k2, afmoe_digits] {
            assert!(split(&[]).is_empty());
        }
    }
}
