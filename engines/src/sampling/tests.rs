//! Tests of [`Sampler`] and [`SamplingParams`].

use super::*;

/// Sampling at `temperature` with a fixed seed, nothing else set.
fn at(temperature: f32) -> SamplingParams {
    SamplingParams { temperature, seed: Some(42), ..SamplingParams::greedy() }
}

fn softmax(xs: &[f32]) -> Vec<f64> {
    let max = xs.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    let ws: Vec<f64> = xs.iter().map(|&x| f64::from(x - max).exp()).collect();
    let total: f64 = ws.iter().sum();
    ws.iter().map(|w| w / total).collect()
}

/// Deterministic pseudo-random logits in [-scale, scale).
fn noise(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    (0..n).map(|_| ((rng.next_u32() >> 8) as f32 / (1 << 24) as f32 * 2.0 - 1.0) * scale).collect()
}

const PROBS: [f32; 5] = [0.4, 0.3, 0.15, 0.1, 0.05];

fn ln_probs() -> Vec<f32> {
    PROBS.iter().map(|p| p.ln()).collect()
}

#[test]
fn greedy_argmax_and_ties() {
    let mut s = Sampler::new(SamplingParams::greedy(), &[]);
    assert_eq!(s.sample(&[0.1, 2.0, -1.0, 2.0]).token, 1);
    assert_eq!(s.sample(&[3.0, 3.0]).token, 0);
    assert_eq!(s.sample(&[f32::NAN, 1.0]).token, 1);
    let mut big = vec![0.0; 152_064];
    big[151_999] = 5.0;
    big[100_000] = 5.0;
    assert_eq!(s.sample(&big).token, 100_000);
    assert_eq!(s.distribution(&big), [(100_000, 1.0)]);
    assert!(s.sample(&big).top.is_empty());

    // Logprobs: log-softmax of the penalised logits; temperature plays no part when greedy.
    let mut s = Sampler::new(SamplingParams { logprobs: true, top_logprobs: 2, ..SamplingParams::greedy() }, &[]);
    let out = s.sample(&[1.0, 2.0, 0.5]);
    let p = softmax(&[1.0, 2.0, 0.5]);
    assert_eq!(out.token, 1);
    assert!((f64::from(out.logprob) - p[1].ln()).abs() < 1e-6);
    assert_eq!(out.top.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 0]);
    assert!((f64::from(out.top[1].1) - p[0].ln()).abs() < 1e-6);
}

#[test]
fn seeded_determinism() {
    let logits = noise(50, 1, 2.0);
    let run = |params: SamplingParams| {
        let mut s = Sampler::new(params, &[]);
        (0..1000).map(|_| s.sample(&logits).token).collect::<Vec<_>>()
    };
    let seeded = |seed| SamplingParams { seed: Some(seed), ..at(1.0) };
    assert_eq!(run(seeded(7)), run(seeded(7)));
    assert_ne!(run(seeded(7)), run(seeded(8)));
    let truncated = |seed| SamplingParams { top_k: Some(20), top_p: Some(0.9), ..seeded(seed) };
    assert_eq!(run(truncated(7)), run(truncated(7)));
    assert_ne!(run(truncated(7)), run(truncated(8)));

    // Without a seed one is drawn, reported, and reproduces the same draws.
    let (a, b) = (Sampler::new(at(1.0), &[]), Sampler::new(SamplingParams { seed: None, ..at(1.0) }, &[]));
    let c = Sampler::new(SamplingParams { seed: None, ..at(1.0) }, &[]);
    assert_eq!(a.seed(), 42);
    assert_ne!(b.seed(), c.seed());
    assert_eq!(run(seeded(b.seed())), {
        let mut b = b;
        (0..1000).map(|_| b.sample(&logits).token).collect::<Vec<_>>()
    });
}

/// Pearson's chi-square statistic of observed counts against expected probabilities.
fn chi_square(counts: &[u32], probs: &[f64]) -> f64 {
    let n: u32 = counts.iter().sum();
    counts
        .iter()
        .zip(probs)
        .filter(|(_, &p)| p > 0.0)
        .map(|(&o, &p)| (f64::from(o) - f64::from(n) * p).powi(2) / (f64::from(n) * p))
        .sum()
}

