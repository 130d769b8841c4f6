//! The scheduler on the bundled stories260k model: concurrent, preempted and chunk-prefilled requests (and
//! `generate`'s one-sequence scheduler) give what a direct loop over the model gives each alone; prefix caching,
//! cancellation, prompt log-probabilities and refusals.

use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::*;
use crate::generate::{generate, GenerateRequest};
use crate::kv::{BlockTable, BLOCK_SIZE};
use crate::model::{load, LoadOptions, LoadedModel, Logits, SeqInput};
use crate::perplexity::log_prob;
use crate::sampling::{FinishReason, Sampled, Sampler, SamplingParams};
use crate::text::completion::{Completion, EndRules};

/// The model, loaded once for every test.
pub(super) fn model() -> Arc<LoadedModel> {
    static MODEL: OnceLock<Arc<LoadedModel>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/stories260k/stories260k-f32.gguf");
            Arc::new(load(path, &LoadOptions::default()).unwrap())
        })
        .clone()
}

/// Sends events down a channel; closes itself once `close_after` tokens went through.
struct ChannelSink {
    tx: mpsc::Sender<Event>,
    close_after: Option<usize>,
    tokens: usize,
}

impl EventSink for ChannelSink {
    fn send(&mut self, event: Event) -> bool {
        if self.is_closed() {
            return false;
        }
        self.tokens += usize::from(matches!(event, Event::Token(_)));
        self.tx.send(event).is_ok()
    }

    fn is_closed(&self) -> bool {
        self.close_after.is_some_and(|n| self.tokens >= n)
    }
}

/// A sink and the receiver of its events.
pub(super) fn sink(close_after: Option<usize>) -> (Box<dyn EventSink>, Receiver<Event>) {
    let (tx, rx) = mpsc::channel();
    (Box::new(ChannelSink { tx, close_after, tokens: 0 }), rx)
}

/// Every event until the request ends or its sink is dropped.
pub(super) fn events(rx: &Receiver<Event>) -> Vec<Event> {
    let mut out = Vec::new();
    while let Ok(e) = rx.recv_timeout(Duration::from_secs(60)) {
        let end = matches!(e, Event::Finished(_) | Event::Failed(_));
        out.push(e);
        if end {
            break;
        }
    }
    out
}

/// The stats once nothing is queued or running.
pub(super) fn settled(h: &SchedulerHandle) -> Stats {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = h.stats();
        if (s.queue_size, s.batch_size) == (0, 0) || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The default configuration with `batching`.
pub(super) fn batching(batching: Batching) -> SchedulerConfig {
    SchedulerConfig { batching, ..SchedulerConfig::default() }
}

/// A greedy request.
pub(super) fn request(prompt_ids: Vec<u32>, max_new_tokens: usize) -> Request {
    Request {
        prompt_ids,
        params: SamplingParams::greedy(),
        max_new_tokens,
        stop: Vec::new(),
        ignore_eos: false,
        prompt_logprobs: false,
        cache_salt: 0,
        constraint: None,
        request_id: String::new(),
        thinking: None,
        pooling: None,
        lora: None,
    }
}

/// Twelve requests of different prompts and lengths: greedy ones, one with a stop string, one ignoring EOS,
/// one sampled with a seed.
fn requests(m: &LoadedModel) -> Vec<Request> {
    let texts = [
        "Once upon a time",
        "The little dog ran to the park and saw a big red ball. He wanted to play with it",
        "Lily",
        "One day, a girl named Sue went to the store with her mom. They bought apples, milk and bread. \
         On the way home, Sue saw a cat sitting in a tree",
        "Tom and his friend",
        "The sun was shining",
        "Once there was a tiny bird who could not fly. Every day it watched the other birds",
        "Mom said",
        "The cat",
        "In a big forest there lived a bear",
        "Ben had a toy car. He loved to play with it all day. One day",
        "Sara",
    ];
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut r = request(m.tokenizer.encode(t, true, false).unwrap(), 4 + (i * 7) % 45);
            match i {
                3 => r.stop = vec![" was".into()],
                5 => r.ignore_eos = true,
                7 => r.params = SamplingParams { temperature: 0.9, top_k: Some(20), seed: Some(7), ..r.params },
                _ => {}
            }
            r
        })
        .collect()
}

