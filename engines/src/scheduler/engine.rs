//! The loop on the scheduler thread: take in requests, drop cancelled ones, admit waiting ones, run one batched
//! step (prefill chunks beside decodes), sample, and retire the sequences that ended.

use std::collections::VecDeque;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use rayon::prelude::*;

use super::config::SchedulerConfig;
use super::request::{EventSink, Request};
use super::sequence::{Progress, Sequence};
use super::stats::Stats;
use crate::kv::{KvCache, BLOCK_SIZE};
use crate::model::{LoadedModel, SeqInput};

/// A request on its way to the engine thread.
pub(super) struct Submission {
    /// The request, validated.
    pub req: Request,
    /// Where its events go.
    pub sink: Box<dyn EventSink>,
    /// When it was submitted.
    pub at: Instant,
}

/// The scheduler's state on its thread.
struct Engine<'m> {
    m: &'m LoadedModel,
    kv: KvCache,
    cfg: SchedulerConfig,
    rx: Receiver<Submission>,
    /// Waiting sequences, oldest (or preempted) first.
    queue: VecDeque<Sequence<'m>>,
    /// The running batch, in admission order (the last is the first preempted).
    running: Vec<Sequence<'m>>,
    stats: Stats,
    /// Where [`SchedulerHandle::stats`](super::SchedulerHandle::stats) reads them.
    shared: Arc<Mutex<Stats>>,
    /// Steps run.
    step: u64,
}

/// Runs the engine until every sender is gone and no request is left.
pub(super) fn run(
    m: &LoadedModel,
    kv: KvCache,
    cfg: SchedulerConfig,
    rx: Receiver<Submission>,
    shared: Arc<Mutex<Stats>>,
) {
    let stats = shared.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let mut e = Engine { m, kv, cfg, rx, queue: VecDeque::new(), running: Vec::new(), stats, shared, step: 0 };
    while e.intake() {
        e.drop_closed();
        e.admit();
        e.step();
        e.publish_stats();
    }
}

