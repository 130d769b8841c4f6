//! Per-sequence speculation depth from an exponentially weighted average of measured acceptance.

/// Weight of the newest observation in the acceptance average.
const RATE: f32 = 0.2;

/// A sequence's measured acceptance and the depth it calls for (see the module docs of
/// [`crate::speculative`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Depth {
    /// Average acceptance of a drafted token, given the ones before it were accepted.
    acceptance: f32,
}

impl Default for Depth {
    fn default() -> Self {
        Depth { acceptance: 0.5 }
    }
}

impl Depth {
    /// The current acceptance estimate.
    pub fn acceptance(&self) -> f32 {
        self.acceptance
    }

    /// The depth in `0..=cap` with the most expected tokens per unit of step cost, `token_cost` being the
    /// cost of one drafted token relative to a step without any; ties go to the shallower depth.
    pub fn choose(&self, cap: usize, token_cost: f32) -> usize {
        let mut best = (0, 1.0f32);
        for k in 1..=cap {
            let score = self.gain(k, token_cost);
            if score > best.1 * (1.0 + 1e-6) {
                best = (k, score);
            }
        }
        best.0
    }

    /// The predicted speed-up of drafting `k` tokens at `token_cost`: expected tokens per step,
    /// `(1 - a^(k+1)) / (1 - a)`, over the step's relative cost `1 + c·k`.
    pub fn gain(&self, k: usize, token_cost: f32) -> f32 {
        let a = self.acceptance.clamp(0.0, 0.999);
        let expected = (0..k as i32).fold((1.0f32, 1.0f32), |(sum, power), _| (sum + power * a, power * a)).0;
        expected / (1.0 + token_cost * k as f32)
    }

    /// Records a verification: `accepted` of `drafted` tokens went through (the first rejection ends it).
    pub fn observe(&mut self, drafted: usize, accepted: usize) {
        for _ in 0..accepted {
            self.push(1.0);
        }
        if accepted < drafted {
            self.push(0.0);
        }
    }

    /// Records whether a token that would have been drafted was the one generated.
    pub fn observe_shadow(&mut self, hit: bool) {
        self.push(if hit { 1.0 } else { 0.0 });
    }

    /// Moves the estimate halfway to `other`'s: a new sequence starts from what finished ones measured.
    pub fn follow(&mut self, other: Depth) {
        self.acceptance += 0.5 * (other.acceptance - self.acceptance);
    }

    fn push(&mut self, x: f32) {
        self.acceptance += RATE * (x - self.acceptance);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_follows_acceptance_and_cost() {
        let mut d = Depth::default();
        // a = 0.5, c = 0.1: 1.5/1.1, 1.75/1.2, 1.875/1.3 -> 2 is best.
        assert_eq!(d.choose(4, 0.1), 2);
        assert_eq!(d.choose(1, 0.1), 1);
        assert_eq!(d.choose(0, 0.1), 0);
        assert_eq!(d.choose(4, 0.0), 4, "free tokens: as deep as allowed");
        assert_eq!(d.choose(4, 1.0), 0, "a drafted token costing a whole step never pays");
        assert!((d.gain(2, 0.1) - 1.75 / 1.2).abs() < 1e-6 && d.gain(0, 0.3) == 1.0);
        for _ in 0..30 {
            d.observe(4, 4);
        }
        assert!(d.acceptance() > 0.99);
        assert_eq!(d.choose(4, 0.1), 4);
        for _ in 0..30 {
            d.observe(4, 0);
        }
        assert!(d.acceptance() < 0.01);
        assert_eq!(d.choose(4, 0.1), 0);
        for _ in 0..20 {
            d.observe_shadow(true);
        }
        assert!(d.choose(4, 0.1) >= 3, "shadow hits bring speculation back: {d:?}");
    }

    #[test]
    fn follow_moves_halfway_to_the_other_estimate() {
        let mut carried = Depth::default();
        let mut high = Depth::default();
        for _ in 0..30 {
            high.observe(4, 4);
        }
        carried.follow(high);
        assert!((carried.acceptance() - (0.5 + 0.5 * (high.acceptance() - 0.5))).abs() < 1e-6);
        carried.follow(high);
        assert!(carried.acceptance() > 0.85 && carried.choose(4, 0.1) == 4, "{carried:?}");
    }
}