/// What a request gives alone.
pub(super) struct Alone {
    /// Generated token ids.
    pub tokens: Vec<u32>,
    /// Per generated token: its logprob and top alternatives.
    pub sampled: Vec<Sampled>,
    /// The output text.
    pub text: String,
    /// Why it stopped.
    pub finish: FinishReason,
}

/// `req` alone, the reference the scheduler is checked against: the whole prompt in one forward pass on a cache
/// of its own, then one forward pass per token, no scheduler; a grammar masks each token's logits before it is
/// sampled (and then ends the output, not EOS being ignored).
pub(super) fn alone(m: &LoadedModel, req: &Request) -> Alone {
    let prompt = &req.prompt_ids;
    let total = (prompt.len() + req.max_new_tokens).min(m.model.config().context);
    let mut kv = m.model.new_cache(BLOCK_SIZE, total.div_ceil(BLOCK_SIZE)).unwrap();
    let mut table = BlockTable::new();
    kv.reserve(&mut table, total).unwrap();
    let ignore_eos = req.ignore_eos && req.constraint.is_none();
    let rules = EndRules { stop: req.stop.clone(), max_tokens: total - prompt.len(), ignore_eos };
    let constraint = req.constraint.clone();
    let mut completion = Completion::new(&m.tokenizer, &m.eos, rules);
    let mut sampler = Sampler::new(req.params.clone(), prompt);
    let (mut tokens, mut sampled, mut text) = (Vec::new(), Vec::new(), String::new());
    let mut input = SeqInput { tokens: prompt, start: 0, table: &table, logits: Logits::Last };
    loop {
        let mut logits = m.model.forward(&mut kv, &[input]).unwrap().remove(0);
        if let Some(c) = &constraint {
            c.mask().unwrap().apply(&mut logits);
        }
        let s = sampler.sample(&logits);
        if let Some(c) = &constraint {
            c.commit(s.token).unwrap();
        }
        sampler.accept(s.token);
        let out = completion.accept(s.token);
        text.push_str(&out.text);
        tokens.push(s.token);
        sampled.push(s);
        if let Some(finish) = out.finish {
            return Alone { tokens, sampled, text, finish };
        }
        let start = prompt.len() + tokens.len() - 1;
        input = SeqInput { tokens: &tokens[tokens.len() - 1..], start, table: &table, logits: Logits::Last };
    }
}

/// Checks a request's events against the request alone: one `Started` first, the same tokens, texts adding up
/// to the same output, the same finish. Returns the tokens generated.
pub(super) fn check(m: &LoadedModel, req: &Request, got: &[Event], what: &str) -> usize {
    let want = alone(m, req);
    assert!(matches!(got.first(), Some(Event::Started { .. })), "{what}: {got:?}");
    assert_eq!(got.iter().filter(|e| matches!(e, Event::Started { .. })).count(), 1, "{what}");
    let tokens: Vec<&TokenEvent> =
        got.iter().filter_map(|e| if let Event::Token(t) = e { Some(t) } else { None }).collect();
    assert_eq!(tokens.iter().map(|t| t.id).collect::<Vec<_>>(), want.tokens, "{what}");
    assert_eq!(tokens.iter().map(|t| t.text.as_str()).collect::<String>(), want.text, "{what}");
    let Some(Event::Finished(f)) = got.last() else { panic!("{what}: no Finished in {got:?}") };
    assert_eq!((f.reason, f.generated_tokens, f.text.as_str()), (want.finish, want.tokens.len(), want.text.as_str()));
    for (t, s) in tokens.iter().zip(&want.sampled) {
        assert!((t.logprob - s.logprob).abs() < 1e-3, "{what}: logprob {} vs {}", t.logprob, s.logprob);
        assert_eq!(t.special, m.eos.contains(&t.id) || m.tokenizer.is_control(t.id));
    }
    tokens.len()
}

