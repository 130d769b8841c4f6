//! Compiles [`CheckedGrammar`]s into per-request [`Constraint`]s against one model's vocabulary, keeping
//! compiled grammars within a byte budget so that a repeated schema (the common case for agents) is not
//! compiled again. Everything that can fail fails here, at admission: llguidance's errors, a grammar no
//! token can start, and the parser's limits on the first tokens.

use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Instant;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::TokEnv;
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};

use super::any_json::any_object;
use super::cache::{CacheStats, GrammarCache};
use super::lark;
use super::limits::{CheckedGrammar, GrammarLimits};
use super::matcher::Constraint;
use super::numbers::NumberDigits;
use super::vocabulary::token_env;
use super::{ConstraintError, Grammar};
use crate::text::tokenizer::Tokenizer;

/// Tokens a new grammar is stepped through at admission (the lowest allowed id each time), so that a row
/// the first tokens overflow refuses the request rather than failing it after it started.
const PROBE_TOKENS: usize = 4;

/// How JSON is laid out when a schema does not say (`x-guidance`): as Python's `json.dumps` writes it, one
/// space after `,` and `:` and no other whitespace, so that the output's length is bounded by its content.
fn json_layout() -> Value {
    json!({"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": false})
}

/// How grammars are compiled and kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrammarConfig {
    /// The bounds grammars were checked against, and llguidance's limits.
    pub limits: GrammarLimits,
    /// The digits of numbers schemas leave unbounded.
    pub digits: NumberDigits,
    /// The compiled-grammar cache's budget in bytes.
    pub cache_bytes: usize,
}

impl Default for GrammarConfig {
    /// The default limits and digits, a 64 MiB cache.
    fn default() -> Self {
        GrammarConfig { limits: GrammarLimits::default(), digits: NumberDigits::default(), cache_bytes: 64 << 20 }
    }
}

/// Turns grammars into constraints for one model; shared by every request (thread-safe).
pub struct GrammarCompiler {
    factory: ParserFactory,
    digits: NumberDigits,
    cache: Mutex<GrammarCache>,
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
    pub fn new(
        tokenizer: &Tokenizer,
        vocab: usize,
        eos: &[u32],
        config: &GrammarConfig,
    ) -> Result<Self, ConstraintError> {
        let env: TokEnv = token_env(tokenizer, vocab, eos)?;
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| ConstraintError::Vocabulary(e.to_string()))?;
        factory.quiet();
        *factory.limits_mut() = config.limits.parser_limits();
        let cache = Mutex::new(GrammarCache::new(config.cache_bytes));
        Ok(GrammarCompiler { factory, digits: config.digits, cache })
    }

    /// The constraint a new sequence starts from: `grammar` compiled (or taken from the cache). Errors name
    /// the grammar's kind and llguidance's reason (a syntax error, an unsupported schema feature, a limit).
    pub fn compile(&self, grammar: &CheckedGrammar) -> Result<(Constraint, Compiled), ConstraintError> {
        let start = Instant::now();
        let grammar = grammar.grammar();
        let invalid = |e: &dyn std::fmt::Display| ConstraintError::Invalid {
            kind: grammar.kind(),
            // llguidance marks where verbose errors would say more.
            message: e.to_string().replace("\n<non-verbose/>", ""),
        };
        let (top, key) = self.top_level(grammar).map_err(|e| invalid(&e))?;
        let hit = self.lock().get(&key);
        let cached = hit.is_some();
        let parser = match hit {
            Some(p) => p,
            None => self.factory.create_parser(top).map_err(|e| invalid(&e))?,
        };
        let matcher = Matcher::new(Ok(parser.deep_clone()));
        if let Some(e) = matcher.get_error() {
            return Err(invalid(&e));
        }
        // A grammar no token can start (e.g. a regex no text matches) is refused now, not mid-generation.
        let constraint = Constraint::new(matcher);
        constraint.mask().map_err(|e| invalid(&e))?;
        if !cached {
            constraint.probe(PROBE_TOKENS).map_err(|e| invalid(&e))?;
            self.lock().insert(key, parser);
        }
        Ok((constraint, Compiled { seconds: start.elapsed().as_secs_f64(), cached }))
    }

    /// What the cache holds.
    pub fn cache_stats(&self) -> CacheStats {
        self.lock().stats()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GrammarCache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// llguidance's grammar for `grammar`, its numbers bounded and its JSON laid out, and a canonical text
    /// of it (the cache key).
    fn top_level(&self, grammar: &Grammar) -> Result<(TopLevelGrammar, String), String> {
        let schema = |mut s: Value| {
            self.digits.bound(&mut s);
            laid_out(&s)
        };
        let top = match grammar {
            Grammar::JsonObject => TopLevelGrammar::from_json_schema(laid_out(&any_object(&self.digits))),
            Grammar::JsonSchema(s) => TopLevelGrammar::from_json_schema(schema(s.clone())),
            Grammar::Regex(rx) => TopLevelGrammar::from_regex(rx),
            Grammar::Lark(text) => TopLevelGrammar::from_lark(lark::rewrite_schemas(text, schema)?),
        };
        let key = serde_json::to_string(&top).map_err(|e| e.to_string())?;
        Ok((top, key))
    }
}

/// A [`GrammarCompiler`] built on first use (most servers never see a grammar), then shared.
pub struct GrammarCell {
    config: GrammarConfig,
    cell: OnceLock<Result<GrammarCompiler, ConstraintError>>,
}

