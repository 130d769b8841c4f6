//! Which tensors of a checkpoint AWQ rewrites, decoder layer by decoder layer, and the seam through
//! which their values arrive: [`LayerWeights`]. `--method rtn` reads them as stored
//! ([`StoredWeights`]); the activation-aware search hands over weights whose input channels it
//! scaled and norms it divided by the same scales.

use std::collections::{BTreeMap, HashMap};

use anyhow::Result;
use tgi_formats::awq::{AwqError, AwqTensor};
use tgi_formats::source::{TensorMeta, TensorSource};

use super::super::hf_dir::is_quantized_linear;
use crate::error::InputError;

/// The norms of a decoder layer that the scale search folds scales into.
const NORMS: [&str; 2] = ["input_layernorm.weight", "post_attention_layernorm.weight"];

/// One linear layer to quantize.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Linear {
    /// Full name of its weight, e.g. `model.layers.3.mlp.down_proj.weight`.
    pub name: String,
    /// Output features (rows of the weight).
    pub out_features: usize,
    /// Input features (columns of the weight).
    pub in_features: usize,
}

impl Linear {
    /// The module name (`model.layers.3.mlp.down_proj`), prefix of `qweight`/`qzeros`/`scales`.
    pub fn module(&self) -> &str {
        self.name.strip_suffix(".weight").unwrap_or(&self.name)
    }
}

/// One decoder layer's tensors that AWQ rewrites.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer {
    /// Index of the layer (`model.layers.{index}`).
    pub index: usize,
    /// Its linear layers, by name.
    pub linears: Vec<Linear>,
    /// Full names of its RMSNorm weights present in the checkpoint (input and post-attention).
    pub norms: Vec<String>,
}

/// The values of one layer's tensors (linear weights `[out, in]` row-major, norms), by full name.
pub type LayerTensors = HashMap<String, Vec<f32>>;

/// Where the values of each decoder layer's linears and norms come from, one layer at a time.
pub trait LayerWeights {
    /// The f32 values to store for every tensor of `layer` (its linears and norms), keyed by name.
    fn layer(&mut self, layer: &Layer) -> Result<LayerTensors>;
}

/// The weights as the checkpoint stores them (`--method rtn`).
pub struct StoredWeights<'a> {
    /// The checkpoint.
    pub source: &'a dyn TensorSource,
}

impl LayerWeights for StoredWeights<'_> {
    fn layer(&mut self, layer: &Layer) -> Result<LayerTensors> {
        let names = layer.linears.iter().map(|l| &l.name).chain(&layer.norms);
        let mut out = HashMap::new();
        for name in names {
            out.insert(name.clone(), self.source.read_f32(name)?);
            self.source.release(name);
        }
        Ok(out)
    }
}

/// The checkpoint split into decoder layers (what AWQ rewrites) and everything else (stored as F16).
#[derive(Debug)]
pub struct AwqPlan {
    /// Decoder layers in index order.
    pub layers: Vec<Layer>,
    /// Embeddings, final norm, lm_head, biases, ...
    pub others: Vec<TensorMeta>,
}

/// The layer index of `model.layers.{i}.…`.
fn layer_index(name: &str) -> Option<usize> {
    name.strip_prefix("model.layers.")?.split('.').next()?.parse().ok()
}

