//! A draft model: a smaller model of the same vocabulary proposing drafts (its argmax for a greedy request,
//! else a token sampled from its processed distribution, kept for verification), one batched step per draft
//! position for all the sequences that speculate, rolled back to what the target kept after each verification.
//!
//! Its keys and values live in the target's paged pool: the draft model's cache has as many blocks as the
//! target's, and a sequence's draft KV sits in the same blocks as its target KV, handed out by the target's
//! allocator. A sequence's draft never holds blocks of its own, so it cannot run out of them apart from the
//! target, and the blocks return with the target's.

use std::sync::Arc;

use super::Proposal;
use crate::kv::{BlockTable, KvCache, BLOCK_SIZE};
use crate::model::{LoadedModel, Logits, ModelError, SeqInput};
use crate::sampling::Sampler;
use crate::text::tokenizer::Tokenizer;

/// Tokens a steadily drafting sequence feeds the draft model first (the last draft token and the sampled one);
/// more is catching up on tokens generated while it did not speculate, which counts against the step's budget.
const STEADY_FEED: usize = 2;

/// Where a sequence stands in the draft model's cache (its blocks are the target's).
#[derive(Debug, Default)]
pub struct DraftCache {
    /// Leading tokens of the sequence whose keys and values the draft cache holds.
    computed: usize,
}

impl DraftCache {
    /// Keeps only the first `valid` tokens (those the target kept; the drafted ones past them are stale).
    pub fn rewind(&mut self, valid: usize) {
        self.computed = self.computed.min(valid);
    }

    /// Forgets every token (the sequence's blocks returned: it finished or was preempted).
    pub fn release(&mut self) {
        self.computed = 0;
    }

    /// The tokens of a sequence of `tokens` tokens that a draft would first catch up, past the two steady
    /// drafting feeds anyway.
    pub fn behind(&self, tokens: usize) -> usize {
        tokens.saturating_sub(self.computed).saturating_sub(STEADY_FEED)
    }
}

/// One sequence's request for a draft.
pub struct DraftJob<'a> {
    /// The sequence's tokens (the last one not yet computed by the target).
    pub tokens: &'a [u32],
    /// Its place in the draft cache.
    pub cache: &'a mut DraftCache,
    /// Its blocks in the target's pool, where its draft keys and values go too: drafting stops at their end.
    pub table: &'a BlockTable,
    /// Tokens wanted.
    pub k: usize,
    /// The request's sampler, when it samples: drafts are then drawn from the draft model's distribution,
    /// processed as the request processes the target's; `None` drafts the argmax.
    pub sampler: Option<&'a mut Sampler>,
}

/// The draft model with its KV cache.
pub struct DraftModel {
    model: Arc<LoadedModel>,
    /// The draft's keys and values, block for block beside the target's cache (its own allocator unused: the
    /// blocks are handed out by the target's).
    kv: KvCache,
    /// Proposals are ids below this (the target's vocabulary).
    vocab: usize,
    /// Seconds the last [`DraftModel::propose`] spent catching up lagging sequences, and the tokens it caught
    /// up (see there).
    catch_up: (f64, usize),
}

impl DraftModel {
    /// The draft model `model` with a cache of `blocks` blocks (the target's pool's), proposing ids below
    /// `vocab`.
    pub fn new(model: Arc<LoadedModel>, blocks: usize, vocab: usize) -> Result<Self, ModelError> {
        let kv = model.model.new_cache(BLOCK_SIZE, blocks)?;
        let vocab = vocab.min(model.model.config().vocab);
        Ok(DraftModel { model, kv, vocab, catch_up: (0.0, 0) })
    }