/// Submits the requests to a scheduler with `cfg` (all at once, or `staggered`: the second half once the first
/// request streams), checks each against the request alone, and returns the stats once the scheduler is idle.
fn run_all(cfg: SchedulerConfig, staggered: bool) -> Stats {
    let m = model();
    let h = Scheduler::start(m.clone(), cfg).unwrap();
    let reqs = requests(&m);
    let submit = |r: &Request| {
        let (s, rx) = sink(None);
        h.submit(r.clone(), s).unwrap();
        rx
    };
    let half = if staggered { reqs.len() / 2 } else { reqs.len() };
    let mut rxs: Vec<Receiver<Event>> = reqs[..half].iter().map(submit).collect();
    let mut first = Vec::new();
    if staggered {
        while !matches!(first.last(), Some(Event::Token(_))) {
            first.push(rxs[0].recv_timeout(Duration::from_secs(60)).unwrap());
        }
        rxs.extend(reqs[half..].iter().map(submit));
    }
    first.extend(events(&rxs[0]));
    let mut generated = check(&m, &reqs[0], &first, "request 0");
    for (i, (r, rx)) in reqs.iter().zip(&rxs).enumerate().skip(1) {
        generated += check(&m, r, &events(rx), &format!("request {i}"));
    }
    // Read at once, not `settled`: a request's end is delivered only after the step that finished it is
    // counted and its blocks are released.
    let stats = h.stats();
    assert_eq!((stats.batch_size, stats.kv_blocks_used, stats.generated_tokens), (0, 0, generated as u64), "{stats:?}");
    stats
}

#[test]
fn concurrent_requests_match_generate_alone() {
    let s = run_all(SchedulerConfig::default(), true);
    assert_eq!((s.preemptions, s.cancelled), (0, 0));
    assert!(s.steps_prefill > 1, "the second half joined a running batch: {s:?}");
    assert!(s.step_batch_size.sum > s.step_batch_size.count as f64, "steps batched several sequences");
    let durations = [&s.step_duration_decode, &s.step_duration_mixed, &s.step_duration_prefill];
    assert_eq!(durations.iter().map(|h| h.count).sum::<u64>(), s.steps_prefill + s.steps_decode);
}

#[test]
fn generate_alone_matches_the_direct_loop() {
    let m = model();
    for req in requests(&m) {
        let want = alone(&m, &req);
        let mut streamed = String::new();
        let g = generate(&m, &GenerateRequest { request: req.clone(), prefill_chunk: 5 }, |t| streamed.push_str(t))
            .unwrap();
        assert_eq!((&g.tokens, &g.text, g.finish), (&want.tokens, &want.text, want.finish));
        assert_eq!(streamed, want.text);
        assert_eq!(g.timings.decode_steps, g.tokens.len() - 1);
        assert!(g.timings.ttft >= g.timings.prefill);
        for (a, b) in g.sampled.iter().zip(&want.sampled) {
            assert_eq!(a.token, b.token);
            assert!((a.logprob - b.logprob).abs() < 1e-3, "logprob {} vs {}", a.logprob, b.logprob);
        }
    }
    let long = request(vec![1; m.model.config().context], 1);
    let e = generate(&m, &GenerateRequest { request: long, prefill_chunk: 5 }, |_| {}).unwrap_err();
    assert!(e.to_string().contains("context length"), "{e}");
    let e = generate(&m, &GenerateRequest { request: request(vec![1, 100_000], 1), prefill_chunk: 5 }, |_| {});
    assert!(matches!(e, Err(crate::generate::GenerateError::Failed(_))), "{e:?}");
}

#[test]
fn preemption_keeps_outputs_identical() {
    // 6 blocks of 16 tokens: the longest request needs 5 of them, the 12 together far more.
    let s = run_all(SchedulerConfig { max_batch_total_tokens: 6 * BLOCK_SIZE, ..SchedulerConfig::default() }, false);
    assert!(s.preemptions > 0, "{s:?}");
}

