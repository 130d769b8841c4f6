//! Rotary position embeddings, computed per step for the positions in the batch.

use candle_core::{Device, Tensor};

use super::config::{DecoderConfig, RopeStyle};

/// RoPE frequencies and pairing for one model.
#[derive(Clone, Debug)]
pub struct Rope {
    inv_freq: Vec<f32>,
    position_scale: f32,
    style: RopeStyle,
}

impl Rope {
    /// Frequencies `theta^(-2i/d)`, divided by per-frequency `factors` (Llama 3 scaling) when given.
    pub fn new(cfg: &DecoderConfig, factors: Option<&[f32]>) -> Self {
        Self::with_base(cfg, cfg.rope_theta, factors, cfg.rope_position_scale)
    }

    /// Gemma 3's RoPE of sliding layers: their own base, no scaling; `None` for other models.
    pub fn local(cfg: &DecoderConfig) -> Option<Self> {
        cfg.rope_local_theta.map(|theta| Self::with_base(cfg, theta, None, 1.0))
    }

    fn with_base(cfg: &DecoderConfig, theta: f32, factors: Option<&[f32]>, position_scale: f32) -> Self {
        let d = cfg.head_dim;
        let inv_freq = (0..d / 2)
            .map(|i| {
                let f = 1.0 / theta.powf((2 * i) as f32 / d as f32);
                f / factors.and_then(|fs| fs.get(i)).copied().unwrap_or(1.0)
            })
            .collect();
        Rope { inv_freq, position_scale, style: cfg.rope_style }
    }

    /// cos and sin tables `[positions, 1, d/2]` for the rows of a step.
    pub fn tables(&self, positions: &[usize], device: &Device) -> candle_core::Result<(Tensor, Tensor)> {
        let half = self.inv_freq.len();
        let mut cos = Vec::with_capacity(positions.len() * half);
        let mut sin = Vec::with_capacity(positions.len() * half);
        for &p in positions {
            let p = p as f32 * self.position_scale;
            for &f in &self.inv_freq {
                let a = p * f;
                cos.push(a.cos());
                sin.push(a.sin());
            }
        }
        let shape = (positions.len(), 1, half);
        Ok((Tensor::from_vec(cos, shape, device)?, Tensor::from_vec(sin, shape, device)?))
    }

    /// Rotates `x` (`[rows, heads * d]`) by the tables of [`Rope::tables`].
    pub fn apply(&self, x: &Tensor, heads: usize, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
        let (rows, width) = x.dims2()?;
        let x = x.reshape((rows, heads, 1, width / heads))?;
        let (cos, sin) = (cos.to_dtype(x.dtype())?, sin.to_dtype(x.dtype())?);
        let y = match self.style {
            RopeStyle::Halves => candle_nn::rotary_emb::rope(&x, &cos, &sin)?,
            RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(&x, &cos, &sin)?,
        };
        y.reshape((rows, width))
    }
}
