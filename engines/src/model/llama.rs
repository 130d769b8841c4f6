//! The Llama family (Llama 1/2/3, Mistral, Qwen2): one implementation over [`Linear`] for every weight format.
//! The weight tree mirrors the module tree (`model.layers.N.self_attn.q_proj`, ...).

use candle_core::{Device, Tensor};
use candle_nn::ops::rms_norm;

use super::config::LlamaConfig;
use super::embedding::Embedding;
use super::linear::Linear;
use super::rope::Rope;
use super::weights::Weights;
use super::{Logits, ModelError, SeqInput};
use crate::kv::{AttentionPlan, KvCache, KvDType, KvError, KvShape, SeqSpan};

/// Self-attention projections.
struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
}

/// The gated MLP.
struct Mlp {
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// One decoder layer.
struct Block {
    input_norm: Tensor,
    attn: Attention,
    post_norm: Tensor,
    mlp: Mlp,
}

/// A Llama-family decoder.
pub struct Llama {
    cfg: LlamaConfig,
    embed: Embedding,
    blocks: Vec<Block>,
    norm: Tensor,
    lm_head: Linear,
    rope: Rope,
    device: Device,
    kv_dtype: KvDType,
    host: bool,
}

impl Llama {
    /// Builds the model from its weights (`rope_factors`: Llama 3 per-frequency divisors, if any). The KV cache
    /// is `kv_dtype`, or by default f32 when every weight is f32 (exact against float32 references) and f16
    /// otherwise (half the memory, llama.cpp's numerics); a type the model or device cannot use is an error.
    pub fn load(
        w: &Weights,
        cfg: LlamaConfig,
        rope_factors: Option<Vec<f32>>,
        kv_dtype: Option<KvDType>,
    ) -> Result<Self, ModelError> {
        let (h, hd) = (cfg.hidden, cfg.head_dim);
        let (q_out, kv_out) = (cfg.heads * hd, cfg.kv_heads * hd);
        let bias = w.has("model.layers.0.self_attn.q_proj.bias");
        let beyond = format!("model.layers.{}.input_layernorm.weight", cfg.layers);
        if w.has(&beyond) {
            return Err(ModelError::Config(format!(
                "the checkpoint has more than the {} layers its configuration states (it has '{beyond}')",
                cfg.layers
            )));
        }
        let blocks = (0..cfg.layers)
            .map(|i| {
                let p = format!("model.layers.{i}");
                Ok(Block {
                    input_norm: w.vector(&format!("{p}.input_layernorm.weight"), h)?,
                    attn: Attention {
                        q: w.linear(&format!("{p}.self_attn.q_proj"), q_out, h, bias)?,
                        k: w.linear(&format!("{p}.self_attn.k_proj"), kv_out, h, bias)?,
                        v: w.linear(&format!("{p}.self_attn.v_proj"), kv_out, h, bias)?,
                        o: w.linear(&format!("{p}.self_attn.o_proj"), h, q_out, false)?,
                    },
                    post_norm: w.vector(&format!("{p}.post_attention_layernorm.weight"), h)?,
                    mlp: Mlp {
                        gate: w.linear(&format!("{p}.mlp.gate_proj"), cfg.intermediate, h, false)?,
                        up: w.linear(&format!("{p}.mlp.up_proj"), cfg.intermediate, h, false)?,
                        down: w.linear(&format!("{p}.mlp.down_proj"), h, cfg.intermediate, false)?,
                    },
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let head = if w.has("lm_head.weight") { "lm_head" } else { "model.embed_tokens" };
        let mut model = Llama {
            embed: w.embedding("model.embed_tokens.weight", cfg.vocab, h)?,
            blocks,
            norm: w.vector("model.norm.weight", h)?,
            lm_head: w.linear(head, cfg.vocab, h, false)?,
            rope: Rope::new(&cfg, rope_factors.as_deref()),
            device: w.device().clone(),
            cfg,
            kv_dtype: KvDType::F32,
            host: w.host(),
        };
        let all_f32 =
            model.linears().all(|l| !l.is_4bit() && l.host_type().is_none_or(|t| t == tgi_formats::GgmlType::F32))
                && model.norm.dtype() == candle_core::DType::F32;
        model.kv_dtype = kv_dtype.unwrap_or(if all_f32 { KvDType::F32 } else { KvDType::F16 });
        model.kv_dtype.check(model.cfg.head_dim, model.host)?;
        Ok(model)
    }

    /// The hyperparameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.cfg
    }

    /// The element type of the KV caches this model makes.
    pub fn kv_dtype(&self) -> KvDType {
        self.kv_dtype
    }

    /// The device the model runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// A KV cache for this model: `num_blocks` blocks of `block_size` tokens on its device.
    pub fn new_cache(&self, block_size: usize, num_blocks: usize) -> Result<KvCache, KvError> {
        let c = &self.cfg;
        let shape = KvShape { layers: c.layers, kv_heads: c.kv_heads, head_dim: c.head_dim, block_size, num_blocks };
        if self.host {
            KvCache::new(shape, &self.device, self.kv_dtype)
        } else {
            KvCache::new_tensors(shape, &self.device, self.kv_dtype)
        }
    }

    /// Every linear layer, for pinning and reporting.
    pub fn linears(&self) -> impl Iterator<Item = &Linear> {
        self.blocks
            .iter()
            .flat_map(|b| [&b.attn.q, &b.attn.k, &b.attn.v, &b.attn.o, &b.mlp.gate, &b.mlp.up, &b.mlp.down])
            .chain(std::iter::once(&self.lm_head))
    }

    /// Pins every weight in RAM.
    pub fn lock(&self) -> std::io::Result<()> {
        self.embed.lock()?;
        self.linears().try_for_each(Linear::lock)
    }

    /// Advances every sequence of `batch` by its new tokens in one pass: all rows go through each matmul
    /// together and attention reads each sequence's own blocks of `kv`. Returns, per sequence, the logits
    /// its [`Logits`] asks for (`vocab` floats per row).
    pub fn forward(&self, kv: &mut KvCache, batch: &[SeqInput<'_>]) -> Result<Vec<Vec<f32>>, ModelError> {
        Ok(self.run(kv, batch, false)?.logits)
    }

    /// [`Llama::forward`], also returning the final normalized hidden state of every row whose logits are
    /// returned (what speculation heads such as Medusa read).
    pub fn forward_hidden(&self, kv: &mut KvCache, batch: &[SeqInput<'_>]) -> Result<Rows, ModelError> {
        self.run(kv, batch, true)
    }

    /// The forward pass, with the hidden rows when `hidden` is set.
    fn run(&self, kv: &mut KvCache, batch: &[SeqInput<'_>], hidden: bool) -> Result<Rows, ModelError> {
        // On a pool thread, the kernels' hundreds of parallel loops per token start without each waking the pool
        // from outside (tens of microseconds apiece: 4.5x decode speed on the bundled 260K model, 2 threads).
        rayon::scope(|_| self.forward_on_pool(kv, batch, hidden))
    }

    /// [`Llama::run`], run on a thread of the rayon pool.
    fn forward_on_pool(&self, kv: &mut KvCache, batch: &[SeqInput<'_>], hidden: bool) -> Result<Rows, ModelError> {
        let cfg = &self.cfg;
        let mut tokens = Vec::new();
        let mut positions = Vec::new();
        let mut spans = Vec::with_capacity(batch.len());
        let mut wanted = Vec::new(); // rows whose logits are returned
        for s in batch {
            let end = s.start + s.tokens.len();
            if end > cfg.context {
                return Err(ModelError::ContextOverflow { tokens: end, context: cfg.context });
            }
            if s.table.capacity() < end {
                return Err(ModelError::Config(format!(
                    "block table holds {} tokens, {end} needed",
                    s.table.capacity()
                )));
            }
            let rows = tokens.len()..tokens.len() + s.tokens.len();
            match s.logits {
                Logits::None => {}
                Logits::Last if !rows.is_empty() => wanted.push(rows.end as u32 - 1),
                Logits::Last => {}
                Logits::All => wanted.extend(rows.start as u32..rows.end as u32),
            }
            tokens.extend_from_slice(s.tokens);
            positions.extend(s.start..end);
            spans.push(SeqSpan { rows, start: s.start, table: s.table.clone() });
        }
        if tokens.is_empty() {
            return Ok(Rows::empty(batch.len()));
        }
        let plan = AttentionPlan::new(spans, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.sliding_window);
        let (cos, sin) = self.rope.tables(&positions, &self.device)?;
        let mut x = self.embed.lookup(&tokens, &self.device)?.to_dtype(self.norm.dtype())?;
        let eps = cfg.rms_eps;
        for (i, b) in self.blocks.iter().enumerate() {
            let h = rms_norm(&x, &b.input_norm, eps)?;
            let q = self.rope.apply(&b.attn.q.forward(&h)?, cfg.heads, &cos, &sin)?;
            let k = self.rope.apply(&b.attn.k.forward(&h)?, cfg.kv_heads, &cos, &sin)?;
            let v = b.attn.v.forward(&h)?;
            let a = kv.attend(i, &q, &k, &v, &plan)?;
            x = (x + b.attn.o.forward(&a)?)?;
            let h = rms_norm(&x, &b.post_norm, eps)?;
            let g = candle_nn::ops::silu(&b.mlp.gate.forward(&h)?)?;
            x = (x + b.mlp.down.forward(&(g * b.mlp.up.forward(&h)?)?)?)?;
        }
        let mut out = Rows::empty(batch.len());
        if wanted.is_empty() {
            return Ok(out);
        }
        let n = wanted.len();
        let x = x.index_select(&Tensor::from_vec(wanted.clone(), n, &self.device)?, 0)?;
        let normed = rms_norm(&x, &self.norm, eps)?;
        let logits = self.lm_head.forward(&normed)?;
        let logits = logits.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let states = if hidden {
            normed.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1::<f32>()?
        } else {
            Vec::new()
        };
        let mut rows = logits.chunks_exact(cfg.vocab);
        let mut state_rows = states.chunks_exact(cfg.hidden);
        for (i, s) in batch.iter().enumerate() {
            let take = match s.logits {
                Logits::None => 0,
                Logits::Last => usize::from(!s.tokens.is_empty()),
                Logits::All => s.tokens.len(),
            };
            for _ in 0..take {
                out.logits[i].extend_from_slice(rows.next().expect("one row per wanted position"));
                if hidden {
                    out.hidden[i].extend_from_slice(state_rows.next().expect("one state per wanted position"));
                }
            }
        }
        Ok(out)
    }
}

/// What a forward pass returns per sequence: the logits its [`Logits`] asks for (`vocab` floats a row) and,
/// from [`Llama::forward_hidden`], the final normalized hidden state of the same rows (`hidden` floats a row).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rows {
    /// Logits, per sequence.
    pub logits: Vec<Vec<f32>>,
    /// Hidden states, per sequence (empty unless asked for).
    pub hidden: Vec<Vec<f32>>,
}

impl Rows {
    /// No rows for each of `n` sequences.
    fn empty(n: usize) -> Self {
        Rows { logits: vec![Vec::new(); n], hidden: vec![Vec::new(); n] }
    }
}
