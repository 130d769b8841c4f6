//! One request inside the scheduler: its tokens so far, its KV blocks, its sampler and completion (text and
//! end), and what a step that computed some of its tokens does to it (sample, decode, report).

use std::time::Instant;

use super::prompt_logprobs::PromptLogprobs;
use super::request::{Event, EventSink, Finished, Request, TokenEvent};
use super::speculation::Speculation;
use crate::constraint::{Constraint, ConstraintError, Mask};
use crate::kv::{BlockAllocator, BlockTable, BLOCK_SIZE};
use crate::lora::LoraUse;
use crate::model::{LoadedModel, Logits};
use crate::pooling::Pooler;
use crate::sampling::{FinishReason, Sampled, Sampler};
use crate::speculative::{DraftJob, Proposal, SpeculationConfig};
use crate::text::completion::{Completion, EndRules};
use crate::text::thinking::ThinkingState;

/// Where a sequence stands after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Progress {
    /// It goes on.
    Running,
    /// It ended: `Finished` (or `Failed`) was sent.
    Finished,
    /// Its receiver is gone: cancel it.
    Closed,
}

/// What one step did to a sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Outcome {
    /// Where it stands now.
    pub progress: Progress,
    /// Tokens it generated.
    pub added: usize,
    /// Draft tokens the step verified (0 when it verified none).
    pub drafted: usize,
    /// Of those, the ones accepted.
    pub accepted: usize,
}

impl Outcome {
    /// A step that generated nothing and leaves the sequence at `progress`.
    pub fn idle(progress: Progress) -> Self {
        Outcome { progress, added: 0, drafted: 0, accepted: 0 }
    }
}

/// Where a sequence is in its life: waiting (never admitted, or put back by a preemption), computing its
/// pending tokens, or decoding one token (or draft) a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// In the queue, not admitted yet.
    Queued,
    /// Admitted at `started`; computing its pending (prompt, after a preemption also output) tokens.
    Prefilling {
        /// When it first left the queue.
        started: Instant,
    },
    /// Every token computed; it samples one a step.
    Decoding {
        /// When it first left the queue.
        started: Instant,
    },
    /// Back in the queue after a preemption.
    Preempted {
        /// When it first left the queue.
        started: Instant,
    },
}

impl State {
    /// When it first left the queue, if it has.
    pub fn started(self) -> Option<Instant> {
        match self {
            State::Queued => None,
            State::Prefilling { started } | State::Decoding { started } | State::Preempted { started } => Some(started),
        }
    }
}

/// A request with its generation state; lives in the queue or in the running batch.
pub(super) struct Sequence<'m> {
    /// The prompt, then the tokens generated so far.
    pub tokens: Vec<u32>,
    /// Prompt tokens at the start of `tokens`.
    pub prompt_len: usize,
    /// Leading positions of `tokens` whose keys and values are in `table`'s blocks.
    pub computed: usize,
    /// The KV blocks held; empty while queued.
    pub table: BlockTable,
    /// Where it is in its life.
    state: State,
    /// Content hashes of the prompt's full blocks, for the prefix cache (empty when caching is off).
    pub hashes: Vec<u64>,
    /// Leading blocks of `table` known to the prefix cache (shared from it, or published to it).
    published: usize,
    /// Whether the request asked for prompt log-probabilities (it then shares no cached blocks).
    pub wants_prompt_logprobs: bool,
    /// When it was submitted.
    enqueued: Instant,
    /// The step count when it entered the queue (last: after a preemption).
    pub enqueued_step: u64,
    /// Where its events go.
    sink: Box<dyn EventSink>,
    /// Prompt log-probabilities being gathered; `None` unless asked for and not sent yet.
    logprobs: Option<PromptLogprobs>,
    /// Most tokens in all (prompt and generated), the model's context included.
    total: usize,
    sampler: Sampler,
    /// The output text and what ends it.
    completion: Completion<'m>,
    /// Times it was preempted.
    preemptions: u32,
    /// Speculative decoding: the next step's draft, measured acceptance, counts.
    pub spec: Speculation,
    /// The HTTP request's id (`x-request-id`), for log lines.
    pub request_id: String,
    /// The grammar its output must match, at the position of the tokens generated so far.
    constraint: Option<Constraint>,
    /// How it ended, held back until the step's stats are published (see [`Sequence::into_ending`]).
    ended: Option<Finished>,
    /// Its answer's thinking block, for a reasoning model.
    thinking: Option<ThinkingState>,
    /// A pooling request's vector so far (it then samples nothing).
    pooler: Option<Pooler>,
    /// The LoRA adapter its tokens run through, held until it ends.
    pub lora: Option<LoraUse>,
}

