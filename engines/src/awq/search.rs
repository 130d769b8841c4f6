//! The layer-by-layer driver: embeds the calibration blocks, then for each decoder layer runs the original
//! layer over all samples (capturing what the searches need), searches and folds the scales, searches the
//! clipping, and hands the layer's new weights over; the original layer's output feeds the next layer.

use candle_core::{Device, Tensor};
use tgi_formats::hf::Architecture;
use tgi_formats::TensorSource;

use super::calibration::Calibration;
use super::clip::{apply_clip, search_clip, token_stride};
use super::forward::{add_abs_sums, mse, Captures, Context, DenseLayer};
use super::layer::{unscale_norm, LayerWeights, Proj};
use super::scale::{fake_quant_scaled, search, weight_mean, ScaleChoice};
use super::{AwqOptions, AwqSearchError};
use crate::model::rope::Rope;
use crate::model::DecoderConfig;

/// Samples run through a layer at once when capturing.
const FORWARD_CHUNK: usize = 8;

/// A step of the search, for progress reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Running the original layer over the calibration set.
    Forward,
    /// Searching the scales of the group of linears led by this one.
    Scale(Proj),
    /// Searching the clipping of this linear.
    Clip(Proj),
}

/// One scaled group's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupReport {
    /// The linears scaled together.
    pub linears: Vec<Proj>,
    /// The chosen exponent (`k / 20`); `None` when the unscaled weights measured best.
    pub ratio: Option<f32>,
    /// The inspected module's output MSE with the chosen scales.
    pub loss: f32,
    /// The same MSE with plain round-to-nearest (no scaling).
    pub rtn_loss: f32,
}

/// A decoder layer after the search: weights to round to nearest and store.
#[derive(Clone, Debug)]
pub struct SearchedLayer {
    /// Scaled and clipped weights and rescaled norms.
    pub weights: LayerWeights,
    /// Per scaled group, the search's outcome.
    pub groups: Vec<GroupReport>,
}

/// The search over a checkpoint, one layer per [`AwqSearch::next_layer`].
pub struct AwqSearch<'a> {
    source: &'a dyn TensorSource,
    cfg: DecoderConfig,
    rope: Rope,
    opts: AwqOptions,
    seq: usize,
    samples: usize,
    /// Hidden states entering the next layer, `[samples * seq, hidden]`.
    x: Tensor,
    next: usize,
}

/// A group of linears scaled together, its preceding op, and the module its loss is measured on.
struct Group {
    prev: Prev,
    linears: &'static [Proj],
}

/// What the scales are folded into.
enum Prev {
    InputNorm,
    PostNorm,
    Linear(Proj),
}

/// The groups AutoAWQ scales in a Llama layer (v -> o only without GQA, where the shapes match).
fn groups(cfg: &DecoderConfig) -> Vec<Group> {
    let mut g = vec![Group { prev: Prev::InputNorm, linears: &[Proj::Q, Proj::K, Proj::V] }];
    if Proj::V.shape(cfg) == Proj::O.shape(cfg) {
        g.push(Group { prev: Prev::Linear(Proj::V), linears: &[Proj::O] });
    }
    g.push(Group { prev: Prev::PostNorm, linears: &[Proj::Gate, Proj::Up] });
    g.push(Group { prev: Prev::Linear(Proj::Up), linears: &[Proj::Down] });
    g
}

/// The linears whose clipping is searched (all but q and k).
const CLIPPED: [Proj; 5] = [Proj::V, Proj::O, Proj::Gate, Proj::Up, Proj::Down];

/// Per-capture data: `[q/k/v, o, gate/up, down]` inputs.
struct Inputs {
    /// Mean |x| per channel over every calibration token.
    mean: [Vec<f32>; 4],
    /// Rows of the first `search_samples` samples.
    search: [Tensor; 4],
    /// Rows strided over all tokens, for the clip search.
    clip: [Tensor; 4],
    /// The original attention block's and MLP's outputs on the search rows (the losses' references).
    reference: [Tensor; 2],
}

/// Which block's output `p` contributes to: 0 the attention, 1 the MLP.
fn reference_of(p: Proj) -> usize {
    match p {
        Proj::Q | Proj::K | Proj::V | Proj::O => 0,
        Proj::Gate | Proj::Up | Proj::Down => 1,
    }
}

/// Which capture feeds `p`.
fn input_of(p: Proj) -> usize {
    match p {
        Proj::Q | Proj::K | Proj::V => 0,
        Proj::O => 1,
        Proj::Gate | Proj::Up => 2,
        Proj::Down => 3,
    }
}

