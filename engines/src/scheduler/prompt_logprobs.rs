//! Log-probabilities of prompt tokens, gathered over the prefill chunks of a request that asked for them.

use crate::perplexity::log_prob;

/// Per prompt token, the log-softmax of the previous row's raw logits at that token.
#[derive(Debug, Default)]
pub(super) struct PromptLogprobs {
    /// One entry per prompt token seen so far; `None` for the first.
    values: Vec<Option<f32>>,
    /// The previous chunk's last row of logits.
    last_row: Option<Vec<f32>>,
}

impl PromptLogprobs {
    /// Takes a chunk's tokens and its logits (one row of `vocab` per token).
    pub(super) fn push(&mut self, tokens: &[u32], rows: &[f32], vocab: usize) {
        debug_assert_eq!(rows.len(), tokens.len() * vocab);
        for (j, &t) in tokens.iter().enumerate() {
            let prev = if j == 0 { self.last_row.as_deref() } else { Some(&rows[(j - 1) * vocab..j * vocab]) };
            self.values.push(prev.map(|row| log_prob(row, t) as f32));
        }
        if let Some(last) = rows.len().checked_sub(vocab) {
            self.last_row = Some(rows[last..].to_vec());
        }
    }

    /// The log-probabilities, and the last row of logits (what the next token is sampled from).
    pub(super) fn finish(self) -> (Vec<Option<f32>>, Vec<f32>) {
        (self.values, self.last_row.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_chain_through_the_previous_last_row() {
        // Vocabulary of 2; rows favour token 1 then token 0.
        let rows = [0.0f32, 1.0, 2.0, 0.0, 0.0, 0.0];
        let mut whole = PromptLogprobs::default();
        whole.push(&[1, 1, 0], &rows, 2);
        let mut split = PromptLogprobs::default();
        split.push(&[1], &rows[..2], 2);
        split.push(&[1, 0], &rows[2..], 2);
        let (a, last) = whole.finish();
        assert_eq!((a.clone(), last), split.finish());
        assert_eq!(a[0], None);
        let lp = |row: &[f32], t| log_prob(row, t) as f32;
        assert_eq!(a[1..], [Some(lp(&rows[..2], 1)), Some(lp(&rows[2..4], 0))]);
    }
}
