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
}