/// A finished sequence's last event and where it goes, delivered once the step that finished it is counted.
pub(super) struct Ending {
    sink: Box<dyn EventSink>,
    finished: Finished,
}

impl Ending {
    /// Sends the `Finished` event.
    pub fn deliver(mut self) {
        self.sink.send(Event::Finished(self.finished));
    }
}

/// The grammar mask for a step's first sampled row, computed beside the forward pass; `None` for a
/// sequence without a grammar.
pub(super) type StepMask = Option<Result<Mask, ConstraintError>>;

/// A step's rows for one sequence: the logits asked for and, when the step returns them, the hidden states
/// of the same rows.
#[derive(Debug, Default)]
pub(super) struct StepRows {
    /// `vocab` floats a row.
    pub logits: Vec<f32>,
    /// `hidden` floats a row, or empty.
    pub hidden: Vec<f32>,
}

impl<'m> Sequence<'m> {
    /// A queued sequence for `req` (validated: a non-empty prompt shorter than the context) with its prompt's
    /// block `hashes` (empty when caching is off).
    pub fn new(
        m: &'m LoadedModel,
        req: Request,
        sink: Box<dyn EventSink>,
        at: Instant,
        step: u64,
        hashes: Vec<u64>,
    ) -> Self {
        let prompt_len = req.prompt_ids.len();
        let total = (prompt_len + req.max_new_tokens.max(1)).min(m.model.config().context);
        let ignore_eos = req.ignore_eos && req.constraint.is_none();
        let rules = EndRules { stop: req.stop, max_tokens: total.saturating_sub(prompt_len), ignore_eos };
        let prompt_top = if req.params.logprobs { req.params.top_logprobs } else { 0 };
        Sequence {
            sampler: Sampler::new(req.params, &req.prompt_ids),
            tokens: req.prompt_ids,
            prompt_len,
            computed: 0,
            table: BlockTable::new(),
            state: State::Queued,
            hashes,
            published: 0,
            wants_prompt_logprobs: req.prompt_logprobs,
            enqueued: at,
            enqueued_step: step,
            sink,
            logprobs: req.prompt_logprobs.then(|| PromptLogprobs::new(prompt_top)),
            total,
            completion: Completion::new(&m.tokenizer, &m.eos, rules),
            ended: None,
            preemptions: 0,
            spec: Speculation::default(),
            request_id: req.request_id,
            constraint: req.constraint,
            thinking: req.thinking.map(ThinkingState::new),
            pooler: req.pooling.map(Pooler::new),
            lora: req.lora,
        }
    }

    /// Whether it may share cached prompt blocks (not when it reports prompt log-probabilities or pools).
    pub fn shares_prefix(&self) -> bool {
        !self.wants_prompt_logprobs && self.pooler.is_none()
    }

    /// Whether its output is inside a thinking block now (its grammar then waits).
    fn thinking(&self) -> bool {
        self.thinking.as_ref().is_some_and(ThinkingState::inside)
    }

    /// The grammar whose mask a step computing its next `n` tokens needs (one that samples: the last
    /// prompt chunk, a decode, a verification); `None` without a grammar or when the step samples nothing.
    pub fn constraint_for(&self, n: usize) -> Option<&Constraint> {
        self.constraint.as_ref().filter(|_| self.computed + n >= self.tokens.len() && !self.thinking())
    }

    /// How many of its leading prompt blocks (named by `hashes`) it may take from the prefix cache: none when
    /// it wants prompt log-probabilities, never the block of its last token (which must be computed for its
    /// logits).
    pub fn shareable_blocks(&self) -> usize {
        let most = if self.shares_prefix() { (self.tokens.len() - 1) / BLOCK_SIZE } else { 0 };
        most.min(self.hashes.len())
    }

    /// The tokens it will hold after `steps` more steps of one token each (at most its total).
    pub fn tokens_after(&self, steps: usize) -> usize {
        (self.tokens.len() + steps).min(self.total.max(self.tokens.len()))
    }

    /// Whether it is admitted and computing its pending tokens.
    pub fn is_prefilling(&self) -> bool {
        matches!(self.state, State::Prefilling { .. })
    }

