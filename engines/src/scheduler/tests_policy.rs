//! The prefill policy on the bundled stories260k model, step by step (the engine driven on the test's thread,
//! each step's plan inspected, step costs from a scripted machine where the fitted cap matters): prompts
//! arriving while others decode are spread over steps within the per-step cap and every decoding sequence gets
//! a token every step; the fitted chunk keeps mixed steps within the ITL factor; a prompt longer than eight
//! fitted chunks is prefilled in eight even steps; prompts as many as the decoders or more are prefilled in one step;
//! a short prompt behind a long one finishes its prefill first; long prompts start in order, and several at once
//! when the budget and the KV pool allow; a request joins the next step while the batch only decodes; outputs
//! stay those of `generate` alone.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

use super::cost::StepLoad;
use super::engine::{Engine, StepClock, Submission};
use super::plan::{StepKind, StepPlan, Work};
use super::proposer::Proposer;
use super::tests::{batching, check, model, request, sink};
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

    /// The harness with step costs from `machine` instead of the wall clock.
    fn scripted(self, machine: fn(StepLoad) -> f64) -> Self {
        Harness { engine: self.engine.with_clock(StepClock::Scripted(machine)), ..self }
    }

    /// Submits a greedy request for `text` repeated `times`, generating `max_new` tokens; returns its index.
    fn submit(&mut self, text: &str, times: usize, max_new: usize) -> usize {
        let prompt = self.m.tokenizer.encode(&text.repeat(times), true, false).unwrap();
        let req = Request { ignore_eos: true, ..request(prompt, max_new) };
        let (s, rx) = sink(None);
        self.tx.send(Submission::new(req.clone(), s, true)).unwrap();
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
const BALL: &str = "A big red ball rolled down the hill and the children ran after it. ";

#[test]
fn prompts_beside_decodes_are_capped_and_decodes_never_stall() {
    let m = model();
    let cap = 8;
    let cfg = batching(Batching { max_prefill_tokens_per_step: Some(cap), ..Batching::default() });
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
    let cfg = batching(Batching {
        max_batch_prefill_tokens: 256,
        max_prefill_tokens_per_step: Some(16),
        ..Batching::default()
    });
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
    let mut h = Harness::new(&m, batching(Batching { max_batch_prefill_tokens: 256, ..Batching::default() }));
    h.submit("Lily", 1, 40);
    h.turn();
    h.submit(STORY, 3, 3);
    while !h.finished(0) {
        let (plan, _) = h.turn();
        if plan.decodes > 0 {
            assert!((BLOCK_SIZE / 4..=256).contains(&plan.prefill_budget), "{plan:?}");
            assert!(plan.prefill_tokens <= plan.prefill_budget);
        }
    }
    h.finish();
}

/// A machine of known speed: 10 ms a step, 10 ms more per decoding sequence, 0.25 ms per prompt token. Beside
/// two decoders a step may take 0.25 x 30 ms / 0.25 ms = 30 prompt tokens at the default factor of 1.25.
fn machine(load: StepLoad) -> f64 {
    0.010 + 0.010 * load.decodes as f64 + 0.000_25 * load.prefill as f64
}

/// Prompt tokens the scripted machine allows beside two decoders at ITL factor `factor`.
fn allowed(factor: f64) -> usize {
    let decode = machine(StepLoad { decodes: 2, ..StepLoad::default() });
    ((factor - 1.0) * decode / 0.000_25).round() as usize
}

/// A harness on the scripted machine with two decoders running (and their step cost measured), at most
/// `prefill` prompt tokens a step (prompts over an eighth of it are long).
fn two_decoders(m: &LoadedModel, prefill: usize) -> (Harness<'_>, [usize; 2]) {
    let cfg = SchedulerConfig {
        max_batch_total_tokens: 64 * BLOCK_SIZE,
        ..batching(Batching { max_batch_prefill_tokens: prefill, ..Batching::default() })
    };
    let mut h = Harness::new(m, cfg).scripted(machine);
    let decoders = [h.submit("Lily", 1, 300), h.submit("The cat", 1, 300)];
    for _ in 0..4 {
        h.turn();
    }
    (h, decoders)
}

#[test]
fn the_fitted_chunk_keeps_mixed_steps_within_the_itl_factor() {
    let m = model();
    let (mut h, decoders) = two_decoders(&m, 256);
    assert_eq!(allowed(1.25), 30);
    let long = h.submit(STORY, 6, 1);
    let prompt = h.reqs[long].prompt_ids.len();
    assert!(prompt > 64 + 2 * 30, "{prompt}");
    let mut chunks = Vec::new();
    while !h.streaming(long) {
        let (plan, tokens) = h.turn();
        assert_eq!((plan.kind, plan.decodes), (StepKind::Mixed, 2), "{plan:?}");
        assert!(decoders.iter().all(|&d| tokens[d] == 1), "every decoder got its token");
        chunks.push(plan.prefill_tokens);
    }
    // Four floors (16 tokens) or an eighth of the prompt until a prompt token's cost beside decodes is
    // measured, then the fitted chunk (more than an eighth): a step of 30 ms + 30 x 0.25 ms = 1.25 decode-only
    // steps.
    assert!(prompt.div_ceil(8) < 30, "{prompt}");
    assert_eq!(chunks[0], prompt.div_ceil(8).max(BLOCK_SIZE));
    let (last, middle) = chunks[1..].split_last().unwrap();
    assert!(middle.iter().all(|&c| c == 30) && *last <= 30, "{chunks:?}");
    assert_eq!(chunks.iter().sum::<usize>(), prompt);
    h.finish();
}

#[test]
fn a_prompt_beside_decodes_is_spread_over_eight_steps() {
    let m = model();
    let (mut h, decoders) = two_decoders(&m, 512);
    // A first prompt (sharing no prefix with the others) measures a prompt token's cost beside decoders.
    let first = h.submit(BALL, 2, 1);
    while !h.finished(first) {
        h.turn();
    }
    // A prompt longer than eight fitted chunks: an eighth of it each step, in eight steps of even cost.
    let long = h.submit(STORY, 14, 1);
    let a = h.reqs[long].prompt_ids.len();
    let eighth = a.div_ceil(8);
    assert!(eighth > allowed(1.25), "{a}");
    let mut chunks = Vec::new();
    while !h.streaming(long) {
        let (plan, tokens) = h.turn();
        assert_eq!((plan.kind, plan.decodes, plan.prefill_budget), (StepKind::Mixed, 2, eighth), "{plan:?}");
        assert!(decoders.iter().all(|&d| tokens[d] == 1), "the decoders never stall");
        chunks.push(plan.prefill_tokens);
    }
    assert_eq!(chunks.len(), a.div_ceil(eighth));
    assert!(chunks.len() <= 8 && chunks.iter().sum::<usize>() == a, "{chunks:?}");
    // Two prompts, as many as the decoders: the whole budget in one step, as llama-server batches them (each
    // decoder waits once, instead of for eight steps).
    let prompts = [h.submit(BIRD, 6, 1), h.submit("The sun was shining", 1, 1)];
    let total: usize = prompts.iter().map(|&i| h.reqs[i].prompt_ids.len()).sum();
    let (plan, tokens) = h.turn();
    assert_eq!((plan.decodes, plan.prefill_budget, plan.prefill_tokens), (2, 512, total));
    assert!(prompts.iter().all(|&i| tokens[i] == 1), "both answers came in one step");
    h.finish();
}

#[test]
fn prompts_outnumbering_the_decoders_take_the_whole_budget_in_one_step() {
    let m = model();
    let (mut h, decoders) = two_decoders(&m, 512);
    // Three prompts arrive beside two decoders (a wave of a closed loop's clients behind two early ones): one
    // step prefills them all, the decoders wait for it once, and the wave then decodes in step.
    let prompts = [h.submit(STORY, 12, 1), h.submit(BIRD, 6, 1), h.submit("The sun was shining", 1, 1)];
    let total: usize = prompts.iter().map(|&i| h.reqs[i].prompt_ids.len()).sum();
    assert!(total <= 512 && h.reqs[prompts[0]].prompt_ids.len() > 512 / 8, "{total}");
    let (plan, tokens) = h.turn();
    assert_eq!((plan.kind, plan.decodes, plan.prefill_budget, plan.prefill_tokens), (StepKind::Mixed, 2, 512, total));
    assert!(decoders.iter().all(|&d| tokens[d] == 1));
    assert!(prompts.iter().all(|&i| h.finished(i)), "every prompt's answer came in one step");
    h.finish();
}

#[test]
fn long_prompts_start_together_when_the_budget_and_the_pool_allow() {
    let m = model();
    let texts = [STORY, BIRD, BALL];
    let lens = texts.map(|t| m.tokenizer.encode(&t.repeat(2), true, false).unwrap().len());
    let blocks = lens.map(|n| n.div_ceil(BLOCK_SIZE));
    assert!(lens.iter().all(|&n| n > 2 * BLOCK_SIZE) && lens[0] + lens[1] <= 256, "{lens:?}");
    // Room for the first two prompts' blocks (and two more); nothing decodes, so a step takes up to 256 prompt
    // tokens: the two start in the same step, the third waits for blocks.
    let cfg = SchedulerConfig {
        max_batch_total_tokens: (blocks[0] + blocks[1] + 2) * BLOCK_SIZE,
        ..batching(Batching { max_batch_prefill_tokens: 256, ..Batching::default() })
    };
    let mut h = Harness::new(&m, cfg);
    let long = texts.map(|t| h.submit(t, 2, 1));
    let (plan, tokens) = h.turn();
    assert_eq!((plan.kind, plan.prefill_tokens), (StepKind::Prefill, lens[0] + lens[1]));
    assert_eq!(tokens, [1, 1, 0]);
    assert!(!h.streaming(long[2]));
    h.finish();
}

#[test]
fn a_request_joins_the_next_step_unless_prompts_are_prefilling() {
    let m = model();
    let cfg = batching(Batching {
        max_batch_prefill_tokens: 256,
        max_prefill_tokens_per_step: Some(8),
        waiting_served_ratio: 10.0,
        max_waiting_tokens: 3,
        ..Batching::default()
    });
    let mut h = Harness::new(&m, cfg);
    h.submit("Lily", 1, 80);
    h.submit("The cat", 1, 80);
    h.turn();
    h.turn();
    // The batch only decodes: a prompt joins the next step, whatever the waiting-served ratio says.
    h.submit(STORY, 3, 1);
    let prefilling = |plan: &StepPlan| plan.slots.iter().filter(|s| s.work == Work::Prefill).count();
    let (plan, _) = h.turn();
    assert_eq!((plan.kind, prefilling(&plan), plan.prefill_tokens), (StepKind::Mixed, 1, 8));
    // While it prefills, one waiting request is fewer than 10 per running one: the next waits
    // max_waiting_tokens steps.
    h.submit("The sun was shining", 1, 1);
    for _ in 0..3 {
        assert_eq!(prefilling(&h.turn().0), 1);
    }
    assert_eq!(prefilling(&h.turn().0), 2);
    h.finish();
}
