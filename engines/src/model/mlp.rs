//! The gated MLP (SwiGLU, GeGLU): `down(act(gate(x)) * up(x))`, a decoder layer's MLP or one expert of a mixture.

use candle_core::Tensor;

use super::family::Activation;
use super::linear::Linear;
use super::weights::Weights;
use super::ModelError;

/// Hugging Face names of a gated MLP's three projections under its prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlpNames {
    /// The gate projection (`gate_proj`; Mixtral's `w1`).
    pub gate: &'static str,
    /// The up projection (`up_proj`; Mixtral's `w3`).
    pub up: &'static str,
    /// The down projection (`down_proj`; Mixtral's `w2`).
    pub down: &'static str,
}

impl MlpNames {
    /// Llama's names.
    pub const LLAMA: MlpNames = MlpNames { gate: "gate_proj", up: "up_proj", down: "down_proj" };
    /// Mixtral's expert names.
    pub const MIXTRAL: MlpNames = MlpNames { gate: "w1", up: "w3", down: "w2" };
}

/// A gated MLP.
pub struct Mlp {
    gate: Linear,
    up: Linear,
    down: Linear,
}

impl Mlp {
    /// The MLP under `prefix` (`{prefix}.gate_proj`, ...), `inner` wide, over rows of `hidden`.
    pub fn load(w: &Weights, prefix: &str, names: MlpNames, hidden: usize, inner: usize) -> Result<Self, ModelError> {
        Ok(Mlp {
            gate: w.linear(&format!("{prefix}.{}", names.gate), inner, hidden, false)?,
            up: w.linear(&format!("{prefix}.{}", names.up), inner, hidden, false)?,
            down: w.linear(&format!("{prefix}.{}", names.down), hidden, inner, false)?,
        })
    }

    /// `down(act(gate(x)) * up(x))` for `[rows, hidden]` rows.
    pub fn forward(&self, x: &Tensor, act: Activation) -> candle_core::Result<Tensor> {
        let g = self.gate.forward(x)?;
        let g = match act {
            Activation::Silu => candle_nn::ops::silu(&g)?,
            Activation::GeluTanh => g.gelu()?,
        };
        self.down.forward(&(g * self.up.forward(x)?)?)
    }

    /// The three projections.
    pub fn linears(&self) -> [&Linear; 3] {
        [&self.gate, &self.up, &self.down]
    }
}
