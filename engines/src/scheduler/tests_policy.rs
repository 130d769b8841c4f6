//! The prefill policy on the bundled stories260k model, step by step (the engine driven on the test's thread,
//! each step's plan inspected): prompts arriving while others decode are spread over steps within the
//! per-step cap and every decoding sequence gets a token every step; a short prompt behind a long one
//! finishes its prefill first; outputs stay those of `generate` alone.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::engine::{Engine, Submission};
use super::plan::{StepKind, StepPlan, Work};
use super::proposer::Proposer;
use super::tests::{check, model, request, sink};
use super::*;
use crate::kv::BLOCK_SIZE;
use crate::model::LoadedModel;

/// An engine on the test's thread, the requests submitted to it and every event each received.
struct Harness<'m> {
    m: &'m LoadedModel,
    engine: Engine<'m>,
    tx: Sender<Submission>,
    reqs: Vec<Request>,
    rxs: Vec<Receiver<Event>>,
    got: Vec<Vec<Event>>,
}

impl<'m> Harness<'m> {
    fn new(m: &'m LoadedModel, cfg: SchedulerConfig) -> Self {
        cfg.validate().unwrap();
        let kv = m.model.new_cache(BLOCK_SIZE, cfg.num_blocks()).unwrap();
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Mutex::new(Stats::new(&cfg)));
        let proposer = Proposer::new(cfg.speculation.as_ref(), m, cfg.num_blocks()).unwrap();
        let engine = Engine::new(m, (kv, proposer), cfg, rx, shared);
        Harness { m, engine, tx, reqs: Vec::new(), rxs: Vec::new(), got: Vec::new() }
    }

    /// Submits a greedy request for `text` repeated `times`, generating `max_new` tokens; returns its index.
    fn submit(&mut self, text: &str, times: usize, max_new: usize) -> usize {
        let prompt = self.m.tokenizer.encode(&text.repeat(times), true, false).unwrap();
        let req = Request { ignore_eos: true, ..request(prompt, max_new) };
        let (s, rx) = sink(None);
        self.tx.send(Submission { req: req.clone(), sink: s, at: Instant::now() }).unwrap();
        self.reqs.push(req);
        self.rxs.push(rx);
        self.got.push(Vec::new());
        self.reqs.len() - 1
    }

    /// Runs one turn; returns its plan and the tokens each request received in it.
    fn turn(&mut self) -> (StepPlan, Vec<usize>) {
        assert!(!self.engine.is_idle() || self.pending_submissions(), "nothing to run");
        assert!(self.engine.intake());
        let plan = self.engine.turn().expect("a step ran");
        let tokens = self
            .rxs
            .iter()
            .zip(&mut self.got)
            .map(|(rx, got)| {
                let before = got.len();
                got.extend(rx.try_iter());
                got[before..].iter().filter(|e| matches!(e, Event::Token(_))).count()
            })
            .collect();
        (plan, tokens)
    }

    /// Whether a submission may still be in the channel (some request has no event yet).
    fn pending_submissions(&self) -> bool {
        self.got.iter().any(Vec::is_empty)
    }

    /// Whether request `i` received a token.
    fn streaming(&self, i: usize) -> bool {
        self.got[i].iter().any(|e| matches!(e, Event::Token(_)))
    }

    /// Whether request `i` ended.
    fn finished(&self, i: usize) -> bool {
        matches!(self.got[i].last(), Some(Event::Finished(_)))
    }

    /// Runs until every request ended, then checks each against `generate` alone.
    fn finish(&mut self) {
        while !(0..self.reqs.len()).all(|i| self.finished(i)) {
            self.turn();
        }
        for (i, (req, got)) in self.reqs.iter().zip(&self.got).enumerate() {
            check(self.m, req, got, &format!("request {i}"));
        }
        assert!(self.engine.is_idle());
    }
}

const STORY: &str = "Once upon a time there was a little dog who liked to run in the park. ";
const BIRD: &str = "The little bird sang a song in the tall green tree every morning. ";