impl<'m> Engine<'m> {
    /// Queues new submissions, blocking while there is nothing to do; `false` once the senders are gone and
    /// nothing is left to do.
    fn intake(&mut self) -> bool {
        if self.queue.is_empty() && self.running.is_empty() {
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

    /// Moves waiting sequences into the running batch, oldest first, when the policy says it is time: always
    /// when nothing runs, else when enough wait per running sequence or the oldest has waited long enough. Stops
    /// at the batch size, when this step's prefill budget is spoken for, or at the first that does not fit.
    fn admit(&mut self) {
        let Some(oldest) = self.queue.front() else { return };
        if !self.running.is_empty() {
            let waited = self.step - oldest.enqueued_step;
            let enough = self.queue.len() as f32 >= self.cfg.waiting_served_ratio * self.running.len() as f32;
            if !enough && waited < self.cfg.max_waiting_tokens as u64 {
                return;
            }
        }
        let mut prefill: usize = self.running.iter().filter(|s| s.prefilling).map(Sequence::pending).sum();
        let now = Instant::now();
        while self.running.len() < self.cfg.max_batch_size && prefill < self.cfg.max_batch_prefill_tokens {
            let Some(mut seq) = self.queue.pop_front() else { break };
            let Some(cached) = self.place(&mut seq) else {
                self.queue.push_front(seq);
                break;
            };
            if !seq.admit(now, cached) {
                self.kv.release(&mut seq.table);
                self.stats.cancelled += 1;
                continue;
            }
            prefill += seq.pending();
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
        let share = self.cfg.prefix_caching && !seq.wants_prompt_logprobs;
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
            victim.preempt(self.step);
            self.queue.push_front(victim);
            self.stats.preemptions += 1;
        }
    }

    /// Gives each decoding sequence its draft for this step when speculation is on and the batch is narrow
    /// enough, with the KV blocks the drafted positions need; a draft without blocks is dropped.
    fn draft(&mut self) {
        let Some(cfg) = &self.cfg.speculation else { return };
        let cap = cfg.cap(self.running.len());
        for s in &mut self.running {
            let k = s.plan_draft(cfg, cap);
            if k > 0 && self.kv.reserve(&mut s.table, s.tokens.len() + k).is_err() {
                s.spec.cancel();
            }
        }
    }

    /// Runs one batched step: every decoding sequence's next token (and the draft it verifies), and prefill
    /// chunks within the budget.
    fn step(&mut self) {
        self.make_room();
        self.draft();
        let mut budget = self.cfg.max_batch_prefill_tokens;
        let mut plan = Vec::new();
        for (i, s) in self.running.iter().enumerate() {
            let n = s.step_len(budget);
            if s.prefilling {
                budget -= n;
            }
            if n > 0 {
                plan.push((i, n));
            }
        }
        if plan.is_empty() {
            return;
        }
        let start = Instant::now();
        let inputs: Vec<SeqInput<'_>> = plan
            .iter()
            .map(|&(i, n)| {
                let s = &self.running[i];
                SeqInput { tokens: s.step_tokens(n), start: s.computed, table: &s.table, logits: s.logits_for(n) }
            })
            .collect();
        let prefill: usize = plan.iter().filter(|&&(i, _)| self.running[i].prefilling).map(|&(_, n)| n).sum();
        let lengths: Vec<usize> = self.running.iter().map(|s| s.tokens.len()).collect();
        let out = self.m.model.forward(&mut self.kv, &inputs);
        let mut ends = vec![Progress::Running; self.running.len()];
        match out {
            Err(e) => {
                let message = e.to_string();
                for &(i, _) in &plan {
                    self.running[i].fail(message.clone());
                    ends[i] = Progress::Finished;
                }
            }
            Ok(rows) => {
                let mut work: Vec<Option<(usize, Vec<f32>)>> = (0..self.running.len()).map(|_| None).collect();
                for (&(i, n), r) in plan.iter().zip(rows) {
                    work[i] = Some((n, r));
                }
                let m = self.m;
                let drafts: Vec<usize> = self.running.iter().map(|s| s.spec.draft().len()).collect();
                let accepted: Vec<usize> = self.running.iter().map(|s| s.spec.accepted).collect();
                ends = self
                    .running
                    .par_iter_mut()
                    .zip(work)
                    .map(|(s, w)| w.map_or(Progress::Running, |(n, r)| s.advance(n, r, m)))
                    .collect();
                for (i, s) in self.running.iter_mut().enumerate() {
                    self.stats.generated_tokens += (s.tokens.len() - lengths[i]) as u64;
                    if drafts[i] > 0 {
                        self.stats.record_verification(drafts[i], s.spec.accepted - accepted[i]);
                        // Rejected positions: their blocks go back; the slots past `computed` are rewritten later.
                        self.kv.truncate(&mut s.table, s.tokens.len());
                    }
                }
                if self.cfg.prefix_caching {
                    for &(i, _) in &plan {
                        self.running[i].publish(self.kv.allocator_mut());
                    }
                }
                self.stats.prefill_tokens += prefill as u64;
            }
        }
        self.retire(ends);
        let secs = start.elapsed().as_secs_f64();
        if prefill > 0 {
            self.stats.steps_prefill += 1;
            self.stats.step_duration_prefill.observe(secs);
        } else {
            self.stats.steps_decode += 1;
            self.stats.step_duration_decode.observe(secs);
        }
        self.stats.step_batch_size.observe(plan.len() as f64);
        self.step += 1;
    }

    /// Removes the running sequences whose entry in `ends` (one per running sequence) is not `Running`,
    /// releasing their blocks; closed ones count as cancelled.
    fn retire(&mut self, ends: Vec<Progress>) {
        for (mut s, end) in std::mem::take(&mut self.running).into_iter().zip(ends) {
            match end {
                Progress::Running => self.running.push(s),
                Progress::Finished => self.kv.release(&mut s.table),
                Progress::Closed => {
                    self.kv.release(&mut s.table);
                    self.stats.cancelled += 1;
                }
            }
        }
    }

    /// Updates the gauges and copies the stats where handles read them.
    fn publish_stats(&mut self) {
        let s = &mut self.stats;
        s.queue_size = self.queue.len();
        s.batch_size = self.running.len();
        s.batch_tokens = self.running.iter().map(|q| q.computed).sum();
        s.kv_blocks_used = self.kv.allocator().used_blocks();
        *self.shared.lock().unwrap_or_else(PoisonError::into_inner) = s.clone();
    }
}
