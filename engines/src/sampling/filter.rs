//! The truncating processors on candidate `(token, logit)` lists, with transformers' semantics
//! (TopK, TopP, Typical and MinP logits warpers, `min_tokens_to_keep = 1`), in linear time.

use std::cmp::Ordering;

use super::math;

/// A candidate token and its (penalised, temperature-scaled) logit.
pub(crate) type Cand = (u32, f32);

/// Buckets of [`keep_prefix`] over keys in [lo, lo + SPAN); one more holds the keys beyond.
const BUCKETS: usize = 2048;
/// The key range the buckets cover: 64 nats below the best logit, weights under e^-64.
const SPAN: f32 = 64.0;

/// The best logit, total weight (of e^(logit - max)) and entropy of a distribution to truncate.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dist {
    /// The largest logit.
    pub max: f32,
    /// The sum of e^(logit - max).
    pub total: f64,
    /// The entropy in nats.
    pub entropy: f64,
}

impl Dist {
    /// The distribution of the candidates; `weight` gives e^(logit - max).
    pub(crate) fn of(cands: &[Cand], max: f32, weight: impl Fn(&Cand) -> f64) -> Self {
        let total: f64 = cands.iter().map(&weight).sum();
        let lse = f64::from(max) + total.ln();
        let entropy = cands.iter().map(|c| weight(c) / total * (lse - f64::from(c.1))).sum();
        Self { max, total, entropy }
    }

    /// The log of the softmax denominator.
    pub(crate) fn lse(&self) -> f64 {
        f64::from(self.max) + self.total.ln()
    }

    /// The logit whose surprise (-log p) equals the entropy: typical-p keeps logits around it.
    pub(crate) fn typical_center(&self) -> f32 {
        (self.lse() - self.entropy) as f32
    }
}

/// Higher logit first, ties to the lower token id.
fn by_logit(a: &Cand, b: &Cand) -> Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// The `n` highest logits, highest first, ties to the lower id; NaN never chosen.
pub(crate) fn top_n(items: impl Iterator<Item = Cand>, n: usize) -> Vec<Cand> {
    let mut best: Vec<Cand> = Vec::with_capacity(n + 1);
    if n == 0 {
        return best;
    }
    for c in items {
        // The cheap test first; an equal logit may still win on a lower id.
        let full = best.len() == n;
        if c.1.is_nan() || (full && (c.1 < best[n - 1].1 || by_logit(&c, &best[n - 1]) != Ordering::Less)) {
            continue;
        }
        let at = best.partition_point(|b| by_logit(b, &c) == Ordering::Less);
        best.insert(at, c);
        best.truncate(n);
    }
    best
}

/// A cheap lower bound of the k-th largest logit: the least of the maxima of k disjoint blocks
/// (each holds a logit at least that large); -inf when that would not narrow anything.
pub(crate) fn top_k_floor(logits: &[f32], k: usize) -> f32 {
    let block = logits.len() / k.max(1);
    if block < 2 {
        return f32::NEG_INFINITY;
    }
    logits.chunks_exact(block).map(math::max).fold(f32::INFINITY, f32::min)
}

/// The narrowest window [center - r, center + r], r = 2, 8 or 32 nats, of logits holding weight
/// `target` (with a margin for rounding), widened by a hair; the whole line when none does.
/// Nucleus (center: the best logit) and typical (center: [`Dist::typical_center`]) truncations
/// keep only logits inside it, so candidates can be gathered from it alone.
pub(crate) fn window(logits: &[f32], weights: &[f32], center: f32, target: f64) -> (f32, f32) {
    const HAIR: f32 = 1e-3;
    for r in [2.0, 8.0, 32.0] {
        if math::mass_within(logits, weights, center - r, center + r) >= target * 1.0001 {
            return (center - r - HAIR, center + r + HAIR);
        }
    }
    (f32::NEG_INFINITY, f32::INFINITY)
}

