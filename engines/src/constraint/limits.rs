//! The bounds a grammar must keep to be compiled ([`GrammarLimits`]), checked by measuring the grammar
//! before anything recurses on it, and llguidance's own parser limits, stated here rather than left to its
//! defaults.
//!
//! What the bounds prevent: llguidance recurses on a JSON schema's nesting, on `$ref` chains and on an
//! object's properties, so an unbounded schema overflows any stack; its compile time grows faster than
//! linearly with the number of properties; and an Earley row (the items the parser holds at one position)
//! grows with the alternatives the grammar offers there, which `max_items_in_row` refuses mid-generation.
//! Bounding the choices a grammar offers bounds every row, so that the row limit never trips after
//! admission.

use llguidance::api::ParserLimits;

use super::census::{self, Census, Refusal};
use super::Grammar;

/// Earley items one choice can put in a row: an optional object property takes four (its optional
/// separator, name, colon and value); an enum value, an `anyOf` branch or a Lark alternative one.
const ITEMS_PER_CHOICE: usize = 4;

/// Items of a row that no choice accounts for (the enclosing rules, the lexer's pending items).
const ROW_ITEMS_SLACK: usize = 256;

/// Stack one level of schema nesting can take while llguidance compiles it (measured: about 3.3 KiB per
/// JSON level, 6.5 KiB per nested object, on x86-64).
const STACK_PER_LEVEL: usize = 8 << 10;

/// Stack a compile takes besides the schema's nesting (the lexer, regular expressions, the Earley rules
/// built one property at a time).
const STACK_BASE: usize = 32 << 20;

/// What a grammar may cost to be compiled and enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrammarLimits {
    /// Largest grammar in bytes: a JSON schema (about its size as compact JSON), a regular expression or a
    /// Lark grammar.
    pub max_bytes: usize,
    /// Deepest nesting of a JSON schema, counted in JSON levels (every object and array, the outermost 1).
    pub max_depth: usize,
    /// Most choices in one grammar: a JSON schema's object properties, enum values, `anyOf`/`oneOf`/`allOf`
    /// branches (their products, for branches inside `allOf`), type lists and `$ref`s; a Lark grammar's `|`
    /// alternatives and the choices of the schemas it embeds with `%json`.
    pub max_choices: usize,
    /// Most distinct `$ref` targets (each can add a chain of `max_depth` levels to llguidance's recursion).
    pub max_refs: usize,
    /// llguidance's fuel for building the lexer's regular expressions when compiling.
    pub initial_lexer_fuel: u64,
    /// llguidance's lexer fuel for one token mask.
    pub step_lexer_fuel: u64,
    /// llguidance's most Earley items created for one token mask.
    pub step_max_items: usize,
    /// llguidance's most lexer states (about 1-2 KiB each) a sequence may build.
    pub max_lexer_states: usize,
    /// llguidance's most symbols in the compiled grammar's rules.
    pub max_grammar_size: usize,
}

impl Default for GrammarLimits {
    /// Bounds for servers: schemas of a megabyte, 64 levels and 2,000 choices (OpenAI's structured outputs
    /// allow 5,000 properties, 10 levels and 1,000 enum values); llguidance's own defaults for the rest.
    fn default() -> Self {
        GrammarLimits {
            max_bytes: 1 << 20,
            max_depth: 64,
            max_choices: 2_000,
            max_refs: 256,
            initial_lexer_fuel: 1_000_000,
            step_lexer_fuel: 200_000,
            step_max_items: 50_000,
            max_lexer_states: 250_000,
            max_grammar_size: 500_000,
        }
    }
}

impl GrammarLimits {
    /// llguidance's limits for grammars within these bounds: a row may hold what the choices can put in it.
    pub fn parser_limits(&self) -> ParserLimits {
        ParserLimits {
            max_items_in_row: self.max_choices.saturating_mul(ITEMS_PER_CHOICE).saturating_add(ROW_ITEMS_SLACK),
            initial_lexer_fuel: self.initial_lexer_fuel,
            step_lexer_fuel: self.step_lexer_fuel,
            step_max_items: self.step_max_items,
            max_lexer_states: self.max_lexer_states,
            max_grammar_size: self.max_grammar_size,
            precompute_large_lexemes: true,
            verbose_errors: false,
        }
    }

    /// The stack a thread compiling grammars within these bounds needs: the deepest recursion is a chain
    /// through every `$ref` target, each `max_depth` levels deep.
    pub fn stack_bytes(&self) -> usize {
        let levels = self.max_refs.saturating_add(1).saturating_mul(self.max_depth);
        levels.saturating_mul(STACK_PER_LEVEL).saturating_add(STACK_BASE)
    }

