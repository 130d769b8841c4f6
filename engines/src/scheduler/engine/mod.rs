//! The loop on the scheduler thread: take in requests, drop cancelled ones, admit waiting ones (see
//! [`admission`]), run one batched step (plan it, run the model, apply the result: sample, report), and retire
//! the sequences that ended.

mod admission;

use std::any::Any;
use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use rayon::prelude::*;

use super::config::SchedulerConfig;
use super::cost::StepCost;
use super::plan::StepPlan;
use super::prefix::block_hashes;
use super::proposer::Proposer;
use super::request::{Event, EventSink, Request};
use super::sequence::{Ending, Outcome, Progress, Sequence, StepMask, StepRows};
use super::stats::Stats;
use crate::kv::{KvCache, BLOCK_SIZE};
use crate::model::{LoadedModel, ModelError, Rows, SeqInput};
use crate::speculative::{probe_interval, Depth, SpeculationConfig, TokenCost, PRIOR_TOKEN_COST};

/// A request on its way to the engine thread.
pub(super) struct Submission {
    /// The request, validated.
    pub req: Request,
    /// Where its events go.
    pub sink: Box<dyn EventSink>,
    /// When it was submitted.
    pub at: Instant,
    /// Its prompt's block hashes for the prefix cache (empty when caching is off).
    pub hashes: Vec<u64>,
}

impl Submission {
    /// `req` submitted now, its block hashes computed here (on the submitting thread, not the engine's) when
    /// `prefix_caching` and it generates (a pooling request's blocks are neither shared nor kept).
    pub fn new(req: Request, sink: Box<dyn EventSink>, prefix_caching: bool) -> Self {
        let hashes = if prefix_caching && req.pooling.is_none() {
            block_hashes(adapter_salt(&req), &req.prompt_ids, BLOCK_SIZE)
        } else {
            Vec::new()
        };
        Submission { req, sink, at: Instant::now(), hashes }
    }
}

/// The request's prefix-cache salt with its adapter and scale mixed in: blocks computed through one adapter are
/// never reused by another, nor by the base.
fn adapter_salt(req: &Request) -> u64 {
    let Some(u) = &req.lora else { return req.cache_salt };
    let mut h = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(&(req.cache_salt, u.adapter.id(), u.scale.to_bits()), &mut h);
    std::hash::Hasher::finish(&h)
}

/// Where the step-cost model's measurements come from.
#[derive(Clone, Copy, Debug)]
pub(super) enum StepClock {
    /// Each step's wall-clock time.
    Wall,
    /// A script's time for each step's load: the policy on a machine of known speed, step by step.
    #[cfg(test)]
    Scripted(fn(super::cost::StepLoad) -> f64),
}

/// The scheduler's state on its thread.
pub(super) struct Engine<'m> {
    m: &'m LoadedModel,
    kv: KvCache,
    cfg: SchedulerConfig,
    rx: Receiver<Submission>,
    /// Waiting sequences, oldest (or preempted) first.
    queue: VecDeque<Sequence<'m>>,
    /// The running batch, in admission order (the last is the first preempted).
    running: Vec<Sequence<'m>>,
    /// Measured step costs, for the prefill cap when the configuration sets none.
    cost: StepCost,
    /// Where the step costs come from.
    clock: StepClock,
    /// What proposes speculative drafts.
    proposer: Proposer,
    /// Measured cost of a drafted token, per batch size.
    token_cost: TokenCost,
    /// Acceptance carried over from finished sequences: where a new sequence's depth controller starts.
    acceptance: Depth,
    stats: Stats,
    /// Where [`SchedulerHandle::stats`](super::SchedulerHandle::stats) reads them.
    shared: Arc<Mutex<Stats>>,
    /// Steps run.
    step: u64,
    /// The ends of the sequences the step finished, delivered once its stats are published: a client that
    /// has its whole answer finds it counted in `/metrics`.
    endings: Vec<Ending>,
}

