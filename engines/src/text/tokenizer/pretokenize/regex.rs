//! llama.cpp's general-purpose pre-tokenizer regexes (`unicode_regex_split` where no custom handler matches),
//! run as it runs them. A regex that names a Unicode category (`\p{L}`, `\p{N}`, `\p{P}`, `\p{M}`, `\p{S}`,
//! `\p{Lu}`...) runs over a collapsed text in which every non-ASCII code point stands for its category, with
//! each category in the regex rewritten as its stand-in plus its ASCII members: so `\p{Lu}` is any letter, as
//! in llama.cpp. Other regexes run over the text itself. Either way non-ASCII whitespace reads as a vertical
//! tab, and `\d` is ASCII, as in `std::regex`.

use fancy_regex::Regex;

use super::super::unicode::class;
use super::Words;

/// The categories llama.cpp collapses: the name in `\p{..}`, the code point standing for it, and its ASCII
/// members as a class body.
const CATEGORIES: [(&str, char, &str); 10] = [
    ("N", '\u{D1}', "0-9"),
    ("L", '\u{D2}', "A-Za-z"),
    ("P", '\u{D3}', r"!-#%-*,-/:-;?-@\[-\]_\{\}"),
    ("M", '\u{D4}', ""),
    ("S", '\u{D5}', r"\$\+<->\^`\|~"),
    ("Lu", '\u{D2}', "A-Za-z"),
    ("Ll", '\u{D2}', "A-Za-z"),
    ("Lt", '\u{D2}', "A-Za-z"),
    ("Lm", '\u{D2}', "A-Za-z"),
    ("Lo", '\u{D2}', "A-Za-z"),
];

/// What a non-ASCII code point of no collapsed category (separators, controls, unassigned) stands for.
const OTHER: char = '\u{D0}';

/// One compiled split regex.
#[derive(Debug)]
pub(super) struct SplitRegex {
    regex: Regex,
    /// The regex runs over the collapsed text.
    collapsed: bool,
}

impl SplitRegex {
    /// Compiles llama.cpp's `pattern`; an error names what `fancy-regex` refused.
    pub(super) fn new(pattern: &str) -> Result<Self, String> {
        let (rewritten, collapsed) = rewrite(pattern)?;
        let regex = Regex::new(&rewritten).map_err(|e| format!("pre-tokenizer regex {pattern:?}: {e}"))?;
        Ok(SplitRegex { regex, collapsed })
    }

    /// The code point lengths of the matches in `s` and of the text between them, in order.
    pub(super) fn split(&self, s: &[char]) -> Vec<usize> {
        let text: String = s.iter().map(|&c| self.stand_in(c)).collect();
        let mut words = Words::new();
        // Match offsets are bytes; the stand-ins are counted once, in order, to turn them into code points.
        let (mut byte, mut cp) = (0, 0);
        let mut to_cp = |to: usize| {
            cp += text[byte..to].chars().count();
            byte = to;
            cp
        };
        for m in self.regex.find_iter(&text) {
            // Past fancy-regex's backtracking limit the rest of the segment stays one word.
            let Ok(m) = m else { break };
            words.emit(to_cp(m.start()));
            words.emit(to_cp(m.end()));
        }
        words.emit(s.len());
        words.lens
    }

    /// The code point the regex sees for `c`.
    fn stand_in(&self, c: char) -> char {
        if c.is_ascii() {
            return c;
        }
        let cls = class(c);
        if cls.is_whitespace() {
            '\u{0B}'
        } else if !self.collapsed {
            c
        } else if cls.is_number() {
            '\u{D1}'
        } else if cls.is_letter() {
            '\u{D2}'
        } else if cls.is_punctuation() {
            '\u{D3}'
        } else if cls.is_mark() {
            '\u{D4}'
        } else if cls.is_symbol() {
            '\u{D5}'
        } else {
            OTHER
        }
    }
}

