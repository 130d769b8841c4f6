//! Token sampling on plain `&[f32]` logits: validated request parameters (TGI/OpenAI semantics),
//! the logits processors of transformers/TGI, a seeded per-sequence [`Sampler`], and stop strings.
//!
//! Processors run in this order: repetition penalty, frequency/presence penalties, then (unless
//! greedy) temperature, top-k, top-p, typical-p and min-p, each truncation renormalising what it
//! keeps before the next. Temperature 0 is greedy: the argmax of the penalised logits, ties to the
//! lowest token id.
//!
//! Log-probabilities are those of the distribution the token was drawn from (vLLM's "processed"
//! logprobs): the log-softmax of the penalised, temperature-scaled logits over the tokens the
//! truncations kept. Greedy decoding reports the log-softmax of the penalised logits (no
//! temperature, no truncation).
//!
//! Draws are reproducible everywhere: one ChaCha20 stream per sequence seeded with
//! `seed_from_u64`, one `u64` per sampled token turned into a uniform in [0, 1) by its top 53 bits.

mod filter;
mod math;
mod range;
pub mod stop;
#[cfg(test)]
mod tests;
mod verify;

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

pub use range::FloatParam;
pub use stop::{FinishReason, StopMatcher, StopResult};

use filter::{top_n, Cand, Dist};

/// The most alternatives a request may ask for per token (OpenAI's `top_logprobs` limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// A request's sampling parameters that fail validation; messages are TGI's, for HTTP 422 bodies.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SamplingError {
    /// TGI's temperature not above 0 or not finite (its API has `do_sample` for greedy).
    #[error("`temperature` must be strictly positive")]
    Temperature,
    /// Temperature negative or not finite, where 0 means greedy (the OpenAI API, the command line).
    #[error("`temperature` must be >= 0.0 (0 picks the most likely token)")]
    NegativeTemperature,
    /// `top_k` of 0.
    #[error("`top_k` must be strictly positive")]
    TopK,
    /// `top_p` outside (0, 1].
    #[error("`top_p` must be > 0.0 and <= 1.0")]
    TopP,
    /// `typical_p` outside (0, 1).
    #[error("`typical_p` must be > 0.0 and < 1.0")]
    TypicalP,
    /// `min_p` outside [0, 1].
    #[error("`min_p` must be >= 0.0 and <= 1.0")]
    MinP,
    /// `repetition_penalty` not above 0.
    #[error("`repetition_penalty` must be strictly positive")]
    RepetitionPenalty,
    /// `frequency_penalty` outside [-2, 2].
    #[error("`frequency_penalty` must be >= -2.0 and <= 2.0")]
    FrequencyPenalty,
    /// `presence_penalty` outside [-2, 2].
    #[error("`presence_penalty` must be >= -2.0 and <= 2.0")]
    PresencePenalty,
    /// More alternatives per token than [`MAX_TOP_LOGPROBS`].
    #[error("`top_n_tokens` must be >= 0 and <= {max}. Given: {given}")]
    TopNTokens {
        /// The limit.
        max: usize,
        /// What the request asked for.
        given: usize,
    },
}

/// Validated sampling parameters of one request (TGI/OpenAI semantics).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; 0 is greedy decoding (the HTTP layer maps `do_sample: false` to 0).
    pub temperature: f32,
    /// Keep the k most likely tokens (and ties with the k-th).
    pub top_k: Option<usize>,
    /// Nucleus sampling: keep the most likely tokens until their mass reaches p.
    pub top_p: Option<f32>,
    /// Keep tokens at least `min_p` times as likely as the most likely one.
    pub min_p: Option<f32>,
    /// Locally typical sampling mass.
    pub typical_p: Option<f32>,
    /// TGI/transformers: divides positive and multiplies negative logits of tokens in prompt + output.
    pub repetition_penalty: Option<f32>,
    /// OpenAI: subtracted once per occurrence of a token in the generated text.
    pub frequency_penalty: f32,
    /// OpenAI: subtracted once from every token present in the generated text.
    pub presence_penalty: f32,
    /// Seed of the sequence's random stream; None draws one (reported by [`Sampler::seed`]).
    pub seed: Option<u64>,
    /// Whether [`Sampled::top`] is filled.
    pub logprobs: bool,
    /// How many most likely alternatives [`Sampled::top`] lists when `logprobs` is on.
    pub top_logprobs: usize,
}

