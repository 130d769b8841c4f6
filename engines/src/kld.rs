//! KL divergence of a model's next-token distributions from a base model's, as llama.cpp's
//! `llama-perplexity --kl-divergence` reports it, and the compact encoding of the base's log-probabilities.
//!
//! A row of log-probabilities is stored as `scale: f32`, `min: f32` and one `u16` per vocabulary entry:
//! `lp ≈ min + scale * v`, where `min` is the smallest log-probability but at most 100 below the largest
//! (entries less likely than e^-100 of the top one are stored as that floor) and `scale = (top - min) /
//! 65535`; the decoded row is renormalized. The rounding error (at most 7.7e-4 in log space, usually far
//! less) moves a KL divergence by about 1e-7 at most.

/// Bytes of one encoded row for a vocabulary of `vocab` entries.
pub fn encoded_row_len(vocab: usize) -> usize {
    8 + 2 * vocab
}

/// `log softmax(logits)` in f64, the sum in f64 after subtracting the max.
pub fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = logits.iter().map(|&l| (l as f64 - max).exp()).sum::<f64>().ln() + max;
    logits.iter().map(|&l| l as f64 - lse).collect()
}

/// Appends the encoding of `logits`' log-probabilities to `out`.
pub fn encode_row(logits: &[f32], out: &mut Vec<u8>) {
    let lp = log_softmax(logits);
    let top = lp.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = lp.iter().copied().fold(f64::INFINITY, f64::min).max(top - 100.0);
    let scale = ((top - min) / 65535.0).max(f64::MIN_POSITIVE);
    out.extend_from_slice(&(scale as f32).to_le_bytes());
    out.extend_from_slice(&(min as f32).to_le_bytes());
    let (scale, min) = (scale as f32 as f64, min as f32 as f64);
    for &l in &lp {
        let v = ((l.max(min) - min) / scale).round().clamp(0.0, 65535.0) as u16;
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Decodes one row written by [`encode_row`] into normalized log-probabilities.
pub fn decode_row(bytes: &[u8]) -> Vec<f64> {
    let scale = f32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes")) as f64;
    let min = f32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes")) as f64;
    let raw: Vec<f64> =
        bytes[8..].chunks_exact(2).map(|b| min + scale * u16::from_le_bytes([b[0], b[1]]) as f64).collect();
    let top = raw.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lse = raw.iter().map(|&l| (l - top).exp()).sum::<f64>().ln() + top;
    raw.into_iter().map(|l| l - lse).collect()
}

/// The comparison of one scored position.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Position {
    /// KL(base || model) in nats.
    pub kld: f64,
    /// Whether both give the same most likely token.
    pub same_top: bool,
    /// p_model(target) - p_base(target).
    pub delta_p: f64,
}

fn argmax(v: &[f64]) -> usize {
    v.iter().enumerate().fold((0, f64::NEG_INFINITY), |(bi, bv), (i, &x)| if x > bv { (i, x) } else { (bi, bv) }).0
}

/// Compares base log-probabilities with the model's log-probabilities at one position whose next token is
/// `target`.
pub fn compare(base: &[f64], model: &[f64], target: u32) -> Position {
    let kld: f64 = base.iter().zip(model).map(|(&b, &m)| if b.is_finite() { b.exp() * (b - m) } else { 0.0 }).sum();
    let t = target as usize;
    Position { kld, same_top: argmax(base) == argmax(model), delta_p: model[t].exp() - base[t].exp() }
}

/// Accumulates [`Position`]s.
#[derive(Clone, Debug, Default)]
pub struct KlStats {
    klds: Vec<f64>,
    same_top: usize,
    dp_sum: f64,
    dp_sum2: f64,
}

/// Mean and its standard error: `sqrt(var / (n - 1))`, as llama-perplexity computes it.
fn mean_stderr(sum: f64, sum2: f64, n: usize) -> (f64, f64) {
    let mean = sum / n as f64;
    let var = (sum2 / n as f64 - mean * mean).max(0.0);
    (mean, if n > 1 { (var / (n - 1) as f64).sqrt() } else { 0.0 })
}

/// The `q` quantile of sorted values, interpolating linearly between ranks.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let x = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (x.floor() as usize, x.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (x - lo as f64)
}

impl KlStats {
    /// Adds one position.
    pub fn push(&mut self, p: Position) {
        self.klds.push(p.kld);
        self.same_top += p.same_top as usize;
        self.dp_sum += p.delta_p;
        self.dp_sum2 += p.delta_p * p.delta_p;
    }

