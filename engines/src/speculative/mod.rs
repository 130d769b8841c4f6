//! Speculative decoding: what proposes draft tokens (n-gram lookup in the sequence's own tokens), the
//! settings, and the adaptive rule that picks each sequence's depth from its measured acceptance. The
//! scheduler verifies the drafts in its batched step; [`crate::sampling::Sampler::verify`] decides each one.
//!
//! The adaptive rule: each sequence keeps an exponentially weighted average `a` of the rate at which its
//! drafted tokens are accepted (also measured while it does not speculate, by comparing the token a one-token
//! proposal would have drafted with the token sampled). With a step costing `1 + c·k` for `k` drafted tokens
//! (`c` = [`SpeculationConfig::token_cost`]), the expected tokens per step are `(1 - a^(k+1)) / (1 - a)`; the
//! depth is the `k` in `0..=depth` with the most tokens per unit of cost. The scheduler turns speculation off
//! for a step with more than [`SpeculationConfig::max_batch`] sequences: a wide step is no longer
//! memory-bound, and the extra tokens cost as much as ordinary ones.

mod depth;
mod ngram;

pub use depth::Depth;
pub use ngram::propose;

/// How speculative decoding proposes and how far it goes.
#[derive(Clone, Debug, PartialEq)]
pub struct SpeculationConfig {
    /// Most tokens drafted per sequence and step.
    pub depth: usize,
    /// Shortest suffix n-gram looked up in the sequence's tokens.
    pub ngram_min: usize,
    /// Longest suffix n-gram looked up (tried first).
    pub ngram_max: usize,
    /// Steps with more sequences than this do not speculate.
    pub max_batch: usize,
    /// Cost of one drafted token in a step, relative to the step without it (the adaptive rule's `c`).
    pub token_cost: f32,
    /// Pick each sequence's depth from its acceptance; `false` drafts `depth` tokens whenever a proposal exists.
    pub adaptive: bool,
}

impl Default for SpeculationConfig {
    fn default() -> Self {
        SpeculationConfig { depth: 4, ngram_min: 1, ngram_max: 3, max_batch: 8, token_cost: 0.1, adaptive: true }
    }
}

impl SpeculationConfig {
    /// Checks the settings; the message names what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.depth == 0 {
            return Err("the speculation depth must be at least 1".into());
        }
        if self.ngram_min == 0 || self.ngram_min > self.ngram_max {
            return Err(format!(
                "n-gram lengths must satisfy 1 <= min <= max (min {}, max {})",
                self.ngram_min, self.ngram_max
            ));
        }
        if !(self.token_cost >= 0.0 && self.token_cost.is_finite()) {
            return Err("the speculative token cost must be a non-negative number".into());
        }
        Ok(())
    }

    /// The most tokens a sequence may draft in a step of `batch` sequences.
    pub fn cap(&self, batch: usize) -> usize {
        if batch > self.max_batch {
            0
        } else {
            self.depth
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_and_caps_by_batch() {
        let c = SpeculationConfig::default();
        c.validate().unwrap();
        assert_eq!((c.cap(1), c.cap(8), c.cap(9)), (4, 4, 0));
        for bad in [
            SpeculationConfig { depth: 0, ..c.clone() },
            SpeculationConfig { ngram_min: 0, ..c.clone() },
            SpeculationConfig { ngram_min: 4, ngram_max: 3, ..c.clone() },
            SpeculationConfig { token_cost: f32::NAN, ..c.clone() },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
