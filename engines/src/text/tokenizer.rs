//! The engine's tokenizer: llama.cpp's algorithms over a GGUF vocabulary (SentencePiece-style
//! and byte-level BPE, WordPiece, Unigram, special-token parsing, BOS/EOS handling), or the `tokenizers` crate over a
//! Hugging Face `tokenizer.json`.

mod bpe;
mod codec;
mod hf;
mod incremental;
mod merge;
mod pretokenize;
mod special;
mod spm;
#[cfg(test)]
mod testvocab;
mod text_index;
mod token_texts;
mod ugm;
mod unicode;
mod vocab;
mod wpm;

use std::path::{Path, PathBuf};

use tgi_formats::GgufFile;

pub use incremental::IncrementalDecoder;

/// Why a tokenizer could not be loaded or could not encode or decode.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A `tokenizer.ggml.*` key is missing or unusable.
    #[error("GGUF tokenizer metadata '{key}' {problem}")]
    Metadata {
        /// The full key.
        key: String,
        /// What is wrong with it.
        problem: String,
    },
    /// `tokenizer.ggml.model` names a tokenizer other than `llama`, `gpt2`, `gemma4`, `bert` or `t5`.
    #[error("unsupported GGUF tokenizer model '{0}' (supported: llama, gpt2, gemma4, bert, t5)")]
    UnsupportedModel(String),
    /// `tokenizer.ggml.pre` names a pre-tokenizer llama.cpp does not know either.
    #[error("unknown GGUF pre-tokenizer '{0}' (known: {names})", names = pretokenize::names())]
    UnsupportedPreTokenizer(String),
    /// Two vocabulary entries have the same text.
    #[error("duplicate token '{text}' in the vocabulary at ids {first} and {second}")]
    DuplicateToken {
        /// The text.
        text: String,
        /// The first id.
        first: u32,
        /// The second id.
        second: u32,
    },
    /// A `tokenizer.json` (or a config file beside it) could not be loaded.
    #[error("{}: {message}", path.display())]
    Hf {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The `tokenizers` crate failed to encode or decode.
    #[error("tokenizer: {0}")]
    Encode(String),
    /// A token id outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {size} tokens")]
    InvalidId {
        /// The id.
        id: u32,
        /// The vocabulary size.
        size: usize,
    },
    /// Byte fallback needed a byte the vocabulary has no token for.
    #[error("the vocabulary has no token for byte 0x{0:02X}")]
    NoByteToken(u8),
}

/// Text <-> token ids, exactly as llama.cpp (for GGUF vocabularies) or HF tokenizers (tokenizer.json) do it.
pub struct Tokenizer {
    backend: Backend,
}

/// Where the tokenization comes from.
enum Backend {
    Gguf(Box<vocab::Vocab>),
    Hf(Box<hf::HfTokenizer>),
}

impl Tokenizer {
    /// Loads a Hugging Face `tokenizer.json`; BOS and EOS come from the `tokenizer_config.json`
    /// and `generation_config.json` beside it when present.
    pub fn from_tokenizer_json(path: &Path) -> Result<Self, TokenizerError> {
        Ok(Tokenizer { backend: Backend::Hf(Box::new(hf::HfTokenizer::load(path)?)) })
    }

