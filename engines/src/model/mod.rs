//! Models: one decoder, parameterised per family, over a linear-layer abstraction shared by every weight format,
//! and the loader that builds one from a Hugging Face directory, a hub id or a GGUF file.

mod awq;
mod bnb;
mod bytes;
mod config;
mod decoder;
mod embedding;
mod family;
mod host_heap;
mod insitu;
mod linear;
mod load;
mod mlp;
mod moe;
mod observe;
pub(crate) mod rope;
mod weights;

pub use config::{gemma_27b, gemma_windows, DecoderConfig, LongRope, RopeStyle, GEMMA3_LOCAL_THETA};
pub use decoder::{Decoder, Rows};
pub use family::{Activation, Family};
pub use insitu::Quantize;
pub use linear::{Linear, Repacked};
pub use load::{load, LoadOptions, LoadedModel};
pub use moe::route;
pub use observe::ActivationObserver;
pub use weights::OutputLayer;

use crate::kv::{BlockTable, KvError};

/// Errors loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A checkpoint file could not be read.
    #[error(transparent)]
    Source(#[from] tgi_formats::SourceError),
    /// A Hugging Face file is missing or malformed.
    #[error(transparent)]
    Hf(#[from] tgi_formats::hf::HfError),
    /// A bitsandbytes 4-bit weight is malformed.
    #[error(transparent)]
    Bnb(#[from] tgi_formats::bnb::BnbError),
    /// A GGUF file could not be read.
    #[error(transparent)]
    Gguf(#[from] tgi_formats::GgufError),
    /// The tokenizer could not be built.
    #[error(transparent)]
    Tokenizer(#[from] crate::text::tokenizer::TokenizerError),
    /// The chat template does not compile.
    #[error(transparent)]
    Chat(#[from] crate::text::chat::ChatTemplateError),
    /// The device could not be opened.
    #[error(transparent)]
    Device(#[from] crate::device::DeviceError),
    /// The KV cache refused.
    #[error(transparent)]
    Kv(#[from] KvError),
    /// A tensor operation failed.
    #[error("tensor operation failed: {0}")]
    Candle(#[from] candle_core::Error),
    /// The model uses something the engine does not implement.
    #[error("unsupported model: {0}")]
    Unsupported(String),
    /// The model's configuration is inconsistent.
    #[error("invalid model: {0}")]
    Config(String),
    /// A tensor the architecture needs is absent.
    #[error("the checkpoint has no tensor '{0}'")]
    MissingTensor(String),
    /// A tensor has the wrong shape.
    #[error("tensor '{name}' has shape {found:?}, expected {expected:?}")]
    Shape {
        /// Stored name.
        name: String,
        /// The shape the configuration implies.
        expected: Vec<usize>,
        /// The stored shape.
        found: Vec<usize>,
    },
    /// A token id beyond the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab}")]
    TokenOutOfRange {
        /// The id.
        id: u32,
        /// The vocabulary size.
        vocab: usize,
    },
    /// A sequence would pass the model's context length.
    #[error("{tokens} tokens exceed the model's context length of {context}")]
    ContextOverflow {
        /// Tokens the sequence would hold.
        tokens: usize,
        /// The context length.
        context: usize,
    },
    /// Pinning weights in RAM failed.
    #[error("--mlock: cannot lock the weights in memory ({0}); raise the limit (ulimit -l) or run without --mlock")]
    Mlock(std::io::Error),
}

/// Which logits a sequence wants back from a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// None (a prefill chunk that is not the last).
    None,
    /// The last new row's (to sample the next token).
    Last,
    /// Every new row's (speculative verification).
    All,
    /// The new rows' from the `k`-th on (perplexity, which scores the second half of each chunk).
    From(usize),
    /// No logits: the final normalized hidden state of every new row (mean pooling, see [`crate::pooling`]).
    HiddenAll,
    /// No logits: the final normalized hidden state of the last new row (last-token pooling).
    HiddenLast,
}

/// One sequence's input to a step.
#[derive(Clone, Copy, Debug)]
pub struct SeqInput<'a> {
    /// The new tokens: a prompt chunk, or one decode token.
    pub tokens: &'a [u32],
    /// Position of the first new token (tokens already in the cache).
    pub start: usize,
    /// The sequence's KV blocks, covering `start + tokens.len()` positions.
    pub table: &'a BlockTable,
    /// The logits wanted back.
    pub logits: Logits,
}
