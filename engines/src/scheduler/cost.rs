//! The online step-cost model that derives the per-step prefill cap: how long a decode-only step takes and
//! what each prompt token adds to a step, both as moving averages of measured steps, so that a step with
//! prefill beside decodes costs about a chosen multiple of a decode-only one.

use crate::speculative::cost::ewma;

/// Weight of the newest measurement in the moving averages.
const ALPHA: f64 = 0.25;

/// Measured step costs and the prefill cap they call for.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct StepCost {
    /// Moving average of decode-only step time, seconds; `None` until one is measured.
    decode_step: Option<f64>,
    /// Moving average of the time one prompt token adds to a step, seconds; `None` until measured.
    per_prefill_token: Option<f64>,
    /// Fewest prompt tokens a step with decodes takes, so that prefill always progresses.
    floor: usize,
    /// Most prompt tokens any step takes (`max_batch_prefill_tokens`).
    ceiling: usize,
    /// What a step with prompt tokens beside decodes may cost, as a multiple of a decode-only step.
    factor: f64,
}

impl StepCost {
    /// A model with nothing measured, its caps within `floor..=ceiling` (the floor is lowered to the ceiling
    /// when above it), letting a step with prompt tokens cost `factor` decode-only steps.
    pub fn new(floor: usize, ceiling: usize, factor: f64) -> Self {
        StepCost { decode_step: None, per_prefill_token: None, floor: floor.min(ceiling).max(1), ceiling, factor }
    }

    /// Takes one step's measurement: `secs` for a step computing `prefill` prompt tokens, beside `decodes`
    /// decoding sequences. A decode-only step updates the decode time; a step with prefill updates the cost
    /// per prompt token, less the decode part predicted for it (all of it when nothing decoded).
    pub fn observe(&mut self, prefill: usize, decodes: usize, secs: f64) {
        if !(secs.is_finite() && secs >= 0.0) {
            return;
        }
        if prefill == 0 {
            if decodes > 0 {
                self.decode_step = Some(ewma(self.decode_step, secs, ALPHA));
            }
            return;
        }
        let decode_part = if decodes > 0 { self.decode_step.unwrap_or(0.0) } else { 0.0 };
        let marginal = (secs - decode_part).max(0.0) / prefill as f64;
        self.per_prefill_token = Some(ewma(self.per_prefill_token, marginal, ALPHA));
    }

    /// Prompt tokens a step with decodes may take: `factor - 1` decode steps' time worth of them, within the
    /// floor and the ceiling; four floors' worth before both costs are measured.
    pub fn cap(&self) -> usize {
        let start = (4 * self.floor).min(self.ceiling);
        let (Some(decode), Some(token)) = (self.decode_step, self.per_prefill_token) else { return start };
        if token <= 0.0 {
            return self.ceiling;
        }
        let tokens = (self.factor - 1.0) * decode / token;
        if tokens >= self.ceiling as f64 {
            self.ceiling
        } else {
            (tokens.round() as usize).clamp(self.floor, self.ceiling)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_at_four_floors_within_the_ceiling() {
        assert_eq!(StepCost::new(16, 4096, 2.0).cap(), 64);
        assert_eq!(StepCost::new(16, 40, 2.0).cap(), 40);
        assert_eq!(StepCost::new(16, 7, 2.0).cap(), 7, "the floor never exceeds the ceiling");
        let mut c = StepCost::new(16, 4096, 2.0);
        c.observe(0, 4, 0.1);
        assert_eq!(c.cap(), 64, "no prefill cost measured yet");
    }

    #[test]
    fn cap_is_a_decode_step_worth_of_prompt_tokens() {
        let mut c = StepCost::new(16, 4096, 2.0);
        c.observe(0, 4, 0.100);
        // 0.1 s of decodes plus 200 tokens taking 0.2 s: 1 ms per token, so 100 tokens cost one decode step.
        c.observe(200, 4, 0.300);
        assert_eq!(c.cap(), 100);
        // A prefill-only step: all of its time is the tokens' (2 ms each), moving the average a quarter there.
        c.observe(100, 0, 0.200);
        assert!((c.per_prefill_token.unwrap() - 0.00125).abs() < 1e-12);
        assert_eq!(c.cap(), 80);
        // Slower decodes (a wider batch) allow more tokens.
        for _ in 0..40 {
            c.observe(0, 8, 0.250);
        }
        assert_eq!(c.cap(), 200);
    }

    #[test]
    fn cap_stays_within_floor_and_ceiling() {
        let mut c = StepCost::new(16, 512, 2.0);
        c.observe(0, 1, 0.010);
        c.observe(10, 1, 0.110);
        assert_eq!(c.cap(), 16, "10 ms per token would allow 1: the floor");
        let mut c = StepCost::new(16, 512, 2.0);
        c.observe(0, 1, 0.100);
        c.observe(100, 1, 0.101);
        assert_eq!(c.cap(), 512, "10 us per token would allow 10000: the ceiling");
        // Faster than the predicted decode part: no measurable cost, the ceiling.
        let mut c = StepCost::new(16, 512, 2.0);
        c.observe(0, 1, 0.100);
        c.observe(100, 1, 0.050);
        assert_eq!(c.cap(), 512);
        // Nonsense timings are ignored.
        c.observe(0, 1, f64::NAN);
        c.observe(5, 1, -1.0);
        assert_eq!(c.decode_step, Some(0.100));
    }
}