/// 20,000 draws, fixed seed; the statistic must stay below the chi-square critical value at
/// p = 0.001 (18.47 for 4 degrees of freedom, 13.82 for 2).
#[test]
fn temperature_sampling_matches_softmax() {
    let logits = [1.0, 0.5, 0.0, -0.5, -2.0];
    let draws = |params: SamplingParams| {
        let mut s = Sampler::new(params, &[]);
        let mut counts = [0u32; 5];
        for _ in 0..20_000 {
            counts[s.sample(&logits).token as usize] += 1;
        }
        counts
    };
    let scaled: Vec<f32> = logits.iter().map(|l| l / 0.7).collect();
    let counts = draws(at(0.7));
    let chi2 = chi_square(&counts, &softmax(&scaled));
    assert!(chi2 < 18.47, "chi-square {chi2} for {counts:?}");

    // top_k = 3: the three best renormalised, the others never drawn.
    let counts = draws(SamplingParams { top_k: Some(3), ..at(0.7) });
    assert_eq!(counts[3..], [0, 0]);
    let chi2 = chi_square(&counts[..3], &softmax(&scaled[..3]));
    assert!(chi2 < 13.82, "chi-square {chi2} for {counts:?}");
}

#[test]
fn truncations_keep_the_right_sets() {
    let logits = ln_probs();
    let dist = |params: SamplingParams| Sampler::new(params, &[]).distribution(&logits);
    let ids = |params| dist(params).into_iter().map(|(id, _)| id).collect::<Vec<_>>();
    let d = dist(SamplingParams { top_k: Some(2), ..at(1.0) });
    assert_eq!(d.iter().map(|t| t.0).collect::<Vec<_>>(), [0, 1]);
    assert!((d[0].1 - 0.4 / 0.7).abs() < 1e-6 && (d[1].1 - 0.3 / 0.7).abs() < 1e-6);
    assert_eq!(ids(SamplingParams { top_p: Some(0.75), ..at(1.0) }), [0, 1, 2]);
    assert_eq!(ids(SamplingParams { top_p: Some(1.0), ..at(1.0) }), [0, 1, 2, 3, 4]);
    assert_eq!(ids(SamplingParams { min_p: Some(0.5), ..at(1.0) }), [0, 1]);
    assert_eq!(ids(SamplingParams { typical_p: Some(0.2), ..at(1.0) }), [1]);
    // Order: top-k first, then top-p on the renormalised rest (0.4, 0.3, 0.15) / 0.85.
    assert_eq!(ids(SamplingParams { top_p: Some(0.8), ..at(1.0) }), [0, 1, 2]);
    assert_eq!(ids(SamplingParams { top_k: Some(3), top_p: Some(0.8), ..at(1.0) }), [0, 1]);
    // Temperature comes before the truncations: at T = 0.5 the probabilities become p^2.
    assert_eq!(ids(SamplingParams { top_p: Some(0.75), ..at(0.5) }), [0, 1]);
    // Only kept tokens are ever drawn.
    let mut s = Sampler::new(SamplingParams { min_p: Some(0.5), ..at(0.8) }, &[]);
    assert!((0..500).all(|_| s.sample(&logits).token < 2));
}

/// The logits after `s`'s penalties.
fn penalised(s: &Sampler, logits: &[f32]) -> Vec<f32> {
    let mut logits = logits.to_vec();
    s.penalise(&mut logits, super::Penalties::default());
    logits
}

#[test]
fn repetition_penalty_divides_positive_multiplies_negative() {
    let mut s = Sampler::new(SamplingParams { repetition_penalty: Some(2.0), ..SamplingParams::greedy() }, &[0, 1]);
    s.accept(3);
    assert_eq!(penalised(&s, &[2.0, -2.0, 1.0, 0.5, 0.0, -1.0]), [1.0, -4.0, 1.0, 0.25, 0.0, -1.0]);
    // Out-of-vocabulary ids in the prompt are ignored.
    let mut s = Sampler::new(SamplingParams { repetition_penalty: Some(2.0), ..SamplingParams::greedy() }, &[0, 99]);
    assert_eq!(s.sample(&[2.0, 1.5]).token, 1);
    assert_eq!(s.sample(&[-1.0, -1.5]).token, 1);
    assert_eq!(s.sample(&[4.0, 1.5]).token, 0);
}