impl SamplingParams {
    /// Greedy decoding without penalties or logprobs.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_k: None,
            top_p: None,
            min_p: None,
            typical_p: None,
            repetition_penalty: None,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            seed: None,
            logprobs: false,
            top_logprobs: 0,
        }
    }

    /// Checks every parameter's range (TGI's ranges, plus OpenAI's min_p, presence and top_logprobs).
    pub fn validate(&self) -> Result<(), SamplingError> {
        let floats = [
            (FloatParam::Temperature, Some(self.temperature)),
            (FloatParam::TopP, self.top_p),
            (FloatParam::TypicalP, self.typical_p),
            (FloatParam::MinP, self.min_p),
            (FloatParam::RepetitionPenalty, self.repetition_penalty),
            (FloatParam::FrequencyPenalty, Some(self.frequency_penalty)),
            (FloatParam::PresencePenalty, Some(self.presence_penalty)),
        ];
        for (param, v) in floats {
            v.map_or(Ok(()), |v| param.check(v))?;
        }
        if self.top_k == Some(0) {
            return Err(SamplingError::TopK);
        }
        if self.top_logprobs > MAX_TOP_LOGPROBS {
            return Err(SamplingError::TopNTokens { max: MAX_TOP_LOGPROBS, given: self.top_logprobs });
        }
        Ok(())
    }
}

/// One sampled token.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampled {
    /// The token id.
    pub token: u32,
    /// Its log-probability in the distribution it was drawn from (see the module docs).
    pub logprob: f32,
    /// The `top_logprobs` most likely tokens of that distribution with their log-probabilities,
    /// most likely first (ties to the lower id); fewer when truncation kept fewer; empty unless
    /// `logprobs` is on.
    pub top: Vec<(u32, f32)>,
}

/// Per-sequence sampler state: the seeded RNG and the token counts for the penalties. The
/// vocabulary-sized buffers are per thread, reused across calls and sequences.
#[derive(Debug)]
pub struct Sampler {
    /// The request's parameters.
    params: SamplingParams,
    /// The seed of `rng`.
    seed: u64,
    /// The sequence's random stream.
    rng: ChaCha20Rng,
    /// The stream a draft model samples its proposals from (the same seed, another ChaCha stream), so drafting
    /// never shifts the draws of `rng`.
    draft_rng: ChaCha20Rng,
    /// Tokens of the prompt and of the output (repetition penalty).
    seen: HashSet<u32>,
    /// How often each token was generated (frequency and presence penalties).
    counts: HashMap<u32, u32>,
}

/// Buffers reused by every sampler on a thread, so sampling allocates (almost) nothing.
#[derive(Default)]
struct Scratch {
    /// The logits being processed, then their softmax weights.
    logits: Vec<f32>,
    /// Softmax weights of the whole vocabulary, for top-p or typical-p without top-k.
    weights: Vec<f32>,
    /// The candidates a truncation kept.
    cands: Vec<Cand>,
    /// Per-block sums of softmax weights.
    blocks: Vec<f32>,
}