/// Runs the engine until every sender is gone and no request is left. A panic fails every request the
/// engine holds or was sent, and ends the loop with the panic's message.
pub(super) fn run(
    m: &LoadedModel,
    caches: (KvCache, Proposer),
    cfg: SchedulerConfig,
    rx: Receiver<Submission>,
    shared: Arc<Mutex<Stats>>,
) -> Result<(), String> {
    let mut e = Engine::new(m, caches, cfg, rx, shared);
    let looped = std::panic::catch_unwind(AssertUnwindSafe(|| {
        while e.intake() {
            e.turn();
        }
    }));
    let Err(payload) = looped else { return Ok(()) };
    let message = panic_message(payload.as_ref());
    tracing::error!(panic = %message, "the engine thread panicked; failing every request it holds");
    e.fail_all(&format!("the engine stopped: {message}"));
    Err(message)
}

/// The text of a panic's payload.
pub(super) fn panic_message(payload: &(dyn Any + Send)) -> String {
    match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
        (Some(s), _) => s.to_string(),
        (_, Some(s)) => s.clone(),
        _ => "a panic without a message".into(),
    }
}

impl<'m> Engine<'m> {
    /// An engine over the target's KV cache and the proposer (with its own cache, if any), with nothing
    /// queued, its stats starting from those in `shared`.
    pub fn new(
        m: &'m LoadedModel,
        (kv, proposer): (KvCache, Proposer),
        cfg: SchedulerConfig,
        rx: Receiver<Submission>,
        shared: Arc<Mutex<Stats>>,
    ) -> Self {
        let stats = shared.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let cost = StepCost::new(BLOCK_SIZE / 4, cfg.batching.max_batch_prefill_tokens);
        let widest = cfg.speculation.as_ref().map_or(1, |s| s.max_batch.min(cfg.max_batch_size));
        let token_cost = TokenCost::new(widest, PRIOR_TOKEN_COST);
        Engine {
            m,
            kv,
            cfg,
            rx,
            queue: VecDeque::new(),
            running: Vec::new(),
            cost,
            clock: StepClock::Wall,
            proposer,
            token_cost,
            acceptance: Depth::default(),
            stats,
            shared,
            step: 0,
            endings: Vec::new(),
        }
    }

    /// The engine with its step costs taken from `clock`.
    #[cfg(test)]
    pub fn with_clock(self, clock: StepClock) -> Self {
        Engine { clock, ..self }
    }

    /// Queues new submissions, blocking while there is nothing to do; `false` once the senders are gone and
    /// nothing is left to do.
    pub fn intake(&mut self) -> bool {
        if self.is_idle() {
            self.publish_stats();
            match self.rx.recv() {
                Ok(s) => self.enqueue(s),
                Err(_) => return false,
            }
        }
        while let Ok(s) = self.rx.try_recv() {
            self.enqueue(s);
        }
        true
    }

    /// Fails every queued, running and submitted request with `message` (after a panic); those the last step
    /// finished get their end.
    fn fail_all(&mut self, message: &str) {
        self.endings.drain(..).for_each(Ending::deliver);
        for mut seq in self.queue.drain(..).chain(self.running.drain(..)) {
            seq.fail(message.to_string());
        }
        while let Ok(mut s) = self.rx.try_recv() {
            s.sink.send(Event::Failed(message.to_string()));
        }
    }