/// The pattern in `fancy-regex`'s syntax, and whether it runs over the collapsed text (it names a category).
/// Categories are rewritten as llama.cpp rewrites them, `\d` as `[0-9]`; everything else is kept.
fn rewrite(pattern: &str) -> Result<(String, bool), String> {
    let category = |rest: &str| {
        let name = rest.strip_prefix("p{")?.split_once('}')?.0;
        CATEGORIES.iter().find(|(n, ..)| *n == name).map(|&(n, c, ascii)| (n.len() + 3, c, ascii))
    };
    let collapsed = pattern.match_indices('\\').any(|(i, _)| category(&pattern[i + 1..]).is_some());
    if collapsed && !pattern.is_ascii() {
        return Err(format!("pre-tokenizer regex {pattern:?} mixes Unicode categories and non-ASCII text"));
    }
    let (mut out, mut inside) = (String::with_capacity(pattern.len() * 2), false);
    let mut rest = pattern;
    while let Some(c) = rest.chars().next() {
        rest = &rest[c.len_utf8()..];
        match c {
            '\\' => {
                let wrap = |out: &mut String, body: &str| {
                    if inside {
                        out.push_str(body);
                    } else {
                        out.extend(['[', ']']);
                        out.insert_str(out.len() - 1, body);
                    }
                };
                if let Some((len, stand_in, ascii)) = category(rest) {
                    wrap(&mut out, &format!("{stand_in}{ascii}"));
                    rest = &rest[len..];
                } else if let Some(after) = rest.strip_prefix('d') {
                    wrap(&mut out, "0-9");
                    rest = after;
                } else {
                    let next =
                        rest.chars().next().ok_or_else(|| format!("pre-tokenizer regex {pattern:?} ends in \\"))?;
                    out.push('\\');
                    out.push(next);
                    rest = &rest[next.len_utf8()..];
                }
            }
            '[' if !inside => {
                inside = true;
                out.push('[');
            }
            ']' if inside => {
                inside = false;
                out.push(']');
            }
            c => out.push(c),
        }
    }
    Ok((out, collapsed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(pattern: &str, text: &str) -> Vec<String> {
        let s: Vec<char> = text.chars().collect();
        let mut start = 0;
        SplitRegex::new(pattern)
            .unwrap()
            .split(&s)
            .into_iter()
            .map(|len| {
                start += len;
                s[start - len..start].iter().collect()
            })
            .collect()
    }

    #[test]
    fn categories_collapse_as_in_llama_cpp() {
        let (re, collapsed) = rewrite(r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+").unwrap();
        assert!(collapsed);
        assert_eq!(re, "[\u{D1}0-9]{1,3}| ?[^\\s\u{D2}A-Za-z\u{D1}0-9]+");
        assert_eq!(rewrite(r"[\d]\d").unwrap(), ("[0-9][0-9]".to_owned(), false));
        assert!(rewrite(r"\p{L}|é").is_err());
    }

    #[test]
    fn matches_and_the_text_between_them_are_words() {
        assert_eq!(split(r"\p{N}+", "ab12c٣٤"), ["ab", "12", "c", "٣٤"]);
        assert_eq!(split(r"[0-9][0-9][0-9]", "12345"), ["123", "45"]);
        // Every letter counts for \p{Lu}, as llama.cpp collapses it.
        assert_eq!(split(r"\p{Lu}+", "abЖ1"), ["abЖ", "1"]);
        // A lookahead that matches empty splits without making words.
        assert_eq!(split(r"(?=(\d{3})+(?!\d))", "1234567"), ["1", "234", "567"]);
        // Non-ASCII whitespace is \s, non-ASCII digits are not \d.
        assert_eq!(split(r"\s+", "a\u{3000}b"), ["a", "\u{3000}", "b"]);
        assert_eq!(split(r"\d+", "٣4"), ["٣", "4"]);
        assert_eq!(split(r"[一-龥]+", "ab我们c"), ["ab", "我们", "c"]);
    }
}
