//! Hugging Face model directories: `config.json`, `generation_config.json`, the tokenizer files and
//! the weight files of a local directory or a Hub cache snapshot.

mod adapter_dir;
pub mod config;
pub mod generation;
mod json;
pub mod model_dir;
pub mod tokenizer;

use std::path::PathBuf;

pub use adapter_dir::resolve_adapter;
pub use config::{Architecture, GemmaExtras, LayerWindows, ModelConfig, MoeConfig, RopeScaling};
pub use generation::GenerationConfig;
pub use model_dir::{resolve, resolve_at, ModelFiles};
pub use tokenizer::GgufVocab;

/// An error reading a Hugging Face model; every message names the file (or Hub repo) and the problem.
#[derive(Debug, thiserror::Error)]
pub enum HfError {
    /// A file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A file is not valid JSON or does not have the expected structure.
    #[error("{}: invalid JSON: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: serde_json::Error,
    },
    /// A JSON field is missing, has the wrong type or an invalid value.
    #[error("{}: field '{field}': {problem}", path.display())]
    Field {
        /// The file.
        path: PathBuf,
        /// The field, dotted for nested objects (`rope_scaling.factor`).
        field: String,
        /// What is wrong with it.
        problem: String,
    },
    /// `config.json` names a model class tgi cannot convert.
    #[error("{}: unsupported architecture '{name}'; supported: {}", path.display(), config::supported_classes())]
    UnsupportedArchitecture {
        /// The config file.
        path: PathBuf,
        /// The class named in `architectures`.
        name: String,
    },
    /// A file or directory exists but cannot be used (missing pieces, unsupported contents).
    #[error("{}: {problem}", path.display())]
    Invalid {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// A model named `org/name` could not be found in, or fetched into, the Hub cache.
    #[error("Hugging Face Hub model '{repo}': {problem}")]
    Hub {
        /// The repo id.
        repo: String,
        /// What went wrong.
        problem: String,
    },
}
