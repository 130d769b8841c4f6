//! Compiles [`Grammar`]s into per-request [`Constraint`]s against one model's vocabulary, keeping the most
//! recently compiled grammars so that a repeated schema (the common case for agents) is not compiled again.

use std::collections::VecDeque;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Instant;

use llguidance::api::{ParserLimits, TopLevelGrammar};
use llguidance::toktrie::TokEnv;
use llguidance::{Matcher, ParserFactory, TokenParser};
use serde_json::{json, Value};

use super::matcher::Constraint;
use super::vocabulary::token_env;
use super::{ConstraintError, Grammar};
use crate::text::tokenizer::Tokenizer;

/// Compiled grammars kept for reuse.
const CACHE_ENTRIES: usize = 64;

/// How JSON is laid out when a schema does not say (`x-guidance`): as Python's `json.dumps` writes it, one
/// space after `,` and `:` and no other whitespace, so that the output's length is bounded by its content.
fn json_layout() -> Value {
    json!({"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": false})
}

/// Turns grammars into constraints for one model; shared by every request (thread-safe).
pub struct GrammarCompiler {
    factory: ParserFactory,
    /// Recently compiled grammars, most recent last: (the grammar's canonical text, its fresh parser).
    cache: Mutex<VecDeque<(String, TokenParser)>>,
}

/// What compiling a grammar did, for metrics.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Compiled {
    /// Seconds spent (lookup only, on a hit).
    pub seconds: f64,
    /// Whether the grammar came from the cache.
    pub cached: bool,
}

impl GrammarCompiler {
    /// A compiler for a model whose logits have `vocab` entries and whose generation ends at `eos`.
    pub fn new(tokenizer: &Tokenizer, vocab: usize, eos: &[u32]) -> Result<Self, ConstraintError> {
        let env: TokEnv = token_env(tokenizer, vocab, eos)?;
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| ConstraintError::Vocabulary(e.to_string()))?;
        factory.quiet();
        *factory.limits_mut() = ParserLimits { verbose_errors: false, ..ParserLimits::default() };
        Ok(GrammarCompiler { factory, cache: Mutex::new(VecDeque::new()) })
    }

    /// The constraint a new sequence starts from: `grammar` compiled (or taken from the cache). Errors name
    /// the grammar's kind and llguidance's reason (a syntax error, an unsupported schema feature, ...).
    pub fn compile(&self, grammar: &Grammar) -> Result<(Constraint, Compiled), ConstraintError> {
        let start = Instant::now();
        let (top, key) = top_level(grammar);
        let invalid =
            |e: &dyn std::fmt::Display| ConstraintError::Invalid { kind: grammar.kind(), message: e.to_string() };
        let hit = self.lookup(&key);
        let cached = hit.is_some();
        let parser = match hit {
            Some(p) => p,
            None => {
                let p = self.factory.create_parser(top).map_err(|e| invalid(&e))?;
                self.store(key, p.clone());
                p
            }
        };
        let matcher = Matcher::new(Ok(parser.deep_clone()));
        if let Some(e) = matcher.get_error() {
            return Err(invalid(&e));
        }
        // A grammar no token can start (e.g. a regex no text matches) is refused now, not mid-generation.
        let constraint = Constraint::new(matcher);
        constraint.mask().map_err(|e| invalid(&e))?;
        Ok((constraint, Compiled { seconds: start.elapsed().as_secs_f64(), cached }))
    }

    fn lookup(&self, key: &str) -> Option<TokenParser> {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        let i = cache.iter().position(|(k, _)| k == key)?;
        let entry = cache.remove(i)?;
        let parser = entry.1.deep_clone();
        cache.push_back(entry);
        Some(parser)
    }

    fn store(&self, key: String, parser: TokenParser) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() == CACHE_ENTRIES {
            cache.pop_front();
        }
        cache.push_back((key, parser));
    }
}

/// A [`GrammarCompiler`] built on first use (most servers never see a grammar), then shared.
#[derive(Default)]
pub struct GrammarCell {
    cell: OnceLock<Result<GrammarCompiler, ConstraintError>>,
}

impl GrammarCell {
    /// The compiler for this vocabulary (see [`GrammarCompiler::new`]); the first call builds it.
    pub fn get(&self, tokenizer: &Tokenizer, vocab: usize, eos: &[u32]) -> Result<&GrammarCompiler, ConstraintError> {
        let built = self.cell.get_or_init(|| {
            let start = Instant::now();
            let c = GrammarCompiler::new(tokenizer, vocab, eos);
            tracing::info!(seconds = start.elapsed().as_secs_f64(), vocab, "grammar vocabulary built");
            c
        });
        built.as_ref().map_err(Clone::clone)
    }
}

/// The schema with the default JSON layout ([`json_layout`]) unless it sets its own `x-guidance`; also for
/// schemas embedded in Lark grammars with `%json`, which llguidance lays out on its own otherwise.
pub fn laid_out(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Some(obj) = schema.as_object_mut() {
        obj.entry("x-guidance").or_insert_with(json_layout);
    }
    schema
}

/// llguidance's grammar for `grammar` and a canonical text of it (the cache key).
fn top_level(grammar: &Grammar) -> (TopLevelGrammar, String) {
    let top = match grammar {
        Grammar::JsonObject => TopLevelGrammar::from_json_schema(laid_out(&json!({"type": "object"}))),
        Grammar::JsonSchema(s) => TopLevelGrammar::from_json_schema(laid_out(s)),
        Grammar::Regex(rx) => TopLevelGrammar::from_regex(rx),
        Grammar::Lark(lark) => TopLevelGrammar::from_lark(lark.clone()),
    };
    let key = serde_json::to_string(&top).unwrap_or_default();
    (top, key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::constraint::testing::stories;

    fn compiler() -> GrammarCompiler {
        let tok = stories();
        GrammarCompiler::new(&tok, 512, tok.eos_ids()).unwrap()
    }

    #[test]
    fn bad_grammars_are_errors_naming_their_kind() {
        let c = compiler();
        let err = |g: Grammar| c.compile(&g).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err(Grammar::Regex("(".into())).starts_with("invalid regex grammar: "));
        assert!(err(Grammar::Lark("start: foo".into())).starts_with("invalid lark grammar: "));
        let unsupported = err(Grammar::JsonSchema(json!({"type": "string", "format": "no-such-format"})));
        assert!(unsupported.starts_with("invalid json_schema grammar: "), "{unsupported}");
        let unknown = err(Grammar::JsonSchema(json!({"type": "object", "unevaluatedProperties": {"type": "string"}})));
        assert!(unknown.contains("unevaluatedProperties"), "{unknown}");
        assert!(err(Grammar::Regex("[^\\s\\S]".into())).starts_with("invalid regex grammar: "), "matches no text");
    }

    #[test]
    fn a_repeated_grammar_comes_from_the_cache() {
        let c = compiler();
        let g = Grammar::JsonSchema(json!({"type": "object", "properties": {"a": {"type": "integer"}}}));
        assert!(!c.compile(&g).unwrap().1.cached);
        assert!(c.compile(&g).unwrap().1.cached);
        assert!(!c.compile(&Grammar::JsonObject).unwrap().1.cached);
    }
}
