//! Rotary position embeddings, computed per step for the positions in the batch: over all of each head or its
//! leading `rotary_dim` dimensions (partial RoPE), with per-frequency divisors (Llama 3 scaling; LongRoPE's short
//! and long factors, chosen per sequence) and LongRoPE's cos/sin scale.

use candle_core::{Device, Tensor};

use super::config::{DecoderConfig, RopeStyle};

/// RoPE frequencies and pairing for one model.
#[derive(Clone, Debug)]
pub struct Rope {
    inv_freq: Vec<f32>,
    /// LongRoPE's frequencies for sequences longer than `original`.
    long: Option<(Vec<f32>, usize)>,
    /// cos and sin are multiplied by this (LongRoPE's attention factor).
    mscale: f32,
    position_scale: f32,
    style: RopeStyle,
}

impl Rope {
    /// Frequencies `theta^(-2i/d)` over the rotary dimensions, divided by per-frequency `factors` (Llama 3
    /// scaling) when given, or by LongRoPE's when the model has them.
    pub fn new(cfg: &DecoderConfig, factors: Option<&[f32]>) -> Self {
        match &cfg.long_rope {
            Some(l) => Rope {
                long: Some((frequencies(cfg, cfg.rope_theta, Some(&l.long)), l.original)),
                mscale: l.attention_factor,
                ..Self::with_base(cfg, cfg.rope_theta, Some(&l.short), cfg.rope_position_scale)
            },
            None => Self::with_base(cfg, cfg.rope_theta, factors, cfg.rope_position_scale),
        }
    }

    /// Gemma 3's RoPE of sliding layers: their own base, no scaling; `None` for other models.
    pub fn local(cfg: &DecoderConfig) -> Option<Self> {
        cfg.rope_local_theta.map(|theta| Self::with_base(cfg, theta, None, 1.0))
    }

    fn with_base(cfg: &DecoderConfig, theta: f32, factors: Option<&[f32]>, position_scale: f32) -> Self {
        Rope {
            inv_freq: frequencies(cfg, theta, factors),
            long: None,
            mscale: 1.0,
            position_scale,
            style: cfg.rope_style,
        }
    }

    /// Whether a sequence reaching `end` positions rotates with LongRoPE's long factors.
    pub fn is_long(&self, end: usize) -> bool {
        self.long.as_ref().is_some_and(|(_, original)| end > *original)
    }

    /// cos and sin tables `[positions, 1, r/2]` for the rows of a step.
    pub fn tables(&self, positions: &[usize], device: &Device) -> candle_core::Result<(Tensor, Tensor)> {
        self.tables_with(positions, &[], device)
    }

    /// [`Rope::tables`], with LongRoPE's long frequencies for the rows whose `long` flag is set.
    pub fn tables_with(
        &self,
        positions: &[usize],
        long: &[bool],
        device: &Device,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let half = self.inv_freq.len();
        let mut cos = Vec::with_capacity(positions.len() * half);
        let mut sin = Vec::with_capacity(positions.len() * half);
        for (row, &p) in positions.iter().enumerate() {
            let p = p as f32 * self.position_scale;
            let freqs = match &self.long {
                Some((l, _)) if long.get(row) == Some(&true) => l,
                _ => &self.inv_freq,
            };
            for &f in freqs {
                let a = p * f;
                cos.push(a.cos() * self.mscale);
                sin.push(a.sin() * self.mscale);
            }
        }
        let shape = (positions.len(), 1, half);
        Ok((Tensor::from_vec(cos, shape, device)?, Tensor::from_vec(sin, shape, device)?))
    }

    /// Rotates `x` (`[rows, heads * d]`) by the tables of [`Rope::tables`]: its first `r` dimensions of each head,
    /// the rest passing through.
    pub fn apply(&self, x: &Tensor, heads: usize, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
        let (rows, width) = x.dims2()?;
        let (d, r) = (width / heads, 2 * self.inv_freq.len());
        let x = x.reshape((rows, heads, 1, d))?;
        let (cos, sin) = (cos.to_dtype(x.dtype())?, sin.to_dtype(x.dtype())?);
        let rotate = |x: &Tensor| match self.style {
            RopeStyle::Halves => candle_nn::rotary_emb::rope(x, &cos, &sin),
            RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(x, &cos, &sin),
        };
        let y = if r == d {
            rotate(&x)?
        } else {
            let rotated = rotate(&x.narrow(3, 0, r)?.contiguous()?)?;
            Tensor::cat(&[rotated, x.narrow(3, r, d - r)?], 3)?
        };
        y.reshape((rows, width))
    }
}

/// `theta^(-2i/r)` for the `r/2` rotary frequencies, each divided by its factor when given.
fn frequencies(cfg: &DecoderConfig, theta: f32, factors: Option<&[f32]>) -> Vec<f32> {
    let r = cfg.rotary_dim;
    (0..r / 2)
        .map(|i| {
            let f = 1.0 / theta.powf((2 * i) as f32 / r as f32);
            f / factors.and_then(|fs| fs.get(i)).copied().unwrap_or(1.0)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use tgi_formats::hf::ModelConfig;

    use super::*;
    use crate::model::config::LongRope;

    /// Partial rotary leaves the trailing dimensions alone; LongRoPE divides by the long factors only for rows
    /// flagged long, and scales cos and sin.
    #[test]
    fn partial_rotary_and_long_rope() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/tiny-phi3/hf/config.json");
        let mut cfg = DecoderConfig::from_hf(&ModelConfig::from_file(std::path::Path::new(path)).unwrap()).unwrap();
        assert_eq!((cfg.head_dim, cfg.rotary_dim), (16, 8));
        cfg.long_rope = Some(LongRope { short: vec![1.0; 4], long: vec![2.0; 4], original: 4, attention_factor: 1.5 });
        let rope = Rope::new(&cfg, None);
        assert!(!rope.is_long(4) && rope.is_long(5));
        let (cos, sin) = rope.tables_with(&[3, 3], &[false, true], &Device::Cpu).unwrap();
        let (cos, sin) = (
            cos.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            sin.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        );
        assert!((cos[0] - 1.5 * 3f32.cos()).abs() < 1e-6 && (cos[4] - 1.5 * 1.5f32.cos()).abs() < 1e-6);
        assert!((sin[4] - 1.5 * 1.5f32.sin()).abs() < 1e-6);
        let x = Tensor::arange(0f32, 32.0, &Device::Cpu).unwrap().reshape((1, 32)).unwrap();
        let (cos, sin) = rope.tables(&[3], &Device::Cpu).unwrap();
        let y = rope.apply(&x, 2, &cos, &sin).unwrap().to_vec2::<f32>().unwrap();
        let x = x.to_vec2::<f32>().unwrap();
        assert_eq!(y[0][8..16], x[0][8..16], "the pass-through half of head 0");
        assert_eq!(y[0][24..32], x[0][24..32], "and of head 1");
        assert_ne!(y[0][..8], x[0][..8]);
    }
}