#[test]
fn chunked_prefill_keeps_outputs_identical() {
    let s = run_all(batching(Batching { max_batch_prefill_tokens: 7, ..Batching::default() }), true);
    assert!(s.steps_prefill > 12, "long prompts took several steps: {s:?}");
}

#[test]
fn end_of_sequence_ends_generation_like_the_direct_loop() {
    // The bundled model never ends a story within its context; make a token it does produce end sequences.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/stories260k/stories260k-f32.gguf");
    let mut m = load(path, &LoadOptions::default()).unwrap();
    let req = request(m.tokenizer.encode("Once upon a time", true, false).unwrap(), 30);
    let eos = alone(&m, &req).tokens[4];
    m.eos = vec![eos];
    let m = Arc::new(m);
    let h = Scheduler::start(m.clone(), SchedulerConfig::default()).unwrap();
    for ignore_eos in [false, true] {
        let req = Request { ignore_eos, ..req.clone() };
        let (s, rx) = sink(None);
        h.submit(req.clone(), s).unwrap();
        let got = events(&rx);
        check(&m, &req, &got, "eos");
        let Some(Event::Token(last)) = got.iter().rev().nth(1) else { panic!("{got:?}") };
        let Some(Event::Finished(f)) = got.last() else { panic!("{got:?}") };
        if ignore_eos {
            assert_eq!(f.reason, FinishReason::Length);
        } else {
            assert_eq!((f.reason, f.generated_tokens, last.id), (FinishReason::EosToken, 5, eos));
            assert!(last.special && last.text.is_empty());
            assert_eq!(last.piece.as_bytes(), m.tokenizer.token_to_piece(eos));
        }
    }
    // A request still in flight when the last handle goes finishes; then the thread ends, dropping the model.
    let (s, rx) = sink(None);
    h.submit(Request { ignore_eos: true, ..req }, s).unwrap();
    drop(h);
    assert!(matches!(events(&rx).last(), Some(Event::Finished(_))));
    let deadline = Instant::now() + Duration::from_secs(30);
    while Arc::strong_count(&m) > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(Arc::strong_count(&m), 1, "the scheduler thread ended");
}

#[test]
fn prefix_cache_shares_blocks_within_a_salt() {
    let m = model();
    let h = Scheduler::start(m.clone(), SchedulerConfig::default()).unwrap();
    let prefix = m
        .tokenizer
        .encode(
            "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. \
             Her mom and dad took her to the beach every summer",
            true,
            false,
        )
        .unwrap();
    assert!(prefix.len() > 2 * BLOCK_SIZE);
    let with_tail = |tail: &str| {
        let mut p = prefix.clone();
        p.extend(m.tokenizer.encode(tail, false, false).unwrap());
        p
    };
    let run = |req: &Request| {
        let (s, rx) = sink(None);
        h.submit(req.clone(), s).unwrap();
        let got = events(&rx);
        check(&m, req, &got, "cached prefix");
        let Event::Started { cached_tokens, .. } = got[0] else { unreachable!() };
        cached_tokens
    };
    let first = request(with_tail(" with her dog"), 10);
    assert_eq!(run(&first), 0);
    let before = settled(&h);
    let second = request(with_tail(". One day she found a shell"), 10);
    let full = prefix.len() / BLOCK_SIZE * BLOCK_SIZE;
    assert_eq!(run(&second), full);
    let after = settled(&h);
    assert_eq!(after.prefix_cache_hits - before.prefix_cache_hits, full as u64);
    assert_eq!(after.prefix_cache_queries - before.prefix_cache_queries, second.prompt_ids.len() as u64);
    // The same prompt again: all but the block holding its last token.
    assert_eq!(run(&first), (first.prompt_ids.len() - 1) / BLOCK_SIZE * BLOCK_SIZE);
    // Another salt shares nothing; prompt logprobs requests do not look.
    assert_eq!(run(&Request { cache_salt: 1, ..second.clone() }), 0);
    assert_eq!(run(&Request { prompt_logprobs: true, ..second.clone() }), 0);
    assert_eq!(settled(&h).kv_blocks_used, 0, "cached blocks nobody holds are not in use");
    // Without prefix caching nothing is shared.
    let h = Scheduler::start(m.clone(), batching(Batching { prefix_caching: false, ..Batching::default() })).unwrap();
    for _ in 0..2 {
        let (s, rx) = sink(None);
        h.submit(first.clone(), s).unwrap();
        assert!(matches!(events(&rx)[0], Event::Started { cached_tokens: 0, .. }));
    }
    assert_eq!(settled(&h).prefix_cache_queries, 0);
}

