//! Log-probabilities of prompt tokens (and their most likely alternatives, when asked for), gathered
//! over the prefill chunks of a request that asked for them.

use super::request::PromptLogprob;
use crate::perplexity::LogSoftmax;
use crate::sampling::top_logits;

/// Per prompt token, the log-softmax of the previous row's raw logits at that token and at the
/// `top` most likely tokens.
#[derive(Debug, Default)]
pub(super) struct PromptLogprobs {
    /// Alternatives per token.
    top: usize,
    /// One entry per prompt token seen so far; `None` for the first.
    values: Vec<Option<PromptLogprob>>,
    /// The previous chunk's last row of logits.
    last_row: Option<Vec<f32>>,
}

impl PromptLogprobs {
    /// Gathers log-probabilities with `top` alternatives per token.
    pub(super) fn new(top: usize) -> Self {
        PromptLogprobs { top, ..Self::default() }
    }

    /// Forgets every chunk taken (the prompt will be computed again), keeping the alternatives asked for.
    pub(super) fn restart(&mut self) {
        *self = Self::new(self.top);
    }

    /// Takes a chunk's tokens and its logits (one row of `vocab` per token).
    pub(super) fn push(&mut self, tokens: &[u32], rows: &[f32], vocab: usize) {
        debug_assert_eq!(rows.len(), tokens.len() * vocab);
        for (j, &t) in tokens.iter().enumerate() {
            let prev = if j == 0 { self.last_row.as_deref() } else { Some(&rows[(j - 1) * vocab..j * vocab]) };
            let entry = prev.map(|row| self.entry(row, t));
            self.values.push(entry);
        }
        if let Some(last) = rows.len().checked_sub(vocab) {
            self.last_row = Some(rows[last..].to_vec());
        }
    }

    /// Token `t`'s entry from the row of logits before it.
    fn entry(&self, row: &[f32], t: u32) -> PromptLogprob {
        let norm = LogSoftmax::of(row);
        PromptLogprob {
            logprob: norm.at(row[t as usize]) as f32,
            top: top_logits(row, self.top).into_iter().map(|(id, l)| (id, norm.at(l) as f32)).collect(),
        }
    }

    /// The log-probabilities, and the last row of logits (what the next token is sampled from).
    pub(super) fn finish(self) -> (Vec<Option<PromptLogprob>>, Vec<f32>) {
        (self.values, self.last_row.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perplexity::log_prob;

    /// Vocabulary of 3; rows favour token 1, then token 0, then tokens 2 and 0 alike.
    const ROWS: [f32; 9] = [0.0, 1.0, -1.0, 2.0, 0.0, 0.0, 0.5, -3.0, 0.5];

    #[test]
    fn chunks_chain_through_the_previous_last_row() {
        let mut whole = PromptLogprobs::new(0);
        whole.push(&[1, 1, 0], &ROWS, 3);
        let mut split = PromptLogprobs::new(0);
        split.push(&[1], &ROWS[..3], 3);
        split.push(&[1, 0], &ROWS[3..], 3);
        let (a, last) = whole.finish();
        assert_eq!((a.clone(), last), split.finish());
        assert_eq!(a[0], None);
        let lp = |row: &[f32], t| log_prob(row, t) as f32;
        let logprobs: Vec<f32> = a[1..].iter().map(|e| e.as_ref().unwrap().logprob).collect();
        assert_eq!(logprobs, [lp(&ROWS[..3], 1), lp(&ROWS[3..6], 0)]);
        assert!(a[1..].iter().all(|e| e.as_ref().unwrap().top.is_empty()));
    }

    #[test]
    fn alternatives_are_the_most_likely_tokens_of_the_previous_row() {
        let mut acc = PromptLogprobs::new(2);
        acc.push(&[2, 0, 1], &ROWS, 3);
        let (values, _) = acc.finish();
        let lp = |row: &[f32], t| log_prob(row, t) as f32;
        let second = values[1].as_ref().unwrap();
        assert_eq!(second.top, [(1, lp(&ROWS[..3], 1)), (0, lp(&ROWS[..3], 0))]);
        // A tie goes to the lower id; the chosen token need not be among the alternatives.
        let third = values[2].as_ref().unwrap();
        assert_eq!(third.logprob, lp(&ROWS[3..6], 1));
        assert_eq!(third.top, [(0, lp(&ROWS[3..6], 0)), (1, lp(&ROWS[3..6], 1))]);
    }

    #[test]
    fn restart_keeps_the_alternatives_asked_for() {
        let mut acc = PromptLogprobs::new(1);
        acc.push(&[1, 2], &ROWS[..6], 3);
        acc.restart();
        acc.push(&[1, 2], &ROWS[..6], 3);
        let (values, last) = acc.finish();
        assert_eq!(values.len(), 2);
        assert_eq!(values[1].as_ref().unwrap().top.len(), 1);
        assert_eq!(last, ROWS[3..6]);
    }
}
