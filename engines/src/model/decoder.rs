//! The decoder: one implementation over [`Linear`] for every weight format and every family (Llama 1/2/3,
//! Mistral, Qwen2, Qwen3, Gemma 2 and 3, Phi-3, and the mixtures of experts Mixtral and Qwen3-MoE), parameterised by the family's [`Family`] description. The weight tree
//! mirrors the module tree (`model.layers.N.self_attn.q_proj`, ...).

use candle_core::{Device, Tensor};
use candle_nn::ops::rms_norm;

use super::config::DecoderConfig;
use super::embedding::Embedding;
use super::family::Family;
use super::linear::{Linear, Repacked};
use super::mlp::{Mlp, MlpNames};
use super::moe::Moe;
use super::observe::ActivationObserver;
use super::rope::Rope;
use super::weights::{OutputLayer, Weights};
use super::{Logits, ModelError, SeqInput};
use crate::kv::{AttentionPlan, KvCache, KvDType, KvError, KvRotation, KvShape, SeqSpan};
use crate::lora::{LayerLora, LoraStep, LoraUse, Module};

/// The query, key and value projections: three, or one fused (Phi-3's `qkv_proj`, rows q then k then v).
enum Qkv {
    /// q, k and v.
    Split(Box<[Linear; 3]>),
    Fused {
        qkv: Linear,
        q_out: usize,
        kv_out: usize,
    },
}

impl Qkv {
    /// Queries, keys and values of `[rows, hidden]` rows, with each row's adapter.
    fn forward(&self, h: &Tensor, lora: LayerLora<'_>) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        match self {
            Qkv::Split(qkv) => {
                let [q, k, v] = &**qkv;
                let q = lora.add(Module::Q, h, q.forward(h)?)?;
                let k = lora.add(Module::K, h, k.forward(h)?)?;
                Ok((q, k, lora.add(Module::V, h, v.forward(h)?)?))
            }
            Qkv::Fused { qkv, q_out, kv_out } => {
                let y = lora.add(Module::Qkv, h, qkv.forward(h)?)?;
                let part = |at, len| y.narrow(1, at, len)?.contiguous();
                Ok((part(0, *q_out)?, part(*q_out, *kv_out)?, part(q_out + kv_out, *kv_out)?))
            }
        }
    }

    fn linears(&self) -> Vec<&Linear> {
        match self {
            Qkv::Split(qkv) => qkv.iter().collect(),
            Qkv::Fused { qkv, .. } => vec![qkv],
        }
    }
}

/// Self-attention projections, with Qwen3's per-head query and key norms.
struct Attention {
    qkv: Qkv,
    o: Linear,
    q_norm: Option<Tensor>,
    k_norm: Option<Tensor>,
}

/// A layer's feed-forward part.
enum Ffn {
    /// One gated MLP.
    Dense(Box<Mlp>),
    /// A mixture of gated MLPs.
    Moe(Moe),
}

impl Ffn {
    fn forward(&self, x: &Tensor, family: Family, lora: LayerLora<'_>) -> candle_core::Result<Tensor> {
        match self {
            Ffn::Dense(m) => m.forward(x, family.activation, lora),
            Ffn::Moe(m) => m.forward(x, family.activation, lora),
        }
    }

    fn linears(&self) -> Box<dyn Iterator<Item = &Linear> + '_> {
        match self {
            Ffn::Dense(m) => Box::new(m.linears().into_iter()),
            Ffn::Moe(m) => Box::new(m.linears()),
        }
    }
}

/// One decoder layer.
struct Block {
    attn_norm: Tensor,
    attn: Attention,
    /// Gemma 2's norm of the attention output.
    attn_post_norm: Option<Tensor>,
    mlp_norm: Tensor,
    mlp: Ffn,
    /// Gemma 2's norm of the MLP output.
    mlp_post_norm: Option<Tensor>,
}