    /// Drafts for `jobs` (at most `k` tokens each; fewer where the draft model's context or the sequence's
    /// blocks end): first each sequence's tokens the draft cache lacks, then one batched step per further position.
    /// The tokens caught up in the first step, past each sequence's steady two, are at most `catch_up` in all
    /// (a long lag is caught up over several steps, without drafts until it is, so that it never stalls the
    /// batch); a failed step ends the
    /// drafts of that step's sequences where they are (logged).
    pub fn propose(&mut self, jobs: &mut [DraftJob<'_>], catch_up: usize) -> Vec<Proposal> {
        let context = self.model.model.config().context;
        let mut left = catch_up.max(1);
        // Per job: the draft length and the tokens fed in the first step.
        let mut plan: Vec<(usize, usize)> = Vec::with_capacity(jobs.len());
        for j in jobs.iter_mut() {
            let (n, done) = (j.tokens.len(), j.cache.computed);
            let k = j.k.min((context.min(j.table.capacity()) + 1).saturating_sub(n));
            let lag = n - done.min(n);
            let behind = j.cache.behind(n);
            let (k, feed, spent) = match (k, lag) {
                (0, _) | (_, 0) => (0, 0, 0),
                _ if behind > left => (0, left, left),
                (k, lag) => (k, lag, behind),
            };
            let end = if k > 0 { n + k - 1 } else { done + feed };
            if feed == 0 || end > j.table.capacity() {
                plan.push((0, 0));
                continue;
            }
            left -= spent;
            plan.push((k, feed));
        }
        let mut out: Vec<Proposal> = vec![Proposal::default(); jobs.len()];
        // The first step's share that catches up lags past the steady two tokens: only that share of its time is
        // the pause's; the steady feeds and the first drafted tokens in the same step are the drafts' own cost.
        let fed: usize = plan.iter().map(|p| p.1).sum();
        let excess: usize = plan.iter().map(|p| p.1.saturating_sub(STEADY_FEED)).sum();
        self.catch_up = (0.0, 0);
        let depth = plan.iter().map(|p| p.0.max(usize::from(p.1 > 0))).max().unwrap_or(0);
        for d in 0..depth {
            let active: Vec<usize> = (0..jobs.len()).filter(|&i| plan[i].0 > d || (d == 0 && plan[i].1 > 0)).collect();
            let inputs: Vec<SeqInput<'_>> = active
                .iter()
                .map(|&i| {
                    let j = &jobs[i];
                    let (k, feed) = plan[i];
                    let done = j.cache.computed;
                    let (tokens, start) = if d == 0 {
                        (&j.tokens[done..done + feed], done)
                    } else {
                        (&out[i].tokens[d - 1..d], j.tokens.len() + d - 1)
                    };
                    SeqInput { tokens, start, table: j.table, logits: if k > 0 { Logits::Last } else { Logits::None } }
                })
                .collect();
            let started = std::time::Instant::now();
            let rows = self.model.model.forward(&mut self.kv, &inputs);
            if d == 0 && excess > 0 {
                self.catch_up = (started.elapsed().as_secs_f64() * excess as f64 / fed as f64, excess);
            }
            drop(inputs);
            let rows = match rows {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::warn!(error = %e, "the draft model's step failed; these drafts end here");
                    for &i in &active {
                        plan[i].0 = plan[i].0.min(d);
                    }
                    continue;
                }
            };
            for (&i, row) in active.iter().zip(rows) {
                let j = &mut jobs[i];
                if plan[i].0 == 0 {
                    j.cache.computed += plan[i].1;
                    continue;
                }
                let ids = self.model.model.logit_ids();
                let row = if ids.is_some() { &row[..] } else { &row[..self.vocab.min(row.len())] };
                let o = &mut out[i];
                match &mut j.sampler {
                    Some(s) => {
                        let (token, q) = s.propose(row, ids, &o.tokens);
                        o.tokens.push(token);
                        o.dists.push(q);
                    }
                    None => o.tokens.push(ids.map_or(argmax(row), |ids| ids[argmax(row) as usize])),
                }
                j.cache.computed = j.tokens.len() + d;
            }
        }
        out
    }

