//! The scheduler's side of each speculation method: proposals for all the sequences that speculate in a
//! step (n-gram per sequence; the draft model and Medusa heads batched), and the draft cache's upkeep (its
//! keys and values sit in the sequences' blocks of the target's pool, so only what it holds is kept here).

use std::sync::Arc;

use super::plan::{StepPlan, Work};
use super::sequence::Sequence;
use crate::model::{LoadedModel, ModelError};
use crate::speculative::{
    check_vocabulary, propose, DraftJob, DraftModel, Medusa, Method, Proposal, SpeculationConfig,
};

/// What proposes drafts in a running engine.
pub(super) enum Proposer {
    /// Speculation is off.
    Off,
    /// Prompt lookup.
    Ngram,
    /// The draft model, with its cache beside the target's (the same blocks).
    Draft(Box<DraftModel>),
    /// Medusa heads.
    Medusa(Arc<Medusa>),
}

impl Proposer {
    /// The proposer for `spec` beside `target`, with a draft cache of `blocks` blocks (the target pool's); a draft
    /// model whose vocabulary differs from the target's is refused, naming the first difference.
    pub fn new(spec: Option<&SpeculationConfig>, target: &LoadedModel, blocks: usize) -> Result<Self, ModelError> {
        let Some(spec) = spec else { return Ok(Proposer::Off) };
        Ok(match &spec.method {
            Method::Ngram => Proposer::Ngram,
            Method::Draft(draft) => {
                check_vocabulary(&target.tokenizer, &draft.tokenizer)
                    .map_err(|e| ModelError::Config(format!("the draft model's tokenizer is not the target's: {e}")))?;
                Proposer::Draft(Box::new(DraftModel::new(draft.clone(), blocks, target.model.config().vocab)?))
            }
            Method::Medusa(m) => Proposer::Medusa(m.clone()),
        })
    }

    /// Whether the model's steps must return hidden states (for Medusa).
    pub fn wants_hidden(&self) -> bool {
        matches!(self, Proposer::Medusa(_))
    }

    /// Proposals for the running sequences: for `wants[i] == Some(k)`, up to `k` tokens after the pending
    /// one of `running[i]` (n-gram proposes one for `k` = 0, the free shadow); empty for `None`. The draft
    /// model catches up at most `catch_up` tokens of the sequences' prompts and outputs per step, and samples
    /// the drafts of sampled requests (with their distributions).
    pub fn propose(
        &mut self,
        running: &mut [Sequence<'_>],
        wants: &[Option<usize>],
        cfg: &SpeculationConfig,
        catch_up: usize,
    ) -> Vec<Proposal> {
        let mut out = vec![Proposal::default(); running.len()];
        match self {
            Proposer::Off => {}
            Proposer::Ngram => {
                for ((s, w), o) in running.iter().zip(wants).zip(&mut out) {
                    if let Some(k) = *w {
                        *o = propose(&s.tokens, cfg.ngram_min, cfg.ngram_max, k.max(1)).into();
                    }
                }
            }
            Proposer::Draft(d) => {
                let (idx, mut jobs): (Vec<usize>, Vec<DraftJob<'_>>) = running
                    .iter_mut()
                    .zip(wants)
                    .enumerate()
                    .filter_map(|(i, (s, w))| {
                        let k = w.filter(|&k| k > 0)?;
                        Some((i, s.draft_job(s.tokens.len(), k)))
                    })
                    .unzip();
                for (i, p) in idx.into_iter().zip(d.propose(&mut jobs, catch_up)) {
                    out[i] = p;
                }
            }
            Proposer::Medusa(m) => {
                let (mut idx, mut states, mut ks) = (Vec::new(), Vec::new(), Vec::new());
                for (i, (s, w)) in running.iter().zip(wants).enumerate() {
                    if let Some(k) = w.filter(|&k| k > 0 && !s.spec.hidden.is_empty()) {
                        idx.push(i);
                        states.push(s.spec.hidden.as_slice());
                        ks.push(k);
                    }
                }
                match m.propose(&states, &ks) {
                    Ok(p) => idx.into_iter().zip(p).for_each(|(i, p)| out[i] = p.into()),
                    Err(e) => tracing::warn!(error = %e, "the Medusa heads failed; no drafts this step"),
                }
            }
        }
        out
    }

    /// Before a step that prefills: the draft model prefills the same prompt chunks (see
    /// [`DraftModel::prefill`]); nothing for the other methods.
    pub fn prefill(&mut self, running: &mut [Sequence<'_>], plan: &StepPlan) {
        let Proposer::Draft(d) = self else { return };
        let mut chunk = vec![None; running.len()];
        for slot in plan.slots.iter().filter(|slot| slot.work == Work::Prefill) {
            chunk[slot.seq] = Some(slot.tokens);
        }
        let mut jobs: Vec<DraftJob<'_>> = running
            .iter_mut()
            .zip(chunk)
            .filter_map(|(s, n)| {
                let end = s.computed + n?;
                Some(s.draft_job(end, 0))
            })
            .collect();
        if jobs.is_empty() {
            return;
        }
        d.prefill(&mut jobs);
    }

    /// After a step: the draft cache keeps only what the target kept of the sequence (all but its pending
    /// last token).
    pub fn rewind(&mut self, s: &mut Sequence<'_>) {
        if let Proposer::Draft(_) = self {
            s.spec.draft_cache.rewind(s.tokens.len().saturating_sub(1));
        }
    }

    /// A sequence left the running batch (finished, cancelled or preempted) and its blocks returned: its draft
    /// keys and values went with them.
    pub fn release(&mut self, s: &mut Sequence<'_>) {
        if let Proposer::Draft(_) = self {
            s.spec.draft_cache.release();
        }
    }

    /// Seconds the last proposals spent catching the draft model up on sequences that had stopped
    /// speculating, and the tokens caught up (see [`DraftModel::catch_up`]); nothing for the other methods.
    pub fn catch_up(&self) -> (f64, usize) {
        match self {
            Proposer::Draft(d) => d.catch_up(),
            _ => (0.0, 0),
        }
    }

    /// The tokens the draft model would first catch up before drafting for `s`; 0 for the other methods.
    pub fn behind(&self, s: &Sequence<'_>) -> usize {
        match self {
            Proposer::Draft(_) => s.spec.draft_cache.behind(s.tokens.len()),
            _ => 0,
        }
    }
}