impl GrammarCell {
    /// A cell that builds its compiler with `config`.
    pub fn new(config: GrammarConfig) -> Self {
        GrammarCell { config, cell: OnceLock::new() }
    }

    /// The compiler for this vocabulary (see [`GrammarCompiler::new`]); the first call builds it.
    pub fn get(&self, tokenizer: &Tokenizer, vocab: usize, eos: &[u32]) -> Result<&GrammarCompiler, ConstraintError> {
        let built = self.cell.get_or_init(|| {
            let start = Instant::now();
            let c = GrammarCompiler::new(tokenizer, vocab, eos, &self.config);
            tracing::info!(seconds = start.elapsed().as_secs_f64(), vocab, "grammar vocabulary built");
            c
        });
        built.as_ref().map_err(Clone::clone)
    }

    /// The compiler, if built.
    pub fn built(&self) -> Option<&GrammarCompiler> {
        self.cell.get().and_then(|c| c.as_ref().ok())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::constraint::any_json;
    use crate::constraint::testing::{accepts, compiler, follows, stories};

    fn compile(c: &GrammarCompiler, g: Grammar) -> Result<(Constraint, Compiled), ConstraintError> {
        c.compile(&GrammarLimits::default().check(g).unwrap())
    }

    #[test]
    fn bad_grammars_are_errors_naming_their_kind() {
        let c = compiler();
        let err = |g: Grammar| compile(&c, g).err().map(|e| e.to_string()).unwrap_or_default();
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
        assert!(!compile(&c, g.clone()).unwrap().1.cached);
        assert!(compile(&c, g).unwrap().1.cached);
        assert!(!compile(&c, Grammar::JsonObject).unwrap().1.cached);
        assert_eq!(c.cache_stats().entries, 2);
    }

    #[test]
    fn unbounded_numbers_take_at_most_15_integer_and_10_fractional_digits() {
        let c = compiler();
        let number = Grammar::JsonSchema(json!({"type": "number"}));
        for ok in ["1", "-0.5", "123456789012345", "-999999999999999.9999999999", "0.0000000001"] {
            assert!(accepts(&c, &number, ok), "{ok}");
        }
        for too_long in ["1234567890123456", "0.12345678901", "1e5"] {
            assert!(!accepts(&c, &number, too_long), "{too_long}");
        }
        let integer = Grammar::JsonSchema(json!({"type": "integer"}));
        assert!(accepts(&c, &integer, "-123456789012345") && !accepts(&c, &integer, "1234567890123456"));
        let own = Grammar::JsonSchema(json!({"type": "number", "maximum": 1e17, "multipleOf": 0.5}));
        assert!(accepts(&c, &own, "12345678901234567.5"), "the schema's own bounds take precedence");
        let tool = Grammar::Lark("start: \"n=\" %json {\"type\": \"number\"}".into());
        assert!(accepts(&c, &tool, "n=2.5") && !accepts(&c, &tool, "n=1234567890123456"), "and in Lark");
    }

    #[test]
    fn json_object_output_is_bounded() {
        let c = compiler();
        let g = Grammar::JsonObject;
        assert!(accepts(&c, &g, r#"{"name": "Lily", "age": 3, "toys": [1, "ball", {"a": null}], "ok": true}"#));
        let long = format!(r#"{{"a": "{}"}}"#, "x".repeat(any_json::MAX_STRING_CHARS + 1));
        assert!(!accepts(&c, &g, &long), "strings");
        let key = format!(r#"{{"{}": 1}}"#, "k".repeat(any_json::MAX_KEY_CHARS + 1));
        assert!(!accepts(&c, &g, &key), "keys");
        let deep = |n: usize| format!(r#"{{"a": {}1{}}}"#, "[".repeat(n), "]".repeat(n));
        let depth = any_json::MAX_DEPTH;
        assert!(accepts(&c, &g, &deep(depth - 1)) && !accepts(&c, &g, &deep(depth)), "nesting");
        let items = |n: usize| format!(r#"{{"a": [{}]}}"#, vec!["1"; n].join(", "));
        let max = any_json::MAX_ITEMS;
        assert!(accepts(&c, &g, &items(max)) && !accepts(&c, &g, &items(max + 1)), "arrays");
    }

    #[test]
    fn the_cache_stays_within_its_bytes_over_10000_distinct_schemas() {
        let tok = stories();
        let config = GrammarConfig { cache_bytes: 8 << 20, ..GrammarConfig::default() };
        let c = GrammarCompiler::new(&tok, 512, tok.eos_ids(), &config).unwrap();
        let schema = |i: usize| {
            Grammar::JsonSchema(
                json!({"type": "object", "properties": {format!("k{i}"): {"type": "integer"}}, "required": [format!("k{i}")]}),
            )
        };
        let (first, _) = compile(&c, schema(0)).unwrap();
        let mut most = 0;
        for i in 1..10_000 {
            compile(&c, schema(i)).unwrap();
            let s = c.cache_stats();
            assert!(s.bytes <= config.cache_bytes, "{s:?} after {i}");
            most = most.max(s.entries);
        }
        assert!(most > 4 && c.cache_stats().entries < 10_000, "the cache kept some and evicted most: {most}");
        assert!(!compile(&c, schema(0)).unwrap().1.cached, "the first was evicted");
        assert!(follows(&first, "{\"k0\": 7}"), "the request that compiled it holds its own copy, still usable");
    }
}
