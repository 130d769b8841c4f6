//! The scheduler's limits and admission knobs, with TGI's defaults: the sizes of the batch and the KV pool, and
//! [`Batching`], how each step is filled (the one type `tgi serve`'s settings hold too).

use crate::kv::BLOCK_SIZE;
use crate::model::ModelError;
use crate::speculative::SpeculationConfig;

/// How the scheduler batches: sizes of the batch and the KV pool, how steps are filled, and speculation.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConfig {
    /// Most sequences per step.
    pub max_batch_size: usize,
    /// KV pool size in tokens (the pool holds this divided by the block size, rounded down, blocks).
    pub max_batch_total_tokens: usize,
    /// Prompt-token budgets, admission and prefix caching.
    pub batching: Batching,
    /// Speculative decoding; `None` is off.
    pub speculation: Option<SpeculationConfig>,
}

/// How each step is filled: its prompt-token budgets, when waiting requests join, and prefix sharing.
#[derive(Clone, Debug, PartialEq)]
pub struct Batching {
    /// Most prompt tokens computed per step; longer prompts are prefilled in chunks.
    pub max_batch_prefill_tokens: usize,
    /// Most prompt tokens a step takes beside decoding sequences (within `max_batch_prefill_tokens`);
    /// `None` derives it from the fitted step costs (see `prefill_itl_factor`).
    pub max_prefill_tokens_per_step: Option<usize>,
    /// Most a step with prompt tokens beside decodes may cost, as a multiple of a decode-only step of the same
    /// batch, when the per-step cap is derived (greater than 1); an eighth of each waiting prompt's length
    /// when that is more, the whole budget when prompts are as many as the decoders or more.
    pub prefill_itl_factor: f64,
    /// While prompts prefill beside decodes, waiting requests join once there are at least this many per
    /// running one.
    pub waiting_served_ratio: f32,
    /// ...or once the oldest waiting one has waited this many steps.
    pub max_waiting_tokens: usize,
    /// Share KV blocks of common prompt prefixes between requests.
    pub prefix_caching: bool,
}

/// A [`Batching`] setting out of its range: the field (as named in [`Batching`]) and what it must be.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field} {requirement}")]
pub struct BatchingError {
    /// The field at fault.
    pub field: &'static str,
    /// What its value must be.
    pub requirement: &'static str,
}

impl Default for Batching {
    fn default() -> Self {
        Batching {
            max_batch_prefill_tokens: 4096,
            max_prefill_tokens_per_step: None,
            prefill_itl_factor: 1.25,
            waiting_served_ratio: 0.3,
            max_waiting_tokens: 20,
            prefix_caching: true,
        }
    }
}

impl Batching {
    /// Checks that every budget lets at least one token through and the factors are usable numbers.
    pub fn validate(&self) -> Result<(), BatchingError> {
        let bad = |field, requirement| Err(BatchingError { field, requirement });
        if self.max_batch_prefill_tokens == 0 {
            return bad("max_batch_prefill_tokens", "must be at least 1");
        }
        if self.max_prefill_tokens_per_step == Some(0) {
            return bad("max_prefill_tokens_per_step", "must be at least 1");
        }
        if !(self.prefill_itl_factor > 1.0 && self.prefill_itl_factor.is_finite()) {
            return bad("prefill_itl_factor", "must be a number greater than 1");
        }
        if !(self.waiting_served_ratio >= 0.0 && self.waiting_served_ratio.is_finite()) {
            return bad("waiting_served_ratio", "must be a non-negative number");
        }
        Ok(())
    }
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            max_batch_size: 128,
            max_batch_total_tokens: 16_384,
            batching: Batching::default(),
            speculation: None,
        }
    }
}

impl SchedulerConfig {
    /// Blocks in the KV pool.
    pub fn num_blocks(&self) -> usize {
        self.max_batch_total_tokens / BLOCK_SIZE
    }

    /// Checks that every limit lets at least one token through.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |what: &str| Err(ModelError::Config(format!("scheduler: {what}")));
        if self.max_batch_size == 0 {
            return bad("max_batch_size must be at least 1");
        }
        if self.num_blocks() == 0 {
            return bad(&format!("max_batch_total_tokens must be at least one block ({BLOCK_SIZE} tokens)"));
        }
        if let Err(e) = self.batching.validate() {
            return bad(&e.to_string());
        }
        if let Some(Err(e)) = self.speculation.as_ref().map(SpeculationConfig::validate) {
            return bad(&e);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_limits_are_checked() {
        let c = SchedulerConfig::default();
        c.validate().unwrap();
        assert_eq!(c.num_blocks(), 16_384 / BLOCK_SIZE);
        let b = Batching::default();
        let with = |batching| SchedulerConfig { batching, ..c.clone() };
        for (bad, field) in [
            (with(Batching { max_batch_prefill_tokens: 0, ..b.clone() }), "max_batch_prefill_tokens"),
            (with(Batching { max_prefill_tokens_per_step: Some(0), ..b.clone() }), "max_prefill_tokens_per_step"),
            (with(Batching { prefill_itl_factor: 1.0, ..b.clone() }), "prefill_itl_factor"),
            (with(Batching { prefill_itl_factor: f64::INFINITY, ..b.clone() }), "prefill_itl_factor"),
            (with(Batching { waiting_served_ratio: f32::NAN, ..b.clone() }), "waiting_served_ratio"),
            (SchedulerConfig { max_batch_size: 0, ..c.clone() }, "max_batch_size"),
            (SchedulerConfig { max_batch_total_tokens: BLOCK_SIZE - 1, ..c.clone() }, "max_batch_total_tokens"),
        ] {
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains(&format!("scheduler: {field} ")), "{e}");
        }
        let e = Batching { prefill_itl_factor: 0.5, ..b }.validate().unwrap_err();
        assert_eq!(
            (e.field, e.to_string().as_str()),
            ("prefill_itl_factor", "prefill_itl_factor must be a number greater than 1")
        );
    }
}
