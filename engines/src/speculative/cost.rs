//! The cost of a drafted token, measured online from the engine's own decode steps: per batch size, a moving
//! average of the step time without drafts and of the time each drafted token adds (its proposal and its
//! verification together), so that the adaptive depth rule carries across models, methods and devices.

/// Weight of the newest measurement in the moving averages.
const ALPHA: f64 = 0.2;

/// Steps at one batch size with drafts after which one is run without, to keep the plain time current.
const EXPLORE_EVERY: u32 = 32;

/// The highest relative cost reported (a drafted token costing this many sequence-steps never pays).
const MAX_COST: f64 = 100.0;

/// Decode steps over which the tokens per second that drafting yields are checked against the plain step's.
const GUARD_WINDOW: u32 = 48;

/// A window with drafts that yields less than this share of the plain step's tokens per second holds drafting off.
const GUARD_FLOOR: f64 = 0.97;

/// Steps a failed window holds drafting off for, doubled for each failure in a row up to [`GUARD_HOLD_MAX`].
const GUARD_HOLD: u32 = 256;

/// The longest hold.
const GUARD_HOLD_MAX: u32 = 4096;

/// What is measured at one batch size.
#[derive(Clone, Debug, Default, PartialEq)]
struct Bucket {
    /// Moving average of a decode step's seconds without drafts.
    plain: Option<f64>,
    /// Moving average of the seconds one drafted token adds to a decode step.
    per_token: Option<f64>,
    /// Steps with drafts since the last one without.
    since_plain: u32,
    /// The check of what drafting yields in whole steps.
    guard: Guard,
}

/// Checks what drafting yields, whole: a drafted token's measured cost leaves out the draft model's catching up
/// after pauses and its work in steps it did not draft in, so the rule can predict a speed-up that the server does
/// not get (0.84x at concurrency 4, temperature 0.7, on Gemma 3 270M F16 with a Q4_0 draft). Each window of
/// [`GUARD_WINDOW`] decode steps compares the tokens emitted per second, every second counted, with the plain
/// step's; a window with drafts below [`GUARD_FLOOR`] of it holds drafting off, then drafting is tried again.
#[derive(Clone, Debug, Default, PartialEq)]
struct Guard {
    /// Steps, seconds, emitted tokens and drafted tokens in the current window.
    window: (u32, f64, f64, usize),
    /// Steps left in a hold.
    hold: u32,
    /// Failed windows in a row.
    fails: u32,
}

impl Guard {
    /// Takes one decode-only step of `batch` sequences: `secs` long in all, `emitted` tokens, `drafted` drafts;
    /// `plain` is the plain step's time.
    fn step(&mut self, batch: usize, drafted: usize, secs: f64, emitted: usize, plain: Option<f64>) {
        if self.hold > 0 {
            self.hold -= 1;
            return;
        }
        let w = &mut self.window;
        *w = (w.0 + 1, w.1 + secs, w.2 + emitted as f64, w.3 + drafted);
        if w.0 < GUARD_WINDOW {
            return;
        }
        let (_, secs, tokens, drafted) = std::mem::take(w);
        let Some(plain) = plain.filter(|&p| p > 0.0 && secs > 0.0 && drafted > 0) else { return };
        if tokens / secs < GUARD_FLOOR * batch as f64 / plain {
            self.hold = GUARD_HOLD.saturating_mul(1 << self.fails.min(4)).min(GUARD_HOLD_MAX);
            self.fails += 1;
        } else {
            self.fails = 0;
        }
    }
}

/// Measured token costs per batch size, with a prior for batch sizes not measured yet.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenCost {
    /// Index `b - 1` holds batch size `b`.
    buckets: Vec<Bucket>,
    /// The cost used where nothing is measured.
    prior: f32,
    /// Moving average of the seconds a draft model takes to catch up one token of a sequence that paused.
    catch_up: Option<f64>,
}

impl TokenCost {
    /// Nothing measured, for batch sizes up to `max_batch` (wider steps share the widest bucket).
    pub fn new(max_batch: usize, prior: f32) -> Self {
        TokenCost { buckets: vec![Bucket::default(); max_batch.max(1)], prior, catch_up: None }
    }

    fn bucket(&self, batch: usize) -> &Bucket {
        &self.buckets[batch.clamp(1, self.buckets.len()) - 1]
    }

    /// The bucket a step of `batch` sequences, `secs` long, is measured in; `None` for an empty batch or a
    /// time that is not one.
    fn measuring(&mut self, batch: usize, secs: f64) -> Option<&mut Bucket> {
        let n = self.buckets.len();
        (batch > 0 && secs.is_finite() && secs >= 0.0).then(|| &mut self.buckets[batch.clamp(1, n) - 1])
    }

