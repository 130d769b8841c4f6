//! A small deterministic PRNG (SplitMix64) and a fast approximately normal sampler.

/// SplitMix64 (Steele, Lea, Flood 2014): 64-bit state, passes BigCrush, one add and three xor-shift-multiplies.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator started at `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A sample with mean 0 and standard deviation 1, approximately normal: the centred sum of the four 16-bit
    /// lanes of one 64-bit draw (Irwin–Hall, n = 4; support ±3.46 σ, no tails beyond).
    #[inline]
    pub fn next_normalish(&mut self) -> f32 {
        let x = self.next_u64();
        let sum = (x & 0xFFFF) + ((x >> 16) & 0xFFFF) + ((x >> 32) & 0xFFFF) + (x >> 48);
        // Four uniforms on 0..65535: mean 4 * 32767.5, variance 4 * (65536^2 - 1) / 12.
        const MEAN: f32 = 131_070.0;
        const INV_STD: f32 = 2.642_899_8e-5; // 1 / sqrt((65536^2 - 1) / 3)
        (sum as f32 - MEAN) * INV_STD
    }
}

/// The seed of the stream for one named tensor: FNV-1a of the name mixed into the run's seed, so a tensor's
/// values do not depend on the order or sharding of the others.
pub fn tensor_seed(seed: u64, name: &str) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3);
    }
    SplitMix64::new(seed ^ h).next_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_known_values() {
        // Reference outputs of SplitMix64 from state 0 (as in Vigna's splitmix64.c).
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn deterministic_per_seed_and_name() {
        let a: Vec<u64> = (0..5).scan(SplitMix64::new(42), |r, _| Some(r.next_u64())).collect();
        let b: Vec<u64> = (0..5).scan(SplitMix64::new(42), |r, _| Some(r.next_u64())).collect();
        assert_eq!(a, b);
        assert_eq!(tensor_seed(7, "model.norm.weight"), tensor_seed(7, "model.norm.weight"));
        assert_ne!(tensor_seed(7, "model.norm.weight"), tensor_seed(8, "model.norm.weight"));
        assert_ne!(tensor_seed(7, "lm_head.weight"), tensor_seed(7, "model.norm.weight"));
    }

    #[test]
    fn normalish_moments() {
        let mut r = SplitMix64::new(1);
        let n = 200_000;
        let xs: Vec<f64> = (0..n).map(|_| f64::from(r.next_normalish())).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var.sqrt() - 1.0).abs() < 0.01, "std {}", var.sqrt());
        assert!(xs.iter().all(|x| x.abs() < 3.5));
    }
}