impl<'a> AwqSearch<'a> {
    /// Prepares the search over `source` (HF tensor names) for the blocks of `calib`; `rope_factors` are
    /// Llama 3's per-frequency divisors, if any. Refuses layers whose inputs do not divide into groups.
    pub fn new(
        source: &'a dyn TensorSource,
        cfg: DecoderConfig,
        rope_factors: Option<&[f32]>,
        calib: &Calibration,
        opts: AwqOptions,
    ) -> Result<Self, AwqSearchError> {
        if crate::model::Family::of(cfg.architecture) != crate::model::Family::of(Architecture::Llama) {
            return Err(AwqSearchError::Unsupported(format!(
                "the AWQ search runs Llama-style layers; {} is not one (supported: {})",
                cfg.architecture.hf_class(),
                [Architecture::Llama, Architecture::Mistral, Architecture::Qwen2]
                    .map(Architecture::hf_class)
                    .join(", ")
            )));
        }
        for p in Proj::ALL {
            let (_, i) = p.shape(&cfg);
            if opts.group_size == 0 || !i.is_multiple_of(opts.group_size) {
                return Err(AwqSearchError::GroupSize {
                    name: p.hf_name(0).replace(".0.", ".N."),
                    in_features: i,
                    group_size: opts.group_size,
                });
            }
        }
        if calib.seq_len > cfg.context {
            return Err(AwqSearchError::Unsupported(format!(
                "calibration blocks of {} tokens exceed the model's context of {}",
                calib.seq_len, cfg.context
            )));
        }
        let embed = source.read_f32("model.embed_tokens.weight")?;
        if embed.len() != cfg.vocab * cfg.hidden {
            return Err(AwqSearchError::Shape {
                name: "model.embed_tokens.weight".into(),
                expected: cfg.vocab * cfg.hidden,
                found: embed.len(),
            });
        }
        let mut x = Vec::with_capacity(calib.tokens() * cfg.hidden);
        for &t in calib.blocks.iter().flatten() {
            let t = t as usize;
            if t >= cfg.vocab {
                return Err(AwqSearchError::Unsupported(format!(
                    "token id {t} is outside the vocabulary of {}",
                    cfg.vocab
                )));
            }
            x.extend_from_slice(&embed[t * cfg.hidden..(t + 1) * cfg.hidden]);
        }
        let x = Tensor::from_vec(x, (calib.tokens(), cfg.hidden), &Device::Cpu)?;
        let rope = Rope::new(&cfg, rope_factors);
        Ok(AwqSearch { source, rope, opts, seq: calib.seq_len, samples: calib.blocks.len(), x, next: 0, cfg })
    }

    /// Decoder layers in the model.
    pub fn layers(&self) -> usize {
        self.cfg.layers
    }

    /// Progress steps per layer (one forward, one per scaled group, one per clipped linear).
    pub fn steps_per_layer(&self) -> usize {
        1 + groups(&self.cfg).len() + CLIPPED.len()
    }

    /// Samples the scale-search losses are evaluated on.
    pub fn search_samples(&self) -> usize {
        self.opts.search_samples.clamp(1, self.samples)
    }

