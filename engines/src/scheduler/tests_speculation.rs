//! Speculative decoding in the scheduler on the bundled stories260k model: greedy output token-identical to
//! each request alone (at concurrency 1 and 16, with stop strings, token limits, penalties and preemption), and
//! sampled output keeping the target distribution (a chi-square test against speculation off).

use std::collections::HashMap;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use super::tests::{alone, check, events, model, request, settled, sink};
use super::*;
use crate::kv::BLOCK_SIZE;
use crate::model::LoadedModel;
use crate::sampling::SamplingParams;
use crate::speculative::SpeculationConfig;

/// Sixteen greedy requests, most of them copy-heavy (the answer can repeat the prompt): stop strings, a
/// one-token limit, repetition and frequency penalties, one ignoring EOS.
pub(super) fn requests(m: &LoadedModel) -> Vec<Request> {
    let texts = [
        "Lily has a red ball. Lily has a red ball. Lily has a red ball. Lily has",
        "Once upon a time",
        "Tom said: the cat sat on the mat. Mom said: the cat sat on the mat. Dad said: the cat",
        "One day, a girl named Sue went to the store with her mom. They bought apples, milk and bread",
        "The dog ran and ran. The dog ran and ran. The dog",
        "Ben had a toy car. He loved to play with it all day. One day",
        "A B C D E F G A B C D E F G A B C",
        "The sun was shining",
        "Sara and Tim went to the park. Sara and Tim played on the swings. Sara and Tim",
        "Lily",
        "In a big forest there lived a bear. The bear was big. The bear was",
        "The little bird sang a song. The little bird sang a song. The little",
        "Mom said",
        "Once there was a tiny bird who could not fly. Every day it watched the other birds",
        "He said yes, yes, yes, yes, yes, yes,",
        "The cat",
    ];
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut r = request(m.tokenizer.encode(t, true, false).unwrap(), 3 + (i * 11) % 70);
            match i {
                2 => r.stop = vec![" mat".into()],
                4 => r.stop = vec!["ran. The".into(), "zzz".into()],
                6 => r.max_new_tokens = 1,
                8 => r.params.repetition_penalty = Some(1.3),
                10 => r.params.frequency_penalty = 0.7,
                11 => r.ignore_eos = true,
                14 => r.params = SamplingParams { presence_penalty: 0.5, repetition_penalty: Some(0.8), ..r.params },
                _ => {}
            }
            r
        })
        .collect()
}

/// Runs the requests through a scheduler with `cfg` on the bundled model (see [`run_on`]).
fn run(cfg: SchedulerConfig, concurrent: bool) -> Stats {
    run_on(model(), cfg, concurrent)
}

/// Runs the requests through a scheduler over `m` with `cfg`, `concurrent`ly or one after another, checks each
/// against the request alone, and returns the stats once idle (every block of both caches returned).
pub(super) fn run_on(m: Arc<LoadedModel>, cfg: SchedulerConfig, concurrent: bool) -> Stats {
    let h = Scheduler::start(m.clone(), cfg).unwrap();
    let reqs = requests(&m);
    let submit = |r: &Request| {
        let (s, rx) = sink(None);
        h.submit(r.clone(), s).unwrap();
        rx
    };
    let mut generated = 0;
    let mut accepted = 0;
    let mut finish = |i: usize, rx: &Receiver<Event>| {
        let got = events(rx);
        generated += check(&m, &reqs[i], &got, &format!("request {i} (concurrent: {concurrent})"));
        let Some(Event::Finished(f)) = got.last() else { unreachable!() };
        assert!(f.accepted_tokens <= f.speculated_tokens);
        accepted += f.accepted_tokens;
    };
    if concurrent {
        let rxs: Vec<Receiver<Event>> = reqs.iter().map(submit).collect();
        rxs.iter().enumerate().for_each(|(i, rx)| finish(i, rx));
    } else {
        reqs.iter().enumerate().for_each(|(i, r)| finish(i, &submit(r)));
    }
    let s = settled(&h);
    assert_eq!((s.kv_blocks_used, s.generated_tokens), (0, generated as u64), "{s:?}");
    assert_eq!(s.speculative_accepted_tokens, accepted as u64);
    assert_eq!(s.speculated_by_position.iter().sum::<u64>(), s.speculated_tokens);
    assert_eq!(s.accepted_by_position.iter().sum::<u64>(), s.speculative_accepted_tokens);
    s
}

