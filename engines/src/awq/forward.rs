//! A dense f32 forward of one Llama decoder layer over whole calibration samples (`[samples * seq, hidden]`
//! rows, causal attention inside each sample, no KV cache), on candle CPU tensors. It exposes the pieces the
//! search inspects: the attention block, the MLP, and each linear's input.

use candle_core::{Device, Tensor};
use candle_nn::ops::{rms_norm, silu, softmax_last_dim};

use super::layer::{LayerWeights, Proj};
use crate::model::rope::Rope;
use crate::model::DecoderConfig;

/// Samples whose attention scores are materialised at once.
const ATTENTION_CHUNK: usize = 4;

/// The layer's tensors, ready for candle.
#[derive(Clone)]
pub(crate) struct DenseLayer {
    input_norm: Tensor,
    post_norm: Tensor,
    w: [Tensor; 7],
    qkv_bias: Option<[Tensor; 3]>,
}

/// Each linear's input and the layer's output, for a batch of samples.
pub(crate) struct Captures {
    /// Input of q/k/v (after the input norm).
    pub h1: Tensor,
    /// Input of o (the attention's output).
    pub attn: Tensor,
    /// Input of gate/up (after the post-attention norm).
    pub h2: Tensor,
    /// Input of down (`silu(gate) * up`).
    pub inner: Tensor,
    /// The attention block's output (o's output).
    pub attn_out: Tensor,
    /// The MLP's output (down's output).
    pub mlp_out: Tensor,
    /// The layer's output.
    pub out: Tensor,
}

/// What a layer forward needs besides its weights.
pub(crate) struct Context<'a> {
    /// The hyperparameters.
    pub cfg: &'a DecoderConfig,
    /// RoPE.
    pub rope: &'a Rope,
    /// Tokens per sample.
    pub seq: usize,
}

/// `x · Wᵀ (+ b)`.
pub(crate) fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> candle_core::Result<Tensor> {
    let y = x.matmul(&w.t()?)?;
    match b {
        Some(b) => y.broadcast_add(b),
        None => Ok(y),
    }
}

/// A `[rows, cols]` tensor on the CPU from f32 values.
pub(crate) fn matrix(v: &[f32], rows: usize, cols: usize) -> candle_core::Result<Tensor> {
    Tensor::from_slice(v, (rows, cols), &Device::Cpu)
}

impl DenseLayer {
    /// Tensors of `lw` under `cfg`.
    pub fn new(lw: &LayerWeights, cfg: &DecoderConfig) -> candle_core::Result<Self> {
        let vec = |v: &[f32]| Tensor::from_slice(v, v.len(), &Device::Cpu);
        let w = Proj::ALL.map(|p| {
            let (o, i) = p.shape(cfg);
            matrix(lw.weight(p), o, i)
        });
        let [q, k, v, o, g, u, d] = w;
        let qkv_bias = match &lw.qkv_bias {
            Some([bq, bk, bv]) => Some([vec(bq)?, vec(bk)?, vec(bv)?]),
            None => None,
        };
        Ok(DenseLayer {
            input_norm: vec(&lw.input_norm)?,
            post_norm: vec(&lw.post_norm)?,
            w: [q?, k?, v?, o?, g?, u?, d?],
            qkv_bias,
        })
    }

    /// The same layer with `proj`'s weight replaced.
    pub fn with(&self, proj: Proj, w: Tensor) -> Self {
        let mut l = self.clone();
        l.w[proj as usize] = w;
        l
    }

    fn proj(&self, p: Proj, x: &Tensor) -> candle_core::Result<Tensor> {
        let bias = match (&self.qkv_bias, p) {
            (Some(b), Proj::Q | Proj::K | Proj::V) => Some(&b[p as usize]),
            _ => None,
        };
        linear(x, &self.w[p as usize], bias)
    }

    /// The attention's output before o (`[rows, heads * head_dim]`) for the input of q/k/v.
    pub fn attention(&self, ctx: &Context<'_>, h1: &Tensor) -> candle_core::Result<Tensor> {
        let (rows, _) = h1.dims2()?;
        let mut parts = Vec::new();
        let chunk = ATTENTION_CHUNK * ctx.seq;
        for start in (0..rows).step_by(chunk) {
            let x = h1.narrow(0, start, chunk.min(rows - start))?;
            parts.push(self.attention_chunk(ctx, &x)?);
        }
        Tensor::cat(&parts, 0)
    }

