//! One decoder layer's weights as dense f32 vectors (Hugging Face layout: linears `[out, in]` row-major),
//! read from the checkpoint, and the scale folding that keeps the layer's function unchanged.

use tgi_formats::TensorSource;

use super::AwqSearchError;
use crate::model::DecoderConfig;

/// The seven linear layers of a Llama decoder layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proj {
    /// Query projection.
    Q,
    /// Key projection.
    K,
    /// Value projection.
    V,
    /// Attention output projection.
    O,
    /// MLP gate.
    Gate,
    /// MLP up projection.
    Up,
    /// MLP down projection.
    Down,
}

impl Proj {
    /// All seven, in checkpoint order.
    pub const ALL: [Proj; 7] = [Proj::Q, Proj::K, Proj::V, Proj::O, Proj::Gate, Proj::Up, Proj::Down];

    /// The module name inside a layer (`self_attn.q_proj`).
    pub fn name(self) -> &'static str {
        match self {
            Proj::Q => "self_attn.q_proj",
            Proj::K => "self_attn.k_proj",
            Proj::V => "self_attn.v_proj",
            Proj::O => "self_attn.o_proj",
            Proj::Gate => "mlp.gate_proj",
            Proj::Up => "mlp.up_proj",
            Proj::Down => "mlp.down_proj",
        }
    }

    /// The full Hugging Face weight prefix in layer `layer` (`model.layers.3.self_attn.q_proj`).
    pub fn hf_name(self, layer: usize) -> String {
        format!("model.layers.{layer}.{}", self.name())
    }

    /// `(out, in)` features under `cfg`.
    pub fn shape(self, cfg: &DecoderConfig) -> (usize, usize) {
        let (q, kv) = (cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim);
        match self {
            Proj::Q => (q, cfg.hidden),
            Proj::K | Proj::V => (kv, cfg.hidden),
            Proj::O => (cfg.hidden, q),
            Proj::Gate | Proj::Up => (cfg.intermediate, cfg.hidden),
            Proj::Down => (cfg.hidden, cfg.intermediate),
        }
    }
}

/// A decoder layer's weights in f32.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerWeights {
    /// The layer's index.
    pub index: usize,
    /// `input_layernorm.weight`.
    pub input_norm: Vec<f32>,
    /// `post_attention_layernorm.weight`.
    pub post_norm: Vec<f32>,
    /// The linears' weights `[out, in]`, in [`Proj::ALL`] order.
    pub weights: [Vec<f32>; 7],
    /// q/k/v biases (Qwen2), if the checkpoint has them.
    pub qkv_bias: Option<[Vec<f32>; 3]>,
}

impl LayerWeights {
    /// Reads layer `index` from an HF-named checkpoint.
    pub fn read(source: &dyn TensorSource, cfg: &DecoderConfig, index: usize) -> Result<Self, AwqSearchError> {
        let read = |name: String, len: usize| -> Result<Vec<f32>, AwqSearchError> {
            let v = source.read_f32(&name)?;
            if v.len() != len {
                return Err(AwqSearchError::Shape { name, expected: len, found: v.len() });
            }
            Ok(v)
        };
        let p = format!("model.layers.{index}");
        let weights = Proj::ALL.map(|proj| {
            let (o, i) = proj.shape(cfg);
            read(format!("{}.weight", proj.hf_name(index)), o * i)
        });
        let weights = {
            let [q, k, v, o, g, u, d] = weights;
            [q?, k?, v?, o?, g?, u?, d?]
        };
        let has_bias = source.tensors().iter().any(|m| m.name == format!("{p}.self_attn.q_proj.bias"));
        let qkv_bias = if has_bias {
            let bias = |proj: Proj| read(format!("{}.bias", proj.hf_name(index)), proj.shape(cfg).0);
            Some([bias(Proj::Q)?, bias(Proj::K)?, bias(Proj::V)?])
        } else {
            None
        };
        Ok(LayerWeights {
            index,
            input_norm: read(format!("{p}.input_layernorm.weight"), cfg.hidden)?,
            post_norm: read(format!("{p}.post_attention_layernorm.weight"), cfg.hidden)?,
            weights,
            qkv_bias,
        })
    }

    /// The weight of `proj`.
    pub fn weight(&self, proj: Proj) -> &[f32] {
        &self.weights[proj as usize]
    }

    /// Multiplies the input columns of `proj` by `s` (one factor per input feature).
    pub(crate) fn scale_columns(&mut self, proj: Proj, s: &[f32]) {
        for row in self.weights[proj as usize].chunks_exact_mut(s.len()) {
            row.iter_mut().zip(s).for_each(|(w, s)| *w *= s);
        }
    }

    /// Divides the output rows of `proj` (and its bias) by `s` (one factor per output feature).
    pub(crate) fn unscale_rows(&mut self, proj: Proj, s: &[f32]) {
        let cols = self.weights[proj as usize].len() / s.len();
        for (row, s) in self.weights[proj as usize].chunks_exact_mut(cols).zip(s) {
            row.iter_mut().for_each(|w| *w /= s);
        }
        if let (Some(b), Proj::Q | Proj::K | Proj::V) = (&mut self.qkv_bias, proj) {
            b[proj as usize].iter_mut().zip(s).for_each(|(b, s)| *b /= s);
        }
    }
}

/// Divides a norm's weight by `s`.
pub(crate) fn unscale_norm(norm: &mut [f32], s: &[f32]) {
    norm.iter_mut().zip(s).for_each(|(w, s)| *w /= s);
}
