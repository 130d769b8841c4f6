//! Requests that pool or think, in the scheduler on the bundled stories260k model: pooled prompts batched with
//! generations, prefilled in chunks and preempted, give the pooled hidden states of one direct forward pass and
//! keep no KV; a thinking budget forces the block's end after its tokens and the answer goes on from there, with a
//! grammar applying only after the block.

use std::sync::mpsc::Receiver;

use super::tests::{check, events, model, request, sink};
use super::*;
use crate::constraint::{Grammar, GrammarCompiler, GrammarConfig, GrammarLimits};
use crate::kv::{BlockTable, BLOCK_SIZE};
use crate::model::{LoadedModel, Logits, SeqInput};
use crate::pooling::Pooling;
use crate::text::thinking::Thinking;

/// `ids`' final hidden states pooled by `pooling`, from one forward pass over the whole prompt.
fn pooled_alone(m: &LoadedModel, ids: &[u32], pooling: Pooling) -> Vec<f32> {
    let mut kv = m.model.new_cache(BLOCK_SIZE, ids.len().div_ceil(BLOCK_SIZE)).unwrap();
    let mut table = BlockTable::new();
    kv.reserve(&mut table, ids.len()).unwrap();
    let input = SeqInput { tokens: ids, start: 0, table: &table, logits: Logits::HiddenAll };
    let rows = m.model.run(&mut kv, &[input], false).unwrap().hidden.remove(0);
    let width = m.model.config().hidden;
    assert_eq!(rows.len(), ids.len() * width);
    match pooling {
        Pooling::Last => rows[rows.len() - width..].to_vec(),
        Pooling::Mean => (0..width)
            .map(|j| (rows.iter().skip(j).step_by(width).map(|&x| f64::from(x)).sum::<f64>() / ids.len() as f64) as f32)
            .collect(),
    }
}

/// The finished event of `events`.
fn finished(events: &[Event]) -> &Finished {
    match events.last() {
        Some(Event::Finished(f)) => f,
        other => panic!("no Finished: {other:?}"),
    }
}

/// Pooled requests of both kinds beside generations, under `cfg`; each pooled vector matches the direct
/// computation and no block is held at the end.
fn pooled_beside_generations(cfg: SchedulerConfig) -> Stats {
    let m = model();
    let h = Scheduler::start(m.clone(), cfg).unwrap();
    let texts = [
        "Once upon a time",
        "The little dog ran to the park and saw a big red ball. He wanted to play with it all day long",
        "Lily",
        "One day, a girl named Sue went to the store with her mom. They bought apples, milk and bread.",
    ];
    let mut submitted: Vec<(Request, Receiver<Event>)> = Vec::new();
    for t in texts {
        let ids = m.tokenizer.encode(t, true, false).unwrap();
        for pooling in [None, Some(Pooling::Mean), Some(Pooling::Last)] {
            // Generations long enough to need every block of the smallest pool, so that they preempt.
            let new = if pooling.is_some() { 1 } else { 4 * BLOCK_SIZE - 1 - ids.len() };
            let req = Request { pooling, ignore_eos: true, ..request(ids.clone(), new) };
            let (s, rx) = sink(None);
            h.submit(req.clone(), s).unwrap();
            submitted.push((req, rx));
        }
    }
    for (req, rx) in &submitted {
        let got = events(rx);
        match req.pooling {
            None => {
                check(&m, req, &got, "generation");
            }
            Some(p) => {
                assert!(matches!(got.first(), Some(Event::Started { .. })) && got.len() == 2, "{got:?}");
                let f = finished(&got);
                assert_eq!((f.generated_tokens, f.text.as_str()), (0, ""));
                let want = pooled_alone(&m, &req.prompt_ids, p);
                let err = f.embedding.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                assert_eq!(f.embedding.len(), want.len());
                assert!(err < 1e-4, "{p:?} of {} tokens: max |diff| {err}", req.prompt_ids.len());
            }
        }
    }
    let stats = h.stats();
    assert_eq!((stats.batch_size, stats.kv_blocks_used), (0, 0), "{stats:?}");
    stats
}

