//! One sequence's grammar state: which tokens may come next ([`Mask`]), applied to a step's logits before
//! sampling, and the tokens the sequence kept, committed in order.

use std::sync::{Mutex, PoisonError};

use llguidance::toktrie::SimpleVob;
use llguidance::Matcher;

use super::ConstraintError;

/// The tokens a grammar allows at one position.
#[derive(Clone, Debug)]
pub struct Mask {
    allowed: SimpleVob,
}

impl Mask {
    /// Sets the logit of every token the grammar forbids to −∞, so that greedy decoding, sampling, the
    /// penalties and the log-probabilities all see the constrained distribution. Entries past the mask's
    /// size (padded vocabularies) are forbidden too.
    pub fn apply(&self, logits: &mut [f32]) {
        let n = self.allowed.len().min(logits.len());
        self.allowed.iter_unset_entries(|i| {
            if i < n {
                logits[i] = f32::NEG_INFINITY;
            }
        });
        for l in logits.iter_mut().skip(n) {
            *l = f32::NEG_INFINITY;
        }
    }

    /// Whether `token` is allowed.
    pub fn allows(&self, token: u32) -> bool {
        (token as usize) < self.allowed.len() && self.allowed.is_allowed(token)
    }

    /// The allowed token with the highest logit in `row` (ties to the lowest id) and its log-probability
    /// among the allowed ones: what a sequence keeps when its sampler, after penalties that overflowed every
    /// allowed logit, fell back on a token the grammar forbids.
    pub fn best(&self, row: &[f32]) -> Option<(u32, f32)> {
        let mut ids = Vec::new();
        self.allowed.iter_set_entries(|i| ids.push(i));
        let allowed: Vec<(usize, f32)> = ids.into_iter().filter_map(|i| row.get(i).map(|&l| (i, l))).collect();
        let &(best, top) = allowed.iter().reduce(|a, b| if b.1 > a.1 { b } else { a })?;
        let finite = top.is_finite();
        let total: f64 = allowed.iter().map(|&(_, l)| if finite { f64::from(l - top).exp() } else { 1.0 }).sum();
        let logprob = if finite { -(total.ln() as f32) } else { -(allowed.len() as f32).ln() };
        Some((best as u32, logprob))
    }
}

/// A sequence's position in its grammar. Interior mutability lets the engine compute the next mask from a
/// shared borrow, beside the forward pass that reads the same sequence.
pub struct Constraint {
    matcher: Mutex<Matcher>,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint").field("stopped", &self.lock().is_stopped()).finish()
    }
}

impl Clone for Constraint {
    /// An independent copy at the same position (its own parser state and lexer caches).
    fn clone(&self) -> Self {
        Constraint::new(self.lock().deep_clone())
    }
}