impl AwqPlan {
    /// Splits `metas`, checking that every linear can be stored with groups of `group_size`
    /// (input features a multiple of it, output features of 8): an error names the first layer
    /// that cannot, and how many others cannot.
    pub fn new(metas: &[TensorMeta], group_size: usize) -> Result<AwqPlan> {
        let mut layers: BTreeMap<usize, Layer> = BTreeMap::new();
        let mut others = Vec::new();
        let mut bad = Vec::new();
        for meta in metas {
            let index = layer_index(&meta.name);
            let layer = |i| Layer { index: i, linears: Vec::new(), norms: Vec::new() };
            match index {
                Some(i) if is_quantized_linear(meta) => {
                    let linear =
                        Linear { name: meta.name.clone(), out_features: meta.shape[0], in_features: meta.shape[1] };
                    // The codec checks the shape before the (here empty) values.
                    let probe = AwqTensor::quantize(&[], linear.out_features, linear.in_features, group_size, true);
                    if let Err(e @ (AwqError::GroupSize { .. } | AwqError::OutFeatures(_))) = probe {
                        bad.push(format!("{}: {e}", linear.module()));
                    }
                    layers.entry(i).or_insert_with(|| layer(i)).linears.push(linear);
                }
                Some(i) if NORMS.iter().any(|n| meta.name == format!("model.layers.{i}.{n}")) => {
                    layers.entry(i).or_insert_with(|| layer(i)).norms.push(meta.name.clone());
                }
                _ => others.push(meta.clone()),
            }
        }
        let mut layers: Vec<Layer> = layers.into_values().collect();
        for l in &mut layers {
            l.linears.sort_by(|a, b| a.name.cmp(&b.name));
            l.norms.sort();
        }
        if layers.iter().all(|l| l.linears.is_empty()) {
            return Err(InputError("no linear layer weights (model.layers.*_proj.weight) to quantize".into()).into());
        }
        bad.sort_by_key(|b| layer_index(b));
        if let Some(first) = bad.first() {
            let more = match bad.len() - 1 {
                0 => String::new(),
                1 => " (and 1 more layer)".into(),
                n => format!(" (and {n} more layers)"),
            };
            return Err(InputError(format!(
                "{first}{more}; AWQ needs every linear's input features to be a multiple of --group-size \
                 (32, 64 or 128) and its output features a multiple of 8"
            ))
            .into());
        }
        Ok(AwqPlan { layers, others })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tgi_formats::source::DType;

    fn meta(name: &str, shape: &[usize]) -> TensorMeta {
        TensorMeta { name: name.into(), shape: shape.to_vec(), dtype: DType::F32 }
    }

    fn metas(inter: usize) -> Vec<TensorMeta> {
        let mut v = vec![meta("model.embed_tokens.weight", &[32, 128]), meta("model.norm.weight", &[128])];
        for i in [1, 0] {
            let p = format!("model.layers.{i}");
            v.push(meta(&format!("{p}.mlp.down_proj.weight"), &[128, inter]));
            v.push(meta(&format!("{p}.mlp.up_proj.weight"), &[inter, 128]));
            v.push(meta(&format!("{p}.self_attn.q_proj.weight"), &[128, 128]));
            v.push(meta(&format!("{p}.self_attn.q_proj.bias"), &[128]));
            v.push(meta(&format!("{p}.input_layernorm.weight"), &[128]));
            v.push(meta(&format!("{p}.post_attention_layernorm.weight"), &[128]));
        }
        v
    }

    #[test]
    fn splits_layers_from_the_rest() {
        let plan = AwqPlan::new(&metas(256), 128).unwrap();
        assert_eq!(plan.layers.len(), 2);
        let l0 = &plan.layers[0];
        assert_eq!(l0.index, 0);
        assert_eq!(l0.linears.len(), 3);
        assert_eq!(l0.linears[0].module(), "model.layers.0.mlp.down_proj");
        assert_eq!((l0.linears[0].out_features, l0.linears[0].in_features), (128, 256));
        assert_eq!(
            l0.norms,
            ["model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight"]
        );
        let others: Vec<&str> = plan.others.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            others,
            [
                "model.embed_tokens.weight",
                "model.norm.weight",
                "model.layers.1.self_attn.q_proj.bias",
                "model.layers.0.self_attn.q_proj.bias"
            ]
        );
    }

    #[test]
    fn names_the_first_layer_that_does_not_divide() {
        let e = AwqPlan::new(&metas(172), 128).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "model.layers.0.mlp.down_proj: 172 input features do not divide into groups of 128 (and 3 more layers)"
            ),
            "{e}"
        );
        let e = AwqPlan::new(&metas(100), 4).unwrap_err().to_string();
        assert!(e.starts_with("model.layers.0.mlp.up_proj: 100 output features are not a multiple of 8"), "{e}");
        assert!(AwqPlan::new(&[meta("model.norm.weight", &[4])], 128).is_err());
    }

    #[test]
    fn stored_weights_reads_every_tensor_of_a_layer() {
        struct Fake;
        impl TensorSource for Fake {
            fn tensors(&self) -> Vec<TensorMeta> {
                Vec::new()
            }
            fn read_f32_into(&self, name: &str, out: &mut Vec<f32>) -> Result<(), tgi_formats::source::SourceError> {
                out.clear();
                out.push(name.len() as f32);
                Ok(())
            }
            fn raw_bytes(&self, _: &str) -> Result<&[u8], tgi_formats::source::SourceError> {
                Ok(&[])
            }
            fn release(&self, _: &str) {}
        }
        let plan = AwqPlan::new(&metas(256), 128).unwrap();
        let got = StoredWeights { source: &Fake }.layer(&plan.layers[1]).unwrap();
        assert_eq!(got.len(), 5);
        assert_eq!(got["model.layers.1.mlp.up_proj.weight"], [33.0]);
    }
}