/// A scheduler configuration with speculation `spec`.
pub(super) fn with(spec: SpeculationConfig) -> SchedulerConfig {
    // A fixed per-step prefill cap: derived, it would follow the machine's step times, and so would how many
    // steps decode beside prompts (where less is drafted).
    let batching = Batching { max_prefill_tokens_per_step: Some(256), ..Batching::default() };
    SchedulerConfig { speculation: Some(spec), batching, ..SchedulerConfig::default() }
}

#[test]
fn greedy_output_is_identical_at_concurrency_1_and_16() {
    let fixed = SpeculationConfig { adaptive: false, max_batch: 16, ..SpeculationConfig::default() };
    for (cfg, what) in [
        // The token cost fixed: measured, it follows the machine's timings, and the test would too.
        (with(SpeculationConfig { token_cost: Some(0.1), ..SpeculationConfig::default() }), "adaptive"),
        (with(fixed.clone()), "fixed depth 4"),
        (with(SpeculationConfig { depth: 7, ngram_min: 2, ngram_max: 4, ..fixed }), "fixed depth 7, 2- to 4-grams"),
    ] {
        for concurrent in [false, true] {
            let s = run(cfg.clone(), concurrent);
            assert!(s.speculative_accepted_tokens > 20, "{what}, concurrent {concurrent}: {s:?}");
            // Tokens generated in fewer sequence-steps than tokens: drafts saved steps.
            assert!(s.speculative_verifications > 0);
        }
    }
}

#[test]
fn speculation_survives_preemption_and_chunked_prefill() {
    let spec = SpeculationConfig { adaptive: false, max_batch: 16, ..SpeculationConfig::default() };
    let cfg = SchedulerConfig {
        max_batch_total_tokens: 8 * BLOCK_SIZE,
        batching: Batching { max_batch_prefill_tokens: 9, ..Batching::default() },
        ..with(spec)
    };
    let s = run(cfg, true);
    assert!(s.preemptions > 0 && s.speculative_accepted_tokens > 0, "{s:?}");
}

#[test]
fn wide_batches_do_not_speculate() {
    let s = run(with(SpeculationConfig { max_batch: 0, ..SpeculationConfig::default() }), false);
    assert_eq!((s.speculated_tokens, s.speculative_verifications), (0, 0));
    assert!(s.speculated_by_position.iter().all(|&n| n == 0));
    assert!(Scheduler::start(model(), with(SpeculationConfig { depth: 0, ..SpeculationConfig::default() })).is_err());
}

/// Counts of each value of the generated tokens at positions `1..=positions`, over `n` requests of `params`
/// (seeds from `seed0`), through a scheduler over `m` with `cfg`; also returns the tokens accepted from drafts.
pub(super) fn marginals(
    m: Arc<LoadedModel>,
    cfg: SchedulerConfig,
    prompt: &[u32],
    params: &SamplingParams,
    n: u64,
    seed0: u64,
    positions: usize,
) -> (Vec<HashMap<u32, u64>>, Drafts) {
    let h = Scheduler::start(m, cfg).unwrap();
    let rxs: Vec<Receiver<Event>> = (0..n)
        .map(|i| {
            let mut r = request(prompt.to_vec(), positions);
            r.params = SamplingParams { seed: Some(seed0 + i), ..params.clone() };
            r.ignore_eos = true;
            let (s, rx) = sink(None);
            h.submit(r, s).unwrap();
            rx
        })
        .collect();
    let mut counts = vec![HashMap::new(); positions];
    let mut drafts = Drafts::default();
    for rx in &rxs {
        let got = events(rx);
        let tokens: Vec<u32> =
            got.iter().filter_map(|e| if let Event::Token(t) = e { Some(t.id) } else { None }).collect();
        assert_eq!(tokens.len(), positions);
        for (c, t) in counts.iter_mut().zip(tokens) {
            *c.entry(t).or_insert(0) += 1;
        }
        let Some(Event::Finished(f)) = got.last() else { panic!("{got:?}") };
        drafts.accepted += f.accepted_tokens;
        drafts.drafted += f.speculated_tokens;
    }
    (counts, drafts)
}