    /// The summary, or `None` before any position.
    pub fn summary(&self) -> Option<KlSummary> {
        let n = self.klds.len();
        if n == 0 {
            return None;
        }
        let mut sorted = self.klds.clone();
        sorted.sort_by(f64::total_cmp);
        let (mean, stderr) = mean_stderr(sorted.iter().sum(), sorted.iter().map(|k| k * k).sum(), n);
        let same = self.same_top as f64 / n as f64;
        let (dp, dp_se) = mean_stderr(self.dp_sum, self.dp_sum2, n);
        Some(KlSummary {
            positions: n,
            mean,
            stderr,
            max: sorted[n - 1],
            p99: quantile(&sorted, 0.99),
            median: quantile(&sorted, 0.5),
            min: sorted[0],
            same_top: same,
            same_top_stderr: if n > 1 { (same * (1.0 - same) / (n - 1) as f64).sqrt() } else { 0.0 },
            mean_delta_p: dp,
            delta_p_stderr: dp_se,
        })
    }
}

/// KL divergence statistics over all scored positions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KlSummary {
    /// Positions compared.
    pub positions: usize,
    /// Mean KL(base || model).
    pub mean: f64,
    /// Standard error of the mean.
    pub stderr: f64,
    /// Largest KL divergence.
    pub max: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Median.
    pub median: f64,
    /// Smallest KL divergence.
    pub min: f64,
    /// Fraction of positions where base and model give the same most likely token.
    pub same_top: f64,
    /// Standard error of `same_top`.
    pub same_top_stderr: f64,
    /// Mean of p_model(target) - p_base(target).
    pub mean_delta_p: f64,
    /// Standard error of `mean_delta_p`.
    pub delta_p_stderr: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kl_of_hand_computed_distributions() {
        // base p = (0.5, 0.25, 0.25), model q = (0.25, 0.5, 0.25):
        // KL = 0.5 ln 2 + 0.25 ln 0.5 + 0 = 0.25 ln 2.
        let base = [0.5f64.ln(), 0.25f64.ln(), 0.25f64.ln()];
        let model = [0.25f64.ln(), 0.5f64.ln(), 0.25f64.ln()];
        let p = compare(&base, &model, 1);
        assert!((p.kld - 0.25 * 2f64.ln()).abs() < 1e-12, "{}", p.kld);
        assert!(!p.same_top);
        assert!((p.delta_p - 0.25).abs() < 1e-12);
        assert_eq!(compare(&base, &base, 0), Position { kld: 0.0, same_top: true, delta_p: 0.0 });
    }

    #[test]
    fn summary_statistics() {
        let mut s = KlStats::default();
        for (k, same, dp) in [(0.1, true, 0.1), (0.2, true, -0.1), (0.3, false, 0.2), (0.4, true, 0.0)] {
            s.push(Position { kld: k, same_top: same, delta_p: dp });
        }
        let r = s.summary().unwrap();
        assert!((r.mean - 0.25).abs() < 1e-12);
        // population variance 0.0125, stderr = sqrt(0.0125 / 3)
        assert!((r.stderr - (0.0125f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!((r.max, r.min), (0.4, 0.1));
        assert!((r.median - 0.25).abs() < 1e-12);
        assert!((r.p99 - (0.3 + 0.1 * 0.97)).abs() < 1e-12);
        assert!((r.same_top - 0.75).abs() < 1e-12);
        assert!((r.same_top_stderr - (0.75f64 * 0.25 / 3.0).sqrt()).abs() < 1e-12);
        assert!((r.mean_delta_p - 0.05).abs() < 1e-12);
        assert!(KlStats::default().summary().is_none());
    }

    #[test]
    fn encoded_rows_round_trip_to_a_negligible_kl() {
        let logits: Vec<f32> = (0..1000).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let mut buf = Vec::new();
        encode_row(&logits, &mut buf);
        assert_eq!(buf.len(), encoded_row_len(logits.len()));
        let exact = log_softmax(&logits);
        let decoded = decode_row(&buf);
        let p = compare(&decoded, &exact, 3);
        assert!(p.kld.abs() < 1e-6, "{}", p.kld);
        assert!(p.same_top && p.delta_p.abs() < 1e-4);
        let total: f64 = decoded.iter().map(|l| l.exp()).sum();
        assert!((total - 1.0).abs() < 1e-12);
    }
}
