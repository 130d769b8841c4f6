//! Speculative decoding: what proposes draft tokens ([`Method`]: n-gram lookup in the sequence's own tokens,
//! a draft model, Medusa heads), the settings, and the adaptive rule that picks each sequence's depth from its
//! measured acceptance and the measured cost of a drafted token. The scheduler verifies the drafts in its
//! batched step; [`crate::sampling::Sampler::verify`] decides each one. A draft model samples the drafts of a
//! sampled request from its own processed distribution and hands it over with them ([`Proposal`]); the other
//! proposals are deterministic (a point mass), and so are all greedy drafts. Verification keeps the target's
//! distribution exactly either way.
//!
//! The adaptive rule: each sequence keeps an exponentially weighted average `a` of the rate at which its
//! drafted tokens are accepted (measured while it does not speculate too: for n-gram by comparing the token a
//! one-token proposal would have drafted with the token sampled, for the other methods by drafting one token
//! every [`probe_interval`] steps). With a step costing `1 + c·k` for `k` drafted tokens, the expected tokens per
//! step are `(1 - a^(k+1)) / (1 - a)`; the depth is the `k` in `0..=depth` with the most tokens per unit of
//! cost. `c` is measured by [`TokenCost`] from the engine's decode steps at the current batch size (the time
//! one drafted token adds, proposal and verification together, over one sequence's share of a step without
//! drafts), unless [`SpeculationConfig::token_cost`] fixes it. So a wide, compute-bound batch, where a drafted
//! token costs about what a sequence-step does, stops speculating by itself; [`SpeculationConfig::max_batch`]
//! is a hard cap beside it.

pub(crate) mod cost;
mod depth;
mod draft;
mod medusa;
mod ngram;

use std::sync::Arc;

pub use cost::TokenCost;
pub use depth::Depth;
pub use draft::{check_vocabulary, frequent_ids, DraftCache, DraftJob, DraftModel};
pub use medusa::{Medusa, MedusaConfig};
pub use ngram::propose;

use crate::model::LoadedModel;

/// A sequence that chose not to speculate drafts one token after at least this many steps with a method whose
/// proposals cost a step (draft model, Medusa), to keep measuring its acceptance (see [`probe_interval`]).
pub const PROBE_EVERY: u32 = 16;

/// Probes cost at most this fraction of the steps between them.
const PROBE_OVERHEAD: f32 = 0.02;

/// Steps between probes at `token_cost`: [`PROBE_EVERY`], or more where a drafted token costs so much that a
/// probe every [`PROBE_EVERY`] steps would cost more than [`PROBE_OVERHEAD`] of them.
pub fn probe_interval(token_cost: f32) -> u32 {
    let spread = (token_cost.max(0.0) / PROBE_OVERHEAD).ceil();
    PROBE_EVERY.max(if spread.is_finite() { spread.min(1e6) as u32 } else { 1_000_000 })
}

/// The token cost assumed before the engine has measured one.
pub const PRIOR_TOKEN_COST: f32 = 0.1;

/// A sequence's proposed draft: its tokens and, when the proposer sampled them, the distribution each was
/// drawn from (sparse `(token, probability)` pairs, ascending ids); no distributions for a deterministic
/// proposal, a point mass on each token.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Proposal {
    /// The drafted tokens.
    pub tokens: Vec<u32>,
    /// The distribution of each drafted token, or none at all.
    pub dists: Vec<Vec<(u32, f32)>>,
}

impl From<Vec<u32>> for Proposal {
    fn from(tokens: Vec<u32>) -> Self {
        Proposal { tokens, dists: Vec::new() }
    }
}

/// What proposes drafts.
#[derive(Clone, Default)]
pub enum Method {
    /// Prompt lookup: n-grams of the sequence's own tokens.
    #[default]
    Ngram,
    /// A smaller model with the same vocabulary, with its own KV cache.
    Draft(Arc<LoadedModel>),
    /// Medusa heads over the target's last hidden state.
    Medusa(Arc<Medusa>),
}

impl Method {
    /// The method's name (`ngram`, `draft`, `medusa`).
    pub fn name(&self) -> &'static str {
        match self {
            Method::Ngram => "ngram",
            Method::Draft(_) => "draft",
            Method::Medusa(_) => "medusa",
        }
    }

    /// Whether a proposal is free enough to compute every step for measuring acceptance (n-gram).
    pub fn free(&self) -> bool {
        matches!(self, Method::Ngram)
    }
}

impl std::fmt::Debug for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl PartialEq for Method {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Method::Ngram, Method::Ngram) => true,
            (Method::Draft(a), Method::Draft(b)) => Arc::ptr_eq(a, b),
            (Method::Medusa(a), Method::Medusa(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

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
    /// Cost of one drafted token relative to a sequence's share of a step without drafts (the adaptive
    /// rule's `c`); `None` measures it online ([`TokenCost`]).
    pub token_cost: Option<f32>,
    /// Pick each sequence's depth from its acceptance; `false` drafts `depth` tokens whenever a proposal exists.
    pub adaptive: bool,
    /// What proposes the drafts.
    pub method: Method,
}

impl Default for SpeculationConfig {
    fn default() -> Self {
        SpeculationConfig {
            depth: 4,
            ngram_min: 1,
            ngram_max: 3,
            max_batch: 8,
            token_cost: None,
            adaptive: true,
            method: Method::Ngram,
        }
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
        if self.token_cost.is_some_and(|c| !(c >= 0.0 && c.is_finite())) {
            return Err("the speculative token cost must be a non-negative number".into());
        }
        if let Method::Medusa(m) = &self.method {
            if self.depth > m.num_heads() {
                return Err(format!(
                    "depth {} needs {} Medusa heads; the heads have {}",
                    self.depth,
                    self.depth,
                    m.num_heads()
                ));
            }
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
    fn probes_are_spread_by_their_cost() {
        assert_eq!(probe_interval(0.1), PROBE_EVERY);
        assert_eq!(probe_interval(0.5), 25);
        assert_eq!(probe_interval(2.0), 100);
        assert_eq!(probe_interval(f32::INFINITY), 1_000_000);
    }

    #[test]
    fn validates_and_caps_by_batch() {
        let c = SpeculationConfig::default();
        c.validate().unwrap();
        assert_eq!((c.cap(1), c.cap(8), c.cap(9)), (4, 4, 0));
        for bad in [
            SpeculationConfig { depth: 0, ..c.clone() },
            SpeculationConfig { ngram_min: 0, ..c.clone() },
            SpeculationConfig { ngram_min: 4, ngram_max: 3, ..c.clone() },
            SpeculationConfig { token_cost: Some(f32::NAN), ..c.clone() },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
