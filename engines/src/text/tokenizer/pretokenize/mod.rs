//! BPE pre-tokenizers: llama.cpp's splitting of text into words before merging (`unicode_regex_split`). A
//! pre-tokenizer is a list of regexes applied in turn, each splitting every word the previous ones left;
//! the regexes llama.cpp runs through hand-made matchers go through the same ones here ([`custom`]), the
//! others through a regex engine as llama.cpp runs them ([`regex`]).

mod custom;
mod regex;

pub(super) use tgi_formats::gguf::pre::{find, names};
use tgi_formats::gguf::pre::{PreType, GPT2};

use self::regex::SplitRegex;
use super::unicode::byte_char;

/// One split step.
#[derive(Debug)]
enum Stage {
    /// A hand-made matcher: the word lengths of a segment.
    Custom(fn(&[char]) -> Vec<usize>),
    /// A regex: its matches and the text between them.
    Regex(SplitRegex),
}

impl Stage {
    /// The step for llama.cpp's regex `pattern`: the custom matcher llama.cpp picks for exactly this text,
    /// else the regex.
    fn new(pattern: &str) -> Result<Stage, String> {
        const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
        const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
        Ok(match pattern {
            GPT2 => Stage::Custom(custom::gpt2),
            LLAMA3 => Stage::Custom(custom::llama3),
            QWEN2 => Stage::Custom(custom::qwen2),
            r"\p{Han}+" => Stage::Custom(custom::kimi_k2),
            r"\p{AFMoE_digits}" | r"\d{1,3}(?=(?:\d{3})*\b)" => Stage::Custom(custom::afmoe_digits),
            _ => Stage::Regex(SplitRegex::new(pattern)?),
        })
    }

    /// The word lengths of `segment`, adding up to its length.
    fn split(&self, segment: &[char]) -> Vec<usize> {
        match self {
            Stage::Custom(split) => split(segment),
            Stage::Regex(regex) => regex.split(segment),
        }
    }
}

/// How a BPE vocabulary splits text into words (`tokenizer.ggml.pre`).
#[derive(Debug)]
pub(super) struct PreTokenizer {
    stages: Vec<Stage>,
    /// Words come out in GPT-2's byte encoding (every UTF-8 byte one character), else as UTF-8.
    pub byte_encode: bool,
    /// Spaces are `▁` in the vocabulary (SentencePiece-style BPE).
    pub escape_whitespaces: bool,
    /// A word of line breaks only is looked up whole before merging (Gemma 4).
    pub newline_tokens: bool,
}

impl PreTokenizer {
    /// The pre-tokenizer of `pre`, its regexes compiled.
    pub(super) fn new(pre: &PreType) -> Result<Self, String> {
        let stages = pre.regexes.iter().map(|p| Stage::new(p)).collect::<Result<_, _>>()?;
        Ok(PreTokenizer {
            stages,
            byte_encode: pre.byte_encode,
            escape_whitespaces: pre.escape_whitespaces,
            newline_tokens: pre.names.contains(&"gemma4"),
        })
    }

    /// Splits `text` into words.
    pub(super) fn split(&self, text: &str) -> Vec<String> {
        let cps: Vec<char> = text.chars().collect();
        let mut lens = vec![cps.len()];
        for stage in &self.stages {
            let mut start = 0;
            lens = lens
                .iter()
                .flat_map(|&len| {
                    let seg = &cps[start..start + len];
                    start += len;
                    stage.split(seg)
                })
                .collect();
        }
        let (mut start, mut offset) = (0, 0);
        lens.iter()
            .map(|&len| {
                let bytes: usize = cps[start..start + len].iter().map(|c| c.len_utf8()).sum();
                let word = &text[offset..offset + bytes];
                (start, offset) = (start + len, offset + bytes);
                if self.byte_encode {
                    word.bytes().map(byte_char).collect()
                } else {
                    word.to_owned()
                }
            })
            .collect()
    }
}

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

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The words `split` makes of `text`.
    pub(crate) fn words(split: fn(&[char]) -> Vec<usize>, text: &str) -> Vec<String> {
        let s: Vec<char> = text.chars().collect();
        let mut start = 0;
        split(&s)
            .into_iter()
            .map(|len| {
                start += len;
                s[start - len..start].iter().collect()
            })
            .collect()
    }

    /// The words the pre-tokenizer named `name` makes of `text`, as UTF-8.
    fn pre_words(name: &str, text: &str) -> Vec<String> {
        let pre = PreTokenizer::new(find(name).unwrap()).unwrap();
        pre.split(text)
            .iter()
            .map(|w| {
                if !pre.byte_encode {
                    return w.clone();
                }
                let bytes: Vec<u8> = w.chars().map(|c| super::super::unicode::char_byte(c).unwrap()).collect();
                String::from_utf8(bytes).unwrap()
            })
            .collect()
    }

    #[test]
    fn every_pre_tokenizer_compiles_and_covers_its_text() {
        let text = "Hello, y'all! 我们 1234567 \t\n  x émoji 🦙 <sentinel:3> IMGIMGABZ ٣٤ ½";
        for pre in tgi_formats::gguf::pre::PRE_TYPES {
            let tok = PreTokenizer::new(pre).unwrap_or_else(|e| panic!("{:?}: {e}", pre.names));
            let words = tok.split(text);
            let joined: String = words.concat();
            let expected: String = if tok.byte_encode { text.bytes().map(byte_char).collect() } else { text.into() };
            assert_eq!(joined, expected, "{:?}", pre.names);
            assert!(tok.split("").is_empty());
        }
    }

    #[test]
    fn default_split_stages() {
        assert_eq!(pre_words("default", "ab...cd 12345 x+=y"), ["ab", "...", "cd", " ", "123", "45", " x", "+=", "y"]);
    }

    #[test]
    fn families_split_as_their_regexes() {
        // StarCoder and its kin split every digit, then GPT-2's regex.
        assert_eq!(pre_words("smollm", "a 123 b"), ["a", " ", "1", "2", "3", " b"]);
        // Bloom splits at whitespace and the punctuation it lists only.
        assert_eq!(pre_words("bloom", "hi, there.x"), ["hi", ",", " there", ".", "x"]);
        // DeepSeek LLM: line breaks alone, Latin words, CJK runs, numbers.
        assert_eq!(pre_words("deepseek-llm", "a\nbc 我们12"), ["a", "\n", "bc", " ", "我们", "12"]);
        // SuperBPE groups numbers in threes from the right.
        assert_eq!(pre_words("superbpe", "x1234567"), ["x", "1", "234", "567"]);
        // Gemma 4 keeps lines whole and its words in UTF-8.
        assert_eq!(pre_words("gemma4", "a b\n\nc"), ["a b", "\n\n", "c"]);
    }
}
