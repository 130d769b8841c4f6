//! Speculative verification of a drafted token against the target distribution (rejection sampling with a
//! point-mass proposal, as n-gram lookup makes).
//!
//! A drafted token `d` is accepted with probability `p(d)`; on rejection the token is drawn from `p` without `d`,
//! renormalised. A token `x != d` then comes out with probability `(1 - p(d)) · p(x) / (1 - p(d)) = p(x)` and `d`
//! with `p(d)`: exactly the target distribution. Greedy decoding accepts `d` when it is the argmax. One uniform
//! draw decides both: `u < p(d)` accepts, otherwise `u - p(d)` is uniform on `[0, 1 - p(d))` and picks the
//! replacement.

use super::filter::top_n;
use super::{Sampled, Sampler};

impl Sampler {
    /// Checks the drafted token `draft` against `logits` (the target's row for its position, the penalties
    /// seeing every token before it): returns the token to keep, with its logprob and alternatives as
    /// [`Sampler::sample`] reports them, and whether it is the draft. Does not record the token: call
    /// [`Sampler::accept`].
    pub fn verify(&mut self, logits: &[f32], draft: u32) -> (Sampled, bool) {
        if self.params.temperature == 0.0 {
            let s = self.sample(logits);
            let hit = s.token == draft;
            return (s, hit);
        }
        let dist = self.distribution(logits);
        let p = dist.binary_search_by_key(&draft, |&(id, _)| id).map_or(0.0, |i| dist[i].1);
        let u = self.uniform();
        let mut pick = (draft, p);
        if u >= f64::from(p) {
            let target = u - f64::from(p);
            let mut acc = 0.0;
            let mut others = dist.iter().filter(|&&(id, _)| id != draft).peekable();
            while let Some(&(id, q)) = others.next() {
                acc += f64::from(q);
                pick = (id, q);
                if acc > target {
                    break;
                }
                // Rounding may leave the walk short of the target: the last token then takes it.
                if others.peek().is_none() {
                    break;
                }
            }
        }
        let n_top = if self.params.logprobs { self.params.top_logprobs } else { 0 };
        let top = top_n(dist.iter().map(|&(id, q)| (id, q.ln())), n_top);
        (Sampled { token: pick.0, logprob: pick.1.ln(), top }, pick.0 == draft)
    }
}

#[cfg(test)]
mod tests {
    use super::super::SamplingParams;
    use super::*;

    /// Over 20000 seeded verifications, the kept token follows the target distribution whatever the draft
    /// (likely, unlikely, or cut by top-k): chi-square goodness of fit, false-alarm rate 1e-3 per case.
    #[test]
    fn kept_tokens_follow_the_target_distribution() {
        let logits = [2.0, 1.0, 0.5, 0.0, -1.0, -3.0];
        let params = SamplingParams { temperature: 0.9, top_k: Some(5), ..SamplingParams::greedy() };
        let target = Sampler::new(params.clone(), &[]).distribution(&logits);
        assert_eq!(target.len(), 5);
        for draft in [0, 2, 4, 5] {
            let mut counts = [0u32; 6];
            let mut hits = 0;
            for seed in 0..20_000 {
                let mut s = Sampler::new(SamplingParams { seed: Some(seed), ..params.clone() }, &[]);
                let (kept, hit) = s.verify(&logits, draft);
                assert_eq!(hit, kept.token == draft);
                counts[kept.token as usize] += 1;
                hits += u32::from(hit);
            }
            assert_eq!(counts[5], 0, "a token top-k removed is never kept");
            let stat: f64 = target
                .iter()
                .map(|&(id, p)| {
                    let e = 20_000.0 * f64::from(p);
                    (f64::from(counts[id as usize]) - e).powi(2) / e
                })
                .sum();
            // The chi-square quantile for 4 degrees of freedom at 1e-3.
            assert!(stat < 18.47, "draft {draft}: chi-square {stat:.2}, counts {counts:?}, target {target:?}");
            assert_eq!(hits, counts[draft as usize]);
        }
    }

    #[test]
    fn greedy_accepts_the_argmax_only() {
        let logits = [0.1, 3.0, 2.9];
        let mut s = Sampler::new(SamplingParams { logprobs: true, top_logprobs: 2, ..SamplingParams::greedy() }, &[]);
        let (kept, hit) = s.verify(&logits, 1);
        assert!(hit);
        assert_eq!(kept, s.sample(&logits));
        let (kept, hit) = s.verify(&logits, 2);
        assert_eq!((kept.token, hit), (1, false));
    }
}
