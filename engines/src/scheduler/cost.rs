//! The online step-cost model that derives the per-step prefill cap. A step's time is fitted as
//! `F(batch) + Σ prompt tokens × (r₀ + r₁ × position)`: a cost per batch size (decoding sequences, piecewise
//! linear between powers of two) plus a cost per prompt token that grows with how far into its prompt the
//! token is (attention reads every earlier position). Every measured step updates the fit by recursive least
//! squares with forgetting, steps with prefill included, so `F` at a batch size that only ever runs beside
//! prompt chunks (sustained prefill) is learned as well as at one that runs decode-only steps. The cap is the
//! prompt tokens that keep a step within a given multiple of a decode-only step of the same batch.

/// Batch sizes with their own estimate: 0 (prefill only), then 1, 2, 4, ... 1024 (wider: the widest).
const BUCKETS: usize = 12;
/// Parameters: the bucket costs, then `r₀` and `r₁`.
const PARAMS: usize = BUCKETS + 2;
/// Prompt tokens per unit of the token features (keeps the fitted numbers near a step's seconds).
const TOKEN_UNIT: f64 = 16.0;
/// Positions per unit of the position feature.
const POSITION_UNIT: f64 = 4096.0;
/// Weight kept by the past at each step (an effective memory of about 50 steps).
const FORGET: f64 = 0.98;
/// Prior variance of every parameter (seconds², far above any real step, so that the fit follows the first
/// measurements within a ten-thousandth), and the most any grows back to.
const PRIOR: f64 = 10_000.0;
/// A combination of parameters counts as measured while its variance is below this share of the prior's (one
/// step measures it; about 300 steps that leave it alone forget it). Strict enough that a batch size weighted a
/// quarter or more on a bucket never measured is not.
const MEASURED: f64 = 0.04;

/// What a step computed, as the cost model sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct StepLoad {
    /// Sequences decoding (or verifying a draft).
    pub decodes: usize,
    /// Prompt tokens computed.
    pub prefill: usize,
    /// Their mean position in their sequence.
    pub position: f64,
}

/// The fitted step-cost model and the prefill cap it calls for.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct StepCost {
    /// The fitted parameters (bucket seconds; seconds per `TOKEN_UNIT` tokens, and per position unit).
    theta: [f64; PARAMS],
    /// Their covariance, up to the noise variance.
    p: [[f64; PARAMS]; PARAMS],
    /// Fewest prompt tokens a step with decodes takes, so that prefill always progresses.
    floor: usize,
    /// Most prompt tokens any step takes (`max_batch_prefill_tokens`).
    ceiling: usize,
}

/// The bucket weights of `batch` decoding sequences: linear between the neighbouring powers of two.
fn bucket_weights(batch: usize) -> [(usize, f64); 2] {
    if batch == 0 {
        return [(0, 1.0), (0, 0.0)];
    }
    let lo = (usize::BITS - 1 - batch.leading_zeros()) as usize;
    if lo + 2 >= BUCKETS {
        return [(BUCKETS - 1, 1.0), (BUCKETS - 1, 0.0)];
    }
    let base = 1usize << lo;
    let hi = (batch - base) as f64 / base as f64;
    [(lo + 1, 1.0 - hi), (lo + 2, hi)]
}

impl StepLoad {
    /// The model's features of this step.
    fn features(&self) -> [f64; PARAMS] {
        let mut x = [0.0; PARAMS];
        for (i, w) in bucket_weights(self.decodes) {
            x[i] += w;
        }
        let tokens = self.prefill as f64 / TOKEN_UNIT;
        x[BUCKETS] = tokens;
        x[BUCKETS + 1] = tokens * self.position / POSITION_UNIT;
        x
    }
}

impl StepCost {
    /// A model with nothing measured, its caps within `floor..=ceiling` (the floor is lowered to the ceiling
    /// when above it).
    pub fn new(floor: usize, ceiling: usize) -> Self {
        let mut p = [[0.0; PARAMS]; PARAMS];
        for (i, row) in p.iter_mut().enumerate() {
            row[i] = PRIOR;
        }
        StepCost { theta: [0.0; PARAMS], p, floor: floor.min(ceiling).max(1), ceiling }
    }