thread_local! {
    /// This thread's sampling buffers.
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

impl Sampler {
    /// A sampler for one sequence; `params` should be validated. Without a seed, one is drawn from
    /// the OS-seeded keys of std's `RandomState`.
    pub fn new(params: SamplingParams, prompt_ids: &[u32]) -> Self {
        let seed = params.seed.unwrap_or_else(random_seed);
        Self {
            params,
            seed,
            rng: ChaCha20Rng::seed_from_u64(seed),
            draft_rng: {
                let mut r = ChaCha20Rng::seed_from_u64(seed);
                r.set_stream(1);
                r
            },
            seen: prompt_ids.iter().copied().collect(),
            counts: HashMap::new(),
        }
    }

    /// The seed in use, given or drawn (TGI's `details.seed`).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Picks the next token from raw logits (the caller's slice is not modified) and returns it
    /// with its logprob and, when asked, the top alternatives. Does not record the token: call
    /// [`Sampler::accept`] for the token the sequence keeps.
    pub fn sample(&mut self, logits: &[f32]) -> Sampled {
        SCRATCH.with_borrow_mut(|s| self.sample_with(s, logits))
    }

    /// Records a token the sequence keeps, for the penalties (also after speculative verification).
    pub fn accept(&mut self, token: u32) {
        *self.counts.entry(token).or_insert(0) += 1;
        self.seen.insert(token);
    }

    /// The distribution [`Sampler::sample`] would draw from, after all processors, for speculative
    /// rejection sampling: sparse `(token, probability)` pairs, ascending token ids, only tokens of
    /// positive probability, summing to 1; greedy gives the argmax with probability 1.
    pub fn distribution(&mut self, logits: &[f32]) -> Vec<(u32, f32)> {
        SCRATCH.with_borrow_mut(|s| self.distribution_with(s, logits, Penalties::default()))
    }

    /// A uniform draw in [0, 1) from the sequence's seeded stream (speculative acceptance tests).
    pub fn uniform(&mut self) -> f64 {
        unit(self.rng.next_u64())
    }

    /// Whether the sampler takes the argmax (temperature 0).
    pub fn is_greedy(&self) -> bool {
        self.params.temperature == 0.0
    }

    /// [`Sampler::sample`] with this thread's buffers.
    fn sample_with(&mut self, s: &mut Scratch, logits: &[f32]) -> Sampled {
        let n_top = if self.params.logprobs { self.params.top_logprobs } else { 0 };
        self.load(s, logits, Penalties::default());
        if self.params.temperature == 0.0 {
            return greedy(s, n_top);
        }
        let truncated = self.warp(s);
        let max = math::max(&s.logits);
        let top = if truncated { top_n(s.cands.iter().copied(), n_top) } else { top_n(numbered(&s.logits), n_top) };
        let total = math::exp_blocks(&mut s.logits, max, &mut s.blocks);
        let Some(i) = math::draw(&s.logits, &s.blocks, total, self.uniform()) else {
            // Nothing has positive weight (all -inf or NaN, or a +inf logit): take the argmax.
            self.load(s, logits, Penalties::default());
            return greedy(s, n_top);
        };
        let ln_total = total.ln() as f32;
        Sampled {
            token: if truncated { s.cands[i].0 } else { i as u32 },
            logprob: s.logits[i].ln() - ln_total,
            top: top.into_iter().map(|(id, l)| (id, l - max - ln_total)).collect(),
        }
    }

    /// [`Sampler::distribution`] with this thread's buffers.
    /// The row's index `i` is token `ids[i]` when `pen.ids` is given (ascending), else token `i`.
    fn distribution_with(&self, s: &mut Scratch, logits: &[f32], pen: Penalties<'_>) -> Vec<(u32, f32)> {
        let token = |i: u32| pen.ids.map_or(i, |ids| ids[i as usize]);
        self.load(s, logits, pen);
        if self.params.temperature == 0.0 {
            return vec![(token(math::argmax(&s.logits) as u32), 1.0)];
        }
        let truncated = self.warp(s);
        let max = math::max(&s.logits);
        let total = math::exp_blocks(&mut s.logits, max, &mut s.blocks);
        if !(total > 0.0 && total.is_finite()) {
            self.load(s, logits, pen);
            return vec![(token(math::argmax(&s.logits) as u32), 1.0)];
        }
        let id = |i: u32| token(if truncated { s.cands[i as usize].0 } else { i });
        let mut dist: Vec<(u32, f32)> = numbered(&s.logits)
            .filter(|&(_, w)| w > 0.0)
            .map(|(i, w)| (id(i), (f64::from(w) / total) as f32))
            .collect();
        if truncated {
            dist.sort_unstable_by_key(|&(id, _)| id);
        }
        dist
    }

    /// Copies `logits` into the scratch buffer and applies the penalties there.
    fn load(&self, s: &mut Scratch, logits: &[f32], pen: Penalties<'_>) {
        s.logits.clear();
        s.logits.extend_from_slice(logits);
        self.penalise(&mut s.logits, pen);
    }

    /// Repetition penalty (tokens of prompt and output), then frequency and presence (output only), on a row
    /// whose index `i` is token `pen.ids[i]` (when given), as if the tokens `pen.drafted` were accepted too.
    fn penalise(&self, logits: &mut [f32], pen: Penalties<'_>) {
        let slot = |t: u32| match pen.ids {
            None => Some(t as usize),
            Some(ids) => ids.binary_search(&t).ok(),
        };
        // Drafted tokens new to the sequence, each once, with how often it was drafted.
        let fresh = pen.drafted.iter().enumerate().filter(|&(j, t)| !pen.drafted[..j].contains(t));
        let drafted = |t: u32| pen.drafted.iter().filter(|&&x| x == t).count() as u32;
        if let Some(r) = self.params.repetition_penalty.filter(|&r| r != 1.0) {
            let new = fresh.clone().map(|(_, &t)| t).filter(|t| !self.seen.contains(t));
            for t in self.seen.iter().copied().chain(new) {
                if let Some(l) = slot(t).and_then(|i| logits.get_mut(i)) {
                    *l = if *l < 0.0 { *l * r } else { *l / r };
                }
            }
        }
        let (freq, presence) = (self.params.frequency_penalty, self.params.presence_penalty);
        if freq != 0.0 || presence != 0.0 {
            let new = fresh.map(|(_, &t)| (t, 0)).filter(|(t, _)| !self.counts.contains_key(t));
            for (t, n) in self.counts.iter().map(|(&t, &n)| (t, n)).chain(new) {
                if let Some(l) = slot(t).and_then(|i| logits.get_mut(i)) {
                    *l -= freq * (n + drafted(t)) as f32 + presence;
                }
            }
        }
    }

    /// Applies temperature and the truncations to the scratch logits. Returns true when some
    /// truncation is active: the kept tokens are then in `cands`, their logits in `logits` in the
    /// same order; otherwise `logits` still covers the whole vocabulary.
    fn warp(&self, s: &mut Scratch) -> bool {
        let p = &self.params;
        if p.temperature != 1.0 {
            for l in &mut s.logits {
                *l /= p.temperature;
            }
        }
        let top_k = p.top_k.filter(|&k| k < s.logits.len());
        let top_p = p.top_p.filter(|&x| x < 1.0);
        let typical_p = p.typical_p.filter(|&x| x < 1.0);
        let min_p = p.min_p.filter(|&x| x > 0.0);
        if top_k.is_none() && top_p.is_none() && typical_p.is_none() && min_p.is_none() {
            return false;
        }
        let max = math::max(&s.logits);
        // Mass-based truncations over the whole vocabulary get its weights, computed vectorised,
        // and its distribution. Candidates keep the global best logit up to typical-p, so weights
        // relative to it serve every truncation.
        let dense = top_k.is_none() && (top_p.is_some() || typical_p.is_some());
        let mut whole = None;
        // Gather candidates only from where the first truncation can keep them.
        let (lo, hi) = if let Some(k) = top_k {
            (filter::top_k_floor(&s.logits, k), f32::INFINITY)
        } else if let Some(mass) = top_p.or(typical_p) {
            s.weights.clear();
            s.weights.extend_from_slice(&s.logits);
            let total = math::exp_blocks(&mut s.weights, max, &mut s.blocks);
            let lse = f64::from(max) + total.ln();
            let entropy = math::entropy(&s.logits, &s.weights, lse as f32, total);
            let dist = Dist { max, total, entropy };
            let center = if top_p.is_some() { max } else { dist.typical_center() };
            whole = Some(dist);
            filter::window(&s.logits, &s.weights, center, f64::from(mass) * total)
        } else {
            (min_p.map_or(f32::NEG_INFINITY, |x| max + x.ln()), f32::INFINITY)
        };
        s.cands.clear();
        s.cands.extend(numbered(&s.logits).filter(|&(_, l)| l > f32::NEG_INFINITY && l >= lo && l <= hi));
        let ws = &s.weights;
        let weight = |c: &Cand| f64::from(if dense { ws[c.0 as usize] } else { math::exp_neg(c.1 - max) });
        if let Some(k) = top_k {
            filter::top_k(&mut s.cands, k);
        }
        if let Some(x) = top_p {
            let dist = whole.take().unwrap_or_else(|| Dist::of(&s.cands, max, weight));
            filter::top_p(&mut s.cands, x, &dist, weight);
        }
        if let Some(x) = typical_p {
            let dist = whole.take().unwrap_or_else(|| Dist::of(&s.cands, max, weight));
            filter::typical_p(&mut s.cands, x, &dist, weight);
        }
        if let Some(x) = min_p {
            filter::min_p(&mut s.cands, x);
        }
        s.logits.clear();
        s.logits.extend(s.cands.iter().map(|c| c.1));
        true
    }
}

/// Greedy pick from the penalised logits in `s`, with their log-softmax.
fn greedy(s: &mut Scratch, n_top: usize) -> Sampled {
    let token = math::argmax(&s.logits);
    let max = s.logits.get(token).copied().unwrap_or(f32::NEG_INFINITY);
    let top = top_n(numbered(&s.logits), n_top);
    let total = math::exp_blocks(&mut s.logits, max, &mut s.blocks);
    // The argmax has weight 1 when `max` is finite; otherwise the distribution is degenerate.
    let ln_total = if max.is_finite() { total.ln() as f32 } else { 0.0 };
    Sampled {
        token: token as u32,
        logprob: -ln_total,
        top: top.into_iter().map(|(id, l)| (id, l - max - ln_total)).collect(),
    }
}

/// The `n` highest of a dense row of logits as `(token, logit)`, highest first, ties to the lower id.
pub(crate) fn top_logits(row: &[f32], n: usize) -> Vec<(u32, f32)> {
    top_n(numbered(row), n)
}

/// `(index, value)` pairs of a dense logits slice.
fn numbered(xs: &[f32]) -> impl Iterator<Item = Cand> + '_ {
    xs.iter().enumerate().map(|(i, &x)| (i as u32, x))
}

/// Where a row's logits sit and what the penalties see beyond the sequence's own tokens (for a draft model's
/// proposals): the default is a whole-vocabulary row and nothing drafted.
#[derive(Clone, Copy, Default)]
struct Penalties<'a> {
    /// The token of each index of the row (ascending), when the row covers only these tokens.
    ids: Option<&'a [u32]>,
    /// Tokens drafted after the sequence's last one, penalised as if accepted.
    drafted: &'a [u32],
}

/// A uniform in [0, 1) from the top 53 bits of a random `u64`.
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// A fresh seed from std's `RandomState`, whose keys come from the OS per thread.
fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0u8)
}
