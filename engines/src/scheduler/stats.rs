//! Counters, gauges and histograms the scheduler keeps, for `/metrics`.

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
    /// Steps run, by kind: steps with prefill tokens ("prefill") and decode-only steps ("decode").
    pub steps_prefill: u64,
    /// Decode-only steps run.
    pub steps_decode: u64,
    /// Prompt tokens computed.
    pub prefill_tokens: u64,
    /// Tokens generated.
    pub generated_tokens: u64,
    /// Duration of steps with prefill tokens, seconds.
    pub step_duration_prefill: Histogram,
    /// Duration of decode-only steps, seconds.
    pub step_duration_decode: Histogram,
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
}

impl Stats {
    /// Zero counters for a pool of `kv_blocks_total` blocks of `block_size` tokens and batches of at most
    /// `max_batch_size`: step durations bucketed from 1 ms doubling to about 33 s, batch sizes by powers of 2.
    /// `depth` is the most tokens drafted per step (0 without speculation).
    pub(super) fn new(kv_blocks_total: usize, block_size: usize, max_batch_size: usize, depth: usize) -> Self {
        let batch_buckets = max_batch_size.next_power_of_two().trailing_zeros() as usize + 1;
        Stats {
            queue_size: 0,
            batch_size: 0,
            batch_tokens: 0,
            kv_blocks_total,
            kv_blocks_used: 0,
            block_size,
            prefix_cache_queries: 0,
            prefix_cache_hits: 0,
            preemptions: 0,
            cancelled: 0,
            steps_prefill: 0,
            steps_decode: 0,
            prefill_tokens: 0,
            generated_tokens: 0,
            step_duration_prefill: Histogram::exponential(0.001, 2.0, 16),
            step_duration_decode: Histogram::exponential(0.001, 2.0, 16),
            step_batch_size: Histogram::exponential(1.0, 2.0, batch_buckets),
            speculated_tokens: 0,
            speculative_accepted_tokens: 0,
            speculative_verifications: 0,
            speculated_by_position: vec![0; depth],
            accepted_by_position: vec![0; depth],
        }
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

    #[test]
    fn buckets_are_cumulative_with_inf_last() {
        let mut h = Histogram::new(vec![0.1, 1.0]);
        for v in [0.05, 0.1, 0.5, 3.0] {
            h.observe(v);
        }
        assert_eq!(h.cumulative(), vec![(0.1, 2), (1.0, 3), (f64::INFINITY, 4)]);
        assert_eq!(h.count, 4);
        assert!((h.sum - 3.65).abs() < 1e-12);
        assert_eq!(Histogram::exponential(0.001, 2.0, 3).bounds, vec![0.001, 0.002, 0.004]);
        assert_eq!(Stats::new(8, 16, 100, 0).step_batch_size.bounds.last(), Some(&128.0));
        assert_eq!(Stats::new(8, 16, 1, 0).step_batch_size.bounds, vec![1.0]);
    }

    #[test]
    fn verifications_count_by_position() {
        let mut s = Stats::new(8, 16, 4, 3);
        s.record_verification(3, 1);
        s.record_verification(2, 2);
        assert_eq!((s.speculated_tokens, s.speculative_accepted_tokens, s.speculative_verifications), (5, 3, 2));
        assert_eq!((s.speculated_by_position, s.accepted_by_position), (vec![2, 2, 1], vec![2, 1, 0]));
    }
}