    /// Takes one step's measurement: `secs` for a step that computed `load`.
    pub fn observe(&mut self, load: StepLoad, secs: f64) {
        if !(secs.is_finite() && secs >= 0.0) || (load.decodes == 0 && load.prefill == 0) {
            return;
        }
        let x = load.features();
        let px: [f64; PARAMS] = std::array::from_fn(|i| dot(&self.p[i], &x));
        let gain = FORGET + dot(&x, &px);
        let err = secs - dot(&self.theta, &x);
        for i in 0..PARAMS {
            self.theta[i] += px[i] / gain * err;
            for j in 0..PARAMS {
                self.p[i][j] = (self.p[i][j] - px[i] * px[j] / gain) / FORGET;
            }
        }
        // What no step excites grows back towards the prior, never past it (a congruence keeps `p` a
        // covariance).
        let scale: [f64; PARAMS] = std::array::from_fn(|i| (PRIOR / self.p[i][i]).min(1.0).sqrt());
        for i in 0..PARAMS {
            for j in 0..PARAMS {
                self.p[i][j] *= scale[i] * scale[j];
            }
        }
    }

    /// The fitted value of the combination `x` of the parameters, when it is measured.
    fn estimate(&self, x: &[f64; PARAMS]) -> Option<f64> {
        let px: [f64; PARAMS] = std::array::from_fn(|i| dot(&self.p[i], x));
        let norm = dot(x, x);
        (norm > 0.0 && dot(x, &px) < MEASURED * PRIOR * norm).then(|| dot(&self.theta, x))
    }

    /// The predicted seconds of a step computing `load`, when every part of it is measured.
    pub fn predict(&self, load: StepLoad) -> Option<f64> {
        self.estimate(&load.features())
    }

    /// The predicted seconds one prompt token adds to a step around `position`, when measured.
    fn token_cost(&self, position: f64) -> Option<f64> {
        let mut x = StepLoad { decodes: 0, prefill: TOKEN_UNIT as usize, position }.features();
        x[..BUCKETS].fill(0.0);
        self.estimate(&x).map(|secs| secs / TOKEN_UNIT)
    }

    /// Prompt tokens a step beside `decodes` decoding sequences may take when its prompt tokens are around
    /// `position`, so that the step costs `factor` decode-only steps of that batch: those that cost
    /// `factor - 1` of them, within the floor and the ceiling (the ceiling when prompt tokens cost nothing
    /// measurable); four floors' worth until the fit covers that batch and a prompt token's cost there.
    pub fn cap(&self, decodes: usize, position: f64, factor: f64) -> usize {
        let start = (4 * self.floor).min(self.ceiling);
        let decode = self.predict(StepLoad { decodes, ..StepLoad::default() });
        let (Some(decode), Some(token)) = (decode, self.token_cost(position)) else { return start };
        if token <= 0.0 {
            return self.ceiling;
        }
        let tokens = (factor - 1.0) * decode.max(0.0) / token;
        if tokens >= self.ceiling as f64 {
            self.ceiling
        } else {
            (tokens.round() as usize).clamp(self.floor, self.ceiling)
        }
    }
}