    /// Builds the tokenizer from a GGUF file's `tokenizer.ggml.*` metadata.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, TokenizerError> {
        Ok(Tokenizer { backend: Backend::Gguf(Box::new(vocab::Vocab::from_gguf(file)?)) })
    }

    /// Token ids of `text`. `add_special` adds BOS (and EOS) as the model asks; `parse_special`
    /// turns control tokens written in the text (`<|im_start|>`) into their ids.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>, TokenizerError> {
        match &self.backend {
            Backend::Gguf(v) => v.encode(text, add_special, parse_special),
            Backend::Hf(h) => h.encode(text, add_special, parse_special),
        }
    }

    /// The text of `ids`; `skip_special` leaves control tokens out.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        match &self.backend {
            Backend::Gguf(v) => v.decode(ids, skip_special),
            Backend::Hf(h) => h.decode(ids, skip_special),
        }
    }

    /// The raw bytes of one token (a byte token gives its byte, a control token its text), for
    /// incremental detokenization; empty for ids outside the vocabulary.
    pub fn token_to_piece(&self, id: u32) -> Vec<u8> {
        match &self.backend {
            Backend::Gguf(v) => v.piece(id, true).unwrap_or_default(),
            Backend::Hf(h) => h.piece(id),
        }
    }

    /// Number of token ids.
    pub fn vocab_size(&self) -> usize {
        match &self.backend {
            Backend::Gguf(v) => v.tokens.len(),
            Backend::Hf(h) => h.vocab_size(),
        }
    }

    /// The beginning-of-sequence token.
    pub fn bos_id(&self) -> Option<u32> {
        match &self.backend {
            Backend::Gguf(v) => v.bos,
            Backend::Hf(h) => h.bos,
        }
    }

    /// Tokens that end generation: EOS and, for GGUF, every end-of-turn token llama.cpp counts.
    pub fn eos_ids(&self) -> &[u32] {
        match &self.backend {
            Backend::Gguf(v) => &v.eog,
            Backend::Hf(h) => &h.eos,
        }
    }

    /// Whether `id` is a control token (BOS, EOS, chat markers, unknown; a special added token of a
    /// `tokenizer.json`): one that stands for no text of its own.
    pub fn is_control(&self, id: u32) -> bool {
        let control = vocab::attr::CONTROL | vocab::attr::UNKNOWN;
        match &self.backend {
            Backend::Gguf(v) => v.tokens.get(id as usize).is_some_and(|t| t.attr & control != 0),
            Backend::Hf(h) => h.special.contains(&id),
        }
    }

    /// Whether `encode` with `add_special` puts BOS first.
    pub fn add_bos(&self) -> bool {
        match &self.backend {
            Backend::Gguf(v) => v.add_bos,
            Backend::Hf(h) => h.add_bos,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testvocab::{bpe_metadata, gguf, spm_metadata};
    use super::*;
    use tgi_formats::gguf::Value;

    #[test]
    fn shareable_across_threads() {
        fn check<T: Send + Sync>() {}
        check::<Tokenizer>();
        check::<IncrementalDecoder<'static>>();
    }

    #[test]
    fn gguf_special_ids() {
        let spm = Tokenizer::from_gguf(&gguf(spm_metadata())).unwrap();
        assert_eq!(spm.bos_id(), Some(1));
        assert_eq!(spm.eos_ids(), [2]);
        assert!(spm.add_bos());
        assert_eq!(spm.vocab_size(), 3 + 256 + 11 + 2);
        assert!(spm.is_control(2) && !spm.is_control(3 + 256));
        let bpe = Tokenizer::from_gguf(&gguf(bpe_metadata())).unwrap();
        let eot = bpe.vocab_size() as u32 - 1;
        assert_eq!((bpe.bos_id(), bpe.eos_ids()), (Some(eot), &[eot][..]));
        assert!(!bpe.add_bos());
        assert_eq!(bpe.encode("the", true, false).unwrap().len(), 2);
    }

    #[test]
    fn gguf_errors() {
        let with = |key: &str, value: Value| {
            let mut meta: Vec<(&str, Value)> = bpe_metadata();
            meta.retain(|(k, _)| *k != key);
            meta.push((key, value));
            Tokenizer::from_gguf(&gguf(meta)).err().unwrap().to_string()
        };
        assert_eq!(
            with("tokenizer.ggml.model", Value::String("rwkv".into())),
            "unsupported GGUF tokenizer model 'rwkv' (supported: llama, gpt2, gemma4, bert, t5)"
        );
        let unknown = with("tokenizer.ggml.pre", Value::String("nope".into()));
        assert!(unknown.contains("'nope'") && unknown.contains("smollm") && unknown.contains("kimi-k2"), "{unknown}");
        assert!(with("tokenizer.ggml.merges", Value::U32(1)).contains("tokenizer.ggml.merges"));
        assert!(with("tokenizer.ggml.tokens", Value::strings(["a", "a"])).starts_with("duplicate token 'a'"));
        assert!(with("tokenizer.ggml.scores", Value::f32s([0.0])).contains("tokenizer.ggml.scores"));
    }
}