#[test]
fn prompts_beside_decodes_are_capped_and_decodes_never_stall() {
    let m = model();
    let cap = 8;
    let cfg = SchedulerConfig { max_prefill_tokens_per_step: Some(cap), ..SchedulerConfig::default() };
    let mut h = Harness::new(&m, cfg);
    let decoders: Vec<usize> = ["Lily", "The cat", "Tom and his friend"].iter().map(|t| h.submit(t, 1, 60)).collect();
    // Nothing decodes yet: the whole budget, all three prompts in one step.
    let (plan, tokens) = h.turn();
    assert_eq!((plan.kind, plan.prefill_budget, plan.decodes), (StepKind::Prefill, 4096, 0));
    assert_eq!(tokens, [1, 1, 1]);
    let long = h.submit(STORY, 4, 5);
    let prompt = h.reqs[long].prompt_ids.len();
    assert!(prompt > 8 * cap, "{prompt}");
    let mut steps = 0;
    while !h.streaming(long) {
        let (plan, tokens) = h.turn();
        steps += 1;
        assert_eq!((plan.kind, plan.prefill_budget, plan.decodes), (StepKind::Mixed, cap, 3), "{plan:?}");
        assert!(plan.prefill_tokens <= cap);
        let decodes = plan.slots.iter().filter(|s| s.work == Work::Decode).count();
        assert_eq!(decodes, 3);
        for &d in &decoders {
            assert_eq!(tokens[d], 1, "step {steps}: decoding request {d} got a token");
        }
    }
    assert_eq!(steps, prompt.div_ceil(cap), "the prompt took cap-sized chunks");
    h.finish();
}

#[test]
fn a_short_prompt_behind_long_ones_starts_first() {
    let m = model();
    // Prompts over 256 / 8 = 32 tokens are long: one prefills at a time; short ones join beside it.
    let cfg = SchedulerConfig {
        max_batch_prefill_tokens: 256,
        max_prefill_tokens_per_step: Some(16),
        ..SchedulerConfig::default()
    };
    let mut h = Harness::new(&m, cfg);
    let decoder = h.submit("Lily", 1, 80);
    h.turn();
    assert!(h.streaming(decoder));
    // Different texts: the second shares no cached prefix with the first.
    let long = [h.submit(STORY, 3, 3), h.submit(BIRD, 2, 3)];
    let short = h.submit("The sun was shining", 1, 3);
    assert!(h.reqs[long[1]].prompt_ids.len() > 32 && h.reqs[short].prompt_ids.len() <= 16);
    // (request, turn in which its first token came)
    let mut order = Vec::new();
    for turn in 1.. {
        let (plan, _) = h.turn();
        assert!(plan.prefill_tokens <= 16, "{plan:?}");
        let prefilling = plan.slots.iter().filter(|s| s.work == Work::Prefill).count();
        assert!(prefilling <= 2, "one long prompt at a time, beside the short one: {plan:?}");
        for i in [long[0], long[1], short] {
            if h.streaming(i) && !order.iter().any(|&(j, _)| j == i) {
                order.push((i, turn));
            }
        }
        if order.len() == 3 {
            break;
        }
    }
    assert_eq!(order.iter().map(|&(i, _)| i).collect::<Vec<_>>(), [short, long[0], long[1]]);
    // The short prompt got half of each step's budget from the first step on.
    assert_eq!(order[0].1, h.reqs[short].prompt_ids.len().div_ceil(8), "{order:?}");
    h.finish();
}

#[test]
fn without_a_cap_the_engine_derives_one_within_its_bounds() {
    let m = model();
    let mut h = Harness::new(&m, SchedulerConfig { max_batch_prefill_tokens: 256, ..SchedulerConfig::default() });
    h.submit("Lily", 1, 40);
    h.turn();
    h.submit(STORY, 3, 3);
    while !h.finished(0) {
        let (plan, _) = h.turn();
        if plan.decodes > 0 {
            assert!((BLOCK_SIZE..=256).contains(&plan.prefill_budget), "{plan:?}");
            assert!(plan.prefill_tokens <= plan.prefill_budget);
        }
    }
    h.finish();
}
