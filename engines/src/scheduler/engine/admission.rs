//! Which waiting requests join the running batch, and what each step may spend on prompts. Beside decodes, the
//! prompt tokens of a step are those the fitted step costs allow within the ITL factor, or an eighth of the
//! length of every prompt waiting or prefilling when that is more: each prompt is prefilled in about eight
//! steps of even cost, whatever the arrivals, instead of a few long steps. Prompts as many as the decoders or
//! more (a wave of arrivals beside a few early ones) take the whole budget in one step: a few decoders wait once,
//! and the wave then decodes in step.
//! Long prompts are admitted several at once when one step's budget covers more than the first and the KV pool
//! holds them beside what the running sequences will grow by meanwhile. Prompts are sized by what they have
//! left once their cached prefix is taken.

use std::time::Instant;

use super::Engine;
use crate::kv::BLOCK_SIZE;
use crate::scheduler::plan::PrefillBudget;
use crate::scheduler::sequence::Sequence;

/// A prompt is long when it has more tokens to compute than this fraction of `max_batch_prefill_tokens`
/// (1/8: 512 of the default 4096); short ones go into a step whole when they fit.
const LONG_PROMPT_FRACTION: usize = 8;
/// Steps over which a prompt beside decodes is prefilled at least: each prompt waiting or prefilling adds this
/// fraction of its length to a step's budget.
const PREFILL_STEPS: usize = 8;

impl<'m> Engine<'m> {
    /// The prompt tokens the next step may take: the configured per-step cap beside decodes; else the whole
    /// budget when the prompts (queued, or prefilling) are as many as the decoding sequences or more; else the larger of the
    /// cap the cost model calls for at the current batch and prompt positions, and an eighth
    /// ([`PREFILL_STEPS`]) of the length of each of those prompts.
    pub(super) fn budget(&self) -> PrefillBudget {
        let b = &self.cfg.batching;
        let full = b.max_batch_prefill_tokens;
        let short = full / LONG_PROMPT_FRACTION;
        let decodes = self.running.iter().filter(|s| !s.is_prefilling()).count();
        let prefilling: Vec<&Sequence<'m>> = self.running.iter().filter(|s| s.is_prefilling()).collect();
        let cap = match b.max_prefill_tokens_per_step {
            Some(n) => n.min(full),
            None if prefilling.len() + self.queue.len() >= decodes => full,
            None => {
                let position =
                    prefilling.iter().map(|s| s.computed as f64).sum::<f64>() / prefilling.len().max(1) as f64;
                let spread: usize =
                    prefilling.iter().copied().chain(&self.queue).map(|s| s.tokens.len().div_ceil(PREFILL_STEPS)).sum();
                self.cost.cap(decodes, position, b.prefill_itl_factor).max(spread).min(full)
            }
        };
        PrefillBudget { full, cap, short }
    }

    /// Moves waiting sequences into the running batch. While prompts prefill beside decodes, waiting ones join
    /// once enough wait per running sequence or the oldest has waited long enough; when nothing runs or the
    /// batch only decodes, at once. Goes through the queue oldest (or preempted) first, up to the batch size,
    /// and stops at the first that does not fit in free KV blocks. A long prompt waits while the long ones
    /// prefilling have a step's prefill budget or more left (so they do not slow each other down, and several
    /// start together when one step would finish them), a short one while the short ones prefilling have
    /// `max_batch_prefill_tokens` left; those behind a waiting one go ahead of it, so a long prompt never keeps
    /// short ones out. A long prompt also leaves free the blocks the decoding sequences will need until it is
    /// prefilled at the step's budget, so that admitting it does not soon preempt a decoder.
    pub(super) fn admit(&mut self) {
        let Some(oldest) = self.queue.front() else { return };
        let b = &self.cfg.batching;
        if self.running.iter().any(Sequence::is_prefilling) {
            let waited = self.step - oldest.enqueued_step;
            let enough = self.queue.len() as f32 >= b.waiting_served_ratio * self.running.len() as f32;
            if !enough && waited < b.max_waiting_tokens as u64 {
                return;
            }
        }
        let budget = self.budget();
        let step_budget = if self.running.iter().any(|s| !s.is_prefilling()) { budget.cap } else { budget.full };
        let prefilling = || self.running.iter().filter(|s| s.is_prefilling()).map(Sequence::pending);
        let mut long_backlog: usize = prefilling().filter(|&n| n > budget.short).sum();
        let mut short_backlog: usize = prefilling().filter(|&n| n <= budget.short).sum();
        let now = Instant::now();
        let mut i = 0;
        while self.running.len() < self.cfg.max_batch_size && i < self.queue.len() {
            let pending = self.pending_after_cache(&self.queue[i]);
            let long = pending > budget.short;
            if (long && long_backlog >= step_budget) || (!long && short_backlog >= budget.full) {
                i += 1;
                continue;
            }
            let headroom = if long { self.growth((long_backlog + pending).div_ceil(step_budget.max(1))) } else { 0 };
            let Some(mut seq) = self.queue.remove(i) else { break };
            let Some(cached) = self.place(&mut seq, headroom) else {
                self.queue.insert(i, seq);
                break;
            };
            if !seq.admit(now, cached) {
                self.kv.release(&mut seq.table);
                self.stats.cancelled += 1;
                continue;
            }
            if long {
                long_backlog += seq.pending();
            } else {
                short_backlog += seq.pending();
            }
            self.running.push(seq);
        }
    }

    /// The tokens `seq` would have to compute if admitted now, its cached prefix taken.
    pub(super) fn pending_after_cache(&self, seq: &Sequence<'m>) -> usize {
        if !self.cfg.batching.prefix_caching {
            return seq.pending();
        }
        let cached = self.kv.allocator().cached_prefix(&seq.hashes[..seq.shareable_blocks()]);
        seq.pending() - cached * BLOCK_SIZE
    }

    /// The blocks the decoding sequences need to grow by `steps` tokens each (within their most tokens; the
    /// prefilling ones hold blocks for all their tokens already).
    fn growth(&self, steps: usize) -> usize {
        let pool = self.kv.allocator();
        let decoding = self.running.iter().filter(|s| !s.is_prefilling());
        decoding.map(|s| pool.blocks_for(s.tokens_after(steps)).saturating_sub(s.table.blocks().len())).sum()
    }

    /// Gives `seq` blocks for all its tokens, the longest chain of cached prompt blocks first (see
    /// [`Sequence::shareable_blocks`]); returns the tokens cached, or `None` when blocks are short. The blocks
    /// running sequences need for this step's tokens, and `headroom` more, are kept free, so that admission
    /// never causes a preemption at once.
    fn place(&mut self, seq: &mut Sequence<'m>, headroom: usize) -> Option<usize> {
        let reserve = self.running.iter().filter(|s| s.tokens.len() > s.table.capacity()).count() + headroom;
        let caching = self.cfg.batching.prefix_caching;
        let pool = self.kv.allocator_mut();
        let shareable = seq.shareable_blocks();
        let shared = if caching { pool.share(&mut seq.table, &seq.hashes[..shareable]) } else { 0 };
        let needed = pool.blocks_for(seq.tokens.len()) - shared;
        if pool.free_blocks() < needed + reserve || pool.grow(&mut seq.table, seq.tokens.len()).is_err() {
            pool.release(&mut seq.table);
            return None;
        }
        if caching && seq.shares_prefix() {
            self.stats.prefix_cache_queries += seq.prompt_len as u64;
            self.stats.prefix_cache_hits += (shared * BLOCK_SIZE) as u64;
        }
        Some(shared * BLOCK_SIZE)
    }
}
