//! Named weights from a tensor source, placed for the model's device: the seam between checkpoint formats
//! and the model code, which asks for tensors by their Hugging Face names.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Once};

use candle_core::{DType as CDType, Device, Tensor};
use tgi_formats::awq::AwqConfig;
use tgi_formats::hf::Architecture;
use tgi_formats::{DType, GgmlType, TensorMeta, TensorSource};

use super::awq;
use super::bnb::{self, Bnb4Tensor};
use super::bytes::{Part, WeightBytes};
use super::embedding::Embedding;
use super::insitu::{self, Plan};
use super::linear::Linear;
use super::ModelError;
use crate::convert::names::{map_name, split_expert};

/// How stored tensor names relate to Hugging Face names.
#[derive(Clone, Copy, Debug)]
pub enum Naming {
    /// Stored under their Hugging Face names.
    Hf,
    /// Stored under llama.cpp's names (`blk.N.attn_q.weight`).
    Gguf {
        /// The architecture, which decides the mapping.
        arch: Architecture,
        /// Query heads.
        heads: usize,
        /// Key/value heads.
        kv_heads: usize,
    },
}

/// A model's tensors, ready to become layers on one device.
pub struct Weights {
    source: Arc<dyn TensorSource>,
    metas: HashMap<String, TensorMeta>,
    naming: Naming,
    device: Device,
    dense: Option<GgmlType>,
    act: CDType,
    host: bool,
    plan: Option<Plan>,
    awq: Option<AwqConfig>,
    output_type: Option<GgmlType>,
    dense_note: Once,
}

/// What the output layer became at load, for the startup log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputLayer {
    /// The stored tensor it was built from.
    pub tensor: String,
    /// Its stored form (`F16`, `q6_K`, `nf4`, `AWQ 4-bit`).
    pub stored: String,
    /// The form it computes in.
    pub loaded: String,
    /// Whether the tensor is the embedding matrix (tied embeddings).
    pub tied: bool,
}

impl fmt::Display for OutputLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let OutputLayer { tensor, stored, loaded, tied } = self;
        let tied = if *tied { ", tied to the embeddings" } else { "" };
        if stored == loaded {
            write!(f, "output layer: {loaded}, as stored ({tensor}{tied})")
        } else {
            write!(f, "output layer: {loaded}, converted at load from {stored} ({tensor}{tied})")
        }
    }
}

impl Weights {
    /// Wraps `source`; dense weights are converted to `dense` when given (else kept as stored);
    /// vectors (norms, biases) become `act` tensors on `device`. On the CPU, matrices feed tgi's kernels
    /// unless `tensor_ops` asks for candle's tensor path (the one GPUs take).
    pub fn new(
        source: Arc<dyn TensorSource>,
        naming: Naming,
        device: Device,
        dense: Option<GgmlType>,
        act: CDType,
        tensor_ops: bool,
    ) -> Self {
        let metas = source.tensors().into_iter().map(|m| (m.name.clone(), m)).collect();
        let host = device.is_cpu() && !tensor_ops;
        Weights {
            source,
            metas,
            naming,
            device,
            dense,
            act,
            host,
            plan: None,
            awq: None,
            output_type: None,
            dense_note: Once::new(),
        }
    }

    /// Quantizes dense tensors as they load, following `plan`.
    pub fn with_plan(mut self, plan: Plan) -> Self {
        self.plan = Some(plan);
        self
    }

    /// Quantizes the output layer to `ty` as it loads (`--lm-head-type`), whatever the in-situ plan says; a tied
    /// output layer gets its own copy, the embedding lookup keeping the stored (or planned) matrix.
    pub fn with_output_type(mut self, ty: GgmlType) -> Self {
        self.output_type = Some(ty);
        self
    }

    /// Reads packed linears (`P.qweight`, `P.qzeros`, `P.scales`) as the AWQ settings of config.json say.
    pub fn with_awq(mut self, cfg: AwqConfig) -> Self {
        self.awq = Some(cfg);
        self
    }

    /// The stored tensors, by stored name.
    pub fn metas(&self) -> &HashMap<String, TensorMeta> {
        &self.metas
    }

    /// Whether layers run on tgi's host kernels (else on candle tensors).
    pub fn host(&self) -> bool {
        self.host
    }

