//! The gated MLP (SwiGLU, GeGLU): `down(act(gate(x)) * up(x))`, a decoder layer's MLP or one expert of a mixture;
//! gate and up are two projections or one fused one (Phi-3's `gate_up_proj`, gate rows first).

use candle_core::{CpuStorage, CustomOp2, DType, Layout, Shape, Tensor};

use super::family::Activation;
use super::linear::Linear;
use super::weights::Weights;
use super::ModelError;
use crate::kernels::gated::gated;
use crate::lora::{LayerLora, Module};

/// Hugging Face names of a gated MLP's projections under its prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MlpNames {
    /// Separate gate and up projections.
    Split {
        /// The gate projection (`gate_proj`; Mixtral's `w1`).
        gate: &'static str,
        /// The up projection (`up_proj`; Mixtral's `w3`).
        up: &'static str,
        /// The down projection (`down_proj`; Mixtral's `w2`).
        down: &'static str,
    },
    /// One projection whose first half of rows is the gate and second the up (`gate_up_proj`).
    Fused {
        /// The fused gate and up projection.
        gate_up: &'static str,
        /// The down projection.
        down: &'static str,
    },
}

impl MlpNames {
    /// Llama's names.
    pub const LLAMA: MlpNames = MlpNames::Split { gate: "gate_proj", up: "up_proj", down: "down_proj" };
    /// Mixtral's expert names.
    pub const MIXTRAL: MlpNames = MlpNames::Split { gate: "w1", up: "w3", down: "w2" };
    /// Phi-3's names.
    pub const PHI3: MlpNames = MlpNames::Fused { gate_up: "gate_up_proj", down: "down_proj" };
}

/// The gate and up projections.
enum GateUp {
    Split { gate: Linear, up: Linear },
    Fused(Linear),
}

/// A gated MLP.
pub struct Mlp {
    gate_up: GateUp,
    down: Linear,
    inner: usize,
}

impl Mlp {
    /// The MLP under `prefix` (`{prefix}.gate_proj`, ...), `inner` wide, over rows of `hidden`.
    pub fn load(w: &Weights, prefix: &str, names: MlpNames, hidden: usize, inner: usize) -> Result<Self, ModelError> {
        let linear = |name: &str, rows, cols| w.linear(&format!("{prefix}.{name}"), rows, cols, false);
        let (gate_up, down) = match names {
            MlpNames::Split { gate, up, down } => {
                (GateUp::Split { gate: linear(gate, inner, hidden)?, up: linear(up, inner, hidden)? }, down)
            }
            MlpNames::Fused { gate_up, down } => (GateUp::Fused(linear(gate_up, 2 * inner, hidden)?), down),
        };
        Ok(Mlp { gate_up, down: linear(down, hidden, inner)?, inner })
    }

    /// `down(act(gate(x)) * up(x))` for `[rows, hidden]` rows, with each row's adapter.
    pub fn forward(&self, x: &Tensor, act: Activation, lora: LayerLora<'_>) -> candle_core::Result<Tensor> {
        let (g, u) = match &self.gate_up {
            GateUp::Split { gate, up } => {
                (lora.add(Module::Gate, x, gate.forward(x)?)?, lora.add(Module::Up, x, up.forward(x)?)?)
            }
            GateUp::Fused(l) => {
                let y = lora.add(Module::GateUp, x, l.forward(x)?)?;
                (y.narrow(1, 0, self.inner)?.contiguous()?, y.narrow(1, self.inner, self.inner)?.contiguous()?)
            }
        };
        let gated = if g.device().is_cpu() && g.dtype() == DType::F32 {
            g.contiguous()?.apply_op2_no_bwd(&u.contiguous()?, &HostGated(act))?
        } else {
            let g = match act {
                Activation::Silu => candle_nn::ops::silu(&g)?,
                Activation::GeluTanh => g.gelu()?,
            };
            (g * u)?
        };
        lora.add(Module::Down, &gated, self.down.forward(&gated)?)
    }

    /// The projections.
    pub fn linears(&self) -> Vec<&Linear> {
        match &self.gate_up {
            GateUp::Split { gate, up } => vec![gate, up, &self.down],
            GateUp::Fused(l) => vec![l, &self.down],
        }
    }
}

/// `act(g) · u` on host f32 tensors of one shape, by the vectorized kernel.
struct HostGated(Activation);

impl CustomOp2 for HostGated {
    fn name(&self) -> &'static str {
        "tgi-host-gated"
    }

    fn cpu_fwd(
        &self,
        g: &CpuStorage,
        gl: &Layout,
        u: &CpuStorage,
        ul: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (CpuStorage::F32(g), CpuStorage::F32(u)) = (g, u) else {
            candle_core::bail!("the gated activation expects f32 gate and up rows")
        };
        let (Some((g0, g1)), Some((u0, u1))) = (gl.contiguous_offsets(), ul.contiguous_offsets()) else {
            candle_core::bail!("the gated activation expects contiguous rows")
        };
        if gl.dims() != ul.dims() {
            candle_core::bail!("gate {:?} and up {:?} differ in shape", gl.dims(), ul.dims())
        }
        let mut y = g[g0..g1].to_vec();
        gated(self.0, &mut y, &u[u0..u1]);
        Ok((CpuStorage::F32(y), gl.shape().clone()))
    }
}