/// Keeps the `k` highest logits and every candidate tied with the k-th, as transformers' TopK.
pub(crate) fn top_k(cands: &mut Vec<Cand>, k: usize) {
    if cands.len() > k {
        let max = cands.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.1));
        keep_prefix(cands, -max, |c| -c.1, |_| 1.0, k as f64, true);
    }
}

/// Nucleus: keeps the most likely candidates while the mass of `dist` before each is below `p`;
/// `weight` gives e^(logit - dist.max).
pub(crate) fn top_p(cands: &mut Vec<Cand>, p: f32, dist: &Dist, weight: impl Fn(&Cand) -> f64) {
    keep_prefix(cands, -dist.max, |c| -c.1, weight, f64::from(p) * dist.total, false);
}

/// Locally typical: orders candidates by |-log p - entropy| and keeps them while the mass of
/// `dist` before each is below `p` (the most likely token may go); `weight` as for [`top_p`].
pub(crate) fn typical_p(cands: &mut Vec<Cand>, p: f32, dist: &Dist, weight: impl Fn(&Cand) -> f64) {
    let (lse, entropy) = (dist.lse() as f32, dist.entropy as f32);
    let surprise = |c: &Cand| (lse - c.1 - entropy).abs();
    keep_prefix(cands, 0.0, surprise, weight, f64::from(p) * dist.total, false);
}

/// Keeps candidates at least `p` times as likely as the most likely one.
pub(crate) fn min_p(cands: &mut Vec<Cand>, p: f32) {
    let threshold = cands.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.1)) + p.ln();
    cands.retain(|c| c.1 >= threshold);
}

/// Keeps the candidates that come first in ascending `key` (ties to the lower id) while the
/// `weight` before each is below `target`, at least one; with `ties`, also those whose key equals
/// the last kept one's; all when their weight stays below `target`. Keys should be >= `lo`.
/// Linear time: one pass sums the weight per key bucket; only the bucket crossing `target` is sorted.
fn keep_prefix(
    cands: &mut Vec<Cand>,
    lo: f32,
    key: impl Fn(&Cand) -> f32,
    weight: impl Fn(&Cand) -> f64,
    target: f64,
    ties: bool,
) {
    let bucket = |c: &Cand| (((key(c) - lo) * (BUCKETS as f32 / SPAN)) as usize).min(BUCKETS);
    let mut mass = [0f64; BUCKETS + 1];
    for c in cands.iter() {
        mass[bucket(c)] += weight(c);
    }
    let mut before = 0.0;
    let Some(edge) = mass.iter().position(|&m| {
        let reached = before + m >= target;
        if !reached {
            before += m;
        }
        reached
    }) else {
        return;
    };
    // Keep the buckets before the edge whole; sort the edge bucket, behind them, and cut it.
    cands.retain(|c| bucket(c) <= edge);
    let mut split = 0;
    for i in 0..cands.len() {
        if bucket(&cands[i]) < edge {
            cands.swap(split, i);
            split += 1;
        }
    }
    cands[split..].sort_unstable_by(|a, b| key(a).total_cmp(&key(b)).then(a.0.cmp(&b.0)));
    let mut end = split;
    for c in &cands[split..] {
        if end > 0 && before >= target {
            break;
        }
        before += weight(c);
        end += 1;
    }
    while ties && end > 0 && end < cands.len() && key(&cands[end]) == key(&cands[end - 1]) {
        end += 1;
    }
    cands.truncate(end);
}

#[cfg(test)]
mod tests {
    use super::*;
    use math::exp_neg;

