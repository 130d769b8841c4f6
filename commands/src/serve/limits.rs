//! The server's per-request budgets and the checks every generation route shares: tokenizing the
//! prompt, truncating it, and fitting prompt plus new tokens into `--max-total-tokens` (TGI's rules).

use std::time::Duration;

use super::backend::Lexicon;
use super::error::ValidationError;

/// Budgets a request must fit in.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestLimits {
    /// Requests in flight at once; more get 429.
    pub max_concurrent_requests: usize,
    /// Most `best_of` candidates.
    pub max_best_of: usize,
    /// Most stop strings.
    pub max_stop_sequences: usize,
    /// Most alternatives per token (`top_n_tokens`).
    pub max_top_n_tokens: u32,
    /// Most prompt tokens.
    pub max_input_tokens: usize,
    /// Most prompt plus generated tokens.
    pub max_total_tokens: usize,
    /// Most OpenAI `n` choices.
    pub max_n: usize,
    /// Largest request body in bytes.
    pub payload_limit: usize,
    /// Longest a request may take before it is cancelled.
    pub request_timeout: Option<Duration>,
    /// Longest a request body may take to arrive (408 after).
    pub body_timeout: Duration,
    /// Tokens the KV cache holds (reported by `/info` and `/metrics`).
    pub max_batch_total_tokens: usize,
}

/// A prompt that fits: its token ids and how many tokens may follow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    /// The prompt's ids, truncated from the left when asked.
    pub ids: Vec<u32>,
    /// Tokens to generate at most.
    pub max_new_tokens: usize,
}

impl RequestLimits {
    /// Checks `truncate` (before tokenizing, as TGI does).
    pub fn check_truncate(&self, truncate: Option<usize>) -> Result<(), ValidationError> {
        match truncate {
            Some(t) if t == 0 || t > self.max_input_tokens => {
                Err(ValidationError::Truncate { max: self.max_input_tokens, given: t })
            }
            _ => Ok(()),
        }
    }

    /// Checks a stop-string count.
    pub fn check_stop(&self, stop: &[String]) -> Result<(), ValidationError> {
        if stop.len() > self.max_stop_sequences {
            return Err(ValidationError::StopSequence { max: self.max_stop_sequences, given: stop.len() });
        }
        Ok(())
    }

    /// Keeps the last `truncate` tokens, defaults `max_new_tokens` to what is left of
    /// `--max-total-tokens`, and checks both limits in TGI's order.
    pub fn fit(
        &self,
        mut ids: Vec<u32>,
        truncate: Option<usize>,
        max_new_tokens: Option<usize>,
    ) -> Result<Budget, ValidationError> {
        if max_new_tokens == Some(0) {
            return Err(ValidationError::NegativeMaxNewTokens);
        }
        if let Some(t) = truncate {
            if ids.len() > t {
                ids.drain(..ids.len() - t);
            }
        }
        if ids.is_empty() {
            return Err(ValidationError::EmptyInput);
        }
        let input = ids.len();
        let new = max_new_tokens.unwrap_or(self.max_total_tokens.saturating_sub(input));
        if input + new > self.max_total_tokens {
            return Err(ValidationError::MaxTotalTokens { max: self.max_total_tokens, input, new });
        }
        if input > self.max_input_tokens {
            return Err(ValidationError::InputLength { max: self.max_input_tokens, given: input });
        }
        if new == 0 {
            return Err(ValidationError::NegativeMaxNewTokens);
        }
        Ok(Budget { ids, max_new_tokens: new })
    }
}

/// How much a normalizer may shrink text before it is split into tokens (NFC composes three 3-byte
/// Hangul jamo into one 3-byte syllable; no UTF-8 character is longer than 4 bytes).
const NORMALIZER_SLACK: usize = 4;

/// The longest prompt, in bytes, that `--max-input-tokens` tokens could cover: no token's text is longer
/// than the vocabulary's longest piece, so a longer prompt has too many tokens whatever they are, and is
/// refused before any tokenizing work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromptBytes {
    /// `--max-input-tokens`.
    pub max_tokens: usize,
    /// The bytes of the vocabulary's longest token.
    pub token_bytes: usize,
    /// Longest prompt accepted: `max_tokens * token_bytes * NORMALIZER_SLACK`.
    pub max_bytes: usize,
}