    /// `grammar`, if it keeps every bound. The measure stops at the first bound exceeded, so that refusing a
    /// huge grammar costs no more than reading `max_bytes` of it.
    pub fn check(&self, grammar: Grammar) -> Result<CheckedGrammar, CheckError> {
        let kind = grammar.kind();
        let refused = |r: Refusal| match r {
            Refusal::Over(bound) => CheckError::Over { kind, bound, limit: self.limit(bound) },
            Refusal::RefCycle(target) => CheckError::RefCycle { kind, target },
        };
        let mut census = Census::default();
        match &grammar {
            Grammar::JsonObject => {}
            Grammar::JsonSchema(schema) => census::schema(schema, self, &mut census).map_err(refused)?,
            Grammar::Regex(rx) if rx.len() > self.max_bytes => return Err(refused(Refusal::Over(Bound::Bytes))),
            Grammar::Regex(_) => {}
            Grammar::Lark(lark) => census::lark(lark, self, &mut census).map_err(refused)?,
        }
        Ok(CheckedGrammar(grammar))
    }

    /// The value of `bound`.
    fn limit(&self, bound: Bound) -> usize {
        match bound {
            Bound::Bytes => self.max_bytes,
            Bound::Depth => self.max_depth,
            Bound::Choices => self.max_choices,
            Bound::Refs => self.max_refs,
        }
    }
}

/// One of the bounds of [`GrammarLimits`] that a grammar is measured against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// [`GrammarLimits::max_bytes`].
    Bytes,
    /// [`GrammarLimits::max_depth`].
    Depth,
    /// [`GrammarLimits::max_choices`].
    Choices,
    /// [`GrammarLimits::max_refs`].
    Refs,
}

impl Bound {
    /// What the bound counts, as error messages say it.
    pub fn counts(self) -> &'static str {
        match self {
            Bound::Bytes => "bytes",
            Bound::Depth => "levels of nesting",
            Bound::Choices => "choices (properties, enum values, branches, alternatives)",
            Bound::Refs => "distinct $ref targets",
        }
    }
}

/// Why a grammar is refused before compiling.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// It exceeds a bound.
    #[error("the {kind} grammar has more than the limit of {limit} {}", bound.counts())]
    Over {
        /// The grammar's kind.
        kind: &'static str,
        /// The bound it exceeds.
        bound: Bound,
        /// The bound's value.
        limit: usize,
    },
    /// A `$ref` leads back to itself through `$ref`s alone, so no value matches it.
    #[error("the {kind} grammar's $ref `{target}` leads back to itself through $refs alone: no value matches it")]
    RefCycle {
        /// The grammar's kind.
        kind: &'static str,
        /// The `$ref`.
        target: String,
    },
}

/// A grammar within [`GrammarLimits`]: what [`super::GrammarCompiler::compile`] takes.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckedGrammar(Grammar);

impl CheckedGrammar {
    /// The grammar.
    pub fn grammar(&self) -> &Grammar {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn refused(limits: &GrammarLimits, g: Grammar) -> Option<Bound> {
        match limits.check(g) {
            Err(CheckError::Over { bound, .. }) => Some(bound),
            _ => None,
        }
    }

    #[test]
    fn each_bound_refuses_what_exceeds_it_and_names_itself() {
        let l = GrammarLimits { max_bytes: 100, max_depth: 4, max_choices: 3, max_refs: 1, ..GrammarLimits::default() };
        let ok = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        assert_eq!(refused(&l, Grammar::JsonSchema(ok)), None);
        assert_eq!(refused(&l, Grammar::JsonSchema(json!({"description": "x".repeat(100)}))), Some(Bound::Bytes));
        let deep = json!({"items": {"items": {"items": {"items": {}}}}});
        assert_eq!(refused(&l, Grammar::JsonSchema(deep)), Some(Bound::Depth));
        assert_eq!(refused(&l, Grammar::JsonSchema(json!({"enum": [1, 2, 3, 4]}))), Some(Bound::Choices));
        let refs = json!({"anyOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/b"}]});
        let wide = GrammarLimits { max_choices: 10, ..l };
        assert_eq!(refused(&wide, Grammar::JsonSchema(refs)), Some(Bound::Refs));
        assert_eq!(refused(&l, Grammar::Regex("a".repeat(101))), Some(Bound::Bytes));
        assert_eq!(
            refused(&l, Grammar::Lark("start: \"a\" | \"b\" | \"c\" | \"d\" | \"e\"".into())),
            Some(Bound::Choices)
        );
        assert_eq!(refused(&l, Grammar::JsonObject), None);
        let e = l.check(Grammar::JsonSchema(json!({"enum": [1, 2, 3, 4]}))).unwrap_err().to_string();
        assert_eq!(e, "the json_schema grammar has more than the limit of 3 choices (properties, enum values, branches, alternatives)");
        let cycle = l.check(Grammar::JsonSchema(json!({"$ref": "#"}))).unwrap_err().to_string();
        assert_eq!(
            cycle,
            "the json_schema grammar's $ref `#` leads back to itself through $refs alone: no value matches it"
        );
    }

    #[test]
    fn rows_fit_the_choices_and_the_stack_fits_the_recursion() {
        let l = GrammarLimits::default();
        assert!(l.parser_limits().max_items_in_row >= 4 * l.max_choices);
        assert!(!l.parser_limits().verbose_errors);
        let mib = l.stack_bytes() >> 20;
        assert!((64..=256).contains(&mib), "{mib} MiB");
    }
}
