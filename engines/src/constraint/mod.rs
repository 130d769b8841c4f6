//! Constrained decoding: the grammar a request's output must match, checked against bounds before anything
//! recurses on it ([`GrammarLimits`]), compiled by llguidance against the model's vocabulary
//! ([`GrammarCompiler`]), and the per-sequence [`Constraint`] that masks each step's logits to the tokens the
//! grammar allows (end-of-sequence only where the grammar accepts).

mod any_json;
mod cache;
mod census;
mod compiler;
mod lark;
mod limits;
mod matcher;
mod numbers;
mod vocabulary;

#[cfg(test)]
mod testing {
    use super::{Constraint, Grammar, GrammarCompiler, GrammarConfig, GrammarLimits};
    use crate::text::tokenizer::Tokenizer;

    /// The bundled stories260K tokenizer (SentencePiece with byte fallback, 512 ids).
    pub fn stories() -> Tokenizer {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/stories260k/hf/tokenizer.json");
        Tokenizer::from_tokenizer_json(&root).expect("bundled tokenizer loads")
    }

    /// A compiler over [`stories`] with the default configuration.
    pub fn compiler() -> GrammarCompiler {
        let tok = stories();
        GrammarCompiler::new(&tok, 512, tok.eos_ids(), &GrammarConfig::default()).unwrap()
    }

    /// Whether `grammar` accepts `text` whole, on [`stories`]'s vocabulary.
    pub fn accepts(c: &GrammarCompiler, grammar: &Grammar, text: &str) -> bool {
        let checked = GrammarLimits::default().check(grammar.clone()).unwrap();
        let (constraint, _) = c.compile(&checked).unwrap();
        follows(&constraint, text)
    }

    /// Whether `constraint` lets `text` through and then end, spelled with the longest allowed tokens.
    pub fn follows(constraint: &Constraint, text: &str) -> bool {
        let tok = stories();
        let mut rest = text.as_bytes();
        while !rest.is_empty() {
            if constraint.is_finished() {
                return false;
            }
            let Ok(mask) = constraint.mask() else { return false };
            let longest = (0..tok.vocab_size() as u32)
                .filter(|&t| mask.allows(t))
                .map(|t| (t, tok.token_to_piece(t)))
                .filter(|(_, piece)| !piece.is_empty() && rest.starts_with(piece))
                .max_by_key(|(_, piece)| piece.len());
            let Some((t, piece)) = longest else { return false };
            if constraint.commit(t).is_err() {
                return false;
            }
            rest = &rest[piece.len()..];
        }
        constraint.is_finished() || constraint.mask().is_ok_and(|m| tok.eos_ids().iter().any(|&e| m.allows(e)))
    }
}

pub use cache::CacheStats;
pub use compiler::{laid_out, Compiled, GrammarCell, GrammarCompiler, GrammarConfig};
pub use limits::{Bound, CheckError, CheckedGrammar, GrammarLimits};
pub use matcher::{Constraint, Mask};
pub use numbers::NumberDigits;

/// What a request's output must match, as the HTTP layer parsed it (compiled by [`GrammarCompiler`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Grammar {
    /// Any JSON object (OpenAI `response_format: {"type": "json_object"}`).
    JsonObject,
    /// JSON valid for this JSON Schema (TGI `grammar: {"type": "json"}`, OpenAI `json_schema`).
    JsonSchema(serde_json::Value),
    /// Text matching this regular expression as a whole (TGI `grammar: {"type": "regex"}`).
    Regex(String),
    /// A grammar in llguidance's Lark dialect, which may embed JSON schemas with `%json`.
    Lark(String),
}

impl Grammar {
    /// The grammar's kind, as requests name it (`json_object`, `json_schema`, `regex`, `lark`).
    pub fn kind(&self) -> &'static str {
        match self {
            Grammar::JsonObject => "json_object",
            Grammar::JsonSchema(_) => "json_schema",
            Grammar::Regex(_) => "regex",
            Grammar::Lark(_) => "lark",
        }
    }
}

/// Why a grammar cannot constrain a request, or why enforcing it failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConstraintError {
    /// The grammar does not compile: a syntax error, an unsatisfiable schema, or a schema feature the
    /// engine cannot enforce (named in the message); the request is refused rather than left unconstrained.
    #[error("invalid {kind} grammar: {message}")]
    Invalid {
        /// The grammar's kind.
        kind: &'static str,
        /// llguidance's message.
        message: String,
    },
    /// The model's vocabulary cannot carry a grammar (e.g. no end-of-sequence token).
    #[error("this model's vocabulary cannot be constrained: {0}")]
    Vocabulary(String),
    /// Enforcing the grammar failed while decoding (the parser's step limits, or no token allowed).
    #[error("the grammar could not be enforced: {0}")]
    Enforce(String),
}
