//! The cost of a drafted token, measured online from the engine's own decode steps: per batch size, a moving
//! average of the step time without drafts and of the time each drafted token adds (its proposal and its
//! verification together), so that the adaptive depth rule carries across models, methods and devices.

/// Weight of the newest measurement in the moving averages.
const ALPHA: f64 = 0.2;

/// Steps at one batch size with drafts after which one is run without, to keep the plain time current.
const EXPLORE_EVERY: u32 = 32;

/// The highest relative cost reported (a drafted token costing this many sequence-steps never pays).
const MAX_COST: f64 = 100.0;

/// What is measured at one batch size.
#[derive(Clone, Debug, Default, PartialEq)]
struct Bucket {
    /// Moving average of a decode step's seconds without drafts.
    plain: Option<f64>,
    /// Moving average of the seconds one drafted token adds to a decode step.
    per_token: Option<f64>,
    /// Steps with drafts since the last one without.
    since_plain: u32,
}

/// Measured token costs per batch size, with a prior for batch sizes not measured yet.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenCost {
    /// Index `b - 1` holds batch size `b`.
    buckets: Vec<Bucket>,
    /// The cost used where nothing is measured.
    prior: f32,
}

impl TokenCost {
    /// Nothing measured, for batch sizes up to `max_batch` (wider steps share the widest bucket).
    pub fn new(max_batch: usize, prior: f32) -> Self {
        TokenCost { buckets: vec![Bucket::default(); max_batch.max(1)], prior }
    }

    fn bucket(&self, batch: usize) -> &Bucket {
        &self.buckets[batch.clamp(1, self.buckets.len()) - 1]
    }

    /// Takes one decode-only step of `batch` sequences with `drafted` drafted tokens in all, `secs` long
    /// (proposing the drafts included).
    pub fn observe(&mut self, batch: usize, drafted: usize, secs: f64) {
        if batch == 0 || !(secs.is_finite() && secs >= 0.0) {
            return;
        }
        let i = batch.clamp(1, self.buckets.len()) - 1;
        let b = &mut self.buckets[i];
        if drafted == 0 {
            b.plain = Some(ewma(b.plain, secs, ALPHA));
            b.since_plain = 0;
            return;
        }
        b.since_plain = b.since_plain.saturating_add(1);
        if let Some(plain) = b.plain {
            b.per_token = Some(ewma(b.per_token, (secs - plain).max(0.0) / drafted as f64, ALPHA));
        }
    }

    /// Whether the next decode step of `batch` sequences should run without drafts, to measure (or refresh)
    /// the plain step time the cost is relative to.
    pub fn explore(&self, batch: usize) -> bool {
        let b = self.bucket(batch);
        b.plain.is_none() || b.since_plain >= EXPLORE_EVERY
    }

    /// The cost of one drafted token in a step of `batch` sequences, relative to one sequence's share of the
    /// step without drafts (`batch * per_token / plain`: the adaptive rule's `c`); the prior until measured.
    pub fn cost(&self, batch: usize) -> f32 {
        match self.bucket(batch) {
            Bucket { plain: Some(plain), per_token: Some(t), .. } if *plain > 0.0 => {
                (batch.max(1) as f64 * t / plain).min(MAX_COST) as f32
            }
            _ => self.prior,
        }
    }

    /// Whether the cost at `batch` comes from measurements (not the prior).
    pub fn measured(&self, batch: usize) -> bool {
        let b = self.bucket(batch);
        b.plain.is_some() && b.per_token.is_some()
    }
}

