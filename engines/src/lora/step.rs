//! The LoRA product of one batched step, segmented by adapter: every row of the step knows its adapter (or
//! none), and each projection adds `scale · B · (A · x)` to the rows whose adapter changes it, in one parallel
//! pass over the rows (shrink then expand per row), whatever the number of adapters in the batch. The base
//! projection runs once over all rows, as stored (quantized or not): adapters are never merged into it.

use std::ops::Range;
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use rayon::prelude::*;

use super::adapter::{LoraAdapter, LoraPair};
use super::module::Module;
use crate::model::ActivationObserver;

/// A sequence's adapter: which one, and the factor on its scale (llama-server's per-request `scale`; 1 as trained).
#[derive(Clone, Debug)]
pub struct LoraUse {
    /// The adapter, held for as long as the sequence runs (unloading it never cuts a running request short).
    pub adapter: Arc<LoraAdapter>,
    /// Multiplies the adapter's own scale.
    pub scale: f32,
}

impl LoraUse {
    /// The adapter at its trained scale.
    pub fn new(adapter: Arc<LoraAdapter>) -> Self {
        LoraUse { adapter, scale: 1.0 }
    }
}

/// The rows of one step and their adapters, and what observes the projections' inputs (see
/// [`ActivationObserver`]), if anything does.
#[derive(Default)]
pub struct LoraStep<'a> {
    /// Per row of the step, its adapter and scale factor.
    rows: Vec<Option<(&'a LoraAdapter, f32)>>,
    observer: Option<&'a dyn ActivationObserver>,
}

impl std::fmt::Debug for LoraStep<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoraStep").field("rows", &self.rows).field("observed", &self.observer.is_some()).finish()
    }
}

impl<'a> LoraStep<'a> {
    /// The step whose sequences cover `spans` (row ranges, in order) with the adapters `uses` (one per span, or
    /// none at all when no sequence has one).
    pub fn new(spans: impl Iterator<Item = Range<usize>>, uses: &'a [Option<LoraUse>]) -> Self {
        if uses.iter().all(Option::is_none) {
            return LoraStep::default();
        }
        let mut rows = Vec::new();
        for (span, u) in spans.zip(uses) {
            rows.resize(span.end, None);
            let u = u.as_ref().map(|u| (&*u.adapter, u.scale));
            rows[span].iter_mut().for_each(|r| *r = u);
        }
        LoraStep { rows, observer: None }
    }

    /// The step with `observer` shown every projection's input.
    pub fn observed(self, observer: Option<&'a dyn ActivationObserver>) -> Self {
        LoraStep { observer, ..self }
    }

    /// The step's view of layer `layer`.
    pub fn layer(&self, layer: usize) -> LayerLora<'_> {
        let active = !self.rows.is_empty() || self.observer.is_some();
        LayerLora { step: active.then_some(self), layer, expert: None }
    }

    /// Shows `observer` (if any) the input `x` of the weight matrix `name` outside the layers (`output.weight`).
    pub fn observe(&self, name: &str, x: &Tensor) -> candle_core::Result<()> {
        self.observer.map_or(Ok(()), |o| o.observe(name, None, x))
    }
}

/// One layer of a step's LoRA product (or one expert of its mixture, which adapters leave as it is).
#[derive(Clone, Copy, Debug)]
pub struct LayerLora<'s> {
    step: Option<&'s LoraStep<'s>>,
    layer: usize,
    /// `(expert, experts)` for a mixture's expert.
    expert: Option<(usize, usize)>,
}

impl LayerLora<'_> {
    /// No adapter on any row and no observer (a step without either).
    pub const NONE: LayerLora<'static> = LayerLora { step: None, layer: 0, expert: None };

    /// The view of expert `expert` of the layer's `experts`: observed, never adapted.
    pub fn expert(self, expert: usize, experts: usize) -> Self {
        LayerLora { expert: Some((expert, experts)), ..self }
    }

    /// Shows the step's observer (if any) the input `x` of the layer's weight `base` (`attn_q`, `ffn_gate_inp`;
    /// a mixture's expert's `ffn_up` is the stacked `ffn_up_exps`).
    pub fn observe(&self, base: &str, x: &Tensor) -> candle_core::Result<()> {
        let Some(observer) = self.step.and_then(|s| s.observer) else { return Ok(()) };
        let stacked = if self.expert.is_some() { "_exps" } else { "" };
        observer.observe(&format!("blk.{}.{base}{stacked}.weight", self.layer), self.expert, x)
    }

    /// `y` (the base projection `m` of `x`, `[rows, out]`) plus each row's adapter product on `x` (`[rows, in]`).
    pub fn add(&self, m: Module, x: &Tensor, y: Tensor) -> candle_core::Result<Tensor> {
        self.observe(m.gguf_name(), x)?;
        let Some(step) = self.step.filter(|s| !s.rows.is_empty() && self.expert.is_none()) else { return Ok(y) };
        let pairs: Vec<Option<(&LoraPair, f32)>> =
            step.rows.iter().map(|r| r.and_then(|(a, s)| Some((a.pair(self.layer, m)?, s)))).collect();
        let Some((first, _)) = pairs.iter().flatten().next() else { return Ok(y) };
        let (rows, cols) = (first.rows, first.cols);
        let x = x.to_device(&Device::Cpu)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        if x.len() != pairs.len() * cols {
            candle_core::bail!("LoRA: {} rows of {cols} inputs expected, got {} values", pairs.len(), x.len())
        }
        let mut delta = vec![0f32; pairs.len() * rows];
        delta.par_chunks_mut(rows).zip(x.par_chunks(cols)).zip(&pairs).for_each(|((d, x), p)| {
            if let Some((pair, s)) = p {
                expand(pair, &shrink(pair, x), pair.scale * s, d);
            }
        });
        let delta = Tensor::from_vec(delta, (pairs.len(), rows), y.device())?.to_dtype(y.dtype())?;
        y + delta
    }
}

/// `A · x`: the row's `rank` coordinates.
fn shrink(p: &LoraPair, x: &[f32]) -> Vec<f32> {
    p.a.chunks_exact(p.cols).map(|a| dot(a, x)).collect()
}

/// `d = scale · B · t`.
fn expand(p: &LoraPair, t: &[f32], scale: f32, d: &mut [f32]) {
    for (d, b) in d.iter_mut().zip(p.b.chunks_exact(p.rank)) {
        *d = scale * dot(b, t);
    }
}

/// Lanes of the dot product's partial sums: independent accumulators the compiler keeps in one SIMD register.
const LANES: usize = 8;

/// `a · b` over their common length, summed in [`LANES`] interleaved partial sums (vectorized, where a plain
/// running sum of floats stays scalar).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; LANES];
    let (ac, bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = ac.remainder().iter().zip(bc.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ac.zip(bc) {
        let (x, y): (&[f32; LANES], &[f32; LANES]) = (x.try_into().expect("a chunk"), y.try_into().expect("a chunk"));
        for ((s, x), y) in acc.iter_mut().zip(x).zip(y) {
            *s += x * y;
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::dot;

    #[test]
    fn dot_matches_a_plain_sum_at_every_length() {
        for n in [0, 1, 7, 8, 9, 16, 37] {
            let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
            let b: Vec<f32> = (0..n).map(|i| 1.0 - i as f32 * 0.25).collect();
            let want: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - want).abs() <= 1e-4 * want.abs().max(1.0), "n = {n}");
        }
    }
}
