//! Speculative sampling (Leviathan et al. 2023, Chen et al. 2023, as vLLM's rejection sampler): a draft model
//! samples each proposal `d` from its own processed distribution `q` ([`Sampler::propose`]), and verification
//! ([`Sampler::verify`]) accepts it with probability `min(1, p(d) / q(d))` against the target's processed
//! distribution `p`; on rejection the token is drawn from the residual `max(0, p - q)`, renormalised. A token
//! `x` then comes out with probability `min(p(x), q(x)) + (1 - Σ min(p, q)) · max(0, p(x) - q(x)) / (1 - Σ
//! min(p, q)) = p(x)`: exactly the target distribution, whatever `q`.
//!
//! A proposer without a distribution (n-gram lookup, Medusa's argmax, a greedy draft) is a point mass
//! `q = [d: 1]`, the same path: `d` is accepted with probability `p(d)` and the residual is `p` without `d`.
//! Greedy decoding accepts `d` when it is the argmax. One uniform draw of the sequence's stream decides both:
//! `u < r` accepts (`r` the ratio), otherwise `(u - r) / (1 - r)` is uniform on `[0, 1)` and picks the
//! replacement, so every emitted token takes one draw, drafted or not. Proposals draw from a stream of their
//! own, so both stay reproducible for a seed.

use rand_chacha::rand_core::RngCore;

use super::filter::top_n;
use super::{unit, Penalties, Sampled, Sampler, SCRATCH};

impl Sampler {
    /// Checks the drafted token `draft`, proposed from the distribution `q` (sparse `(token, probability)`
    /// pairs, ascending ids, as [`Sampler::propose`] returns; `[(draft, 1.0)]` for a deterministic proposal),
    /// against `logits` (the target's row for its position, the penalties seeing every token before it):
    /// returns the token to keep, with its logprob and alternatives as [`Sampler::sample`] reports them, and
    /// whether it is the draft. Does not record the token: call [`Sampler::accept`].
    pub fn verify(&mut self, logits: &[f32], draft: u32, q: &[(u32, f32)]) -> (Sampled, bool) {
        if self.params.temperature == 0.0 {
            let s = self.sample(logits);
            let hit = s.token == draft;
            return (s, hit);
        }
        let p = self.distribution(logits);
        let ratio = match prob(q, draft) {
            q_d if q_d > 0.0 => f64::from(prob(&p, draft)) / f64::from(q_d),
            _ => 0.0,
        };
        let u = self.uniform();
        let token = if u < ratio {
            draft
        } else {
            let v = (u - ratio) / (1.0 - ratio);
            let total: f64 = residual(&p, q).map(|x| x.1).sum();
            let walk = if total > 0.0 { pick(residual(&p, q), v * total) } else { None };
            // Rounding may leave no residual mass: the target distribution then decides alone.
            walk.or_else(|| pick(p.iter().map(|&(id, x)| (id, f64::from(x))), v)).map_or(draft, |x| x.0)
        };
        let n_top = if self.params.logprobs { self.params.top_logprobs } else { 0 };
        let top = top_n(p.iter().map(|&(id, x)| (id, x.ln())), n_top);
        (Sampled { token, logprob: prob(&p, token).ln(), top }, token == draft)
    }

    /// A draft model's proposal from its row `logits`, processed as [`Sampler::sample`] processes the target's
    /// (the penalties seeing the tokens `drafted` before it too): the token drawn from the draft's own stream,
    /// and the distribution `q` it was drawn from, for [`Sampler::verify`]. Index `i` of the row is token
    /// `ids[i]` when `ids` is given (ascending: a draft limited to frequent tokens), else token `i`.
    pub fn propose(&mut self, logits: &[f32], ids: Option<&[u32]>, drafted: &[u32]) -> (u32, Vec<(u32, f32)>) {
        let q = SCRATCH.with_borrow_mut(|s| self.distribution_with(s, logits, Penalties { ids, drafted }));
        let u = unit(self.draft_rng.next_u64());
        let token = pick(q.iter().map(|&(id, x)| (id, f64::from(x))), u).map_or(q[0].0, |x| x.0);
        (token, q)
    }
}

/// The probability of `token` in a sparse distribution (ascending ids); 0 when absent.
fn prob(dist: &[(u32, f32)], token: u32) -> f32 {
    dist.binary_search_by_key(&token, |&(id, _)| id).map_or(0.0, |i| dist[i].1)
}

/// The unnormalised residual `max(0, p - q)` over `p`'s tokens (both sparse, ascending ids).
fn residual<'a>(p: &'a [(u32, f32)], q: &'a [(u32, f32)]) -> impl Iterator<Item = (u32, f64)> + 'a {
    let mut j = 0;
    p.iter().map(move |&(id, x)| {
        while q.get(j).is_some_and(|e| e.0 < id) {
            j += 1;
        }
        let y = q.get(j).filter(|e| e.0 == id).map_or(0.0, |e| e.1);
        (id, (f64::from(x) - f64::from(y)).max(0.0))
    })
}