/// Reads the scheduler's stats as the request's end arrives, and sends them on.
struct StatsAtEnd {
    handle: SchedulerHandle,
    tx: mpsc::Sender<(Finished, Stats)>,
}

impl EventSink for StatsAtEnd {
    fn send(&mut self, event: Event) -> bool {
        if let Event::Finished(f) = event {
            let _ = self.tx.send((f, self.handle.stats()));
        }
        true
    }

    fn is_closed(&self) -> bool {
        false
    }
}

#[test]
fn a_requests_end_arrives_once_its_step_is_counted() {
    let m = model();
    let h = Scheduler::start(m.clone(), SchedulerConfig::default()).unwrap();
    let (tx, rx) = mpsc::channel();
    let req = Request { ignore_eos: true, ..request(m.tokenizer.encode("Once upon a time", true, false).unwrap(), 9) };
    h.submit(req, Box::new(StatsAtEnd { handle: h.clone(), tx })).unwrap();
    let (f, s) = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    // What /metrics shows a client that has its answer already holds the answer's last step.
    assert_eq!(f.generated_tokens, 9);
    assert_eq!((s.generated_tokens, s.batch_size, s.kv_blocks_used), (9, 0, 0), "{s:?}");
}

#[test]
fn cancelled_requests_free_their_blocks() {
    let m = model();
    let h = Scheduler::start(m.clone(), SchedulerConfig::default()).unwrap();
    let long =
        Request { ignore_eos: true, ..request(m.tokenizer.encode("Once upon a time", true, false).unwrap(), 400) };
    let (s, rx) = sink(Some(3));
    h.submit(long.clone(), s).unwrap();
    // A request whose client is gone before it starts never runs.
    let (s, queued_rx) = sink(Some(0));
    h.submit(long, s).unwrap();
    let got = events(&rx);
    assert_eq!(got.iter().filter(|e| matches!(e, Event::Token(_))).count(), 3, "{got:?}");
    assert!(!got.iter().any(|e| matches!(e, Event::Finished(_) | Event::Failed(_))));
    assert!(events(&queued_rx).is_empty());
    let s = settled(&h);
    assert_eq!((s.cancelled, s.kv_blocks_used, s.generated_tokens), (2, 0, 3), "{s:?}");
}

#[test]
fn prompt_logprobs_match_a_direct_computation() {
    let m = model();
    let cfg = batching(Batching { max_batch_prefill_tokens: 5, ..Batching::default() });
    let h = Scheduler::start(m.clone(), cfg).unwrap();
    let prompt = m.tokenizer.encode("The little dog ran to the park and saw a big red ball", true, false).unwrap();
    let base = request(prompt.clone(), 8);
    let params = SamplingParams { logprobs: true, top_logprobs: 3, ..base.params.clone() };
    let req = Request { prompt_logprobs: true, params, ..base };
    let (s, rx) = sink(None);
    h.submit(req.clone(), s).unwrap();
    let got = events(&rx);
    let Some(Event::PromptLogprobs(lps)) = got.get(1) else { panic!("{got:?}") };
    let filtered: Vec<Event> = got.iter().filter(|e| !matches!(e, Event::PromptLogprobs(_))).cloned().collect();
    check(&m, &req, &filtered, "prompt logprobs");

    let mut kv = m.model.new_cache(BLOCK_SIZE, prompt.len().div_ceil(BLOCK_SIZE)).unwrap();
    let mut table = BlockTable::new();
    kv.reserve(&mut table, prompt.len()).unwrap();
    let input = SeqInput { tokens: &prompt, start: 0, table: &table, logits: Logits::All };
    let rows = m.model.forward(&mut kv, &[input]).unwrap().remove(0);
    let vocab = m.model.config().vocab;
    assert_eq!(lps.len(), prompt.len());
    assert_eq!(lps[0], None);
    for (i, lp) in lps.iter().enumerate().skip(1) {
        let want = log_prob(&rows[(i - 1) * vocab..i * vocab], prompt[i]) as f32;
        let lp = lp.as_ref().unwrap();
        assert!((lp.logprob - want).abs() < 1e-4, "token {i}: {lp:?} vs {want}");
        // The 3 most likely tokens of the same row, most likely first.
        let row = &rows[(i - 1) * vocab..i * vocab];
        let mut order: Vec<u32> = (0..vocab as u32).collect();
        order.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]).then(a.cmp(&b)));
        assert_eq!(lp.top.iter().map(|&(id, _)| id).collect::<Vec<_>>(), order[..3], "token {i}");
        for &(id, l) in &lp.top {
            assert!((l - log_prob(row, id) as f32).abs() < 1e-4, "token {i}: alternative {id}");
        }
    }
}