#[test]
fn frequency_and_presence_penalties() {
    let params = SamplingParams { frequency_penalty: 0.5, presence_penalty: 0.25, ..SamplingParams::greedy() };
    let mut s = Sampler::new(params, &[4]);
    for t in [1, 1, 2] {
        s.accept(t);
    }
    assert_eq!(penalised(&s, &[0.0; 5]), [0.0, -1.25, -0.75, 0.0, 0.0]);
    // Negative penalties encourage repetition; the repetition penalty applies first.
    let params = SamplingParams { frequency_penalty: -1.0, repetition_penalty: Some(2.0), ..SamplingParams::greedy() };
    let mut s = Sampler::new(params, &[]);
    s.accept(1);
    assert_eq!(penalised(&s, &[1.0, 3.0]), [1.0, 2.5]);
}

#[test]
fn logprobs_exponentiate_to_one() {
    let sum = |top: &[(u32, f32)]| top.iter().map(|t| f64::from(t.1).exp()).sum::<f64>();
    let logits = [1.0, 0.5, 0.0, -0.5, -2.0];
    let with_logprobs = |params: SamplingParams| SamplingParams { logprobs: true, top_logprobs: 5, ..params };
    for params in [at(0.8), at(0.0), SamplingParams { top_k: Some(3), ..at(1.3) }] {
        let mut s = Sampler::new(with_logprobs(params.clone()), &[]);
        for _ in 0..20 {
            let out = s.sample(&logits);
            assert!((sum(&out.top) - 1.0).abs() < 1e-5, "{params:?}: {out:?}");
            let listed = out.top.iter().find(|t| t.0 == out.token).unwrap();
            assert!((listed.1 - out.logprob).abs() < 1e-5);
        }
    }
    let mut s = Sampler::new(SamplingParams { logprobs: false, top_logprobs: 5, ..at(1.0) }, &[]);
    assert!(s.sample(&logits).top.is_empty());

    // A large vocabulary: the distribution sums to 1 and matches the sampled logprob.
    let logits = noise(100_000, 3, 8.0);
    for params in [at(0.9), SamplingParams { top_p: Some(0.95), min_p: Some(0.01), ..at(0.9) }] {
        let mut s = Sampler::new(params, &[]);
        let dist = s.distribution(&logits);
        assert!((dist.iter().map(|d| f64::from(d.1)).sum::<f64>() - 1.0).abs() < 1e-4);
        assert!(dist.windows(2).all(|w| w[0].0 < w[1].0));
        let out = s.sample(&logits);
        let p = dist.iter().find(|d| d.0 == out.token).unwrap().1;
        assert!((p.ln() - out.logprob).abs() < 1e-4, "{} vs {}", p.ln(), out.logprob);
    }
}

#[test]
fn big_vocabulary_truncations() {
    let logits = noise(152_064, 5, 10.0);
    let mut order: Vec<u32> = (0..logits.len() as u32).collect();
    order.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
    let mut s = Sampler::new(SamplingParams { top_k: Some(50), ..at(1.0) }, &[]);
    let dist = s.distribution(&logits);
    let mut want = order[..50].to_vec();
    want.sort_unstable();
    assert_eq!(dist.iter().map(|d| d.0).collect::<Vec<_>>(), want);
    assert!((0..100).all(|_| want.binary_search(&s.sample(&logits).token).is_ok()));

    // Mass-based truncations over the whole vocabulary (vectorised weights, candidates gathered
    // from a window) agree with them after a top-k that keeps everything (per-candidate weights).
    let mut logits = logits;
    logits[7] = f32::NEG_INFINITY;
    let k = logits.len() - 1;
    for params in [
        SamplingParams { top_p: Some(0.9), ..at(0.5) },
        SamplingParams { typical_p: Some(0.9), ..at(0.5) },
        SamplingParams { typical_p: Some(0.2), ..at(1.0) },
        SamplingParams { top_p: Some(0.95), typical_p: Some(0.5), min_p: Some(0.001), ..at(0.7) },
    ] {
        let dense = Sampler::new(params.clone(), &[]).distribution(&logits);
        let sparse = Sampler::new(SamplingParams { top_k: Some(k), ..params.clone() }, &[]).distribution(&logits);
        assert!(dense.len() > 1000, "{params:?}: {}", dense.len());
        assert_eq!(dense.len(), sparse.len(), "{params:?}");
        assert!(dense.iter().zip(&sparse).all(|(a, b)| a.0 == b.0 && (a.1 - b.1).abs() < 1e-9), "{params:?}");
    }
}