impl PromptBytes {
    /// The bound for `max_tokens` tokens of `lexicon`'s vocabulary.
    pub fn new(max_tokens: usize, lexicon: &dyn Lexicon) -> Self {
        let tok = lexicon.tokenizer();
        let token_bytes = (0..tok.vocab_size() as u32).map(|id| tok.token_to_piece(id).len()).max().unwrap_or(0).max(1);
        let max_bytes = max_tokens.saturating_mul(token_bytes).saturating_mul(NORMALIZER_SLACK);
        PromptBytes { max_tokens, token_bytes, max_bytes }
    }

    /// Refuses `text` when it is longer than [`PromptBytes::max_bytes`].
    pub fn check(&self, text: &str) -> Result<(), ValidationError> {
        if text.len() > self.max_bytes {
            return Err(ValidationError::InputBytes {
                max: self.max_tokens,
                bytes: text.len(),
                max_bytes: self.max_bytes,
            });
        }
        Ok(())
    }
}

/// The token ids of a prompt: special tokens (BOS) added as the model asks when `add_special`, and
/// control tokens written in the text recognized, as HF tokenizers do. A prompt over the byte bound is
/// refused without being tokenized.
pub fn tokenize(
    lexicon: &dyn Lexicon,
    bound: &PromptBytes,
    text: &str,
    add_special: bool,
) -> Result<Vec<u32>, ValidationError> {
    if text.is_empty() {
        return Err(ValidationError::EmptyInput);
    }
    bound.check(text)?;
    lexicon.tokenizer().encode(text, add_special, true).map_err(|e| ValidationError::Tokenizer(e.to_string()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Limits for tests: 16 total tokens, 12 input.
    pub(crate) fn small() -> RequestLimits {
        RequestLimits {
            max_concurrent_requests: 4,
            max_best_of: 2,
            max_stop_sequences: 2,
            max_top_n_tokens: 5,
            max_input_tokens: 12,
            max_total_tokens: 16,
            max_n: 4,
            payload_limit: 10_000,
            request_timeout: None,
            body_timeout: Duration::from_secs(30),
            max_batch_total_tokens: 64,
        }
    }

    #[test]
    fn fit_follows_tgi() {
        let l = small();
        let ids: Vec<u32> = (0..10).collect();
        assert_eq!(l.fit(ids.clone(), None, None).unwrap().max_new_tokens, 6);
        assert_eq!(l.fit(ids.clone(), Some(4), Some(3)).unwrap(), Budget { ids: vec![6, 7, 8, 9], max_new_tokens: 3 });
        assert_eq!(
            l.fit(ids.clone(), None, Some(7)),
            Err(ValidationError::MaxTotalTokens { max: 16, input: 10, new: 7 })
        );
        assert_eq!(l.fit(ids, None, Some(0)), Err(ValidationError::NegativeMaxNewTokens));
        assert_eq!(l.fit((0..14).collect(), None, Some(1)), Err(ValidationError::InputLength { max: 12, given: 14 }));
        assert_eq!(l.check_truncate(Some(13)), Err(ValidationError::Truncate { max: 12, given: 13 }));
        assert_eq!(l.check_truncate(Some(0)), Err(ValidationError::Truncate { max: 12, given: 0 }));
        assert!(l.check_stop(&["a".into(), "b".into(), "c".into()]).is_err());
    }

    #[test]
    fn prompt_bytes_bound() {
        let lex = crate::serve::tests::lexicon();
        let b = PromptBytes::new(12, lex.as_ref());
        let longest = (0..512).map(|id| lex.tokenizer().token_to_piece(id).len()).max().unwrap();
        assert_eq!((b.token_bytes, b.max_bytes), (longest, 12 * longest * NORMALIZER_SLACK));
        let at = "a".repeat(b.max_bytes);
        assert_eq!(b.check(&at), Ok(()));
        let over = "a".repeat(b.max_bytes + 1);
        assert_eq!(
            b.check(&over),
            Err(ValidationError::InputBytes { max: 12, bytes: b.max_bytes + 1, max_bytes: b.max_bytes })
        );
        assert_eq!(tokenize(lex.as_ref(), &b, &over, true), b.check(&over).map(|()| Vec::new()));
    }
}