/// The moving average after `v`, weighting it `alpha`; `v` itself first.
pub(crate) fn ewma(prev: Option<f64>, v: f64, alpha: f64) -> f64 {
    prev.map_or(v, |p| p + alpha * (v - p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_is_the_drafted_tokens_share_of_a_plain_step() {
        let mut c = TokenCost::new(4, 0.1);
        assert_eq!(c.cost(1), 0.1, "prior until measured");
        assert!(c.explore(1), "a plain step first");
        c.observe(1, 3, 0.013);
        assert_eq!(c.cost(1), 0.1, "drafted steps need a plain time to compare with");
        c.observe(1, 0, 0.010);
        assert!(!c.explore(1));
        // 10 ms plain, 3 drafted tokens adding 3 ms: 1 ms each, a tenth of the one sequence's step.
        c.observe(1, 3, 0.013);
        assert!((c.cost(1) - 0.1).abs() < 1e-6 && c.measured(1));
        // Four sequences: a 20 ms step is 5 ms per sequence; 8 tokens adding 8 ms cost 1 ms each = 0.2.
        c.observe(4, 0, 0.020);
        c.observe(4, 8, 0.028);
        assert!((c.cost(4) - 0.2).abs() < 1e-6);
        // Wider batches share the widest bucket; unmeasured sizes fall back to the prior.
        assert!((c.cost(9) - 0.2 * 9.0 / 4.0).abs() < 1e-5);
        assert_eq!(c.cost(2), 0.1);
    }

    #[test]
    fn explores_after_a_run_of_drafted_steps_and_ignores_nonsense() {
        let mut c = TokenCost::new(2, 0.5);
        c.observe(2, 0, 0.01);
        for _ in 0..EXPLORE_EVERY - 1 {
            c.observe(2, 2, 0.012);
        }
        assert!(!c.explore(2));
        c.observe(2, 2, 0.012);
        assert!(c.explore(2));
        c.observe(2, 0, 0.01);
        assert!(!c.explore(2));
        let before = c.clone();
        c.observe(2, 1, f64::NAN);
        c.observe(0, 1, 0.1);
        c.observe(2, 1, -1.0);
        assert_eq!(c, before);
        // Drafts faster than the plain average cost nothing (not less than nothing).
        let mut c = TokenCost::new(1, 0.5);
        c.observe(1, 0, 0.01);
        c.observe(1, 4, 0.005);
        assert_eq!(c.cost(1), 0.0);
    }

    /// Scripted step times at batch size `b`: a plain step reads the weights once and adds a little per
    /// sequence; each drafted token adds `per_token`.
    fn plain(b: usize) -> f64 {
        0.010 + 0.002 * b as f64
    }

    #[test]
    fn cost_is_measured_at_every_batch_size() {
        let mut c = TokenCost::new(16, 0.1);
        for b in 1..=16 {
            assert!(c.explore(b) && c.cost(b) == 0.1, "batch {b}: nothing measured yet");
            c.observe(b, 0, plain(b));
            for drafted in [b, 2 * b, 4 * b] {
                c.observe(b, drafted, plain(b) + 0.003 * drafted as f64);
            }
            let want = b as f64 * 0.003 / plain(b);
            assert!(c.measured(b) && (f64::from(c.cost(b)) - want).abs() < 1e-6, "batch {b}: {}", c.cost(b));
        }
        // Each batch size keeps its own measurement.
        assert!((f64::from(c.cost(1)) - 0.25).abs() < 1e-6 && (f64::from(c.cost(16)) - 48.0 / 42.0).abs() < 1e-5);
    }

    /// Tokens per second of `batch` alike sequences under the adaptive rule, relative to never drafting, with
    /// the scripted [`plain`] step, `per_token` seconds per drafted token, and each drafted token accepted with
    /// probability `acceptance` (a seeded draw). The loop is the scheduler's: a plain step whenever
    /// [`TokenCost::explore`] asks for one, else each sequence's depth from its acceptance at the measured
    /// cost, and a one-token probe every [`probe_interval`] steps while that depth is 0.
    fn simulate(batch: usize, per_token: f64, acceptance: f64) -> f64 {
        use crate::speculative::{probe_interval, Depth, PRIOR_TOKEN_COST};
        let mut cost = TokenCost::new(16, PRIOR_TOKEN_COST);
        let mut seqs = vec![(Depth::default(), 0u32); batch];
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut draw = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let (mut secs, mut tokens) = (0.0, 0.0);
        for _ in 0..4000 {
            let explore = cost.explore(batch);
            let c = cost.cost(batch);
            let ks: Vec<usize> = seqs
                .iter_mut()
                .map(|(depth, idle)| match (explore, depth.choose(4, c)) {
                    (true, _) => 0,
                    (false, 0) => {
                        *idle += 1;
                        let probe = *idle >= probe_interval(c);
                        if probe {
                            *idle = 0;
                        }
                        usize::from(probe)
                    }
                    (false, k) => {
                        *idle = 0;
                        k
                    }
                })
                .collect();
            let drafted: usize = ks.iter().sum();
            let step = plain(batch) + per_token * drafted as f64;
            cost.observe(batch, drafted, step);
            secs += step;
            for ((depth, _), &k) in seqs.iter_mut().zip(&ks) {
                let accepted = (0..k).take_while(|_| draw() < acceptance).count();
                depth.observe(k, accepted);
                tokens += (accepted + 1) as f64;
            }
        }
        tokens / secs / (batch as f64 / plain(batch))
    }

    #[test]
    fn the_rule_is_never_more_than_5_percent_slower_at_any_batch_size() {
        // Cheap drafts that agree (a memory-bound target), cheap drafts that never agree, costly drafts.
        for (per_token, acceptance) in [(0.003, 0.8), (0.003, 0.0), (0.02, 0.9), (0.008, 0.5)] {
            for batch in 1..=16 {
                let ratio = simulate(batch, per_token, acceptance);
                assert!(
                    ratio >= 0.95,
                    "{per_token} s per drafted token, acceptance {acceptance}, batch {batch}: {ratio:.3}x"
                );
            }
        }
        // Where drafting pays (c = 0.25, a = 0.8 predicts 1.69x at depth 3), the rule takes it.
        let ratio = simulate(1, 0.003, 0.8);
        assert!(ratio > 1.5, "{ratio:.3}x");
    }
}