/// A decoder-only transformer of one of the dense families.
pub struct Decoder {
    cfg: DecoderConfig,
    family: Family,
    embed: Embedding,
    blocks: Vec<Block>,
    norm: Tensor,
    lm_head: Linear,
    /// The token id of each output row, when they are not all of them in order (see [`Decoder::limit_vocab`]).
    logit_ids: Option<Vec<u32>>,
    /// What the output layer became at load.
    output: OutputLayer,
    rope: Rope,
    /// Gemma 3's RoPE of sliding layers.
    rope_local: Option<Rope>,
    device: Device,
    kv_dtype: KvDType,
    /// Whether block-quantized caches take llama.cpp's Hadamard rotation.
    kv_rotation: bool,
    host: bool,
}

impl Decoder {
    /// Builds the model from its weights (`rope_factors`: Llama 3 per-frequency divisors, if any). The KV cache
    /// is `kv_dtype`, or by default f32 when every weight is f32 (exact against float32 references) and f16
    /// otherwise (half the memory, llama.cpp's numerics); a type the model or device cannot use is an error.
    /// `kv_rotation` false turns off the Hadamard rotation of block-quantized caches.
    pub fn load(
        w: &Weights,
        cfg: DecoderConfig,
        rope_factors: Option<Vec<f32>>,
        kv_dtype: Option<KvDType>,
        kv_rotation: bool,
    ) -> Result<Self, ModelError> {
        let family = Family::of(cfg.architecture);
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
        let norm = |name: &str, len: usize| w.norm(name, len, family.norm_plus_one);
        let optional = |on: bool, name: String, len: usize| on.then(|| norm(&name, len)).transpose();
        let blocks = (0..cfg.layers)
            .map(|i| {
                let p = format!("model.layers.{i}");
                let sandwich = family.sandwich_norms;
                Ok(Block {
                    attn_norm: norm(&format!("{p}.input_layernorm.weight"), h)?,
                    attn: Attention {
                        qkv: if family.fused_projections {
                            let qkv = w.linear(&format!("{p}.self_attn.qkv_proj"), q_out + 2 * kv_out, h, false)?;
                            Qkv::Fused { qkv, q_out, kv_out }
                        } else {
                            Qkv::Split(Box::new([
                                w.linear(&format!("{p}.self_attn.q_proj"), q_out, h, bias)?,
                                w.linear(&format!("{p}.self_attn.k_proj"), kv_out, h, bias)?,
                                w.linear(&format!("{p}.self_attn.v_proj"), kv_out, h, bias)?,
                            ]))
                        },
                        o: w.linear(&format!("{p}.self_attn.o_proj"), h, q_out, false)?,
                        q_norm: optional(family.qk_norm, format!("{p}.self_attn.q_norm.weight"), hd)?,
                        k_norm: optional(family.qk_norm, format!("{p}.self_attn.k_norm.weight"), hd)?,
                    },
                    attn_post_norm: optional(sandwich, format!("{p}.post_attention_layernorm.weight"), h)?,
                    mlp_norm: norm(&format!("{p}.{}.weight", family.mlp_norm_name()), h)?,
                    mlp: match (&cfg.moe, family.moe_names) {
                        (Some(moe), Some(names)) if moe.sparse_layers.get(i) == Some(&true) => {
                            Ffn::Moe(Moe::load(w, &p, names, moe, h)?)
                        }
                        _ => {
                            let names = if family.fused_projections { MlpNames::PHI3 } else { MlpNames::LLAMA };
                            Ffn::Dense(Box::new(Mlp::load(w, &format!("{p}.mlp"), names, h, cfg.intermediate)?))
                        }
                    },
                    mlp_post_norm: optional(sandwich, format!("{p}.post_feedforward_layernorm.weight"), h)?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let head = if w.has("lm_head.weight") { "lm_head" } else { "model.embed_tokens" };
        let embed = w.embedding("model.embed_tokens.weight", cfg.vocab, h)?;
        let (lm_head, output) = w.output(head, cfg.vocab, h)?;
        let mut model = Decoder {
            embed,
            blocks,
            norm: norm("model.norm.weight", h)?,
            lm_head,
            logit_ids: None,
            output,
            rope: Rope::new(&cfg, rope_factors.as_deref()),
            rope_local: Rope::local(&cfg),
            device: w.device().clone(),
            cfg,
            family,
            kv_dtype: KvDType::F32,
            kv_rotation,
            host: w.host(),
        };
        let all_f32 = model.linears().all(Linear::is_f32) && model.norm.dtype() == candle_core::DType::F32;
        model.kv_dtype = kv_dtype.unwrap_or(if all_f32 { KvDType::F32 } else { KvDType::F16 });
        model.kv_dtype.check(model.cfg.head_dim, model.host)?;
        Ok(model)
    }

    /// The hyperparameters.
    pub fn config(&self) -> &DecoderConfig {
        &self.cfg
    }

    /// Limits the logits to the token ids `ids` (ascending; a draft model proposing among frequent tokens
    /// only): the output layer keeps those rows, so a step reads and returns `ids.len()` logits a row, the
    /// `i`-th for `ids[i]` (see [`Decoder::logit_ids`]). Returns whether it could (host weights without bias).
    pub fn limit_vocab(&mut self, ids: Vec<u32>) -> Result<bool, ModelError> {
        let Some(head) = self.lm_head.select_rows(&ids)? else { return Ok(false) };
        self.lm_head = head;
        self.logit_ids = Some(ids);
        Ok(true)
    }

    /// The token id of each logit a row returns, when [`Decoder::limit_vocab`] limited them (else logit `i` is
    /// token `i`).
    pub fn logit_ids(&self) -> Option<&[u32]> {
        self.logit_ids.as_deref()
    }

    /// What the output layer (`lm_head`) became at load, for the startup log.
    pub fn output_layer(&self) -> &OutputLayer {
        &self.output
    }

    /// What load repacked into the interleaved layout (nothing where the CPU level has none, or on a GPU).
    pub fn repacked(&self) -> Repacked {
        Repacked::of(self.linears())
    }

    /// The element type of the KV caches this model makes.
    pub fn kv_dtype(&self) -> KvDType {
        self.kv_dtype
    }

    /// The Hadamard rotation of the KV caches this model makes.
    pub fn kv_rotation(&self) -> KvRotation {
        KvRotation::new(self.kv_dtype, self.cfg.head_dim, self.kv_rotation && self.host)
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
            Ok(KvCache::new(shape, &self.device, self.kv_dtype)?.with_rotation(self.kv_rotation))
        } else {
            KvCache::new_tensors(shape, &self.device, self.kv_dtype)
        }
    }

    /// Every linear layer, for pinning and reporting.
    pub fn linears(&self) -> impl Iterator<Item = &Linear> {
        self.blocks
            .iter()
            .flat_map(|b| b.attn.qkv.linears().into_iter().chain([&b.attn.o]).chain(b.mlp.linears()))
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

    /// [`Decoder::forward`] with every [`Rows`]: the logits each sequence asks for, the final normalized hidden
    /// states of the rows asked for with [`Logits::HiddenAll`] and [`Logits::HiddenLast`] (pooling), and with
    /// `hidden` those of the logits' rows too (what speculation heads such as Medusa read).
    pub fn run(&self, kv: &mut KvCache, batch: &[SeqInput<'_>], hidden: bool) -> Result<Rows, ModelError> {
        self.run_lora(kv, batch, hidden, &[])
    }

    /// [`Decoder::run`] with each sequence's LoRA adapter (`lora`: one per sequence of `batch`, or empty when
    /// none has one): the base projections run once over all rows and each adds its rows' adapter products.
    pub fn run_lora(
        &self,
        kv: &mut KvCache,
        batch: &[SeqInput<'_>],
        hidden: bool,
        lora: &[Option<LoraUse>],
    ) -> Result<Rows, ModelError> {
        // On a pool thread, the kernels' hundreds of parallel loops per token start without each waking the pool
        // from outside (tens of microseconds apiece: 4.5x decode speed on the bundled 260K model, 2 threads).
        rayon::scope(|_| self.forward_on_pool(kv, batch, hidden, lora, None))
    }

    /// [`Decoder::forward`] showing `observer` the input of every weight matrix (the output layer's only for the
    /// rows whose logits are asked for).
    pub fn forward_observed(
        &self,
        kv: &mut KvCache,
        batch: &[SeqInput<'_>],
        observer: &dyn ActivationObserver,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        Ok(rayon::scope(|_| self.forward_on_pool(kv, batch, false, &[], Some(observer)))?.logits)
    }

    /// [`Decoder::run_lora`], run on a thread of the rayon pool, with the observer if any.
    fn forward_on_pool(
        &self,
        kv: &mut KvCache,
        batch: &[SeqInput<'_>],
        hidden: bool,
        lora: &[Option<LoraUse>],
        observer: Option<&dyn ActivationObserver>,
    ) -> Result<Rows, ModelError> {
        let cfg = &self.cfg;
        let mut tokens = Vec::new();
        let mut positions = Vec::new();
        let mut spans = Vec::with_capacity(batch.len());
        let mut wanted = Vec::new(); // rows whose logits are returned
        let mut pooled = Vec::new(); // rows whose hidden state alone is returned
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
                Logits::From(k) => wanted.extend((rows.start + k).min(rows.end) as u32..rows.end as u32),
                Logits::HiddenAll => pooled.extend(rows.start as u32..rows.end as u32),
                Logits::HiddenLast => {
                    pooled.extend(rows.end.checked_sub(1).filter(|_| !rows.is_empty()).map(|r| r as u32))
                }
            }
            tokens.extend_from_slice(s.tokens);
            positions.extend(s.start..end);
            spans.push(SeqSpan { rows, start: s.start, table: s.table.clone() });
        }
        if tokens.is_empty() {
            return Ok(Rows::empty(batch.len()));
        }
        let lora = LoraStep::new(spans.iter().map(|s| s.rows.clone()), lora).observed(observer);
        let plan = AttentionPlan::new(spans, cfg.heads, cfg.kv_heads, cfg.head_dim, None)
            .with_scale(cfg.attn_scale)
            .with_softcap(cfg.attn_softcap);
        let windowed = cfg.sliding_window.map(|w| plan.clone().with_window(Some(w)));
        // LongRoPE's long factors for the sequences that reach past the original context (transformers' rule).
        let long: Vec<bool> = batch
            .iter()
            .flat_map(|s| std::iter::repeat_n(self.rope.is_long(s.start + s.tokens.len()), s.tokens.len()))
            .collect();
        let global = self.rope.tables_with(&positions, &long, &self.device)?;
        let local = self.rope_local.as_ref().map(|r| Ok::<_, ModelError>((r, r.tables(&positions, &self.device)?)));
        let local = local.transpose()?;
        let mut x = self.embed.lookup(&tokens, &self.device)?.to_dtype(self.norm.dtype())?;
        if self.family.embed_scale {
            x = (x * (cfg.hidden as f64).sqrt())?;
        }
        let eps = cfg.rms_eps;
        for (i, b) in self.blocks.iter().enumerate() {
            let plan = match (cfg.window(i), &windowed) {
                (Some(_), Some(windowed)) => windowed,
                _ => &plan,
            };
            let h = rms_norm(&x, &b.attn_norm, eps)?;
            let adapters = lora.layer(i);
            let (q, k, v) = b.attn.qkv.forward(&h, adapters)?;
            let q = head_norm(q, b.attn.q_norm.as_ref(), cfg.heads, eps)?;
            let k = head_norm(k, b.attn.k_norm.as_ref(), cfg.kv_heads, eps)?;
            let (rope, (cos, sin)) = match &local {
                Some((rope, tables)) if cfg.is_sliding(i) => (*rope, tables),
                _ => (&self.rope, &global),
            };
            let q = rope.apply(&q, cfg.heads, cos, sin)?;
            let k = rope.apply(&k, cfg.kv_heads, cos, sin)?;
            let attended = kv.attend(i, &q, &k, &v, plan)?;
            let a = adapters.add(Module::O, &attended, b.attn.o.forward(&attended)?)?;
            x = (x + post_norm(a, b.attn_post_norm.as_ref(), eps)?)?;
            let h = rms_norm(&x, &b.mlp_norm, eps)?;
            let m = b.mlp.forward(&h, self.family, adapters)?;
            x = (x + post_norm(m, b.mlp_post_norm.as_ref(), eps)?)?;
        }
        let mut out = Rows::empty(batch.len());
        let pooled = self.final_rows(&x, pooled)?;
        let mut pooled_rows = pooled.chunks_exact(cfg.hidden);
        for (i, s) in batch.iter().enumerate() {
            let take = match s.logits {
                Logits::HiddenAll => s.tokens.len(),
                Logits::HiddenLast => usize::from(!s.tokens.is_empty()),
                _ => 0,
            };
            for _ in 0..take {
                out.hidden[i].extend_from_slice(pooled_rows.next().expect("one state per pooled position"));
            }
        }
        if wanted.is_empty() {
            return Ok(out);
        }
        let n = wanted.len();
        let x = x.index_select(&Tensor::from_vec(wanted.clone(), n, &self.device)?, 0)?;
        let normed = rms_norm(&x, &self.norm, eps)?;
        // Tied embeddings meet the rows as `token_embd.weight`, whose statistics llama-imatrix never keeps.
        if !self.output.tied {
            lora.observe("output.weight", &normed)?;
        }
        let mut logits = self.lm_head.forward(&normed)?;
        if let Some(c) = cfg.final_softcap {
            logits = ((logits / c as f64)?.tanh()? * c as f64)?;
        }
        let logits = logits.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let states = if hidden {
            normed.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1::<f32>()?
        } else {
            Vec::new()
        };
        let mut rows = logits.chunks_exact(self.lm_head.rows());
        let mut state_rows = states.chunks_exact(cfg.hidden);
        for (i, s) in batch.iter().enumerate() {
            let take = match s.logits {
                Logits::None | Logits::HiddenAll | Logits::HiddenLast => 0,
                Logits::Last => usize::from(!s.tokens.is_empty()),
                Logits::All => s.tokens.len(),
                Logits::From(k) => s.tokens.len().saturating_sub(k),
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

    /// The final normalized hidden state of `rows` of `x` (the residual stream after the last layer), as f32
    /// rows of `hidden` floats.
    fn final_rows(&self, x: &Tensor, rows: Vec<u32>) -> Result<Vec<f32>, ModelError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let n = rows.len();
        let x = x.index_select(&Tensor::from_vec(rows, n, &self.device)?, 0)?;
        let normed = rms_norm(&x, &self.norm, self.cfg.rms_eps)?;
        Ok(normed.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
    }
}

/// Per-head RMSNorm of a `[rows, heads * d]` projection (Qwen3's `q_norm`, `k_norm`), when the layer has one.
fn head_norm(x: Tensor, weight: Option<&Tensor>, heads: usize, eps: f32) -> candle_core::Result<Tensor> {
    let Some(w) = weight else { return Ok(x) };
    let (rows, width) = x.dims2()?;
    rms_norm(&x.reshape((rows * heads, width / heads))?, w, eps)?.reshape((rows, width))
}

/// A sublayer's output through its post-norm (Gemma 2), when it has one.
fn post_norm(x: Tensor, weight: Option<&Tensor>, eps: f32) -> candle_core::Result<Tensor> {
    match weight {
        Some(w) => rms_norm(&x, w, eps),
        None => Ok(x),
    }
}

/// What a forward pass returns per sequence: the logits its [`Logits`] asks for (`vocab` floats a row) and,
/// from [`Decoder::run`], the final normalized hidden state of the same rows with `hidden` set, or of the rows a
/// pooling sequence asks for (`hidden` floats a row).
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
