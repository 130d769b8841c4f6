//! Counters, gauges and histograms the scheduler keeps, for `/metrics`.

use super::config::SchedulerConfig;
use super::plan::StepKind;
use crate::kv::BLOCK_SIZE;

/// A cumulative histogram with fixed upper bounds (Prometheus semantics: `counts[i]` counts
/// observations `<= bounds[i]`, non-cumulatively stored; the last, implicit bucket is +Inf).
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    /// Upper bounds of the buckets, ascending.
    pub bounds: Vec<f64>,
    /// Observations per bucket; one more entry than `bounds` (the +Inf bucket).
    pub counts: Vec<u64>,
    /// Sum of all observations.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
}

impl Histogram {
    /// An empty histogram with these bucket upper bounds.
    pub fn new(bounds: Vec<f64>) -> Self {
        let n = bounds.len() + 1;
        Histogram { bounds, counts: vec![0; n], sum: 0.0, count: 0 }
    }

    /// Bounds growing by `factor` from `start`, `n` of them (Prometheus' exponential buckets).
    pub fn exponential(start: f64, factor: f64, n: usize) -> Self {
        Self::new((0..n).map(|i| start * factor.powi(i as i32)).collect())
    }

    /// Records one observation.
    pub fn observe(&mut self, v: f64) {
        let i = self.bounds.iter().position(|&b| v <= b).unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    /// This histogram and `other` (with the same bounds) as one.
    pub fn merged(&self, other: &Histogram) -> Histogram {
        debug_assert_eq!(self.bounds, other.bounds);
        Histogram {
            bounds: self.bounds.clone(),
            counts: self.counts.iter().zip(&other.counts).map(|(a, b)| a + b).collect(),
            sum: self.sum + other.sum,
            count: self.count + other.count,
        }
    }

    /// `(upper bound, cumulative count)` per bucket, +Inf last, as Prometheus exposes them.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut acc = 0;
        self.bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(&self.counts)
            .map(|(b, &c)| {
                acc += c;
                (b, acc)
            })
            .collect()
    }
}

/// A snapshot of the scheduler's state and counters since start.
#[derive(Clone, Debug, PartialEq)]
pub struct Stats {
    /// Requests waiting to be admitted (preempted ones included).
    pub queue_size: usize,
    /// Sequences in the running batch.
    pub batch_size: usize,
    /// Tokens the running batch holds in the KV cache.
    pub batch_tokens: usize,
    /// KV blocks in the pool.
    pub kv_blocks_total: usize,
    /// KV blocks held by sequences (shared prefix blocks counted once).
    pub kv_blocks_used: usize,
    /// Tokens per KV block.
    pub block_size: usize,
    /// Prompt tokens looked up in the prefix cache.
    pub prefix_cache_queries: u64,
    /// Prompt tokens found there (their prefill skipped).
    pub prefix_cache_hits: u64,
    /// Sequences preempted because KV blocks ran out.
    pub preemptions: u64,
    /// Requests cancelled because their client went away.
    pub cancelled: u64,
    /// Steps with prompt tokens run (prefill-only and mixed).
    pub steps_prefill: u64,
    /// Decode-only steps run.
    pub steps_decode: u64,
    /// Prompt tokens computed.
    pub prefill_tokens: u64,
    /// Tokens generated.
    pub generated_tokens: u64,
    /// Duration of decode-only steps, seconds.
    pub step_duration_decode: Histogram,
    /// Duration of steps with decodes and prompt tokens, seconds.
    pub step_duration_mixed: Histogram,
    /// Duration of prefill-only steps, seconds.
    pub step_duration_prefill: Histogram,
    /// Prompt tokens per step with prompt tokens.
    pub step_prefill_tokens: Histogram,
    /// Most prompt tokens the next step with decodes takes (set, or derived from measured step costs).
    pub prefill_cap: usize,
    /// Sequences per step.
    pub step_batch_size: Histogram,
    /// Tokens drafted by speculative decoding and checked in a step.
    pub speculated_tokens: u64,
    /// Drafted tokens accepted.
    pub speculative_accepted_tokens: u64,
    /// Steps of a sequence that verified a draft.
    pub speculative_verifications: u64,
    /// Per draft position (1-based position = index + 1): drafts that reached that position.
    pub speculated_by_position: Vec<u64>,
    /// Per draft position: drafts whose token at that position was accepted.
    pub accepted_by_position: Vec<u64>,
    /// Time to compute one grammar mask (one constrained token), seconds, from 10 µs doubling.
    pub grammar_mask_seconds: Histogram,
    /// The token cost the last speculating step's depths were chosen at (measured, or the prior).
    pub speculation_token_cost: f64,
    /// The speed-up the adaptive rule predicted for the last step's drafts (mean over drafting sequences).
    pub speculation_predicted_speedup: f64,
    /// Decode-only steps in which the check of what drafting yields held the adaptive rule's drafting off.
    pub speculation_held_steps: u64,
}