    /// Tokens not computed yet.
    pub fn pending(&self) -> usize {
        self.tokens.len() - self.computed
    }

    /// Whether its receiver is gone.
    pub fn is_closed(&self) -> bool {
        self.sink.is_closed()
    }

    /// The number of tokens to draft for the next step at most `cap`, `token_cost` and the cost of catching
    /// the draft model up first (see [`Speculation::want`]); `None` while it prefills (no draft, no shadow).
    pub fn draft_depth(
        &mut self,
        cfg: &SpeculationConfig,
        cap: usize,
        token_cost: f32,
        catch_up: f32,
    ) -> Option<usize> {
        if self.is_prefilling() {
            self.spec.cancel();
            return None;
        }
        let room = self.total.saturating_sub(self.tokens.len() + 1);
        Some(self.spec.want(cfg, cap, room, token_cost, catch_up))
    }

    /// Takes the proposal for a step that wanted `k` tokens, cut to the prefix its grammar allows; returns
    /// the draft's length.
    pub fn set_draft(&mut self, k: usize, proposal: Proposal) -> usize {
        let Some(&last) = self.tokens.last() else { return 0 };
        let n = self.spec.install(last, k, proposal);
        match &self.constraint {
            Some(c) if n > 0 && !self.thinking() => self.spec.keep(c.valid_prefix(self.spec.draft())),
            _ => n,
        }
    }

