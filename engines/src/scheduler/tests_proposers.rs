//! Draft-model and Medusa speculation in the scheduler, on stories-distill-4l with stories260k (the same
//! tokenizer) as its draft and the Medusa heads trained for it: greedy output token-identical to each request
//! alone (one at a time and 16 at once, with stop strings, limits, penalties, preemption and chunked prefill),
//! sampled output keeping the target's distribution with a draft model, every block of both caches returned;
//! and the target drafting for itself from its own weights quantized to 4 bits at load (a quantized self-draft).

use std::path::Path;
use std::sync::{Arc, OnceLock};

use super::tests::{alone, model, request};
use super::tests_speculation::{chi_square, critical, marginals, run_on, with};
use super::*;
use crate::kv::BLOCK_SIZE;
use crate::model::{load, LoadOptions, LoadedModel};
use crate::sampling::SamplingParams;
use crate::speculative::{Medusa, Method, SpeculationConfig};

/// Where the fixture models are.
fn models() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../models"))
}

/// stories-distill-4l, loaded once.
fn target() -> Arc<LoadedModel> {
    static MODEL: OnceLock<Arc<LoadedModel>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let dir = models().join("stories-distill-4l/hf");
            Arc::new(load(dir.to_str().unwrap(), &LoadOptions::default()).unwrap())
        })
        .clone()
}

/// stories-distill-4l's own weights quantized in place to Q4_0 at load (a quantized self-draft), loaded once.
fn q4_self() -> Arc<LoadedModel> {
    static MODEL: OnceLock<Arc<LoadedModel>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let dir = models().join("stories-distill-4l/hf");
            let opts = LoadOptions { quantize: Some("q4_0".parse().unwrap()), ..LoadOptions::default() };
            Arc::new(load(dir.to_str().unwrap(), &opts).unwrap())
        })
        .clone()
}

/// Its Medusa heads, loaded once.
fn heads() -> Arc<Medusa> {
    static HEADS: OnceLock<Arc<Medusa>> = OnceLock::new();
    HEADS.get_or_init(|| Arc::new(Medusa::load(&models().join("stories-distill-4l/medusa"), 256, 512).unwrap())).clone()
}

/// Speculation by `method`, at a fixed depth 4 or adaptive (at a fixed token cost: measured, it would follow the
/// machine's timings, and the tests would too).
fn spec(method: Method, adaptive: bool) -> SpeculationConfig {
    SpeculationConfig { method, adaptive, max_batch: 16, token_cost: Some(0.1), ..SpeculationConfig::default() }
}

