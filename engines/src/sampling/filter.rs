//! The truncating processors on candidate `(token, logit)` lists, with transformers' semantics
//! (TopK, TopP, Typical and MinP logits warpers, `min_tokens_to_keep = 1`), without full sorts.

use std::cmp::Ordering;

use super::math::exp_neg;

/// A candidate token and its (penalised, temperature-scaled) logit.
pub(crate) type Cand = (u32, f32);

/// How many candidates the first round of [`keep_mass`] orders; each further round takes 4x more.
const FIRST_ROUND: usize = 64;

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
        let full = best.len() == n;
        if c.1.is_nan() || (full && by_logit(&c, &best[n - 1]) != Ordering::Less) {
            continue;
        }
        let at = best.partition_point(|b| by_logit(b, &c) == Ordering::Less);
        best.insert(at, c);
        best.truncate(n);
    }
    best
}

/// Keeps the `k` highest logits and every candidate tied with the k-th, as transformers' TopK.
pub(crate) fn top_k(cands: &mut Vec<Cand>, k: usize) {
    let k = k.max(1);
    if cands.len() <= k {
        return;
    }
    cands.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
    let kth = cands[k - 1].1;
    let mut kept = k;
    for i in k..cands.len() {
        if cands[i].1 == kth {
            cands.swap(kept, i);
            kept += 1;
        }
    }
    cands.truncate(kept);
}

/// Nucleus: keeps the most likely candidates while the mass before each is below `p`.
pub(crate) fn top_p(cands: &mut Vec<Cand>, p: f32) {
    keep_mass(cands, p, by_logit);
}

/// Locally typical: orders candidates by |-log p - entropy| and keeps them while the mass before
/// each is below `p` (the most likely token may go).
pub(crate) fn typical_p(cands: &mut Vec<Cand>, p: f32) {
    let (max, total) = weights(cands);
    let lse = max + total.ln() as f32;
    let entropy = cands
        .iter()
        .map(|c| f64::from(exp_neg(c.1 - max)) / total * f64::from(lse - c.1))
        .sum::<f64>() as f32;
    let surprise = |c: &Cand| (lse - c.1 - entropy).abs();
    keep_mass(cands, p, |a, b| surprise(a).total_cmp(&surprise(b)).then(a.0.cmp(&b.0)));
}

/// Keeps candidates at least `p` times as likely as the most likely one.
pub(crate) fn min_p(cands: &mut Vec<Cand>, p: f32) {
    let threshold = cands.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.1)) + p.ln();
    cands.retain(|c| c.1 >= threshold);
}

/// The largest logit and the sum of e^(logit - max).
fn weights(cands: &[Cand]) -> (f32, f64) {
    let max = cands.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.1));
    (max, cands.iter().map(|c| f64::from(exp_neg(c.1 - max))).sum())
}

/// Keeps the shortest prefix of the candidates in `order` whose probability reaches `mass` (at
/// least one). Orders only as many as needed: the best 64, then 256, ... via select_nth.
fn keep_mass(cands: &mut Vec<Cand>, mass: f32, order: impl Fn(&Cand, &Cand) -> Ordering) {
    if cands.len() <= 1 {
        return;
    }
    let (max, total) = weights(cands);
    let target = f64::from(mass) * total;
    let (mut sorted, mut cum) = (0, 0.0);
    let mut round = FIRST_ROUND;
    loop {
        let end = round.min(cands.len());
        if end < cands.len() {
            cands[sorted..].select_nth_unstable_by(end - sorted - 1, &order);
        }
        cands[sorted..end].sort_unstable_by(&order);
        for i in sorted..end {
            if i > 0 && cum >= target {
                cands.truncate(i);
                return;
            }
            cum += f64::from(exp_neg(cands[i].1 - max));
        }
        if end == cands.len() {
            return;
        }
        sorted = end;
        round = end * 4;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn top_p_sets() {
        for (p, want) in [(0.3, vec![0]), (0.5, vec![0, 1]), (0.75, vec![0, 1, 2]), (0.9, vec![0, 1, 2, 3])] {
            let mut c = cands(&PROBS);
            top_p(&mut c, p);
            assert_eq!(ids(c), want, "top_p {p}");
        }
    }

    #[test]
    fn typical_p_sets() {
        // Entropy 1.392; |-ln p - H| = [0.476, 0.188, 0.505, 0.910, 1.603]: order 1, 0, 2, 3, 4.
        for (p, want) in [(0.2, vec![1]), (0.5, vec![0, 1]), (0.8, vec![0, 1, 2]), (0.9, vec![0, 1, 2, 3])] {
            let mut c = cands(&PROBS);
            typical_p(&mut c, p);
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

    /// Big vocabularies take several rounds of [`keep_mass`]; compare with a full sort.
    #[test]
    fn mass_rounds_match_full_sort() {
        let mut state = 7u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 40) as f32 / (1u64 << 24) as f32
        };
        let logits: Vec<Cand> = (0..20_000).map(|i| (i, next() * 6.0)).collect();
        let (max, total) = weights(&logits);
        for p in [0.05, 0.5, 0.9, 0.99] {
            let mut sorted = logits.clone();
            sorted.sort_by(by_logit);
            let mut cum = 0.0;
            let n = sorted.iter().take_while(|c| {
                let keep = cum < f64::from(p) * total;
                cum += f64::from(exp_neg(c.1 - max));
                keep
            });
            let want = ids(n.copied().collect());
            let mut got = logits.clone();
            top_p(&mut got, p);
            assert!(got.len() > FIRST_ROUND || p < 0.9);
            assert_eq!(ids(got), want, "top_p {p}");
        }
    }
}