    /// The device layers are placed on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The stored name of a Hugging Face tensor name.
    fn stored(&self, hf: &str) -> String {
        match self.naming {
            Naming::Hf => hf.to_string(),
            Naming::Gguf { arch, heads, kv_heads } => match map_name(arch, heads, kv_heads, hf) {
                Ok(Some((name, _))) => name,
                _ => hf.to_string(),
            },
        }
    }

    /// Whether the tensor exists.
    pub fn has(&self, hf: &str) -> bool {
        self.metas.contains_key(&self.stored(hf))
    }

    /// The stored tensor's metadata.
    fn meta(&self, hf: &str) -> Result<&TensorMeta, ModelError> {
        let name = self.stored(hf);
        self.metas.get(&name).ok_or(ModelError::MissingTensor(name))
    }

    /// The GGML encoding of a stored matrix, checking its shape is `[rows, cols]`; an expert's matrix may be
    /// its part of a stored `[experts, rows, cols]` stack.
    fn matrix(&self, hf: &str, rows: usize, cols: usize) -> Result<(GgmlType, String, Option<Part>), ModelError> {
        let m = self.meta(hf)?;
        let ty = match m.dtype {
            DType::F32 => GgmlType::F32,
            DType::F16 => GgmlType::F16,
            DType::BF16 => GgmlType::BF16,
            DType::Ggml(q) => q,
            other => return Err(ModelError::Unsupported(format!("tensor '{}' has dtype {other}", m.name))),
        };
        let part = match (split_expert(hf), m.shape.as_slice()) {
            (Some((_, index)), &[count, r, c]) if m.name != hf && [r, c] == [rows, cols] && index < count => {
                Some(Part { index, count })
            }
            _ if m.shape == [rows, cols] => None,
            _ => {
                let expected = vec![rows, cols];
                return Err(ModelError::Shape { name: m.name.clone(), expected, found: m.shape.clone() });
            }
        };
        Ok((ty, m.name.clone(), part))
    }

    /// The stored bytes of (`part` of) a matrix (`cols` values per row): quantized when the in-situ plan says
    /// so, else converted to the dense dtype when one was asked for.
    fn bytes(
        &self,
        ty: GgmlType,
        name: &str,
        part: Option<Part>,
        cols: usize,
    ) -> Result<(GgmlType, WeightBytes), ModelError> {
        if let Some(planned) = self.planned(ty, name, part, cols)? {
            return Ok(planned);
        }
        match self.dense {
            Some(want) if !ty.is_quantized() && want != ty => {
                let mut f = Vec::new();
                insitu::widen(self.metas[name].dtype, Part::of(part, self.source.raw_bytes(name)?), &mut f);
                let mut out = vec![0u8; want.bytes_for(f.len() as u64).expect("float types") as usize];
                tgi_formats::quant::quantize_row(want, &f, &mut out).map_err(|e| ModelError::Config(e.to_string()))?;
                Ok((want, WeightBytes::Owned(out)))
            }
            _ => Ok((ty, WeightBytes::mapped_part(&self.source, name, part)?)),
        }
    }

    /// The matrix quantized to the type the in-situ GGML plan gives it, if that differs from the stored one.
    fn planned(
        &self,
        ty: GgmlType,
        name: &str,
        part: Option<Part>,
        cols: usize,
    ) -> Result<Option<(GgmlType, WeightBytes)>, ModelError> {
        let Some(Plan::Ggml(types)) = &self.plan else { return Ok(None) };
        let Some(&target) = types.get(name).filter(|&&t| t != ty) else { return Ok(None) };
        let out = insitu::encode_ggml(self.source.as_ref(), &self.metas[name], part, cols, target)?;
        Ok(Some((target, WeightBytes::Owned(out))))
    }

    /// The linear layer `{prefix}.weight` (`[rows, cols]`), with `{prefix}.bias` when `bias`.
    pub fn linear(&self, prefix: &str, rows: usize, cols: usize, bias: bool) -> Result<Linear, ModelError> {
        Ok(self.typed_linear(prefix, rows, cols, bias, None)?.0)
    }

