//! What a forward pass shows of its projections' inputs: an observer is called with each weight matrix's input
//! rows before the matrix multiplies them (what llama-imatrix's graph callback reads).

use candle_core::Tensor;

/// Sees the input of every weight matrix of a forward pass.
pub trait ActivationObserver: Sync {
    /// `x` (`[rows, cols]`) is about to meet the weight matrix `name` (its GGUF name, `blk.3.attn_q.weight`);
    /// `expert` is `(expert, experts)` for a mixture's stacked expert matrices (`blk.3.ffn_up_exps.weight`).
    fn observe(&self, name: &str, expert: Option<(usize, usize)>, x: &Tensor) -> candle_core::Result<()>;
}