    /// Feeds each job's tokens that its draft cache lacks (its `k` unused) in one batched step without
    /// logits: the draft model prefills beside the target, so that a sequence drafts from its first decode
    /// step instead of catching its prompt up later within the small budget of a loaded batch. A job past the
    /// draft model's context, or past its blocks, is left to catch up later; a failed step is logged.
    pub fn prefill(&mut self, jobs: &mut [DraftJob<'_>]) {
        let context = self.model.model.config().context;
        let fed: Vec<bool> = jobs
            .iter_mut()
            .map(|j| {
                let n = j.tokens.len();
                n > j.cache.computed && n <= context && n <= j.table.capacity()
            })
            .collect();
        let inputs: Vec<SeqInput<'_>> = jobs
            .iter()
            .zip(&fed)
            .filter(|(_, &f)| f)
            .map(|(j, _)| SeqInput {
                tokens: &j.tokens[j.cache.computed..],
                start: j.cache.computed,
                table: j.table,
                logits: Logits::None,
            })
            .collect();
        if inputs.is_empty() {
            return;
        }
        let done = self.model.model.forward(&mut self.kv, &inputs);
        drop(inputs);
        match done {
            Ok(_) => jobs.iter_mut().zip(fed).filter(|(_, f)| *f).for_each(|(j, _)| j.cache.computed = j.tokens.len()),
            Err(e) => tracing::warn!(error = %e, "the draft model's prefill failed; its sequences catch up later"),
        }
    }

    /// Seconds of the last [`DraftModel::propose`]'s first step that caught up sequences lagging by more than the
    /// two tokens steady drafting leaves, as the share of the tokens it fed past those two, and those tokens
    /// ((0, 0) without a lag): the cost of having stopped speculating, not of the drafts, so the token-cost
    /// measurement leaves it out.
    pub fn catch_up(&self) -> (f64, usize) {
        self.catch_up
    }
}

/// The first index of the largest value (0 for an empty row).
fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

/// The token ids a draft limited to `n` frequent tokens proposes among (`--draft-vocab`), ascending: the ids
/// below `n` and every id whose piece is one character or one byte. SentencePiece vocabularies number merged
/// pieces by score, the most frequent first, and keep the single characters apart (Gemma's last, from id
/// 236000 on: punctuation, digits and letters among them).
pub fn frequent_ids(tokenizer: &Tokenizer, n: usize) -> Vec<u32> {
    (0..tokenizer.vocab_size() as u32)
        .filter(|&id| {
            let piece = tokenizer.token_to_piece(id);
            (id as usize) < n || std::str::from_utf8(&piece).map_or(piece.len() == 1, |p| p.chars().count() == 1)
        })
        .collect()
}

/// Checks that a draft model's tokenizer is the target's: the same tokens, pieces, control tokens, BOS and
/// EOS. The error says so and names the first difference.
pub fn check_vocabulary(target: &Tokenizer, draft: &Tokenizer) -> Result<(), String> {
    first_difference(target, draft).map_err(|e| format!("the draft model's tokenizer is not the target's: {e}"))
}

/// The first difference between two tokenizers, if any.
fn first_difference(target: &Tokenizer, draft: &Tokenizer) -> Result<(), String> {
    if target.vocab_size() != draft.vocab_size() {
        return Err(format!(
            "the draft model's vocabulary has {} tokens, the target's {}",
            draft.vocab_size(),
            target.vocab_size()
        ));
    }
    if target.bos_id() != draft.bos_id() {
        return Err(format!("BOS differs: target {:?}, draft {:?}", target.bos_id(), draft.bos_id()));
    }
    if target.eos_ids() != draft.eos_ids() {
        return Err(format!("EOS differs: target {:?}, draft {:?}", target.eos_ids(), draft.eos_ids()));
    }
    for id in 0..target.vocab_size() as u32 {
        let (t, d) = (target.token_to_piece(id), draft.token_to_piece(id));
        if t != d || target.is_control(id) != draft.is_control(id) {
            return Err(format!(
                "token {id} differs: target {:?}{}, draft {:?}{}",
                String::from_utf8_lossy(&t),
                if target.is_control(id) { " (control)" } else { "" },
                String::from_utf8_lossy(&d),
                if draft.is_control(id) { " (control)" } else { "" },
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::BlockAllocator;
    use crate::model::{load, LoadOptions};
    use crate::sampling::SamplingParams;

    fn shared(rel: &str) -> String {
        format!("{}/../models/{rel}", env!("CARGO_MANIFEST_DIR"))
    }

    /// `N` block tables from a 16-block pool (the draft caches' size here), each holding `tokens` tokens, as
    /// the target's allocator hands them out.
    fn tables<const N: usize>(tokens: usize) -> [BlockTable; N] {
        let mut pool = BlockAllocator::new(16, BLOCK_SIZE);
        std::array::from_fn(|_| {
            let mut t = BlockTable::new();
            pool.grow(&mut t, tokens).unwrap();
            t
        })
    }

    #[test]
    fn drafts_continue_as_the_draft_model_alone_and_rewind() {
        let m = Arc::new(load(&shared("stories260k/hf"), &LoadOptions::default()).unwrap());
        let mut d = DraftModel::new(m.clone(), 16, 512).unwrap();
        let prompt = m.tokenizer.encode("Once upon a time", true, false).unwrap();
        // What the draft model generates greedily alone, one full forward per token.
        let mut alone = prompt.clone();
        for _ in 0..6 {
            let mut kv = m.model.new_cache(BLOCK_SIZE, 4).unwrap();
            let mut table = BlockTable::new();
            kv.reserve(&mut table, alone.len()).unwrap();
            let input = SeqInput { tokens: &alone, start: 0, table: &table, logits: Logits::Last };
            let row = m.model.forward(&mut kv, &[input]).unwrap().remove(0);
            alone.push(argmax(&row));
        }
        let (mut a, mut b) = (DraftCache::default(), DraftCache::default());
        let [t_a, t_b, t_c] = tables::<3>(64);
        let short = &prompt[..prompt.len() - 1];
        let mut jobs = [
            DraftJob { tokens: &prompt, cache: &mut a, table: &t_a, k: 4, sampler: None },
            DraftJob { tokens: short, cache: &mut b, table: &t_b, k: 0, sampler: None },
        ];
        let out = d.propose(&mut jobs, 1000);
        assert_eq!(out[0].tokens, alone[prompt.len()..prompt.len() + 4]);
        assert!(out[1].tokens.is_empty());
        assert_eq!(a.computed, prompt.len() + 3);
        // The target kept two drafted tokens and sampled a third: the cache rewinds to them and goes on.
        let kept = &alone[..prompt.len() + 3];
        a.rewind(kept.len() - 1);
        assert_eq!(a.computed, prompt.len() + 2);
        let out = d.propose(&mut [DraftJob { tokens: kept, cache: &mut a, table: &t_a, k: 3, sampler: None }], 1000);
        assert_eq!(out[0].tokens, alone[kept.len()..kept.len() + 3]);
        // A long lag is caught up a budget at a time past the steady two tokens, without drafts until it is;
        // then drafts go on as before.
        let mut c = DraftCache::default();
        let long = &alone[..prompt.len() + 4];
        let out = d.propose(&mut [DraftJob { tokens: long, cache: &mut c, table: &t_c, k: 2, sampler: None }], 4);
        assert!(out[0].tokens.is_empty() && c.computed == 4, "{c:?}");
        assert!(d.catch_up().0 > 0.0 && d.catch_up().1 > 0, "catching up is timed and counted");
        assert_eq!(c.behind(long.len()), long.len() - 4 - STEADY_FEED);
        let job = DraftJob { tokens: long, cache: &mut c, table: &t_c, k: 1, sampler: None };
        let out = d.propose(&mut [job], long.len() - 4 - 2);
        assert_eq!((out[0].tokens.as_slice(), c.computed), (&alone[long.len()..long.len() + 1], long.len()));
        let next = &alone[..long.len() + 1];
        let out = d.propose(&mut [DraftJob { tokens: next, cache: &mut c, table: &t_c, k: 1, sampler: None }], 1);
        assert_eq!(out[0].tokens, alone[next.len()..next.len() + 1]);
        assert_eq!(d.catch_up(), (0.0, 0), "one token behind is steady drafting");
        c.release();
        assert_eq!(c.computed, 0);
    }

    #[test]
    fn a_sequence_drafts_only_within_its_blocks() {
        let m = Arc::new(load(&shared("stories260k/hf"), &LoadOptions::default()).unwrap());
        let mut d = DraftModel::new(m.clone(), 16, 512).unwrap();
        let mut prompt = m.tokenizer.encode("Once upon a time there was", true, false).unwrap();
        prompt.resize(BLOCK_SIZE - 2, prompt[1]);
        // One block: the prompt, its pending token and two drafted positions fill it, so a draft of 5 stops at 3
        // (the last drafted token's keys and values are the target's verification's, not the draft's).
        let [one] = tables::<1>(BLOCK_SIZE);
        let mut cache = DraftCache::default();
        let out =
            d.propose(&mut [DraftJob { tokens: &prompt, cache: &mut cache, table: &one, k: 5, sampler: None }], 1000);
        assert_eq!((out[0].tokens.len(), cache.computed), (3, BLOCK_SIZE));
        // Without a block for what the draft needs, nothing is fed, and the prefill beside the target waits too.
        let [none] = tables::<1>(0);
        let mut fresh = DraftCache::default();
        let out =
            d.propose(&mut [DraftJob { tokens: &prompt, cache: &mut fresh, table: &none, k: 2, sampler: None }], 1000);
        assert!(out[0].tokens.is_empty() && fresh.computed == 0);
        d.prefill(&mut [DraftJob { tokens: &prompt, cache: &mut fresh, table: &none, k: 0, sampler: None }]);
        assert_eq!(fresh.computed, 0);
    }

    #[test]
    fn sequences_prefilled_beside_the_target_draft_at_once_within_a_small_budget() {
        let m = Arc::new(load(&shared("stories260k/hf"), &LoadOptions::default()).unwrap());
        let mut d = DraftModel::new(m.clone(), 16, 512).unwrap();
        let prompts = ["Once upon a time", "The little dog ran"].map(|p| m.tokenizer.encode(p, true, false).unwrap());
        let alone: Vec<u32> = prompts
            .iter()
            .map(|p| {
                let [t_fresh] = tables::<1>(64);
                let mut fresh = DraftCache::default();
                let job = DraftJob { tokens: p, cache: &mut fresh, table: &t_fresh, k: 1, sampler: None };
                d.propose(&mut [job], 1000)[0].tokens[0]
            })
            .collect();
        // The target prefills each prompt but its last token (a chunk), the draft model beside it.
        let (mut a, mut b) = (DraftCache::default(), DraftCache::default());
        let [t_a, t_b] = tables::<2>(64);
        let [p, q] = &prompts;
        d.prefill(&mut [
            DraftJob { tokens: &p[..p.len() - 1], cache: &mut a, table: &t_a, k: 0, sampler: None },
            DraftJob { tokens: &q[..q.len() - 1], cache: &mut b, table: &t_b, k: 0, sampler: None },
        ]);
        assert_eq!((a.computed, b.computed), (p.len() - 1, q.len() - 1));
        // Two sequences a token or two behind draft in the same step with a budget of one: steady feeds are free.
        let out = d.propose(
            &mut [
                DraftJob { tokens: p, cache: &mut a, table: &t_a, k: 1, sampler: None },
                DraftJob { tokens: q, cache: &mut b, table: &t_b, k: 1, sampler: None },
            ],
            1,
        );
        assert_eq!([&out[0].tokens, &out[1].tokens], [&vec![alone[0]], &vec![alone[1]]]);
        assert_eq!(d.catch_up(), (0.0, 0));
    }

    #[test]
    fn a_draft_limited_to_frequent_tokens_proposes_among_them() {
        let dir = shared("stories-distill-4l/hf");
        for quantize in [None, Some("q4_0")] {
            let opts = LoadOptions { quantize: quantize.map(|q| q.parse().unwrap()), ..LoadOptions::default() };
            let full = load(&dir, &opts).unwrap();
            let mut limited = load(&dir, &opts).unwrap();
            let ids = frequent_ids(&full.tokenizer, 300);
            assert!(ids.len() < 512 && ids[..300].iter().enumerate().all(|(i, &id)| id == i as u32), "{ids:?}");
            assert!(ids.windows(2).all(|w| w[0] < w[1]) && ids.len() > 300, "single characters past 300 too");
            assert!(limited.model.limit_vocab(ids.clone()).unwrap());
            assert_eq!(limited.model.logit_ids(), Some(&ids[..]));
            let prompt = full.tokenizer.encode("Once upon a time", true, false).unwrap();
            let last_row = |m: &LoadedModel| {
                let mut kv = m.model.new_cache(BLOCK_SIZE, 4).unwrap();
                let mut table = BlockTable::new();
                kv.reserve(&mut table, prompt.len()).unwrap();
                let input = SeqInput { tokens: &prompt, start: 0, table: &table, logits: Logits::Last };
                m.model.forward(&mut kv, &[input]).unwrap().remove(0)
            };
            let (all, some) = (last_row(&full), last_row(&limited));
            assert_eq!(some.len(), ids.len());
            for (&id, y) in ids.iter().zip(&some) {
                let x = all[id as usize];
                assert!((x - y).abs() <= 1e-4 * x.abs().max(1.0), "{quantize:?}: logit of {id}: {x} against {y}");
            }
            let mut d = DraftModel::new(Arc::new(limited), 16, 512).unwrap();
            let [t_cache] = tables::<1>(64);
            let mut cache = DraftCache::default();
            let job = DraftJob { tokens: &prompt, cache: &mut cache, table: &t_cache, k: 4, sampler: None };
            let out = d.propose(&mut [job], 1000);
            assert!(out[0].tokens.len() == 4 && out[0].tokens.iter().all(|t| ids.contains(t)), "{out:?}");
            assert!(out[0].dists.is_empty(), "greedy drafts are point masses");
            cache.release();
            // Sampled drafts come with their distributions, over the kept ids only, the first one the
            // request's processing of the draft's row.
            let params =
                SamplingParams { temperature: 0.7, top_p: Some(0.95), seed: Some(3), ..SamplingParams::greedy() };
            let mut sampler = Sampler::new(params.clone(), &prompt);
            let job =
                DraftJob { tokens: &prompt, cache: &mut cache, table: &t_cache, k: 4, sampler: Some(&mut sampler) };
            let out = d.propose(&mut [job], 1000);
            let p = &out[0];
            assert_eq!((p.tokens.len(), p.dists.len()), (4, 4));
            for (t, q) in p.tokens.iter().zip(&p.dists) {
                assert!(q.iter().all(|(id, _)| ids.contains(id)) && q.iter().any(|(id, _)| id == t), "{q:?}");
            }
            let mut masked = vec![f32::NEG_INFINITY; all.len()];
            ids.iter().zip(&some).for_each(|(&id, &y)| masked[id as usize] = y);
            let expected = Sampler::new(params, &prompt).distribution(&masked);
            assert_eq!(p.dists[0].len(), expected.len());
            for (a, b) in p.dists[0].iter().zip(&expected) {
                assert!(a.0 == b.0 && (a.1 - b.1).abs() < 1e-4, "{a:?} against {b:?}");
            }
            cache.release();
        }
    }

    #[test]
    fn vocabularies_must_agree() {
        let a = load(&shared("stories260k/hf"), &LoadOptions::default()).unwrap();
        let b = load(&shared("stories-distill-4l/hf"), &LoadOptions::default()).unwrap();
        check_vocabulary(&a.tokenizer, &b.tokenizer).unwrap();
        check_vocabulary(&a.tokenizer, &a.tokenizer).unwrap();
    }
}