#[test]
fn pooled_prompts_match_one_forward_pass() {
    let s = pooled_beside_generations(SchedulerConfig::default());
    assert!(s.step_batch_size.sum > s.step_batch_size.count as f64, "steps batched several sequences");
    // Chunked and preempted: the mean is taken over every chunk, and taken again after a preemption.
    let s = pooled_beside_generations(SchedulerConfig {
        batching: Batching { max_batch_prefill_tokens: 7, ..Batching::default() },
        max_batch_total_tokens: 4 * BLOCK_SIZE,
        ..SchedulerConfig::default()
    });
    assert!(s.preemptions > 0, "{s:?}");
}

#[test]
fn pooled_prompts_share_no_cached_prefix() {
    let m = model();
    let h = Scheduler::start(m.clone(), SchedulerConfig::default()).unwrap();
    let ids = m.tokenizer.encode(&"Once upon a time there was a cat. ".repeat(4), true, false).unwrap();
    assert!(ids.len() > 2 * BLOCK_SIZE);
    let (s, rx) = sink(None);
    h.submit(request(ids.clone(), 2), s).unwrap();
    events(&rx);
    let (s, rx) = sink(None);
    h.submit(Request { pooling: Some(Pooling::Mean), ..request(ids.clone(), 1) }, s).unwrap();
    let got = events(&rx);
    assert!(matches!(got.first(), Some(Event::Started { cached_tokens: 0, .. })), "{got:?}");
    let want = pooled_alone(&m, &ids, Pooling::Mean);
    assert!(finished(&got).embedding.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-4));
    assert_eq!(h.stats().prefix_cache_hits, 0);
}

/// The generated token ids of `events`.
fn tokens(events: &[Event]) -> Vec<u32> {
    events.iter().filter_map(|e| if let Event::Token(t) = e { Some(t.id) } else { None }).collect()
}

#[test]
fn a_thinking_budget_forces_the_end_and_the_answer_goes_on() {
    let m = model();
    let h = Scheduler::start(m.clone(), SchedulerConfig::default()).unwrap();
    let prompt = m.tokenizer.encode("Once upon a time", true, false).unwrap();
    let forced = m.tokenizer.encode("</think>", false, false).unwrap();
    assert!(forced.len() > 1, "the closing tag is several tokens here: {forced:?}");
    let thinking = |budget| Thinking {
        start: "<think>".into(),
        end: "</think>".into(),
        open: true,
        budget: Some(budget),
        forced: forced.clone(),
    };
    let compiler = GrammarCompiler::new(&m.tokenizer, m.model.config().vocab, &m.eos, &GrammarConfig::default());
    let grammar = Grammar::Regex("(yes|no), [a-z]{1,8}\\.".into());
    let constraint = compiler.unwrap().compile(&GrammarLimits::default().check(grammar).unwrap()).unwrap().0;
    for (budget, constrained) in [(3, false), (0, false), (4, true)] {
        let base = request(prompt.clone(), budget + forced.len() + 8);
        let req = Request {
            thinking: Some(thinking(budget)),
            constraint: constrained.then(|| constraint.clone()),
            ..base.clone()
        };
        let (s, rx) = sink(None);
        h.submit(req, s).unwrap();
        let got = tokens(&events(&rx));
        // The budget's tokens are the free answer's; then the tag; then what the model says after them (under
        // the grammar, which saw none of the thinking).
        let free = super::tests::alone(&m, &request(prompt.clone(), budget.max(1))).tokens;
        assert_eq!(got[..budget], free[..budget], "budget {budget}");
        assert_eq!(got[budget..budget + forced.len()], forced[..], "budget {budget}");
        let mut after = prompt.clone();
        after.extend_from_slice(&got[..budget + forced.len()]);
        let rest = Request { constraint: constrained.then(|| constraint.clone()), ..request(after, 8) };
        let want = super::tests::alone(&m, &rest).tokens;
        assert_eq!(got[budget + forced.len()..], want[..], "budget {budget}, grammar {constrained}");
    }
}