    /// Whether nothing is queued or running.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.running.is_empty()
    }

    /// One turn of the loop: drops cancelled requests, admits waiting ones, runs a step, publishes the stats
    /// and then tells the finished requests; returns the step's plan (`None` when there was nothing to
    /// compute).
    pub fn turn(&mut self) -> Option<StepPlan> {
        self.drop_closed();
        self.admit();
        let plan = self.step();
        self.publish_stats();
        self.endings.drain(..).for_each(Ending::deliver);
        plan
    }

    fn enqueue(&mut self, s: Submission) {
        let mut seq = Sequence::new(self.m, s.req, s.sink, s.at, self.step, s.hashes);
        seq.spec.start_from(self.acceptance);
        self.queue.push_back(seq);
    }

    /// Cancels queued and running sequences whose receiver is gone.
    fn drop_closed(&mut self) {
        let before = self.queue.len();
        self.queue.retain(|s| !s.is_closed());
        self.stats.cancelled += (before - self.queue.len()) as u64;
        let ends =
            self.running.iter().map(|s| if s.is_closed() { Progress::Closed } else { Progress::Running }).collect();
        self.retire(ends);
    }

    /// Gives each running sequence the block its next token needs, oldest first; when the pool is out of
    /// blocks, preempts a running sequence (see [`victim`]): its blocks return, it goes back to the queue's
    /// front.
    fn make_room(&mut self) {
        let mut i = 0;
        while i < self.running.len() {
            let s = &mut self.running[i];
            if self.kv.reserve(&mut s.table, s.tokens.len()).is_ok() {
                i += 1;
                continue;
            }
            let v = victim(&self.running);
            let mut victim = self.running.remove(v);
            i -= usize::from(v < i);
            self.kv.release(&mut victim.table);
            self.proposer.release(&mut victim);
            victim.preempt(self.step);
            self.queue.push_front(victim);
            self.stats.preemptions += 1;
        }
    }

    /// Gives each decoding sequence its draft for this step when speculation is on and the batch is narrow
    /// enough (the depth from its acceptance and the measured token cost at this batch size, where the tokens
    /// it has left pay for the draft model's catching up on it first; none in a step that measures the plain
    /// step time), with the KV blocks the drafted positions need, reserved before the
    /// proposal (the draft model writes its keys and values in them too) and returned past the draft it made; a
    /// sequence without blocks for its draft does not draft this step.
    fn draft(&mut self, catch_up: usize) {
        let Some(cfg) = self.cfg.speculation.clone() else { return };
        let decoding = self.running.iter().filter(|s| !s.is_prefilling()).count();
        let explore = cfg.adaptive && cfg.token_cost.is_none() && self.token_cost.explore(decoding);
        let cap = if explore { 0 } else { cfg.cap(self.running.len()) };
        let cost = cfg.token_cost.unwrap_or_else(|| self.token_cost.cost(decoding));
        let lag_cost = self.token_cost.catch_up_cost(decoding);
        let proposer = &self.proposer;
        let mut wants: Vec<Option<usize>> = self
            .running
            .iter_mut()
            .map(|s| {
                let behind = proposer.behind(s) as f32 * lag_cost;
                s.draft_depth(&cfg, cap, cost, behind)
            })
            .collect();
        for (s, want) in self.running.iter_mut().zip(&mut wants) {
            if let Some(k) = want.filter(|&k| k > 0) {
                if self.kv.reserve(&mut s.table, s.tokens.len() + k).is_err() {
                    *want = None;
                }
            }
        }
        // A sequence the rule kept from drafting lags the draft model by the steps between probes: its probe
        // catches that up whole, or it would never draft again in a loaded batch.
        let probe_lag = decoding * (probe_interval(cost) as usize + 1);
        let catch_up = catch_up.max(probe_lag.min(self.cfg.batching.max_batch_prefill_tokens));
        let proposals = self.proposer.propose(&mut self.running, &wants, &cfg, catch_up);
        let mut gains = (0.0f64, 0usize);
        for ((s, want), proposal) in self.running.iter_mut().zip(&wants).zip(proposals) {
            let Some(k) = *want else { continue };
            let n = s.set_draft(k, proposal);
            self.kv.truncate(&mut s.table, s.tokens.len() + n);
            if n > 0 {
                gains = (gains.0 + f64::from(s.spec.gain(n, cost)), gains.1 + 1);
            }
        }
        self.stats.speculation_token_cost = f64::from(cost);
        if gains.1 > 0 {
            self.stats.speculation_predicted_speedup = gains.0 / gains.1 as f64;
        }
    }

    /// Runs one batched step (plan, forward, apply) and returns its plan; `None` when nothing was computed.
    fn step(&mut self) -> Option<StepPlan> {
        let start = Instant::now();
        self.make_room();
        let budget = self.budget();
        self.draft(budget.cap);
        let plan = StepPlan::build(&self.running, budget);
        if plan.slots.is_empty() {
            return None;
        }
        // The draft model prefills beside the target where drafts may follow: not while the check of what
        // drafting yields holds the adaptive rule off (the sequences catch up when it drafts again).
        let n = self.running.len();
        let held = |c: &SpeculationConfig| c.adaptive && c.token_cost.is_none() && self.token_cost.holds(n);
        if self.cfg.speculation.as_ref().is_some_and(|c| c.cap(n) > 0 && !held(c)) {
            self.proposer.prefill(&mut self.running, &plan);
        }
        let drafted: usize = plan.slots.iter().map(|slot| self.running[slot.seq].spec.draft().len()).sum();
        let (paused, caught_up) = self.proposer.catch_up();
        self.token_cost.caught_up(paused, caught_up);
        let accepted_before = self.stats.speculative_accepted_tokens;
        let (rows, masks) = self.forward(&plan);
        let ends = self.apply(&plan, rows, masks);
        let accepted = (self.stats.speculative_accepted_tokens - accepted_before) as usize;
        self.retire(ends);
        let secs = start.elapsed().as_secs_f64();
        let measured = match self.clock {
            StepClock::Wall => secs,
            #[cfg(test)]
            StepClock::Scripted(script) => script(plan.load()),
        };
        self.cost.observe(plan.load(), measured);
        if plan.prefill_tokens == 0 {
            let adaptive = self.cfg.speculation.as_ref().is_some_and(|c| c.adaptive && c.token_cost.is_none());
            self.stats.speculation_held_steps += u64::from(adaptive && self.token_cost.holds(plan.decodes));
            // Catching a draft model up is the cost of having paused, not of these drafts.
            self.token_cost.observe(plan.decodes, drafted, secs - paused);
            self.token_cost.yielded(plan.decodes, drafted, secs, plan.decodes + accepted);
        }
        tracing::debug!(
            step = self.step,
            decodes = plan.decodes,
            prefill = plan.prefill_tokens,
            prompts = plan.slots.len() - plan.decodes,
            budget = plan.prefill_budget,
            queued = self.queue.len(),
            drafted,
            accepted,
            catch_up_ms = paused * 1e3,
            ms = secs * 1e3,
            "step"
        );
        self.stats.record_step(plan.kind, plan.prefill_tokens, plan.slots.len(), secs);
        self.step += 1;
        Some(plan)
    }

    /// Runs the model on the plan's tokens (one row set per slot) and, beside it, computes the grammar masks
    /// of the slots that sample under a grammar (one per slot, `None` for the others).
    fn forward(&mut self, plan: &StepPlan) -> (Result<Rows, ModelError>, Vec<StepMask>) {
        let hidden = self.proposer.wants_hidden();
        let Engine { m, kv, running, stats, .. } = self;
        let inputs: Vec<SeqInput<'_>> = plan
            .slots
            .iter()
            .map(|slot| {
                let s = &running[slot.seq];
                SeqInput { tokens: s.step_tokens(slot.tokens), start: s.computed, table: &s.table, logits: slot.logits }
            })
            .collect();
        let lora: Vec<_> = plan.slots.iter().map(|slot| running[slot.seq].lora.clone()).collect();
        let grammars: Vec<_> = plan.slots.iter().map(|slot| running[slot.seq].constraint_for(slot.tokens)).collect();
        let masks = || {
            grammars
                .par_iter()
                .map(|g| {
                    g.map(|c| {
                        let start = Instant::now();
                        (c.mask(), start.elapsed().as_secs_f64())
                    })
                })
                .collect::<Vec<_>>()
        };
        let run = || m.model.run_lora(kv, &inputs, hidden, &lora);
        let (rows, timed) = rayon::join(run, masks);
        let masks = timed
            .into_iter()
            .map(|t| {
                t.map(|(mask, secs)| {
                    stats.grammar_mask_seconds.observe(secs);
                    mask
                })
            })
            .collect();
        (rows, masks)
    }

    /// Takes the forward pass's rows into the planned sequences (sampling, reporting, verifying drafts, in
    /// parallel), or fails them all on an error; returns where each running sequence stands.
    fn apply(&mut self, plan: &StepPlan, rows: Result<Rows, ModelError>, masks: Vec<StepMask>) -> Vec<Progress> {
        let rows = match rows {
            Ok(rows) => rows,
            Err(e) => {
                let message = e.to_string();
                let mut ends = vec![Progress::Running; self.running.len()];
                for slot in &plan.slots {
                    self.running[slot.seq].fail(message.clone());
                    ends[slot.seq] = Progress::Finished;
                }
                return ends;
            }
        };
        let mut work: Vec<Option<(usize, StepRows, StepMask)>> = (0..self.running.len()).map(|_| None).collect();
        let mut hidden = rows.hidden.into_iter();
        for ((slot, logits), mask) in plan.slots.iter().zip(rows.logits).zip(masks) {
            work[slot.seq] = Some((slot.tokens, StepRows { logits, hidden: hidden.next().unwrap_or_default() }, mask));
        }
        let m = self.m;
        let outcomes: Vec<Outcome> = self
            .running
            .par_iter_mut()
            .zip(work)
            .map(|(s, w)| w.map_or(Outcome::idle(Progress::Running), |(n, r, mask)| s.advance(n, r, mask, m)))
            .collect();
        for (s, o) in self.running.iter_mut().zip(&outcomes) {
            self.stats.generated_tokens += o.added as u64;
            if o.drafted > 0 {
                self.stats.record_verification(o.drafted, o.accepted);
                // Rejected positions: their blocks go back; the slots past `computed` are rewritten later.
                self.kv.truncate(&mut s.table, s.tokens.len());
            }
        }
        for slot in &plan.slots {
            self.proposer.rewind(&mut self.running[slot.seq]);
        }
        if self.cfg.batching.prefix_caching {
            for slot in &plan.slots {
                self.running[slot.seq].publish(self.kv.allocator_mut());
            }
        }
        outcomes.into_iter().map(|o| o.progress).collect()
    }

    /// Removes the running sequences whose entry in `ends` (one per running sequence) is not `Running`,
    /// releasing their blocks; closed ones count as cancelled.
    fn retire(&mut self, ends: Vec<Progress>) {
        for (mut s, end) in std::mem::take(&mut self.running).into_iter().zip(ends) {
            match end {
                Progress::Running => self.running.push(s),
                Progress::Finished => {
                    tracing::debug!(request_id = %s.request_id, tokens = s.tokens.len(), "retired");
                    self.kv.release(&mut s.table);
                    self.proposer.release(&mut s);
                    self.acceptance.follow(s.spec.depth());
                    self.endings.extend(s.into_ending());
                }
                Progress::Closed => {
                    tracing::info!(request_id = %s.request_id, "cancelled: the client went away");
                    self.kv.release(&mut s.table);
                    self.proposer.release(&mut s);
                    self.stats.cancelled += 1;
                }
            }
        }
    }

    /// Updates the gauges and copies the stats where handles read them.
    fn publish_stats(&mut self) {
        self.stats.prefill_cap = self.budget().cap;
        let s = &mut self.stats;
        s.queue_size = self.queue.len();
        s.batch_size = self.running.len();
        s.batch_tokens = self.running.iter().map(|q| q.computed).sum();
        s.kv_blocks_used = self.kv.allocator().used_blocks();
        *self.shared.lock().unwrap_or_else(PoisonError::into_inner) = s.clone();
    }
}