    /// The output layer `{prefix}.weight` (`[vocab, hidden]`, `model.embed_tokens` when tied), in the type
    /// [`Weights::with_output_type`] asked for, with what it became.
    pub fn output(&self, prefix: &str, rows: usize, cols: usize) -> Result<(Linear, OutputLayer), ModelError> {
        let (linear, tensor, stored, loaded) = self.typed_linear(prefix, rows, cols, false, self.output_type)?;
        Ok((linear, OutputLayer { tensor, stored, loaded, tied: prefix != "lm_head" }))
    }

    /// [`Weights::linear`], quantized to `want` when given (refused unless the stored weight is dense or
    /// already `want`); also returns the stored tensor's name, its stored form and the form it computes in.
    fn typed_linear(
        &self,
        prefix: &str,
        rows: usize,
        cols: usize,
        bias: bool,
        want: Option<GgmlType>,
    ) -> Result<(Linear, String, String, String), ModelError> {
        let weight = format!("{prefix}.weight");
        let refuse = |stored: &str| {
            let want = want.map_or(String::new(), |t| t.to_string());
            ModelError::Unsupported(format!(
                "--lm-head-type {want}: the output layer ('{prefix}') is stored as {stored}; only a dense \
                 (F32/F16/BF16) one can be quantized at load"
            ))
        };
        if bnb::is_bnb4(&self.metas, &weight) {
            let t = bnb::read(&self.source, &weight, rows, cols)?;
            let kind = t.ty.to_string();
            if want.is_some() {
                return Err(refuse(&kind));
            }
            return Ok((self.bnb4_linear(t, prefix, rows, cols, bias)?, weight, kind.clone(), kind));
        }
        match &self.awq {
            // Linears AWQ leaves unquantized (`modules_to_not_convert`, lm_head) are stored as `P.weight`.
            Some(cfg) if awq::is_packed(&self.metas, prefix) || !self.metas.contains_key(&weight) => {
                if want.is_some() {
                    return Err(refuse("AWQ 4-bit"));
                }
                let m = awq::read(&self.source, &self.metas, prefix, rows, cols, cfg)?;
                self.note_dense("AWQ");
                let bias = if bias { Some(self.vector(&format!("{prefix}.bias"), rows)?) } else { None };
                let linear = Linear::new_awq(m, rows, cols, bias, &self.device, self.act, self.host)?;
                let kind = "AWQ 4-bit".to_string();
                return Ok((linear, format!("{prefix}.qweight"), kind.clone(), kind));
            }
            None if awq::is_packed(&self.metas, prefix) => {
                return Err(ModelError::Unsupported(format!(
                    "tensor '{prefix}.qweight' is a packed quantized weight, but config.json has no AWQ \
                     quantization_config (GPTQ and other packed formats are not supported)"
                )));
            }
            _ => {}
        }
        let (ty, name, part) = self.matrix(&weight, rows, cols)?;
        if want.is_some_and(|w| ty.is_quantized() && w != ty) {
            return Err(refuse(&ty.to_string()));
        }
        if let (Some(Plan::Bnb4(kind)), false, true, None) =
            (&self.plan, ty.is_quantized(), prefix.starts_with("model.layers."), want)
        {
            let t = insitu::encode_bnb4(self.source.as_ref(), &self.metas[&name], part, *kind)?;
            let loaded = t.ty.to_string();
            return Ok((self.bnb4_linear(t, prefix, rows, cols, bias)?, name, ty.to_string(), loaded));
        }
        if !cols.is_multiple_of(ty.block_size()) {
            return Err(ModelError::Unsupported(format!(
                "tensor '{name}': rows of {cols} are not whole {ty} blocks of {}",
                ty.block_size()
            )));
        }
        let bias = if bias { Some(self.vector(&format!("{prefix}.bias"), rows)?) } else { None };
        let (loaded, bytes) = match want {
            Some(w) if w == ty => (ty, WeightBytes::mapped_part(&self.source, &name, part)?),
            Some(w) if !cols.is_multiple_of(w.block_size()) => {
                return Err(ModelError::Unsupported(format!(
                    "--lm-head-type {w}: the output layer's rows of {cols} values are not whole {w} blocks of {}",
                    w.block_size()
                )));
            }
            Some(w) => {
                (w, WeightBytes::Owned(insitu::encode_ggml(self.source.as_ref(), &self.metas[&name], part, cols, w)?))
            }
            None => self.bytes(ty, &name, part, cols)?,
        };
        let linear = Linear::new(loaded, bytes, rows, cols, bias, &self.device, self.act, self.host)?;
        Ok((linear, name, ty.to_string(), loaded.to_string()))
    }

