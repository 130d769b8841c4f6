//! The calibration set, as AutoAWQ's `get_calib_dataset` builds it: texts tokenized one by one (BOS added as
//! the model asks), empty ones and ones longer than a block skipped, the rest concatenated and cut into blocks
//! of `seq_len` tokens. Texts are taken until `samples` blocks are filled (AutoAWQ counts texts instead).

use std::path::Path;

use crate::text::tokenizer::{Tokenizer, TokenizerError};

/// The calibration text shipped with tgi: original prose dedicated to the public domain (CC0; see
/// `calibration/LICENSE.md`), one paragraph per line.
pub const DEFAULT_TEXT: &str = include_str!("calibration/default.txt");

/// The name under which the shipped text is reported.
pub const DEFAULT_NAME: &str = "tgi-default (built-in, CC0)";

/// Errors reading or tokenizing a calibration set.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    /// A JSONL line is not an object with a string "text" field.
    #[error("{name}: line {line}: {message}")]
    Jsonl {
        /// The set's name.
        name: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// Tokenizing failed.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// Not even one block could be filled.
    #[error(
        "calibration set {name}: {tokens} usable tokens, but one sample needs --calib-seq-len {seq_len} \
         (texts longer than that are skipped, as AutoAWQ does)"
    )]
    TooShort {
        /// The set's name.
        name: String,
        /// Tokens gathered.
        tokens: usize,
        /// Tokens per block.
        seq_len: usize,
    },
    /// Zero samples or zero tokens per sample asked for.
    #[error("--calib-samples and --calib-seq-len must be at least 1")]
    Empty,
}

/// How a calibration file holds its texts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextFormat {
    /// Plain text, one text per non-empty line.
    Plain,
    /// JSON Lines, one object per line with a string field "text".
    Jsonl,
}

impl TextFormat {
    /// JSONL for `.jsonl`/`.json` files, plain text otherwise.
    pub fn from_path(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("jsonl" | "json") => TextFormat::Jsonl,
            _ => TextFormat::Plain,
        }
    }
}

/// The texts of a calibration file (`name` is used in error messages).
pub fn parse_texts(name: &str, content: &str, format: TextFormat) -> Result<Vec<String>, CalibrationError> {
    let lines = content.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    match format {
        TextFormat::Plain => Ok(lines.map(|(_, l)| l.trim().to_string()).collect()),
        TextFormat::Jsonl => lines
            .map(|(i, l)| {
                let err = |message: String| CalibrationError::Jsonl { name: name.to_string(), line: i + 1, message };
                let v: serde_json::Value = serde_json::from_str(l).map_err(|e| err(e.to_string()))?;
                match v.get("text") {
                    Some(serde_json::Value::String(s)) => Ok(s.trim().to_string()),
                    _ => Err(err("no string field \"text\"".into())),
                }
            })
            .collect(),
    }
}

/// Token blocks to calibrate on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Calibration {
    /// Where the texts came from.
    pub name: String,
    /// Tokens per block.
    pub seq_len: usize,
    /// The blocks (each `seq_len` tokens).
    pub blocks: Vec<Vec<u32>>,
    /// Texts tokenized into the blocks.
    pub texts_used: usize,
    /// Texts skipped for being empty or longer than a block.
    pub texts_skipped: usize,
}

impl Calibration {
    /// Up to `samples` blocks of `seq_len` tokens from `texts`.
    pub fn from_texts(
        name: &str,
        texts: &[String],
        tokenizer: &Tokenizer,
        samples: usize,
        seq_len: usize,
    ) -> Result<Self, CalibrationError> {
        if samples == 0 || seq_len == 0 {
            return Err(CalibrationError::Empty);
        }
        let want = samples * seq_len;
        let (mut stream, mut used, mut skipped) = (Vec::new(), 0, 0);
        for t in texts {
            if stream.len() >= want {
                break;
            }
            let ids = tokenizer.encode(t, true, false)?;
            if ids.is_empty() || ids.len() > seq_len || t.is_empty() {
                skipped += 1;
                continue;
            }
            stream.extend(ids);
            used += 1;
        }
        let blocks: Vec<Vec<u32>> = stream.chunks_exact(seq_len).take(samples).map(<[u32]>::to_vec).collect();
        if blocks.is_empty() {
            return Err(CalibrationError::TooShort { name: name.to_string(), tokens: stream.len(), seq_len });
        }
        Ok(Calibration { name: name.to_string(), seq_len, blocks, texts_used: used, texts_skipped: skipped })
    }

    /// Tokens in all blocks.
    pub fn tokens(&self) -> usize {
        self.blocks.len() * self.seq_len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokenizer() -> Tokenizer {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/stories-distill-4l/hf/tokenizer.json");
        Tokenizer::from_tokenizer_json(&root).unwrap()
    }

    #[test]
    fn jsonl_needs_a_text_field() {
        let t = parse_texts("c.jsonl", "{\"text\": \" a \"}\n\n{\"text\": \"b\"}\n", TextFormat::Jsonl).unwrap();
        assert_eq!(t, ["a", "b"]);
        let e = parse_texts("c.jsonl", "{\"text\": \"a\"}\n{\"body\": 1}\n", TextFormat::Jsonl).unwrap_err();
        assert_eq!(e.to_string(), "c.jsonl: line 2: no string field \"text\"");
        assert!(parse_texts("c.jsonl", "nope\n", TextFormat::Jsonl).is_err());
        assert_eq!(TextFormat::from_path(Path::new("x.jsonl")), TextFormat::Jsonl);
        assert_eq!(TextFormat::from_path(Path::new("x.txt")), TextFormat::Plain);
    }

    #[test]
    fn blocks_concatenate_texts_and_skip_long_ones() {
        let tok = tokenizer();
        let long = "Once upon a time there was a dog. ".repeat(20);
        let texts: Vec<String> =
            ["Lily went to the park.", long.as_str(), "", "The sun was big and warm."].map(String::from).to_vec();
        let a = tok.encode(&texts[0], true, false).unwrap();
        let b = tok.encode(&texts[3], true, false).unwrap();
        let seq = a.len().max(b.len());
        let c = Calibration::from_texts("t", &texts, &tok, 4, seq).unwrap();
        let stream: Vec<u32> = a.iter().chain(&b).copied().collect();
        assert_eq!(c.blocks.len(), stream.len() / seq);
        assert_eq!(c.blocks.concat(), stream[..c.tokens()]);
        assert_eq!((c.texts_used, c.texts_skipped), (2, 2));
        let e = Calibration::from_texts("t", &texts[..1], &tok, 4, 512).unwrap_err();
        assert!(e.to_string().contains("one sample needs --calib-seq-len 512"), "{e}");
    }

    #[test]
    fn the_default_text_fills_blocks() {
        let texts = parse_texts(DEFAULT_NAME, DEFAULT_TEXT, TextFormat::Plain).unwrap();
        let c = Calibration::from_texts(DEFAULT_NAME, &texts, &tokenizer(), 16, 128).unwrap();
        assert_eq!(c.blocks.len(), 16);
    }
}