/// The two methods under test, by name.
fn methods() -> [(Method, &'static str); 2] {
    [(Method::Draft(model()), "draft model"), (Method::Medusa(heads()), "medusa")]
}

#[test]
fn greedy_output_is_identical_with_a_draft_model_and_medusa() {
    for (method, what) in methods() {
        for adaptive in [false, true] {
            for concurrent in [false, true] {
                let s = run_on(target(), with(spec(method.clone(), adaptive)), concurrent);
                let per_step = s.speculative_accepted_tokens as f64 / s.speculative_verifications.max(1) as f64;
                eprintln!("{what} adaptive {adaptive} concurrent {concurrent}: {per_step:.2} accepted per check");
                // (How many tokens are drafted depends on how the requests' arrivals meet the steps: a count of
                // accepted tokens is checked only to be positive, their rate per verification below.)
                assert!(s.speculative_accepted_tokens > 0, "{what}, adaptive {adaptive}: {s:?}");
                if !adaptive {
                    // The heads' README: greedy chains of the 4 heads accept 1.34 tokens per step on stories.
                    assert!(per_step > 0.7, "{what}: {per_step:.2} tokens accepted per verification");
                }
            }
        }
    }
}

#[test]
fn greedy_output_is_identical_with_a_quantized_self_draft_at_concurrency_1_and_16() {
    for adaptive in [false, true] {
        for concurrent in [false, true] {
            let s = run_on(target(), with(spec(Method::Draft(q4_self()), adaptive)), concurrent);
            let rate = s.speculative_accepted_tokens as f64 / s.speculated_tokens.max(1) as f64;
            eprintln!("Q4_0 self-draft, adaptive {adaptive}, concurrent {concurrent}: {rate:.2} of drafts accepted");
            // The same weights at 4 bits agree with the target far more often than stories260k does. (How many
            // tokens are drafted at once depends on the prefill cap, which follows the machine's step times.)
            assert!(rate > 0.6 && s.speculative_accepted_tokens > 0, "adaptive {adaptive}: {s:?}");
        }
    }
    let cfg = SchedulerConfig {
        max_batch_total_tokens: 12 * BLOCK_SIZE,
        batching: Batching { max_batch_prefill_tokens: 9, ..Batching::default() },
        ..with(spec(Method::Draft(q4_self()), false))
    };
    let s = run_on(target(), cfg, true);
    assert!(s.preemptions > 0 && s.speculative_accepted_tokens > 0, "{s:?}");
}

#[test]
fn proposers_survive_preemption_and_chunked_prefill() {
    for (method, what) in methods() {
        let cfg = SchedulerConfig {
            max_batch_total_tokens: 12 * BLOCK_SIZE,
            batching: Batching { max_batch_prefill_tokens: 9, ..Batching::default() },
            ..with(spec(method, false))
        };
        let s = run_on(target(), cfg, true);
        assert!(s.preemptions > 0 && s.speculative_accepted_tokens > 0, "{what}: {s:?}");
    }
}

/// Sampled output with a draft model has the distribution it has without (the test of
/// `tests_speculation::sampling_keeps_the_target_distribution`, whose n-gram drafts are point masses, with
/// stories260k drafting for stories-distill-4l): the draft model samples its drafts from its own processed
/// distribution `q`, unlike the target's `p`, and many are rejected, their replacements drawn from the residual
/// `max(0, p - q)`; with top-p, and with top-k and penalties (which the draft applies to its drafted tokens too).
#[test]
fn sampling_with_a_draft_model_keeps_the_target_distribution() {
    let m = target();
    let prompt = m.tokenizer.encode("Once upon a time, there was a little girl named Lily.", true, false).unwrap();
    let nucleus = SamplingParams { temperature: 0.7, top_p: Some(0.95), ..SamplingParams::greedy() };
    let penalised = SamplingParams {
        temperature: 0.9,
        top_k: Some(40),
        repetition_penalty: Some(1.2),
        frequency_penalty: 0.4,
        presence_penalty: 0.2,
        ..SamplingParams::greedy()
    };
    let n = 2000;
    for (params, what) in [(nucleus, "top-p"), (penalised, "top-k and penalties")] {
        let (off, _) = marginals(m.clone(), SchedulerConfig::default(), &prompt, &params, n, 0, 5);
        let wide = SpeculationConfig { max_batch: usize::MAX, ..spec(Method::Draft(model()), false) };
        let (on, drafts) = marginals(m.clone(), with(wide), &prompt, &params, n, 1 << 20, 5);
        assert!(drafts.accepted as u64 > n / 4, "{what}: drafts were accepted ({drafts:?})");
        assert!((drafts.drafted - drafts.accepted) as u64 > n / 40, "{what}: and rejected ({drafts:?})");
        for pos in 1..5 {
            let (stat, df) = chi_square(&off[pos], &on[pos]);
            assert!(stat < critical(df), "{what}, position {}: chi-square {stat:.1} with {df} df", pos + 1);
        }
    }
}

#[test]
fn a_draft_model_with_another_vocabulary_and_too_few_heads_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let src = models().join("stories260k/hf");
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, tmp.path().join(f.file_name().unwrap())).unwrap();
    }
    let tj = tmp.path().join("tokenizer.json");
    let text = std::fs::read_to_string(&tj).unwrap().replace("\"<0x61>\": 100", "\"<0x7A7A>\": 100");
    std::fs::write(&tj, text).unwrap();
    let other = Arc::new(load(tmp.path().to_str().unwrap(), &LoadOptions::default()).unwrap());
    let err = Scheduler::start(target(), with(spec(Method::Draft(other), true))).err().unwrap().to_string();
    assert!(err.contains("tokenizer is not the target's") && err.contains("token 100 differs"), "{err}");
    let deep = SpeculationConfig { depth: 5, ..spec(Method::Medusa(heads()), true) };
    let err = Scheduler::start(target(), with(deep)).err().unwrap().to_string();
    assert!(err.contains("needs 5 Medusa heads; the heads have 4"), "{err}");
    // A draft whose greedy continuation is the target's own (the target drafting for itself) is all accepted.
    let req = request(target().tokenizer.encode("Once upon a time", true, false).unwrap(), 40);
    let s = run_self(&req);
    assert_eq!(s.speculative_accepted_tokens, s.speculated_tokens, "{s:?}");
    assert_eq!(alone(&target(), &req).tokens.len(), 40);
}

/// The heads accept what their README measured (1.34 tokens per step on greedy continuations of stories).
#[test]
fn medusa_heads_accept_what_they_were_measured_to() {
    let (mut accepted, mut checks) = (0, 0);
    for text in ["Once upon a time", "Lily and Ben were playing in the", "The cat"] {
        let req = request(target().tokenizer.encode(text, true, false).unwrap(), 100);
        let h = Scheduler::start(target(), with(spec(Method::Medusa(heads()), false))).unwrap();
        let (s, rx) = super::tests::sink(None);
        h.submit(req, s).unwrap();
        super::tests::events(&rx);
        let s = super::tests::settled(&h);
        (accepted, checks) = (accepted + s.speculative_accepted_tokens, checks + s.speculative_verifications);
    }
    let per_step = accepted as f64 / checks as f64;
    assert!((1.1..1.6).contains(&per_step), "{per_step:.2} tokens accepted per verification");
}

/// Runs `req` with the target drafting for itself at a fixed depth; returns the stats once idle.
fn run_self(req: &Request) -> Stats {
    let h = Scheduler::start(target(), with(spec(Method::Draft(target()), false))).unwrap();
    let (s, rx) = super::tests::sink(None);
    h.submit(Request { ignore_eos: true, ..req.clone() }, s).unwrap();
    super::tests::events(&rx);
    super::tests::settled(&h)
}