    /// A layer over bitsandbytes 4-bit weights; on a GPU they become dense tensors, which is said once on stderr.
    fn bnb4_linear(
        &self,
        t: Bnb4Tensor,
        prefix: &str,
        rows: usize,
        cols: usize,
        bias: bool,
    ) -> Result<Linear, ModelError> {
        self.note_dense(&t.ty.to_string());
        let bias = if bias { Some(self.vector(&format!("{prefix}.bias"), rows)?) } else { None };
        Ok(Linear::new_bnb4(t, rows, cols, bias, &self.device, self.act, self.host)?)
    }

    /// Off the host kernels, says once on stderr that `what` 4-bit weights become dense tensors at load.
    fn note_dense(&self, what: &str) {
        if !self.host {
            self.dense_note.call_once(|| {
                eprintln!(
                    "note: {what} weights are dequantized to {:?} tensors at load on {:?} (no 4-bit kernel there)",
                    self.act, self.device
                )
            });
        }
    }

    /// A `[len]` vector (norm weight, bias) as an activation-dtype tensor.
    pub fn vector(&self, hf: &str, len: usize) -> Result<Tensor, ModelError> {
        self.offset_vector(hf, len, 0.0)
    }

    /// [`Weights::vector`] with `offset` added to every value in f32.
    fn offset_vector(&self, hf: &str, len: usize, offset: f32) -> Result<Tensor, ModelError> {
        let m = self.meta(hf)?;
        if m.shape.iter().product::<usize>() != len || m.shape.len() != 1 {
            return Err(ModelError::Shape { name: m.name.clone(), expected: vec![len], found: m.shape.clone() });
        }
        let mut v = self.source.read_f32(&m.name)?;
        if offset != 0.0 {
            v.iter_mut().for_each(|x| *x += offset);
        }
        Ok(Tensor::from_vec(v, len, &self.device)?.to_dtype(self.act)?)
    }

    /// A norm's `[len]` weight. With `plus_one` (Gemma's `x * (1 + w)`) a Hugging Face weight is offset by
    /// one here; a GGUF file stores it offset already, as llama.cpp's converter writes it.
    pub fn norm(&self, hf: &str, len: usize, plus_one: bool) -> Result<Tensor, ModelError> {
        let offset = if plus_one && matches!(self.naming, Naming::Hf) { 1.0 } else { 0.0 };
        self.offset_vector(hf, len, offset)
    }

    /// A vector of f32 values kept on the host (e.g. RoPE factors).
    pub fn host_vector(&self, name: &str) -> Result<Option<Vec<f32>>, ModelError> {
        if !self.metas.contains_key(name) {
            return Ok(None);
        }
        Ok(Some(self.source.read_f32(name)?))
    }

    /// The `[vocab, hidden]` embedding matrix.
    pub fn embedding(&self, hf: &str, vocab: usize, hidden: usize) -> Result<Embedding, ModelError> {
        let (ty, name, _) = self.matrix(hf, vocab, hidden)?;
        if !hidden.is_multiple_of(ty.block_size()) {
            return Err(ModelError::Unsupported(format!("tensor '{name}': {hidden} is not whole {ty} blocks")));
        }
        let (ty, bytes) = match self.planned(ty, &name, None, hidden)? {
            Some(planned) => planned,
            None => (ty, WeightBytes::mapped(&self.source, &name)?),
        };
        Ok(Embedding::new(ty, bytes, vocab, hidden))
    }
}

#[cfg(test)]
mod tests {
    use super::OutputLayer;

    #[test]
    fn output_layer_says_what_changed() {
        let layer = |stored: &str, loaded: &str, tied| OutputLayer {
            tensor: "lm_head.weight".into(),
            stored: stored.into(),
            loaded: loaded.into(),
            tied,
        };
        assert_eq!(layer("F16", "F16", false).to_string(), "output layer: F16, as stored (lm_head.weight)");
        assert_eq!(
            layer("F16", "q6_K", true).to_string(),
            "output layer: q6_K, converted at load from F16 (lm_head.weight, tied to the embeddings)"
        );
    }
}