    /// Takes one decode-only step of `batch` sequences with `drafted` drafted tokens in all, `secs` long
    /// (proposing the drafts included).
    pub fn observe(&mut self, batch: usize, drafted: usize, secs: f64) {
        let Some(b) = self.measuring(batch, secs) else { return };
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

    /// Takes one decode-only step of `batch` sequences for the check of what drafting yields: `secs` long with
    /// everything (the draft model's catching up included), `drafted` drafted tokens, `emitted` tokens emitted.
    pub fn yielded(&mut self, batch: usize, drafted: usize, secs: f64, emitted: usize) {
        if let Some(b) = self.measuring(batch, secs) {
            b.guard.step(batch, drafted, secs, emitted, b.plain);
        }
    }

    /// Whether the check of what drafting yields holds drafting off at `batch` sequences.
    pub fn holds(&self, batch: usize) -> bool {
        self.bucket(batch).guard.hold > 0
    }

    /// Whether the next decode step of `batch` sequences should run without drafts, to measure (or refresh)
    /// the plain step time the cost is relative to.
    pub fn explore(&self, batch: usize) -> bool {
        let b = self.bucket(batch);
        b.plain.is_none() || b.since_plain >= EXPLORE_EVERY
    }

    /// The cost of one drafted token in a step of `batch` sequences, relative to one sequence's share of the
    /// step without drafts (`batch * per_token / plain`: the adaptive rule's `c`); the prior until measured, and
    /// the highest cost while the check of what drafting yields holds it off.
    pub fn cost(&self, batch: usize) -> f32 {
        match self.bucket(batch) {
            Bucket { guard: Guard { hold: 1.., .. }, .. } => MAX_COST as f32,
            Bucket { plain: Some(plain), per_token: Some(t), .. } if *plain > 0.0 => {
                (batch.max(1) as f64 * t / plain).min(MAX_COST) as f32
            }
            _ => self.prior,
        }
    }

    /// Takes a draft model's catching up of `tokens` tokens in `secs` seconds.
    pub fn caught_up(&mut self, secs: f64, tokens: usize) {
        if tokens > 0 && secs.is_finite() && secs >= 0.0 {
            self.catch_up = Some(ewma(self.catch_up, secs / tokens as f64, ALPHA));
        }
    }

    /// The cost of catching a draft model up one token in a step of `batch` sequences, in the units of
    /// [`TokenCost::cost`] (one sequence's share of a plain step); a drafted token's cost until measured.
    pub fn catch_up_cost(&self, batch: usize) -> f32 {
        match (self.catch_up, self.bucket(batch).plain) {
            (Some(t), Some(plain)) if plain > 0.0 => (batch.max(1) as f64 * t / plain).min(MAX_COST) as f32,
            _ => self.cost(batch),
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
    fn catching_up_costs_its_share_of_a_plain_step() {
        let mut c = TokenCost::new(4, 0.1);
        assert_eq!(c.catch_up_cost(2), 0.1, "a drafted token's cost until measured");
        c.observe(2, 0, 0.020);
        c.caught_up(0.004, 8);
        c.caught_up(f64::NAN, 8);
        c.caught_up(1.0, 0);
        // Half a millisecond a token against a 20 ms step of two sequences (10 ms each).
        assert!((c.catch_up_cost(2) - 0.05).abs() < 1e-6, "{}", c.catch_up_cost(2));
        assert_eq!(c.catch_up_cost(4), 0.1, "no plain time at 4 yet");
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
        simulate_hidden(batch, per_token, acceptance, 0.0)
    }

    /// As [`simulate`], with `hidden` seconds added to every step with drafts that the drafted token's cost does
    /// not see (a draft model catching up after a pause), only the check of what drafting yields does.
    fn simulate_hidden(batch: usize, per_token: f64, acceptance: f64, hidden: f64) -> f64 {
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
            let paused = if drafted > 0 { hidden } else { 0.0 };
            cost.observe(batch, drafted, step);
            secs += step + paused;
            let mut emitted = 0;
            for ((depth, _), &k) in seqs.iter_mut().zip(&ks) {
                let accepted = (0..k).take_while(|_| draw() < acceptance).count();
                depth.observe(k, accepted);
                emitted += accepted + 1;
            }
            cost.yielded(batch, drafted, step + paused, emitted);
            tokens += emitted as f64;
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

    #[test]
    fn what_drafting_yields_whole_keeps_the_guarantee_where_the_token_cost_misses_a_cost() {
        // Drafts that look cheap and half-accepted, with a hidden cost in every drafted step as large as a
        // plain step: the token cost predicts a gain, whole steps lose; the check holds drafting off.
        for batch in [1, 4, 16] {
            let hidden = plain(batch);
            let ratio = simulate_hidden(batch, 0.001, 0.5, hidden);
            assert!(ratio >= 0.95, "batch {batch}: {ratio:.3}x");
        }
        // A hidden cost small beside the gain leaves drafting on.
        let ratio = simulate_hidden(1, 0.003, 0.8, 0.001);
        assert!(ratio > 1.4, "{ratio:.3}x");
    }

    #[test]
    fn a_failed_window_holds_drafting_off_and_longer_each_time() {
        let mut c = TokenCost::new(1, 0.1);
        c.observe(1, 0, 0.010);
        c.observe(1, 2, 0.012);
        let measured = c.cost(1);
        // 48 steps of 20 ms emitting 1 token each: half the plain rate.
        for _ in 0..GUARD_WINDOW {
            c.yielded(1, 2, 0.020, 1);
        }
        assert_eq!(c.cost(1), MAX_COST as f32, "held off");
        assert!(c.holds(1));
        for _ in 0..GUARD_HOLD {
            c.yielded(1, 0, 0.010, 1);
        }
        assert_eq!(c.cost(1), measured, "tried again");
        for _ in 0..GUARD_WINDOW {
            c.yielded(1, 2, 0.020, 1);
        }
        for _ in 0..GUARD_HOLD {
            c.yielded(1, 0, 0.010, 1);
        }
        assert_eq!(c.cost(1), MAX_COST as f32, "twice as long after a second failure");
        // A window without drafts is no evidence either way; one at the plain rate passes.
        let mut c = TokenCost::new(1, 0.1);
        c.observe(1, 0, 0.010);
        for _ in 0..GUARD_WINDOW {
            c.yielded(1, 0, 0.020, 1);
        }
        for _ in 0..GUARD_WINDOW {
            c.yielded(1, 1, 0.010, 1);
        }
        assert_ne!(c.cost(1), MAX_COST as f32);
    }
}