/// The dot product of two equally long vectors.
fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scripted machine: 10 ms plus 5 ms per decoding sequence, 1 ms per prompt token plus 1 ms more per
    /// 4096 positions.
    fn secs(load: StepLoad) -> f64 {
        let decode = if load.decodes > 0 { 0.010 + 0.005 * load.decodes as f64 } else { 0.002 };
        decode + load.prefill as f64 * (0.001 + 0.001 * load.position / 4096.0)
    }

    fn step(c: &mut StepCost, decodes: usize, prefill: usize, position: f64) {
        let load = StepLoad { decodes, prefill, position };
        c.observe(load, secs(load));
    }

    #[test]
    fn bucket_weights_interpolate_between_powers_of_two() {
        assert_eq!(bucket_weights(0), [(0, 1.0), (0, 0.0)]);
        assert_eq!(bucket_weights(1), [(1, 1.0), (2, 0.0)]);
        assert_eq!(bucket_weights(3), [(2, 0.5), (3, 0.5)]);
        assert_eq!(bucket_weights(6), [(3, 0.5), (4, 0.5)]);
        assert_eq!(bucket_weights(512), [(10, 1.0), (11, 0.0)]);
        assert_eq!(bucket_weights(1024), [(11, 1.0), (11, 0.0)]);
        assert_eq!(bucket_weights(5000), [(11, 1.0), (11, 0.0)]);
    }

    #[test]
    fn starts_at_four_floors_within_the_ceiling() {
        assert_eq!(StepCost::new(16, 4096).cap(4, 0.0, 2.0), 64);
        assert_eq!(StepCost::new(16, 40).cap(4, 0.0, 2.0), 40);
        assert_eq!(StepCost::new(16, 7).cap(4, 0.0, 2.0), 7, "the floor never exceeds the ceiling");
        let mut c = StepCost::new(16, 4096);
        step(&mut c, 4, 0, 0.0);
        assert_eq!(c.cap(4, 0.0, 2.0), 64, "no prompt token's cost measured yet");
        let decode = |c: &StepCost, b: usize| c.predict(StepLoad { decodes: b, ..StepLoad::default() });
        assert!((decode(&c, 4).unwrap() - 0.030).abs() < 1e-5, "one step measures its batch size");
        assert_eq!(decode(&c, 5), None, "a quarter on the bucket of 8, never measured");
        step(&mut c, 0, 100, 0.0);
        assert_eq!(c.cap(8, 0.0, 2.0), 64, "batch 8 not measured yet");
    }

    #[test]
    fn the_fit_learns_each_batch_size_from_decode_and_mixed_steps() {
        let mut c = StepCost::new(4, 4096);
        for i in 0..6 {
            step(&mut c, 4, 0, 0.0);
            step(&mut c, 0, 100 + 50 * i, 0.0);
            step(&mut c, 0, 200, 2048.0 * i as f64);
        }
        // Batch 8 only ever runs beside prompt chunks (sustained prefill): its cost is learned all the same.
        for i in 0..30 {
            step(&mut c, 8, 16 + 8 * (i % 4), 100.0 * i as f64);
        }
        let decode = |b: usize| c.predict(StepLoad { decodes: b, ..StepLoad::default() }).unwrap();
        assert!((decode(4) - 0.030).abs() < 1e-4, "{}", decode(4));
        assert!((decode(8) - 0.050).abs() < 1e-4, "{}", decode(8));
        assert!((decode(6) - 0.040).abs() < 1e-4, "between the buckets: {}", decode(6));
        assert!(c.predict(StepLoad { decodes: 64, ..StepLoad::default() }).is_none(), "never run");
        // A fifth of a 50 ms step at 1 ms a token; deeper into a prompt tokens cost more, so fewer fit.
        assert_eq!(c.cap(8, 0.0, 1.2), 10);
        assert_eq!(c.cap(8, 4096.0, 1.2), 5);
        assert_eq!(c.cap(4, 0.0, 1.2), 6);
        assert_eq!(c.cap(1, 0.0, 1.2), 16, "batch 1 never ran: four floors");
        assert_eq!(c.cap(8, 0.0, 3.0), 100, "a wider factor");
        assert_eq!(c.cap(8, 4096.0, 3.0), 50);
    }

    #[test]
    fn the_fit_follows_a_machine_that_changes() {
        let mut c = StepCost::new(16, 4096);
        for _ in 0..20 {
            step(&mut c, 4, 0, 0.0);
            step(&mut c, 0, 128, 0.0);
            step(&mut c, 0, 64, 4096.0);
            step(&mut c, 0, 32, 0.0);
        }
        assert_eq!(c.cap(4, 0.0, 2.0), 30);
        // Decodes get twice as slow (another process on the machine).
        for _ in 0..200 {
            let load = StepLoad { decodes: 4, ..StepLoad::default() };
            c.observe(load, 2.0 * secs(load));
        }
        assert_eq!(c.cap(4, 0.0, 2.0), 60);
    }

    /// A model fitted to a machine whose decode step takes `decode` seconds at batch 1 and whose prompt tokens
    /// take `token` seconds each (prefill-only steps of `n`, `2n` and `3n` tokens, nothing else).
    fn fitted(decode: f64, n: usize, token: f64) -> StepCost {
        let mut c = StepCost::new(16, 512);
        for _ in 0..5 {
            c.observe(StepLoad { decodes: 1, ..StepLoad::default() }, decode);
            for (k, position) in [(1, 0.0), (2, 4096.0), (3, 0.0)] {
                c.observe(StepLoad { decodes: 0, prefill: k * n, position }, (k * n) as f64 * token);
            }
        }
        c
    }

    #[test]
    fn cap_stays_within_floor_and_ceiling() {
        let c = fitted(0.010, 10, 0.010);
        assert_eq!(c.cap(1, 0.0, 2.0), 16, "10 ms per token would allow 1: the floor");
        let mut c = fitted(0.100, 100, 0.000_01);
        assert_eq!(c.cap(1, 0.0, 2.0), 512, "10 us per token would allow 10000: the ceiling");
        // Nonsense timings and empty steps are ignored.
        let before = c.clone();
        c.observe(StepLoad { decodes: 1, ..StepLoad::default() }, f64::NAN);
        c.observe(StepLoad { decodes: 0, prefill: 5, position: 0.0 }, -1.0);
        c.observe(StepLoad::default(), 1.0);
        assert_eq!(c, before);
    }
}