#[test]
fn refuses_what_can_never_fit() {
    fn shareable<T: Send + Sync + Clone>() {}
    shareable::<SchedulerHandle>();
    let m = model();
    let context = m.model.config().context;
    let h = Scheduler::start(m.clone(), SchedulerConfig { max_batch_total_tokens: 100, ..SchedulerConfig::default() })
        .unwrap();
    assert_eq!(h.capacity_tokens(), 96);
    let (s, _rx) = sink(None);
    assert_eq!(h.submit(request(vec![1; 90], 10), s), Err(SubmitError::TooLarge { needed: 100, capacity: 96 }));
    let h = Scheduler::start(m.clone(), SchedulerConfig::default()).unwrap();
    // New tokens are clamped to the context; a prompt filling it is refused.
    let (s, rx) = sink(None);
    h.submit(request(vec![1; context - 2], 1000), s).unwrap();
    let Some(Event::Finished(f)) = events(&rx).pop() else { panic!() };
    assert!(f.generated_tokens <= 2);
    let (s, _rx) = sink(None);
    let e = h.submit(request(vec![1; context], 1), s).unwrap_err();
    assert_eq!(e, SubmitError::TooLarge { needed: context + 1, capacity: context });
    for bad in [vec![], vec![1, 100_000]] {
        let (s, rx) = sink(None);
        h.submit(request(bad, 1), s).unwrap();
        assert!(matches!(events(&rx)[..], [Event::Failed(_)]));
    }
    assert!(Scheduler::start(m, SchedulerConfig { max_batch_size: 0, ..SchedulerConfig::default() }).is_err());
}

/// Panics the engine thread on the first token it is given (a stand-in for any bug in a step).
struct PanickingSink;

impl EventSink for PanickingSink {
    fn send(&mut self, event: Event) -> bool {
        if matches!(event, Event::Token(_)) {
            panic!("injected panic");
        }
        true
    }

    fn is_closed(&self) -> bool {
        false
    }
}

#[test]
fn a_panic_fails_every_request_and_ends_the_engine() {
    let m = model();
    let h = Scheduler::start(m.clone(), SchedulerConfig::default()).unwrap();
    let watch = h.watch();
    let prompt = m.tokenizer.encode("Once upon a time", true, false).unwrap();
    // A long request running beside the one that panics, so that it is held by the engine when it panics.
    let (held, held_rx) = sink(None);
    h.submit(Request { ignore_eos: true, ..request(prompt.clone(), 400) }, held).unwrap();
    h.submit(request(prompt.clone(), 4), Box::new(PanickingSink)).unwrap();
    assert_eq!(watch.wait(), Err("injected panic".to_string()));
    let events = events(&held_rx);
    assert_eq!(events.last(), Some(&Event::Failed("the engine stopped: injected panic".into())), "{events:?}");
    let (late, _) = sink(None);
    assert!(matches!(h.submit(request(prompt, 4), late), Err(SubmitError::NotRunning)));
}