#[test]
fn degenerate_logits_do_not_panic() {
    for params in [
        at(1.0),
        at(0.0),
        SamplingParams { top_k: Some(2), top_p: Some(0.5), ..at(1.0) },
        SamplingParams { top_p: Some(0.5), ..at(1.0) },
        SamplingParams { typical_p: Some(0.5), ..at(1.0) },
        SamplingParams { min_p: Some(0.5), ..at(1.0) },
    ] {
        let mut s = Sampler::new(params, &[]);
        assert_eq!(s.sample(&[f32::NEG_INFINITY; 4]).token, 0);
        assert_eq!(s.sample(&[f32::NAN; 4]).token, 0);
        assert_eq!(s.sample(&[0.0, 1.0, f32::INFINITY, 2.0]).token, 2);
        assert_eq!(s.sample(&[f32::NEG_INFINITY, 1.0, f32::NEG_INFINITY]).token, 1);
        assert_eq!(s.sample(&[]).token, 0);
        assert_eq!(s.distribution(&[f32::NEG_INFINITY, 0.0]), [(1, 1.0)]);
    }
}

#[test]
fn validation_messages_match_tgi() {
    let check = |params: SamplingParams| params.validate().map_err(|e| e.to_string());
    let base = at(1.0);
    assert_eq!(check(SamplingParams::greedy()), Ok(()));
    assert_eq!(
        check(SamplingParams {
            top_k: Some(1),
            top_p: Some(1.0),
            typical_p: Some(0.5),
            min_p: Some(0.0),
            repetition_penalty: Some(1.2),
            frequency_penalty: 2.0,
            presence_penalty: -2.0,
            top_logprobs: MAX_TOP_LOGPROBS,
            ..base.clone()
        }),
        Ok(())
    );
    let err = |params: SamplingParams| check(params).unwrap_err();
    assert_eq!(err(at(-0.1)), "`temperature` must be >= 0.0 (0 picks the most likely token)");
    assert_eq!(err(at(f32::NAN)), "`temperature` must be >= 0.0 (0 picks the most likely token)");
    assert_eq!(err(SamplingParams { top_k: Some(0), ..base.clone() }), "`top_k` must be strictly positive");
    for p in [0.0, 1.5, f32::NAN] {
        assert_eq!(err(SamplingParams { top_p: Some(p), ..base.clone() }), "`top_p` must be > 0.0 and <= 1.0");
    }
    for p in [0.0, 1.0] {
        assert_eq!(err(SamplingParams { typical_p: Some(p), ..base.clone() }), "`typical_p` must be > 0.0 and < 1.0");
    }
    assert_eq!(err(SamplingParams { min_p: Some(1.01), ..base.clone() }), "`min_p` must be >= 0.0 and <= 1.0");
    assert_eq!(
        err(SamplingParams { repetition_penalty: Some(0.0), ..base.clone() }),
        "`repetition_penalty` must be strictly positive"
    );
    assert_eq!(
        err(SamplingParams { frequency_penalty: 2.5, ..base.clone() }),
        "`frequency_penalty` must be >= -2.0 and <= 2.0"
    );
    assert_eq!(
        err(SamplingParams { presence_penalty: -3.0, ..base.clone() }),
        "`presence_penalty` must be >= -2.0 and <= 2.0"
    );
    assert_eq!(err(SamplingParams { top_logprobs: 21, ..base }), "`top_n_tokens` must be >= 0 and <= 20. Given: 21");
}