    fn max_logit(cands: &[Cand]) -> f32 {
        cands.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.1))
    }

    /// Top-p over the candidates' own distribution.
    fn nucleus(c: &mut Vec<Cand>, p: f32) {
        let max = max_logit(c);
        let w = |c: &Cand| f64::from(exp_neg(c.1 - max));
        let dist = Dist::of(c, max, w);
        top_p(c, p, &dist, w);
    }

    /// Typical-p over the candidates' own distribution.
    fn typical(c: &mut Vec<Cand>, p: f32) {
        let max = max_logit(c);
        let w = |c: &Cand| f64::from(exp_neg(c.1 - max));
        let dist = Dist::of(c, max, w);
        typical_p(c, p, &dist, w);
    }

    fn cands(probs: &[f32]) -> Vec<Cand> {
        probs.iter().enumerate().map(|(i, p)| (i as u32, p.ln())).collect()
    }

    fn ids(mut cands: Vec<Cand>) -> Vec<u32> {
        let mut ids: Vec<u32> = cands.drain(..).map(|c| c.0).collect();
        ids.sort_unstable();
        ids
    }

    const PROBS: [f32; 5] = [0.4, 0.3, 0.15, 0.1, 0.05];

    #[test]
    fn top_k_keeps_ties() {
        let run = |logits: &[f32], k| {
            let mut c: Vec<Cand> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l)).collect();
            top_k(&mut c, k);
            ids(c)
        };
        assert_eq!(run(&[0.1, 0.5, 0.3, 0.9], 2), [1, 3]);
        assert_eq!(run(&[1.0, 2.0, 2.0, 0.0], 2), [1, 2]);
        assert_eq!(run(&[2.0, 2.0, 0.0], 1), [0, 1]);
        assert_eq!(run(&[1.0, 3.0, 2.0, 2.0, 2.0], 2), [1, 2, 3, 4]);
        assert_eq!(run(&[1.0, 2.0], 5), [0, 1]);
    }

    #[test]
    fn top_k_floor_bounds_the_kth() {
        let ascending: Vec<f32> = (0..1000).map(|i| i as f32).collect();
        for k in [1, 7, 50, 333, 499, 500, 999] {
            let floor = top_k_floor(&ascending, k);
            assert!(floor <= (1000 - k) as f32, "k {k}: {floor}");
        }
        assert_eq!(top_k_floor(&ascending, 1), 999.0);
        assert_eq!(top_k_floor(&ascending, 600), f32::NEG_INFINITY);
        let descending: Vec<f32> = ascending.iter().rev().copied().collect();
        assert_eq!(top_k_floor(&descending, 10), 99.0);
        assert_eq!(top_k_floor(&[f32::NAN; 8], 2), f32::NEG_INFINITY);
    }

    #[test]
    fn windows_hold_the_mass() {
        let logits: Vec<f32> = (0..1000).map(|i| -(i as f32) * 0.01).collect();
        let mut weights = logits.clone();
        let total = math::exp_blocks(&mut weights, 0.0, &mut Vec::new());
        // The half-width, hair removed, and the centre.
        let radius = |center, mass| {
            let (lo, hi) = window(&logits, &weights, center, mass * total);
            (((hi - lo) / 2.0).round(), (hi + lo) / 2.0)
        };
        assert_eq!(radius(0.0, 0.5), (2.0, 0.0));
        assert_eq!(radius(0.0, 0.95), (8.0, 0.0));
        assert_eq!(radius(-20.0, 0.95), (32.0, -20.0));
        assert_eq!(window(&logits, &weights, 0.0, total), (f32::NEG_INFINITY, f32::INFINITY));
    }

    #[test]
    fn top_p_sets() {
        for (p, want) in [(0.3, vec![0]), (0.5, vec![0, 1]), (0.75, vec![0, 1, 2]), (0.9, vec![0, 1, 2, 3])] {
            let mut c = cands(&PROBS);
            nucleus(&mut c, p);
            assert_eq!(ids(c), want, "top_p {p}");
        }
    }

    #[test]
    fn typical_p_sets() {
        // Entropy 1.392; |-ln p - H| = [0.476, 0.188, 0.505, 0.910, 1.603]: order 1, 0, 2, 3, 4.
        for (p, want) in [(0.2, vec![1]), (0.5, vec![0, 1]), (0.8, vec![0, 1, 2]), (0.9, vec![0, 1, 2, 3])] {
            let mut c = cands(&PROBS);
            typical(&mut c, p);
            assert_eq!(ids(c), want, "typical_p {p}");
        }
    }

    #[test]
    fn min_p_sets() {
        for (p, want) in [(0.3, vec![0, 1, 2]), (0.5, vec![0, 1]), (0.8, vec![0]), (0.1, vec![0, 1, 2, 3, 4])] {
            let mut c = cands(&PROBS);
            min_p(&mut c, p);
            assert_eq!(ids(c), want, "min_p {p}");
        }
    }

    #[test]
    fn top_n_order() {
        let items = [(0, 1.0), (1, f32::NAN), (2, 3.0), (3, 3.0), (4, 2.0), (5, 3.0)];
        assert_eq!(top_n(items.into_iter(), 3), [(2, 3.0), (3, 3.0), (5, 3.0)]);
        assert_eq!(top_n(items.into_iter().rev(), 4), [(2, 3.0), (3, 3.0), (5, 3.0), (4, 2.0)]);
        assert!(top_n(items.into_iter(), 0).is_empty());
        assert_eq!(top_n(items.into_iter(), 9).len(), 5);
    }

    /// Reference: sort everything by (key, id), keep while the weight before is below target.
    fn by_sorting(cands: &[Cand], key: impl Fn(&Cand) -> f32, weight: impl Fn(&Cand) -> f64, mass: f64) -> Vec<u32> {
        let mut sorted = cands.to_vec();
        sorted.sort_by(|a, b| key(a).total_cmp(&key(b)).then(a.0.cmp(&b.0)));
        let target = mass * sorted.iter().map(&weight).sum::<f64>();
        let mut before = 0.0;
        let kept = sorted.iter().take_while(|c| {
            let keep = before < target;
            before += weight(c);
            keep
        });
        ids(kept.copied().collect())
    }

    /// Big vocabularies spread over many buckets: the same sets as a full sort.
    #[test]
    fn buckets_match_full_sort() {
        let mut state = 7u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 40) as f32 / (1u64 << 24) as f32
        };
        let mut logits: Vec<Cand> = (0..50_000).map(|i| (i, next() * 12.0 - 6.0)).collect();
        logits.extend((50_000..50_100).map(|i| (i, -80.0)));
        logits.extend((50_100..50_110).map(|i| (i, 2.5)));
        let max = max_logit(&logits);
        let w = |c: &Cand| f64::from(exp_neg(c.1 - max));
        for p in [0.05, 0.5, 0.9, 0.99, 0.999999] {
            let mut got = logits.clone();
            nucleus(&mut got, p);
            assert_eq!(ids(got), by_sorting(&logits, |c| -c.1, w, f64::from(p)), "top_p {p}");
        }
        for k in [1, 40, 1000, 49_990, 50_105] {
            let mut got = logits.clone();
            top_k(&mut got, k);
            let mut sorted = logits.clone();
            sorted.sort_by(by_logit);
            let kth = sorted[k - 1].1;
            assert_eq!(ids(got), ids(logits.iter().filter(|c| c.1 >= kth).copied().collect()), "top_k {k}");
        }
        let total: f64 = logits.iter().map(w).sum();
        let lse = max + total.ln() as f32;
        let entropy = logits.iter().map(|c| w(c) / total * f64::from(lse - c.1)).sum::<f64>() as f32;
        for p in [0.1, 0.6, 0.95] {
            let mut got = logits.clone();
            typical(&mut got, p);
            let want = by_sorting(&logits, |c| (lse - c.1 - entropy).abs(), w, f64::from(p));
            assert_eq!(ids(got), want, "typical_p {p}");
        }
    }
}
