//! Open-loop arrival times: gaps drawn from a gamma distribution of shape `burstiness` and mean
//! `1 / rate` (shape 1 is a Poisson process), as vLLM's benchmark does; seeded, so runs repeat.

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A seeded source of uniform, normal and gamma variates.
pub struct Rng(ChaCha8Rng);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(ChaCha8Rng::seed_from_u64(seed))
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform integer in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.0.next_u64() % (hi - lo + 1)
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// Gamma with shape `k` and scale 1 (Marsaglia and Tsang; shapes below 1 by boosting).
    pub fn gamma(&mut self, k: f64) -> f64 {
        if k < 1.0 {
            let u = 1.0 - self.uniform();
            return self.gamma(k + 1.0) * u.powf(1.0 / k);
        }
        let d = k - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = (1.0 + c * x).powi(3);
            if v <= 0.0 {
                continue;
            }
            let u = 1.0 - self.uniform();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v;
            }
        }
    }
}

/// Arrival offsets (seconds from the start) of an open-loop run at `rate` requests/s: `count` of them, or as
/// many as fall within `horizon_s` seconds when `count` is `None`.
pub fn arrivals(rate: f64, burstiness: f64, seed: u64, count: Option<usize>, horizon_s: f64) -> Vec<f64> {
    let mut rng = Rng::new(seed);
    let scale = 1.0 / (rate * burstiness);
    let mut t = 0.0;
    let mut out = Vec::new();
    loop {
        if count.is_some_and(|n| out.len() >= n) {
            break;
        }
        t += rng.gamma(burstiness) * scale;
        if count.is_none() && t > horizon_s {
            break;
        }
        out.push(t);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mean rate and coefficient of variation of the gaps.
    fn stats(t: &[f64]) -> (f64, f64) {
        let gaps: Vec<f64> = std::iter::once(t[0]).chain(t.windows(2).map(|w| w[1] - w[0])).collect();
        let n = gaps.len() as f64;
        let mean = gaps.iter().sum::<f64>() / n;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n;
        (1.0 / mean, var.sqrt() / mean)
    }

    #[test]
    fn poisson_rate_and_dispersion() {
        let t = arrivals(20.0, 1.0, 7, Some(200_000), 0.0);
        let (rate, cv) = stats(&t);
        assert!((rate - 20.0).abs() < 0.2, "rate {rate}");
        assert!((cv - 1.0).abs() < 0.01, "cv {cv}");
        // Counts per 1 s window of a Poisson process: variance equals the mean.
        let windows = t.last().unwrap().floor() as usize;
        let mut counts = vec![0f64; windows];
        for &x in &t {
            if (x as usize) < windows {
                counts[x as usize] += 1.0;
            }
        }
        let m = counts.iter().sum::<f64>() / windows as f64;
        let v = counts.iter().map(|c| (c - m).powi(2)).sum::<f64>() / windows as f64;
        assert!((v / m - 1.0).abs() < 0.05, "index of dispersion {}", v / m);
    }

    #[test]
    fn gamma_burstiness() {
        for b in [0.25, 0.5, 2.0, 4.0] {
            let (rate, cv) = stats(&arrivals(5.0, b, 3, Some(200_000), 0.0));
            assert!((rate / 5.0 - 1.0).abs() < 0.01, "b {b}: rate {rate}");
            assert!((cv - 1.0 / b.sqrt()).abs() < 0.02 / b.sqrt().min(1.0), "b {b}: cv {cv}");
        }
    }

    #[test]
    fn seeded_and_bounded_by_horizon() {
        assert_eq!(arrivals(3.0, 1.0, 1, Some(50), 0.0), arrivals(3.0, 1.0, 1, Some(50), 0.0));
        assert_ne!(arrivals(3.0, 1.0, 1, Some(50), 0.0), arrivals(3.0, 1.0, 2, Some(50), 0.0));
        let t = arrivals(100.0, 1.0, 1, None, 10.0);
        assert!(t.iter().all(|&x| x <= 10.0) && (t.len() as f64 - 1000.0).abs() < 120.0, "{}", t.len());
        assert!(t.windows(2).all(|w| w[0] < w[1]));
    }
}