    fn attention_chunk(&self, ctx: &Context<'_>, h1: &Tensor) -> candle_core::Result<Tensor> {
        let cfg = ctx.cfg;
        let (rows, _) = h1.dims2()?;
        let (seq, n) = (ctx.seq, rows / ctx.seq);
        let (heads, kvh, hd) = (cfg.heads, cfg.kv_heads, cfg.head_dim);
        let positions: Vec<usize> = (0..n).flat_map(|_| 0..seq).collect();
        let (cos, sin) = ctx.rope.tables(&positions, &Device::Cpu)?;
        let q = ctx.rope.apply(&self.proj(Proj::Q, h1)?, heads, &cos, &sin)?;
        let k = ctx.rope.apply(&self.proj(Proj::K, h1)?, kvh, &cos, &sin)?;
        let v = self.proj(Proj::V, h1)?;
        let split = |t: Tensor, h: usize| -> candle_core::Result<Tensor> {
            let t = t.reshape((n, seq, h, hd))?.transpose(1, 2)?;
            if h == heads {
                return t.contiguous();
            }
            t.unsqueeze(2)?.broadcast_as((n, h, heads / h, seq, hd))?.contiguous()?.reshape((n, heads, seq, hd))
        };
        let (q, k, v) = (split(q, heads)?, split(k, kvh)?, split(v, kvh)?);
        let scores = (q.matmul(&k.t()?)? * (1.0 / (hd as f64).sqrt()))?;
        let scores = scores.broadcast_add(&causal_mask(seq, cfg.sliding_window)?)?;
        let p = softmax_last_dim(&scores)?;
        p.matmul(&v)?.transpose(1, 2)?.contiguous()?.reshape((rows, heads * hd))
    }

    /// The attention block's output (o's output) for the input of q/k/v.
    pub fn self_attn(&self, ctx: &Context<'_>, h1: &Tensor) -> candle_core::Result<Tensor> {
        self.proj(Proj::O, &self.attention(ctx, h1)?)
    }

    /// The input of down for the input of gate/up.
    pub fn mlp_inner(&self, h2: &Tensor) -> candle_core::Result<Tensor> {
        silu(&self.proj(Proj::Gate, h2)?)? * self.proj(Proj::Up, h2)?
    }

    /// The MLP's output for the input of gate/up.
    pub fn mlp(&self, h2: &Tensor) -> candle_core::Result<Tensor> {
        self.proj(Proj::Down, &self.mlp_inner(h2)?)
    }

    /// `proj` applied to `x` alone.
    pub fn single(&self, proj: Proj, x: &Tensor) -> candle_core::Result<Tensor> {
        self.proj(proj, x)
    }

    /// The whole layer on hidden states `x` (`[samples * seq, hidden]`), with every linear's input.
    pub fn forward(&self, ctx: &Context<'_>, x: &Tensor) -> candle_core::Result<Captures> {
        let eps = ctx.cfg.rms_eps;
        let h1 = rms_norm(x, &self.input_norm, eps)?;
        let attn = self.attention(ctx, &h1)?;
        let attn_out = self.proj(Proj::O, &attn)?;
        let x = (x + &attn_out)?;
        let h2 = rms_norm(&x, &self.post_norm, eps)?;
        let inner = self.mlp_inner(&h2)?;
        let mlp_out = self.proj(Proj::Down, &inner)?;
        let out = (x + &mlp_out)?;
        Ok(Captures { h1, attn, h2, inner, attn_out, mlp_out, out })
    }
}

/// `[seq, seq]` additive mask: 0 where position i may attend to j (j <= i, inside the sliding window), else -inf.
fn causal_mask(seq: usize, window: Option<usize>) -> candle_core::Result<Tensor> {
    let mask: Vec<f32> = (0..seq)
        .flat_map(|i| {
            (0..seq).map(move |j| {
                let visible = j <= i && window.is_none_or(|w| i - j < w);
                if visible {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
        })
        .collect();
    Tensor::from_vec(mask, (seq, seq), &Device::Cpu)
}

/// Per-channel sums of `|x|` over the rows of `x`, added to `sum`.
pub(crate) fn add_abs_sums(sum: &mut [f64], x: &Tensor) -> candle_core::Result<()> {
    let s = x.abs()?.sum(0)?.to_vec1::<f32>()?;
    sum.iter_mut().zip(s).for_each(|(a, b)| *a += f64::from(b));
    Ok(())
}

/// Mean squared difference of two tensors of the same shape.
pub(crate) fn mse(a: &Tensor, b: &Tensor) -> candle_core::Result<f32> {
    (a - b)?.sqr()?.mean_all()?.to_scalar::<f32>()
}