/// The first item whose cumulative weight passes `target` (an inverse-CDF draw); rounding may leave the walk
/// short of it, and the last item of positive weight then takes it. `None` when no weight is positive.
fn pick(items: impl Iterator<Item = (u32, f64)>, target: f64) -> Option<(u32, f64)> {
    let mut acc = 0.0;
    let mut last = None;
    for (id, w) in items.filter(|x| x.1 > 0.0) {
        acc += w;
        last = Some((id, w));
        if acc > target {
            break;
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::super::SamplingParams;
    use super::*;

    /// The chi-square statistic of `counts` (indexed by token) against `target` over `n` draws.
    fn chi_square(counts: &[u32], target: &[(u32, f32)], n: f64) -> f64 {
        target
            .iter()
            .map(|&(id, p)| {
                let e = n * f64::from(p);
                (f64::from(counts[id as usize]) - e).powi(2) / e
            })
            .sum()
    }

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
                let (kept, hit) = s.verify(&logits, draft, &[(draft, 1.0)]);
                assert_eq!(hit, kept.token == draft);
                counts[kept.token as usize] += 1;
                hits += u32::from(hit);
            }
            assert_eq!(counts[5], 0, "a token top-k removed is never kept");
            let stat = chi_square(&counts, &target, 20_000.0);
            // The chi-square quantile for 4 degrees of freedom at 1e-3.
            assert!(stat < 18.47, "draft {draft}: chi-square {stat:.2}, counts {counts:?}, target {target:?}");
            assert_eq!(hits, counts[draft as usize]);
        }
    }

    #[test]
    fn greedy_accepts_the_argmax_only() {
        let logits = [0.1, 3.0, 2.9];
        let mut s = Sampler::new(SamplingParams { logprobs: true, top_logprobs: 2, ..SamplingParams::greedy() }, &[]);
        let (kept, hit) = s.verify(&logits, 1, &[(1, 1.0)]);
        assert!(hit);
        assert_eq!(kept, s.sample(&logits));
        let (kept, hit) = s.verify(&logits, 2, &[(2, 1.0)]);
        assert_eq!((kept.token, hit), (1, false));
    }

    /// Drafts sampled from a draft distribution `q` unlike the target's `p` (another row; another row whose
    /// truncation keeps a token `p` removes; a row that puts almost all mass on one token) keep `p` exactly:
    /// the residual path decides most rejections. Acceptance is `Σ min(p, q)`, as the theory says.
    #[test]
    fn sampled_drafts_keep_the_target_distribution_whatever_their_distribution() {
        let target_row = [2.0, 1.0, 0.5, 0.0, -1.0, -3.0];
        let params = SamplingParams { temperature: 0.9, top_k: Some(5), ..SamplingParams::greedy() };
        let p = Sampler::new(params.clone(), &[]).distribution(&target_row);
        let drafts: [[f32; 6]; 3] =
            [[0.0, 2.0, 0.5, 1.0, -1.0, -3.0], [-3.0, 1.0, 0.5, 0.0, 0.5, 2.5], [0.0, 0.0, 9.0, 0.0, 0.0, 0.0]];
        let n = 20_000;
        for row in drafts {
            let q = Sampler::new(params.clone(), &[]).distribution(&row);
            let overlap: f32 = (0..6).map(|t| prob(&p, t).min(prob(&q, t))).sum();
            let (mut counts, mut hits) = ([0u32; 6], 0);
            for seed in 0..n {
                let mut s = Sampler::new(SamplingParams { seed: Some(seed), ..params.clone() }, &[]);
                let (d, q_seen) = s.propose(&row, None, &[]);
                assert_eq!(q_seen, q);
                let (kept, hit) = s.verify(&target_row, d, &q_seen);
                counts[kept.token as usize] += 1;
                hits += u32::from(hit);
                assert!((kept.logprob - prob(&p, kept.token).ln()).abs() < 1e-6);
            }
            assert_eq!(counts[5], 0, "a token the target's top-k removed is never kept");
            let stat = chi_square(&counts, &p, f64::from(n as u32));
            assert!(stat < 18.47, "draft {row:?}: chi-square {stat:.2}, counts {counts:?}, target {p:?}");
            // Binomial acceptance within 4 standard deviations of Σ min(p, q).
            let (rate, sd) = (f64::from(hits) / n as f64, (0.25 / n as f64).sqrt());
            assert!((rate - f64::from(overlap)).abs() < 4.0 * sd, "acceptance {rate:.3}, expected {overlap:.3}");
        }
    }

    /// A proposal from a row of some tokens only (a draft limited to frequent tokens), with tokens drafted
    /// before it, draws from the distribution of the whole row without the others, penalised as if the drafted
    /// tokens had been accepted; the same seed draws the same proposals, and never from the target's stream.
    #[test]
    fn proposals_see_the_drafted_tokens_and_the_rows_ids() {
        let params = SamplingParams {
            temperature: 0.8,
            repetition_penalty: Some(1.3),
            frequency_penalty: 0.5,
            presence_penalty: 0.2,
            seed: Some(7),
            ..SamplingParams::greedy()
        };
        let full = [0.5, 1.5, -0.5, 2.0, 1.0, 0.0, 0.7, -1.0];
        let ids = [0u32, 1, 3, 4, 6];
        let compact: Vec<f32> = ids.iter().map(|&i| full[i as usize]).collect();
        let masked: Vec<f32> =
            (0..8).map(|i| if ids.contains(&i) { full[i as usize] } else { f32::NEG_INFINITY }).collect();
        let mut s = Sampler::new(params.clone(), &[1, 2]);
        s.accept(4);
        let mut after = Sampler::new(params.clone(), &[1, 2]);
        for t in [4, 3, 6, 3] {
            after.accept(t);
        }
        let (d, q) = s.propose(&compact, Some(&ids), &[3, 6, 3]);
        assert_eq!(q, after.distribution(&masked));
        assert!(ids.contains(&d));
        let mut again = Sampler::new(params.clone(), &[1, 2]);
        again.accept(4);
        assert_eq!(again.propose(&compact, Some(&ids), &[3, 6, 3]).0, d, "seeded");
        let fresh = Sampler::new(params, &[]).uniform();
        assert_eq!(s.uniform(), fresh, "proposals leave the target's stream alone");
    }
}