impl Constraint {
    /// A constraint over a started matcher.
    pub(super) fn new(matcher: Matcher) -> Self {
        Constraint { matcher: Mutex::new(matcher) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Matcher> {
        self.matcher.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The tokens allowed next: end-of-sequence only, once the grammar has ended. An error when the
    /// parser hit its limits or allows nothing at all.
    pub fn mask(&self) -> Result<Mask, ConstraintError> {
        let allowed = self.lock().compute_mask_or_eos().map_err(|e| ConstraintError::Enforce(e.to_string()))?;
        if allowed.is_zero() {
            return Err(ConstraintError::Enforce("no token can continue the output".into()));
        }
        Ok(Mask { allowed })
    }

    /// Moves past `token`, which the last mask allowed.
    pub fn commit(&self, token: u32) -> Result<(), ConstraintError> {
        let mut m = self.lock();
        if m.is_stopped() {
            return Ok(());
        }
        m.consume_token(token).map_err(|e| ConstraintError::Enforce(e.to_string()))
    }

    /// How many leading tokens of `draft` the grammar would accept from here (speculative drafts are cut
    /// there before the model verifies them).
    pub fn valid_prefix(&self, draft: &[u32]) -> usize {
        let mut m = self.lock();
        if m.is_stopped() {
            return 0;
        }
        m.validate_tokens(draft).unwrap_or(0)
    }

    /// Steps a copy through up to `tokens` tokens, the lowest allowed id each time (special tokens aside), so
    /// that a limit the first steps would hit (an Earley row too large) shows before the request starts.
    pub fn probe(&self, tokens: usize) -> Result<(), ConstraintError> {
        let mut m = self.lock().deep_clone();
        let env = m.tok_env().map_err(|e| ConstraintError::Enforce(e.to_string()))?;
        for _ in 0..tokens {
            if m.is_stopped() {
                break;
            }
            let mask = m.compute_mask().map_err(|e| ConstraintError::Enforce(e.to_string()))?;
            let mut next = None;
            mask.iter_set_entries(|t| {
                if next.is_none() && !env.tok_trie().is_special_token(t as u32) {
                    next = Some(t as u32);
                }
            });
            let Some(token) = next else { break };
            m.consume_token(token).map_err(|e| ConstraintError::Enforce(e.to_string()))?;
        }
        Ok(())
    }

    /// Whether the grammar has ended (only end-of-sequence can follow).
    pub fn is_finished(&self) -> bool {
        self.lock().is_stopped()
    }
}

#[cfg(test)]
mod tests {
    use crate::constraint::testing::{compiler, stories};
    use crate::constraint::{Constraint, Grammar, GrammarLimits};

    fn compile(grammar: Grammar) -> Constraint {
        compiler().compile(&GrammarLimits::default().check(grammar).unwrap()).unwrap().0
    }

    /// Greedy decoding under `grammar` with logits that prefer ids in `order` (earlier is likelier), until
    /// the grammar ends; returns the text.
    fn decode(grammar: Grammar, prefer: &str) -> String {
        let tok = stories();
        let con = compile(grammar);
        let wanted = tok.encode(prefer, false, false).unwrap();
        let mut out = Vec::new();
        for step in 0..200 {
            let mut logits: Vec<f32> = (0..512).map(|i| -(i as f32) / 512.0).collect();
            if let Some(&w) = wanted.get(step) {
                logits[w as usize] = 10.0;
            }
            con.mask().unwrap().apply(&mut logits);
            let best = (0..512).max_by(|&a, &b| logits[a].total_cmp(&logits[b])).unwrap() as u32;
            if tok.eos_ids().contains(&best) {
                assert!(con.is_finished() || con.mask().unwrap().allows(best));
                break;
            }
            con.commit(best).unwrap();
            out.push(best);
        }
        tok.decode(&out, true).unwrap()
    }

    #[test]
    fn regex_output_matches_and_ends_with_eos() {
        let text = decode(Grammar::Regex("(yes|no), [0-9]{3}".into()), "maybe");
        let re = regex::Regex::new(r"^(yes|no), [0-9]{3}$").unwrap();
        assert!(re.is_match(&text), "{text:?}");
    }

    #[test]
    fn json_schema_output_validates() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 5}, "age": {"type": "integer"}},
            "required": ["name", "age"],
            "additionalProperties": false
        });
        let text = decode(Grammar::JsonSchema(schema), "Once upon a time");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        let integer = v["age"].as_f64().is_some_and(|a| a.fract() == 0.0);
        assert!(v["name"].as_str().unwrap().chars().count() <= 5 && integer, "{text}");
        assert!(text.starts_with("{\"name\": \""), "one space after the colon, none before the key: {text}");
    }

    #[test]
    fn the_best_allowed_token_stands_in_for_a_forbidden_one() {
        let tok = stories();
        let con = compile(Grammar::Regex("a|b".into()));
        let id = |piece: &[u8]| (0..512).find(|&i| tok.token_to_piece(i) == piece).unwrap();
        let mask = con.mask().unwrap();
        let mut row = vec![f32::NEG_INFINITY; 512];
        assert_eq!(mask.best(&row).map(|(t, _)| mask.allows(t)), Some(true), "all -inf: still an allowed token");
        row[id(b"b") as usize] = 2.0;
        row[id(b"a") as usize] = 2.0;
        row[0] = 9.0;
        mask.apply(&mut row);
        let (t, lp) = mask.best(&row).unwrap();
        assert_eq!((t, (lp - 0.5f32.ln()).abs() < 1e-5), (id(b"a").min(id(b"b")), true));
    }

    #[test]
    fn drafts_are_cut_where_the_grammar_rejects_them() {
        let tok = stories();
        let con = compile(Grammar::Regex("ab+".into()));
        let id = |piece: &[u8]| (0..512).find(|&i| tok.token_to_piece(i) == piece).unwrap();
        let (a, b) = (id(b"a"), id(b"b"));
        let copy = con.clone();
        assert_eq!(con.valid_prefix(&[a, b, b, a]), 3);
        con.commit(a).unwrap();
        assert_eq!(con.valid_prefix(&[b, b, a]), 2);
        assert_eq!(copy.valid_prefix(&[a, b, b, a]), 3, "the copy is independent");
        assert_eq!(copy.valid_prefix(&[b]), 0);
    }
}