    /// Its request to the draft model for `k` tokens after its first `end` tokens; a sampled request's drafts
    /// are sampled with its own processing. Its draft keys and values go in its own blocks.
    pub fn draft_job(&mut self, end: usize, k: usize) -> DraftJob<'_> {
        let sampler = (!self.sampler.is_greedy()).then_some(&mut self.sampler);
        DraftJob { tokens: &self.tokens[..end], cache: &mut self.spec.draft_cache, table: &self.table, k, sampler }
    }

    /// The next step's `n` tokens: the pending ones, or the last token and the draft.
    pub fn step_tokens(&self, n: usize) -> &[u32] {
        match self.spec.input() {
            [] => &self.tokens[self.computed..self.computed + n],
            input => input,
        }
    }

    /// The logits a step computing its next `n` tokens must return.
    pub fn logits_for(&self, n: usize) -> Logits {
        if let Some(p) = &self.pooler {
            p.pooling().rows(self.computed + n == self.tokens.len())
        } else if self.logprobs.is_some() || !self.spec.input().is_empty() {
            Logits::All
        } else if self.computed + n == self.tokens.len() {
            Logits::Last
        } else {
            Logits::None
        }
    }

    /// Marks the sequence admitted with `cached` tokens from the prefix cache; the first time, reports
    /// `Started`. `false` when the receiver is gone.
    pub fn admit(&mut self, now: Instant, cached: usize) -> bool {
        self.computed = cached;
        self.published = cached / BLOCK_SIZE;
        tracing::debug!(request_id = %self.request_id, prompt_tokens = self.prompt_len, cached, "admitted");
        if let Some(started) = self.state.started() {
            self.state = State::Prefilling { started };
            return true;
        }
        self.state = State::Prefilling { started: now };
        self.sink.send(Event::Started { queue_time: now - self.enqueued, cached_tokens: cached })
    }

    /// Puts the sequence back to waiting after its blocks were taken (they must be released already): it
    /// will recompute its prompt and generated tokens, then go on where it stopped.
    pub fn preempt(&mut self, step: u64) {
        debug_assert!(self.table.blocks().is_empty());
        if let Some(started) = self.state.started() {
            self.state = State::Preempted { started };
        }
        self.computed = 0;
        self.published = 0;
        self.preemptions += 1;
        self.enqueued_step = step;
        tracing::info!(request_id = %self.request_id, preemptions = self.preemptions, "preempted: KV blocks ran out");
        if let Some(acc) = &mut self.logprobs {
            acc.restart();
        }
        if let Some(p) = &mut self.pooler {
            p.restart();
        }
    }

    /// Names the blocks of prompt tokens computed so far in the prefix cache.
    pub fn publish(&mut self, pool: &mut BlockAllocator) {
        let full = (self.computed.min(self.prompt_len) / BLOCK_SIZE).min(self.hashes.len());
        for i in self.published..full {
            pool.publish(&self.table, i, self.hashes[i]);
        }
        self.published = self.published.max(full);
    }

    /// Reports an engine error; the request is over.
    pub fn fail(&mut self, message: String) {
        self.sink.send(Event::Failed(message));
    }

    /// Takes a step's result: `n` more tokens computed, with the logits [`Sequence::logits_for`] asked for
    /// (and the hidden states of the same rows when the step returned them), and the grammar mask computed
    /// before the step (see [`Sequence::constraint_for`]). When every token is computed, samples the next one
    /// and reports it (and the end, if it is one).
    pub fn advance(&mut self, n: usize, rows: StepRows, mask: StepMask, m: &'m LoadedModel) -> Outcome {
        if self.pooler.is_some() {
            return Outcome::idle(self.pool(n, &rows.hidden));
        }
        let before = self.tokens.len();
        let drafted = self.spec.draft().len();
        let count = rows.logits.len() / m.model.config().vocab;
        let width = rows.hidden.len().checked_div(count).unwrap_or(0);
        // The row the last token was sampled from: the last one, or in a verification the last one kept.
        let (progress, accepted, row) = if drafted > 0 {
            self.verify(rows.logits, mask, m)
        } else {
            (self.compute(n, rows.logits, mask, m), 0, count.saturating_sub(1))
        };
        if width > 0 {
            self.spec.hidden.clear();
            self.spec.hidden.extend_from_slice(&rows.hidden[row * width..(row + 1) * width]);
        }
        Outcome { progress, added: self.tokens.len() - before, drafted, accepted }
    }

    /// Takes a pooling step's `n` computed prompt tokens and their hidden rows; once the prompt is computed,
    /// the sequence ends with its vector.
    fn pool(&mut self, n: usize, hidden: &[f32]) -> Progress {
        self.computed += n;
        let Some(p) = &mut self.pooler else { return Progress::Running };
        p.push(hidden, n);
        if self.computed < self.tokens.len() {
            return Progress::Running;
        }
        let now = Instant::now();
        self.ended = Some(Finished {
            reason: FinishReason::Length,
            generated_tokens: 0,
            text: String::new(),
            stop_sequence: None,
            seed: self.sampler.seed(),
            inference_time: now - self.state.started().unwrap_or(now),
            preemptions: self.preemptions,
            speculated_tokens: 0,
            accepted_tokens: 0,
            embedding: p.finish(),
        });
        Progress::Finished
    }

    /// Prepares a row about to be sampled: while a thinking block's end is forced, only the forced token is
    /// left; else the grammar's mask is applied (outside a thinking block): `mask` when given (computed beside
    /// the forward pass), else computed now. Returns the mask applied (`None` without one). `Err` (the request
    /// failed) when the grammar cannot go on.
    fn constrain(&mut self, row: &mut [f32], mask: StepMask) -> Result<Option<Mask>, ()> {
        if let Some(token) = self.thinking.as_ref().and_then(ThinkingState::forced) {
            force(row, token);
            return Ok(None);
        }
        let Some(c) = self.constraint.as_ref().filter(|_| !self.thinking()) else { return Ok(None) };
        match mask.unwrap_or_else(|| c.mask()) {
            Ok(mask) => {
                mask.apply(row);
                Ok(Some(mask))
            }
            Err(e) => {
                tracing::warn!(request_id = %self.request_id, error = %e, "grammar enforcement failed");
                self.fail(e.to_string());
                Err(())
            }
        }
    }

    /// Takes a step's `n` computed tokens without a draft: a prompt chunk or a decode.
    fn compute(&mut self, n: usize, logits: Vec<f32>, mask: StepMask, m: &'m LoadedModel) -> Progress {
        let from = self.computed;
        self.computed += n;
        let mut logits = logits;
        if let Some(acc) = &mut self.logprobs {
            acc.push(&self.tokens[from..self.computed], &logits, m.model.config().vocab);
            if self.computed < self.tokens.len() {
                return Progress::Running;
            }
            let (values, last) = self.logprobs.take().unwrap_or_default().finish();
            logits = last;
            if !self.sink.send(Event::PromptLogprobs(values)) {
                return Progress::Closed;
            }
        }
        if self.computed < self.tokens.len() {
            return Progress::Running;
        }
        if let State::Prefilling { started } = self.state {
            self.state = State::Decoding { started };
        }
        let Ok(mask) = self.constrain(&mut logits, mask) else { return Progress::Finished };
        let s = within(self.sampler.sample(&logits), &logits, mask.as_ref());
        self.spec.sampled(s.token);
        self.emit(s, m)
    }

    /// Takes a verification step's rows (one per input token: the last token, then the draft). Row `i` gives
    /// the token after draft token `i`; each drafted token is checked against it in order, the penalties
    /// having seen every token kept before it, until one is rejected (the replacement is kept) or, all
    /// accepted, the last row samples one more. Each kept token is reported as it is decided; positions past
    /// the last kept token are left computed but unused (the engine truncates the table). Returns the
    /// progress, the drafted tokens accepted, and the row the last kept token was sampled from.
    fn verify(&mut self, mut rows: Vec<f32>, mask: StepMask, m: &'m LoadedModel) -> (Progress, usize, usize) {
        let vocab = m.model.config().vocab;
        let base = self.computed;
        let (mut decided, mut accepted) = (0, 0);
        let mut progress = Progress::Running;
        let mut mask = Some(mask);
        let mut last_row = 0;
        self.spec.verifying();
        for (i, row) in rows.chunks_exact_mut(vocab).enumerate() {
            let Ok(grammar) = self.constrain(row, mask.take().flatten()) else {
                progress = Progress::Finished;
                break;
            };
            let row = &*row;
            let (s, hit) = match self.spec.draft().get(i) {
                Some(&d) => {
                    decided += 1;
                    self.sampler.verify(row, d, self.spec.dist(i).unwrap_or(&[(d, 1.0)]))
                }
                None => (self.sampler.sample(row), false),
            };
            let s = within(s, row, grammar.as_ref());
            if hit {
                accepted += 1;
                self.spec.hit();
            }
            self.computed = base + i + 1;
            last_row = i;
            progress = self.emit(s, m);
            if progress != Progress::Running || !hit {
                break;
            }
        }
        self.spec.verified(decided, accepted);
        (progress, accepted, last_row)
    }

    /// Records a sampled token and reports it with the text it makes final (and the end, if it is one).
    fn emit(&mut self, s: Sampled, m: &'m LoadedModel) -> Progress {
        let free = self.thinking();
        if let Some(Err(e)) = self.constraint.as_ref().filter(|_| !free).map(|c| c.commit(s.token)) {
            self.fail(e.to_string());
            return Progress::Finished;
        }
        self.sampler.accept(s.token);
        self.tokens.push(s.token);
        let out = self.completion.accept(s.token);
        if let Some(t) = &mut self.thinking {
            t.accept(&out.piece);
        }
        let special = m.eos.contains(&s.token) || m.tokenizer.is_control(s.token);
        let event =
            TokenEvent { id: s.token, logprob: s.logprob, top: s.top, piece: out.piece, text: out.text, special };
        if !self.sink.send(Event::Token(event)) {
            return Progress::Closed;
        }
        let Some(reason) = out.finish else { return Progress::Running };
        let now = Instant::now();
        self.ended = Some(Finished {
            reason,
            generated_tokens: self.completion.generated(),
            text: self.completion.take_text(),
            stop_sequence: self.completion.take_stop_sequence(),
            seed: self.sampler.seed(),
            inference_time: now - self.state.started().unwrap_or(now),
            preemptions: self.preemptions,
            speculated_tokens: self.spec.drafted,
            accepted_tokens: self.spec.accepted,
            embedding: Vec::new(),
        });
        Progress::Finished
    }

    /// Its `Finished` event, held back since it ended (`None` when it failed instead).
    pub fn into_ending(self) -> Option<Ending> {
        let sink = self.sink;
        self.ended.map(|finished| Ending { sink, finished })
    }
}

/// Leaves `token` the only token `row` allows (out-of-range tokens leave it as it is).
fn force(row: &mut [f32], token: u32) {
    if let Some(&keep) = row.get(token as usize) {
        row.fill(f32::NEG_INFINITY);
        row[token as usize] = if keep.is_finite() { keep } else { 0.0 };
    }
}

/// `s`, or the best token `mask` allows in `row` when the sampler fell back on one it forbids (penalties can
/// overflow every allowed logit to −∞, and the sampler then takes the argmax of all).
fn within(s: Sampled, row: &[f32], mask: Option<&Mask>) -> Sampled {
    match mask.filter(|m| !m.allows(s.token)).and_then(|m| m.best(row)) {
        Some((token, logprob)) => Sampled { token, logprob, top: Vec::new() },
        None => s,
    }
}