/// Drafted tokens of a run of requests, and how many of them were accepted.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Drafts {
    /// Tokens drafted (and checked).
    pub drafted: usize,
    /// Drafted tokens accepted.
    pub accepted: usize,
}

/// Pearson's chi-square statistic for two samples of the same size over the same categories, with categories
/// of fewer than 10 observations in both together pooled into one; returns it with its degrees of freedom.
pub(super) fn chi_square(a: &HashMap<u32, u64>, b: &HashMap<u32, u64>) -> (f64, usize) {
    let mut keys: Vec<u32> = a.keys().chain(b.keys()).copied().collect();
    keys.sort_unstable();
    keys.dedup();
    let get = |m: &HashMap<u32, u64>, k| m.get(&k).copied().unwrap_or(0) as f64;
    let (mut stat, mut cells, mut pooled) = (0.0, 0usize, (0.0, 0.0));
    for k in keys {
        let (x, y) = (get(a, k), get(b, k));
        if x + y < 10.0 {
            pooled = (pooled.0 + x, pooled.1 + y);
            continue;
        }
        stat += (x - y).powi(2) / (x + y);
        cells += 1;
    }
    if pooled.0 + pooled.1 > 0.0 {
        stat += (pooled.0 - pooled.1).powi(2) / (pooled.0 + pooled.1);
        cells += 1;
    }
    (stat, cells.saturating_sub(1))
}

/// The chi-square quantile for a false-alarm rate of 1e-3 (Wilson-Hilferty; z = 3.0902).
pub(super) fn critical(df: usize) -> f64 {
    let d = df.max(1) as f64;
    let h = 2.0 / (9.0 * d);
    d * (1.0 - h + 3.0902 * h.sqrt()).powi(3)
}

/// Sampled output with speculation has the distribution it has without: per generated position (2 to 5; the
/// first comes from the prefill and is never drafted), a two-sample chi-square test of the token counts over
/// 2000 seeded requests each, at a false-alarm rate of 1e-3 per position (4 positions × 2 parameter sets: at
/// most 0.8% for the whole test; seeds are fixed, so the outcome is deterministic).
#[test]
fn sampling_keeps_the_target_distribution() {
    let m = model();
    // The tiny model does not copy its prompt, but it follows its own greedy path: a story's start, its greedy
    // continuation, and the start again make drafts (the continuation) the model often accepts.
    let start = m.tokenizer.encode("Once upon a time", true, false).unwrap();
    let mut prompt = start.clone();
    prompt.extend(alone(&m, &request(start.clone(), 30)).tokens);
    prompt.extend(&start[1..]);
    let plain = SamplingParams { temperature: 0.6, ..SamplingParams::greedy() };
    let warped = SamplingParams {
        temperature: 0.7,
        top_k: Some(40),
        top_p: Some(0.95),
        repetition_penalty: Some(1.1),
        frequency_penalty: 0.3,
        ..SamplingParams::greedy()
    };
    let spec = SpeculationConfig { adaptive: false, max_batch: usize::MAX, ..SpeculationConfig::default() };
    let n = 2000;
    for (params, what) in [(plain, "temperature 0.6"), (warped, "penalties and truncations")] {
        let (off, _) = marginals(m.clone(), SchedulerConfig::default(), &prompt, &params, n, 0, 5);
        let (on, drafts) = marginals(m.clone(), with(spec.clone()), &prompt, &params, n, 1_000_000, 5);
        assert!(drafts.accepted as u64 > n / 2, "{what}: drafts were accepted ({drafts:?})");
        for pos in 1..5 {
            let (stat, df) = chi_square(&off[pos], &on[pos]);
            assert!(stat < critical(df), "{what}, position {}: chi-square {stat:.1} with {df} df", pos + 1);
        }
    }
}