    fn ctx(&self) -> Context<'_> {
        Context { cfg: &self.cfg, rope: &self.rope, seq: self.seq }
    }

    /// Searches the next layer; `None` after the last. `progress` hears each step as it starts.
    pub fn next_layer(&mut self, progress: &mut dyn FnMut(Step)) -> Result<Option<SearchedLayer>, AwqSearchError> {
        if self.next == self.cfg.layers {
            return Ok(None);
        }
        progress(Step::Forward);
        let mut lw = LayerWeights::read(self.source, &self.cfg, self.next)?;
        let dense = DenseLayer::new(&lw, &self.cfg)?;
        let inputs = self.capture(&dense)?;
        let mut choices = Vec::new();
        for g in groups(&self.cfg) {
            progress(Step::Scale(g.linears[0]));
            let choice = self.search_group(&dense, &lw, &g, &inputs)?;
            choices.push((g, choice));
        }
        let mut clip_inputs = inputs.clip;
        let mut reports = Vec::new();
        for (g, c) in choices {
            fold(&mut lw, &g, &c.scales);
            let s = Tensor::from_slice(&c.scales, c.scales.len(), &Device::Cpu)?;
            let k = input_of(g.linears[0]);
            clip_inputs[k] = clip_inputs[k].broadcast_div(&s)?;
            reports.push(GroupReport {
                linears: g.linears.to_vec(),
                ratio: c.ratio,
                loss: c.loss,
                rtn_loss: c.rtn_loss,
            });
        }
        for p in CLIPPED {
            progress(Step::Clip(p));
            let (_, i) = p.shape(&self.cfg);
            let bound =
                search_clip(lw.weight(p), i, &clip_inputs[input_of(p)], self.opts.group_size, self.opts.zero_point)?;
            apply_clip(&mut lw.weights[p as usize], &bound, self.opts.group_size);
        }
        self.next += 1;
        Ok(Some(SearchedLayer { weights: lw, groups: reports }))
    }

    /// Runs the original layer over every sample: the activation means, the search and clip rows, and the
    /// output that becomes the next layer's input.
    fn capture(&mut self, dense: &DenseLayer) -> Result<Inputs, AwqSearchError> {
        let ctx = Context { cfg: &self.cfg, rope: &self.rope, seq: self.seq };
        let widths = [self.cfg.hidden, self.cfg.heads * self.cfg.head_dim, self.cfg.hidden, self.cfg.intermediate];
        let mut sums = widths.map(|w| vec![0f64; w]);
        let mut search: [Vec<Tensor>; 4] = Default::default();
        let mut clip: [Vec<Tensor>; 4] = Default::default();
        let mut outs = Vec::new();
        let mut reference: [Vec<Tensor>; 2] = Default::default();
        let (n_tok, search_rows) = (self.samples * self.seq, self.search_samples() * self.seq);
        let stride = token_stride(n_tok);
        let step = FORWARD_CHUNK * self.seq;
        for start in (0..n_tok).step_by(step) {
            let len = step.min(n_tok - start);
            let c: Captures = dense.forward(&ctx, &self.x.narrow(0, start, len)?)?;
            let first = start.div_ceil(stride) * stride - start; // first strided row in this chunk
            let picks: Vec<u32> = (first..len).step_by(stride).map(|r| r as u32).collect();
            let picks = Tensor::from_vec(picks.clone(), picks.len(), &Device::Cpu)?;
            for (k, t) in [&c.h1, &c.attn, &c.h2, &c.inner].into_iter().enumerate() {
                add_abs_sums(&mut sums[k], t)?;
                if start < search_rows {
                    search[k].push(t.narrow(0, 0, len.min(search_rows - start))?);
                }
                clip[k].push(t.index_select(&picks, 0)?);
            }
            if start < search_rows {
                for (r, t) in reference.iter_mut().zip([&c.attn_out, &c.mlp_out]) {
                    r.push(t.narrow(0, 0, len.min(search_rows - start))?);
                }
            }
            outs.push(c.out);
        }
        self.x = Tensor::cat(&outs, 0)?;
        let cat = |v: &[Tensor]| Tensor::cat(v, 0);
        Ok(Inputs {
            mean: sums.map(|s| s.into_iter().map(|v| (v / n_tok as f64) as f32).collect()),
            search: [cat(&search[0])?, cat(&search[1])?, cat(&search[2])?, cat(&search[3])?],
            clip: [cat(&clip[0])?, cat(&clip[1])?, cat(&clip[2])?, cat(&clip[3])?],
            reference: [cat(&reference[0])?, cat(&reference[1])?],
        })
    }

    /// The grid search for one group on the search rows, and the loss of plain round-to-nearest.
    fn search_group(
        &self,
        dense: &DenseLayer,
        lw: &LayerWeights,
        g: &Group,
        inputs: &Inputs,
    ) -> Result<ScaleChoice, AwqSearchError> {
        let ctx = self.ctx();
        let k = input_of(g.linears[0]);
        let x = &inputs.search[k];
        let module = |l: &DenseLayer| -> candle_core::Result<Tensor> {
            match g.prev {
                Prev::InputNorm => l.self_attn(&ctx, x),
                Prev::PostNorm => l.mlp(x),
                Prev::Linear(_) => l.single(g.linears[0], x),
            }
        };
        let reference = &inputs.reference[reference_of(g.linears[0])];
        let (_, in_features) = g.linears[0].shape(&self.cfg);
        let weights: Vec<&[f32]> = g.linears.iter().map(|&p| lw.weight(p)).collect();
        let w_mean = weight_mean(&weights, in_features, self.opts.group_size);
        let loss = |s: &[f32]| -> Result<f32, AwqSearchError> {
            let mut l = dense.clone();
            for &p in g.linears {
                let (o, i) = p.shape(&self.cfg);
                let q = fake_quant_scaled(lw.weight(p), s, self.opts.group_size, self.opts.zero_point);
                l = l.with(p, Tensor::from_vec(q, (o, i), &Device::Cpu)?);
            }
            Ok(mse(reference, &module(&l)?)?)
        };
        search(&inputs.mean[k], &w_mean, loss)
    }
}

/// Folds a group's scales into the layer: the preceding norm or linear's output divided by `s`, the group's
/// input columns multiplied by it (the layer computes the same function before quantization).
fn fold(lw: &mut LayerWeights, g: &Group, s: &[f32]) {
    match g.prev {
        Prev::InputNorm => unscale_norm(&mut lw.input_norm, s),
        Prev::PostNorm => unscale_norm(&mut lw.post_norm, s),
        Prev::Linear(p) => lw.unscale_rows(p, s),
    }
    for &p in g.linears {
        lw.scale_columns(p, s);
    }
}

#[cfg(test)]
mod tests;