/// The running sequence to preempt when blocks run out: the one whose preemption loses the least work per
/// block it frees (computed tokens per block held; a prompt admitted but not started loses nothing), the
/// newest among equals.
fn victim(running: &[Sequence<'_>]) -> usize {
    cheapest(running.iter().map(|s| (s.computed, s.table.blocks().len())))
}

/// The index of the cheapest `(computed tokens, blocks held)` to give up (see [`victim`]), the last among equals.
fn cheapest(held: impl DoubleEndedIterator<Item = (usize, usize)> + ExactSizeIterator) -> usize {
    let lost = |(computed, blocks): (usize, usize)| computed as f64 / blocks.max(1) as f64;
    held.enumerate().rev().min_by(|a, b| lost(a.1).total_cmp(&lost(b.1))).map_or(0, |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::cheapest;

    #[test]
    fn the_victim_loses_the_least_work_per_block() {
        // A decoder with 150 tokens in 10 blocks, a long prompt with 500 of 1024 computed in 64 blocks.
        assert_eq!(cheapest([(150, 10), (500, 64)].into_iter()), 1);
        assert_eq!(cheapest([(150, 10), (500, 64), (0, 64)].into_iter()), 2, "a prompt not started yet");
        assert_eq!(cheapest([(32, 2), (16, 1), (48, 3)].into_iter()), 2, "the newest among equals");
        assert_eq!(cheapest([(0, 0)].into_iter()), 0);
    }
}