impl Stats {
    /// Zero counters for a scheduler with `cfg`: step durations bucketed from 1 ms doubling to about 33 s,
    /// batch sizes and prompt tokens per step by powers of 2 up to their limits, a count per draft position.
    pub fn new(cfg: &SchedulerConfig) -> Self {
        let powers_to =
            |max: usize| Histogram::exponential(1.0, 2.0, max.next_power_of_two().trailing_zeros() as usize + 1);
        let depth = cfg.speculation.as_ref().map_or(0, |s| s.depth);
        Stats {
            queue_size: 0,
            batch_size: 0,
            batch_tokens: 0,
            kv_blocks_total: cfg.num_blocks(),
            kv_blocks_used: 0,
            block_size: BLOCK_SIZE,
            prefix_cache_queries: 0,
            prefix_cache_hits: 0,
            preemptions: 0,
            cancelled: 0,
            steps_prefill: 0,
            steps_decode: 0,
            prefill_tokens: 0,
            generated_tokens: 0,
            step_duration_decode: Histogram::exponential(0.001, 2.0, 16),
            step_duration_mixed: Histogram::exponential(0.001, 2.0, 16),
            step_duration_prefill: Histogram::exponential(0.001, 2.0, 16),
            step_prefill_tokens: powers_to(cfg.batching.max_batch_prefill_tokens),
            prefill_cap: 0,
            step_batch_size: powers_to(cfg.max_batch_size),
            speculated_tokens: 0,
            speculative_accepted_tokens: 0,
            speculative_verifications: 0,
            speculated_by_position: vec![0; depth],
            accepted_by_position: vec![0; depth],
            speculation_token_cost: 0.0,
            speculation_predicted_speedup: 1.0,
            speculation_held_steps: 0,
            grammar_mask_seconds: Histogram::exponential(1e-5, 2.0, 16),
        }
    }

    /// Counts one step of `kind` that took `secs`, computed `prefill` prompt tokens and `batch` sequences.
    pub(super) fn record_step(&mut self, kind: StepKind, prefill: usize, batch: usize, secs: f64) {
        let duration = match kind {
            StepKind::Decode => &mut self.step_duration_decode,
            StepKind::Mixed => &mut self.step_duration_mixed,
            StepKind::Prefill => &mut self.step_duration_prefill,
        };
        duration.observe(secs);
        if prefill > 0 {
            self.steps_prefill += 1;
            self.prefill_tokens += prefill as u64;
            self.step_prefill_tokens.observe(prefill as f64);
        } else {
            self.steps_decode += 1;
        }
        self.step_batch_size.observe(batch as f64);
    }

    /// Counts one verification of `drafted` tokens of which the first `accepted` went through.
    pub(super) fn record_verification(&mut self, drafted: usize, accepted: usize) {
        self.speculated_tokens += drafted as u64;
        self.speculative_accepted_tokens += accepted as u64;
        self.speculative_verifications += 1;
        for (i, n) in self.speculated_by_position.iter_mut().take(drafted).enumerate() {
            *n += 1;
            self.accepted_by_position[i] += u64::from(i < accepted);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::speculative::SpeculationConfig;

    /// A config with this batch size and draft depth (0: no speculation).
    fn cfg(max_batch_size: usize, depth: usize) -> SchedulerConfig {
        let speculation = (depth > 0).then(|| SpeculationConfig { depth, ..SpeculationConfig::default() });
        SchedulerConfig { max_batch_size, speculation, ..SchedulerConfig::default() }
    }

    #[test]
    fn buckets_are_cumulative_with_inf_last() {
        let mut h = Histogram::new(vec![0.1, 1.0]);
        for v in [0.05, 0.1, 0.5, 3.0] {
            h.observe(v);
        }
        assert_eq!(h.cumulative(), vec![(0.1, 2), (1.0, 3), (f64::INFINITY, 4)]);
        assert_eq!(h.count, 4);
        assert!((h.sum - 3.65).abs() < 1e-12);
        let mut g = Histogram::new(vec![0.1, 1.0]);
        g.observe(0.7);
        assert_eq!(h.merged(&g).cumulative(), vec![(0.1, 2), (1.0, 4), (f64::INFINITY, 5)]);
        assert_eq!(Histogram::exponential(0.001, 2.0, 3).bounds, vec![0.001, 0.002, 0.004]);
        assert_eq!(Stats::new(&cfg(100, 0)).step_batch_size.bounds.last(), Some(&128.0));
        assert_eq!(Stats::new(&cfg(1, 0)).step_batch_size.bounds, vec![1.0]);
        assert_eq!(Stats::new(&cfg(1, 0)).step_prefill_tokens.bounds.last(), Some(&4096.0));
    }

    #[test]
    fn steps_count_by_kind() {
        let mut s = Stats::new(&cfg(4, 0));
        s.record_step(StepKind::Decode, 0, 4, 0.1);
        s.record_step(StepKind::Mixed, 16, 5, 0.2);
        s.record_step(StepKind::Prefill, 300, 1, 0.5);
        let counts = [&s.step_duration_decode, &s.step_duration_mixed, &s.step_duration_prefill].map(|h| h.count);
        assert_eq!(counts, [1, 1, 1]);
        assert_eq!((s.steps_decode, s.steps_prefill, s.prefill_tokens), (1, 2, 316));
        assert_eq!(s.step_prefill_tokens.cumulative()[4..6], [(16.0, 1), (32.0, 1)]);
        assert_eq!((s.step_batch_size.count, s.step_batch_size.sum), (3, 10.0));
    }

    #[test]
    fn verifications_count_by_position() {
        let mut s = Stats::new(&cfg(4, 3));
        s.record_verification(3, 1);
        s.record_verification(2, 2);
        assert_eq!((s.speculated_tokens, s.speculative_accepted_tokens, s.speculative_verifications), (5, 3, 2));
        assert_eq!((s.speculated_by_position, s.accepted_by_position), (vec![2, 2, 1], vec![2, 1, 0]));
    }
}
