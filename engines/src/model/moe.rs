//! Mixture of experts (Mixtral, Qwen3-MoE): a router scores the experts for each token, the token goes through
//! its `top_k` best ones, and their outputs are summed weighted by the router's softmax. Each expert runs once
//! per step, over exactly the rows routed to it (from every sequence of the batch).

use candle_core::{DType, Tensor};
use tgi_formats::hf::MoeConfig;

use super::family::Activation;
use super::linear::Linear;
use super::mlp::{Mlp, MlpNames};
use super::weights::Weights;
use super::ModelError;
use crate::lora::LayerLora;

/// One mixture-of-experts MLP.
pub struct Moe {
    router: Linear,
    experts: Vec<Mlp>,
    top_k: usize,
    norm_topk_prob: bool,
}

/// Where an architecture keeps a mixture's weights: `{prefix}.{block}.gate` routes to
/// `{prefix}.{block}.experts.E.{names}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeNames {
    /// The block's module name (`mlp`; Mixtral's `block_sparse_moe`).
    pub block: &'static str,
    /// The experts' projections.
    pub expert: MlpNames,
}

impl Moe {
    /// The mixture of layer prefix `p` (`model.layers.N`) over rows of `hidden`.
    pub fn load(w: &Weights, p: &str, names: MoeNames, cfg: &MoeConfig, hidden: usize) -> Result<Self, ModelError> {
        let block = format!("{p}.{}", names.block);
        let experts = (0..cfg.experts)
            .map(|e| Mlp::load(w, &format!("{block}.experts.{e}"), names.expert, hidden, cfg.expert_intermediate))
            .collect::<Result<_, _>>()?;
        Ok(Moe {
            router: w.linear(&format!("{block}.gate"), cfg.experts, hidden, false)?,
            experts,
            top_k: cfg.experts_per_token,
            norm_topk_prob: cfg.norm_topk_prob,
        })
    }

    /// The mixture's output for `[rows, hidden]` rows (`lora` observes the router and experts; adapters leave
    /// experts as they are).
    pub fn forward(&self, x: &Tensor, act: Activation, lora: LayerLora<'_>) -> candle_core::Result<Tensor> {
        lora.observe("ffn_gate_inp", x)?;
        let logits = self.router.forward(x)?.to_dtype(DType::F32)?.to_vec2::<f32>()?;
        let mut rows: Vec<Vec<u32>> = vec![Vec::new(); self.experts.len()];
        let mut weights: Vec<Vec<f32>> = vec![Vec::new(); self.experts.len()];
        for (r, l) in logits.iter().enumerate() {
            for (e, w) in route(l, self.top_k, self.norm_topk_prob) {
                rows[e].push(r as u32);
                weights[e].push(w);
            }
        }
        // Experts in order, each adding its weighted rows (transformers' order of summation).
        let mut out = x.zeros_like()?;
        let experts = self.experts.len();
        for (e, ((expert, rows), weights)) in self.experts.iter().zip(rows).zip(weights).enumerate() {
            if rows.is_empty() {
                continue;
            }
            let n = rows.len();
            let idx = Tensor::from_vec(rows, n, x.device())?;
            let y = expert.forward(&x.index_select(&idx, 0)?, act, lora.expert(e, experts))?;
            let w = Tensor::from_vec(weights, (n, 1), x.device())?.to_dtype(y.dtype())?;
            out = out.index_add(&idx, &y.broadcast_mul(&w)?, 0)?;
        }
        Ok(out)
    }

    /// The router and every expert's projections.
    pub fn linears(&self) -> impl Iterator<Item = &Linear> {
        std::iter::once(&self.router).chain(self.experts.iter().flat_map(Mlp::linears))
    }
}

/// A token's experts and their weights from its router logits: softmax over all experts, the `top_k` largest
/// probabilities (largest first, ties to the lower expert), renormalized to sum to one when `norm`.
pub fn route(logits: &[f32], top_k: usize, norm: bool) -> Vec<(usize, f32)> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exp: Vec<f32> = logits.iter().map(|&l| (l - max).exp()).collect();
    let sum: f32 = exp.iter().sum();
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| exp[b].total_cmp(&exp[a]).then(a.cmp(&b)));
    let chosen: Vec<(usize, f32)> = order.into_iter().take(top_k).map(|e| (e, exp[e] / sum)).collect();
    if !norm {
        return chosen;
    }
    let total: f32 = chosen.iter().map(|(_, p)| p).sum();
    chosen.into_iter().map(|(e, p)| (e, p / total)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_picks_the_largest_and_normalizes() {
        let logits = [0.5, 2.0, -1.0, 2.0];
        let r = route(&logits, 2, false);
        assert_eq!(r.iter().map(|c| c.0).collect::<Vec<_>>(), [1, 3], "ties go to the lower expert");
        let z: f32 = logits.iter().map(|l| l.exp()).sum();
        assert!((r[0].1 - 2f32.exp() / z).abs() < 1e-6);
        let n = route(&logits, 3, true);
        assert_eq!(n.iter().map(|c| c.0).collect::<Vec<_>>(), [1, 3, 0]);
        assert!((n.iter().map(|c| c.1).sum::<f32>() - 1.0).abs() < 1e-6);
        // Mixtral's softmax over the chosen logits is the same as renormalizing.
        let chosen_z = 2f32.exp() * 2.0 + 0.5f32.exp();
        assert!((n[2].1 - 0.5f32.exp() / chosen_z).abs() < 1e-6);
    }
}
