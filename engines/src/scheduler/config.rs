//! The scheduler's limits and admission knobs, with TGI's defaults.

use crate::kv::BLOCK_SIZE;
use crate::model::ModelError;
use crate::speculative::SpeculationConfig;

/// How the scheduler batches: sizes of the batch and the KV pool, and when waiting requests join.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConfig {
    /// Most sequences per step.
    pub max_batch_size: usize,
    /// KV pool size in tokens (the pool holds this divided by the block size, rounded down, blocks).
    pub max_batch_total_tokens: usize,
    /// Most prompt tokens computed per step; longer prompts are prefilled in chunks.
    pub max_batch_prefill_tokens: usize,
    /// Most prompt tokens a step takes beside decoding sequences (within `max_batch_prefill_tokens`);
    /// `None` derives it from measured step costs (see `prefill_itl_factor`).
    pub max_prefill_tokens_per_step: Option<usize>,
    /// Most a step with prompt tokens beside decodes may cost, as a multiple of a decode-only step of the same
    /// batch, when the per-step cap is derived (greater than 1).
    pub prefill_itl_factor: f64,
    /// While sequences run, waiting requests join once there are at least this many per running one.
    pub waiting_served_ratio: f32,
    /// ...or once the oldest waiting one has waited this many steps.
    pub max_waiting_tokens: usize,
    /// Share KV blocks of common prompt prefixes between requests.
    pub prefix_caching: bool,
    /// Speculative decoding; `None` is off.
    pub speculation: Option<SpeculationConfig>,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            max_batch_size: 128,
            max_batch_total_tokens: 16_384,
            max_batch_prefill_tokens: 4096,
            max_prefill_tokens_per_step: None,
            prefill_itl_factor: 1.25,
            waiting_served_ratio: 0.3,
            max_waiting_tokens: 20,
            prefix_caching: true,
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
        if self.max_batch_prefill_tokens == 0 {
            return bad("max_batch_prefill_tokens must be at least 1");
        }
        if self.max_prefill_tokens_per_step == Some(0) {
            return bad("max_prefill_tokens_per_step must be at least 1");
        }
        if !(self.prefill_itl_factor > 1.0 && self.prefill_itl_factor.is_finite()) {
            return bad("prefill_itl_factor must be a number greater than 1");
        }
        if self.num_blocks() == 0 {
            return bad(&format!("max_batch_total_tokens must be at least one block ({BLOCK_SIZE} tokens)"));
        }
        if !(self.waiting_served_ratio >= 0.0 && self.waiting_served_ratio.is_finite()) {
            return bad("waiting_served_ratio must be a non-negative number");
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
        for bad in [
            SchedulerConfig { max_batch_size: 0, ..c.clone() },
            SchedulerConfig { max_batch_prefill_tokens: 0, ..c.clone() },
            SchedulerConfig { max_prefill_tokens_per_step: Some(0), ..c.clone() },
            SchedulerConfig { max_batch_total_tokens: BLOCK_SIZE - 1, ..c.clone() },
            SchedulerConfig { prefill_itl_factor: 1.0, ..c.clone() },
            SchedulerConfig { prefill_itl_factor: f64::INFINITY, ..c.clone() },
            SchedulerConfig { waiting_served_ratio: f32::NAN, ..c.clone() },
        ] {
            assert!(bad.validate().unwrap_err().to_string().contains("scheduler: "));
        }
    }
}
