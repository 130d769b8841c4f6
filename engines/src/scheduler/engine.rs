//! The loop on the scheduler thread: take in requests, drop cancelled ones, admit waiting ones, run one batched
//! step (plan it, run the model, apply the result: sample, report), and retire the sequences that ended.

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
use super::proposer::Proposer;
use super::request::{Event, EventSink, Request};
use super::sequence::{Ending, Outcome, Progress, Sequence, StepMask, StepRows};
use super::stats::Stats;
use crate::kv::{KvCache, BLOCK_SIZE};
use crate::model::{LoadedModel, ModelError, Rows, SeqInput};
use crate::speculative::{TokenCost, PRIOR_TOKEN_COST};

/// A request on its way to the engine thread.
pub(super) struct Submission {
    /// The request, validated.
    pub req: Request,
    /// Where its events go.
    pub sink: Box<dyn EventSink>,
    /// When it was submitted.
    pub at: Instant,
}

/// A prompt is long when it has more tokens to compute than this fraction of `max_batch_prefill_tokens`
/// (1/8: 512 of the default 4096); long prompts are admitted one at a time.
const LONG_PROMPT_FRACTION: usize = 8;

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
    /// What proposes speculative drafts.
    proposer: Proposer,
    /// Measured cost of a drafted token, per batch size.
    token_cost: TokenCost,
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
        let cost = StepCost::new(BLOCK_SIZE, cfg.max_batch_prefill_tokens, cfg.prefill_itl_factor);
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
            proposer,
            token_cost,
            stats,
            shared,
            step: 0,
            endings: Vec::new(),
        }
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
        let seq = Sequence::new(self.m, s.req, s.sink, s.at, self.step, self.cfg.prefix_caching);
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

    /// Moves waiting sequences into the running batch when the policy says it is time: always when nothing
    /// runs, else when enough wait per running sequence or the oldest has waited long enough. Goes through the
    /// queue oldest first, up to the batch size, and stops at the first that does not fit in free KV blocks.
    /// A long prompt (see [`LONG_PROMPT_FRACTION`]) waits while another long one prefills, and a short one
    /// while the short ones prefilling have `max_batch_prefill_tokens` left to compute; those behind a
    /// waiting one go ahead of it. So a long prompt never keeps short ones out, and long prompts, which share
    /// each step's prefill budget with the others, do not slow each other down.
    fn admit(&mut self) {
        let Some(oldest) = self.queue.front() else { return };
        if !self.running.is_empty() {
            let waited = self.step - oldest.enqueued_step;
            let enough = self.queue.len() as f32 >= self.cfg.waiting_served_ratio * self.running.len() as f32;
            if !enough && waited < self.cfg.max_waiting_tokens as u64 {
                return;
            }
        }
        let budget = self.cfg.max_batch_prefill_tokens;
        let long_from = budget / LONG_PROMPT_FRACTION;
        let prefilling = || self.running.iter().filter(|s| s.prefilling).map(Sequence::pending);
        let mut long_prefilling = prefilling().any(|n| n > long_from);
        let mut short_backlog: usize = prefilling().filter(|&n| n <= long_from).sum();
        let now = Instant::now();
        let mut i = 0;
        while self.running.len() < self.cfg.max_batch_size && i < self.queue.len() {
            let long = self.queue[i].pending() > long_from;
            if (long && long_prefilling) || (!long && short_backlog >= budget) {
                i += 1;
                continue;
            }
            let Some(mut seq) = self.queue.remove(i) else { break };
            let Some(cached) = self.place(&mut seq) else {
                self.queue.insert(i, seq);
                break;
            };
            if !seq.admit(now, cached) {
                self.kv.release(&mut seq.table);
                self.stats.cancelled += 1;
                continue;
            }
            if long {
                long_prefilling = true;
            } else {
                short_backlog += seq.pending();
            }
            self.running.push(seq);
        }
    }

    /// Gives `seq` blocks for all its tokens, the longest chain of cached prompt blocks first (never its last
    /// token, which must be computed for its logits); returns the tokens cached, or `None` when blocks are short.
    /// The blocks running sequences need for this step's tokens are kept free, so that admission never causes
    /// a preemption at once.
    fn place(&mut self, seq: &mut Sequence<'m>) -> Option<usize> {
        let reserve = self.running.iter().filter(|s| s.tokens.len() > s.table.capacity()).count();
        let pool = self.kv.allocator_mut();
        let share = self.cfg.prefix_caching && seq.shares_prefix();
        let shared = if share {
            let most = ((seq.tokens.len() - 1) / BLOCK_SIZE).min(seq.hashes.len());
            pool.share(&mut seq.table, &seq.hashes[..most])
        } else {
            0
        };
        let needed = pool.blocks_for(seq.tokens.len()) - shared;
        if pool.free_blocks() < needed + reserve || pool.grow(&mut seq.table, seq.tokens.len()).is_err() {
            pool.release(&mut seq.table);
            return None;
        }
        if share {
            self.stats.prefix_cache_queries += seq.prompt_len as u64;
            self.stats.prefix_cache_hits += (shared * BLOCK_SIZE) as u64;
        }
        Some(shared * BLOCK_SIZE)
    }

    /// Gives each running sequence the block its next token needs, oldest first; when the pool is out of
    /// blocks, preempts the newest running sequence (its blocks return, it goes back to the queue's front).
    fn make_room(&mut self) {
        let mut i = 0;
        while i < self.running.len() {
            let s = &mut self.running[i];
            if self.kv.reserve(&mut s.table, s.tokens.len()).is_ok() {
                i += 1;
                continue;
            }
            let Some(mut victim) = self.running.pop() else { break };
            self.kv.release(&mut victim.table);
            self.proposer.release(&mut victim);
            victim.preempt(self.step);
            self.queue.push_front(victim);
            self.stats.preemptions += 1;
        }
    }

    /// Gives each decoding sequence its draft for this step when speculation is on and the batch is narrow
    /// enough (the depth from its acceptance and the measured token cost at this batch size; none in a step
    /// that measures the plain step time), with the KV blocks the drafted positions need; a draft without
    /// blocks is dropped.
    fn draft(&mut self) {
        let Some(cfg) = self.cfg.speculation.clone() else { return };
        let decoding = self.running.iter().filter(|s| !s.prefilling).count();
        let explore = cfg.adaptive && cfg.token_cost.is_none() && self.token_cost.explore(decoding);
        let cap = if explore { 0 } else { cfg.cap(self.running.len()) };
        let cost = cfg.token_cost.unwrap_or_else(|| self.token_cost.cost(decoding));
        let wants: Vec<Option<usize>> = self.running.iter_mut().map(|s| s.draft_depth(&cfg, cap, cost)).collect();
        let catch_up = self.prefill_cap();
        let proposals = self.proposer.propose(&mut self.running, &wants, &cfg, catch_up);
        let mut gains = (0.0f64, 0usize);
        for ((s, want), proposal) in self.running.iter_mut().zip(&wants).zip(&proposals) {
            let Some(k) = *want else { continue };
            let n = s.set_draft(k, proposal);
            if n > 0 && self.kv.reserve(&mut s.table, s.tokens.len() + n).is_err() {
                s.spec.cancel();
            } else if n > 0 {
                gains = (gains.0 + f64::from(s.spec.gain(n, cost)), gains.1 + 1);
            }
        }
        self.stats.speculation_token_cost = f64::from(cost);
        if gains.1 > 0 {
            self.stats.speculation_predicted_speedup = gains.0 / gains.1 as f64;
        }
    }

    /// Most prompt tokens a step with decodes takes: the configured cap, else the one measured costs call for.
    fn prefill_cap(&self) -> usize {
        let full = self.cfg.max_batch_prefill_tokens;
        self.cfg.max_prefill_tokens_per_step.map_or_else(|| self.cost.cap(), |n| n.min(full))
    }

    /// Runs one batched step (plan, forward, apply) and returns its plan; `None` when nothing was computed.
    fn step(&mut self) -> Option<StepPlan> {
        let start = Instant::now();
        self.make_room();
        self.draft();
        let plan = StepPlan::build(&self.running, self.cfg.max_batch_prefill_tokens, self.prefill_cap());
        if plan.slots.is_empty() {
            return None;
        }
        let drafted: usize = plan.slots.iter().map(|slot| self.running[slot.seq].spec.draft().len()).sum();
        let paused = self.proposer.catch_up_secs();
        let (rows, masks) = self.forward(&plan);
        let ends = self.apply(&plan, rows, masks);
        self.retire(ends);
        let secs = start.elapsed().as_secs_f64();
        self.cost.observe(plan.prefill_tokens, plan.decodes, secs);
        if plan.prefill_tokens == 0 {
            // Catching a draft model up is the cost of having paused, not of these drafts.
            self.token_cost.observe(plan.decodes, drafted, secs - paused);
        }
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
        let run = || m.model.run(kv, &inputs, hidden);
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
        if self.cfg.prefix_caching {
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
        self.stats.prefill_cap = self.prefill_cap();
        let s = &mut self.stats;
        s.queue_size = self.queue.len();
        s.batch_size = self.running.len();
        s.batch_tokens = self.running.iter().map(|q| q.computed).sum();
        s.kv_blocks_used = self.kv.allocator().used_blocks();
        s.draft_kv_blocks_used = self.proposer.used_blocks();
        *self.shared.lock().unwrap_or_else(PoisonError::into_inner) = s.clone();
    }
}
