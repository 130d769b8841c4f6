//! Medusa heads (TGI's layout): a directory with `config.json` (`medusa_num_heads`, `medusa_num_layers`,
//! `base_model_name_or_path`) and `medusa_lm_head.safetensors`. Head `h` is `medusa_num_layers` residual SiLU
//! blocks (`h.L.linear.weight`/`bias`, `y = x + silu(W x + b)`) and a vocabulary projection
//! (`h.{num_layers}.weight`); it reads the target's final normalized hidden state at position `t` and
//! proposes the token at `t + h + 2` (the target's own head gives `t + 1`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};

use crate::model::ModelError;

/// The file holding the heads.
const WEIGHTS: &str = "medusa_lm_head.safetensors";

/// What `config.json` of a Medusa directory says.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
pub struct MedusaConfig {
    /// Heads.
    pub medusa_num_heads: usize,
    /// Residual blocks per head.
    pub medusa_num_layers: usize,
    /// The model the heads were trained for (a path or a hub id).
    #[serde(default)]
    pub base_model_name_or_path: Option<String>,
}

impl MedusaConfig {
    /// The Medusa configuration of `dir`, `None` when `dir` is not a Medusa directory (no config.json, or
    /// one without `medusa_num_heads`); `Err` for a Medusa config.json that is malformed.
    pub fn probe(dir: &Path) -> Result<Option<Self>, ModelError> {
        let path = dir.join("config.json");
        let Ok(text) = std::fs::read_to_string(&path) else { return Ok(None) };
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| ModelError::Config(format!("{}: {e}", path.display())))?;
        if value.get("medusa_num_heads").is_none() {
            return Ok(None);
        }
        let cfg: MedusaConfig =
            serde_json::from_value(value).map_err(|e| ModelError::Config(format!("{}: {e}", path.display())))?;
        if cfg.medusa_num_heads == 0 {
            return Err(ModelError::Config(format!("{}: medusa_num_heads must be at least 1", path.display())));
        }
        Ok(Some(cfg))
    }

    /// Where the base model of the Medusa directory `dir` is: `base_model_name_or_path` as a path (as given,
    /// or beside `dir`, or beside `dir`'s parent; a directory holding an `hf/` checkpoint means that one), else
    /// as a hub id; `None` without a base model named.
    pub fn base_model(&self, dir: &Path) -> Option<String> {
        let base = self.base_model_name_or_path.as_deref()?;
        let parent = dir.parent().unwrap_or(Path::new("."));
        let candidates = [PathBuf::from(base), parent.join(base), parent.parent().unwrap_or(Path::new(".")).join(base)];
        let Some(c) = candidates.iter().find(|c| c.is_dir() || c.is_file()) else { return Some(base.to_string()) };
        if c.join("hf").join("config.json").is_file() && !c.join("config.json").is_file() {
            return Some(c.join("hf").display().to_string());
        }
        Some(c.display().to_string())
    }
}

/// One head: residual blocks, then the vocabulary projection.
struct Head {
    /// `(weight [hidden, hidden], bias [hidden])` per block.
    blocks: Vec<(Tensor, Tensor)>,
    /// `[vocab, hidden]`.
    projection: Tensor,
}

/// Medusa heads loaded for a target model, on the CPU in f32.
pub struct Medusa {
    heads: Vec<Head>,
    hidden: usize,
}

impl std::fmt::Debug for Medusa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Medusa({} heads)", self.heads.len())
    }
}

impl Medusa {
    /// Loads the heads of `dir` for a target of width `hidden` and vocabulary `vocab` (shapes checked).
    pub fn load(dir: &Path, hidden: usize, vocab: usize) -> Result<Self, ModelError> {
        let cfg = MedusaConfig::probe(dir)?.ok_or_else(|| {
            ModelError::Config(format!(
                "{}: not a Medusa directory (no config.json with medusa_num_heads)",
                dir.display()
            ))
        })?;
        let path = dir.join(WEIGHTS);
        if !path.is_file() {
            return Err(ModelError::Config(format!("{}: no {WEIGHTS}", dir.display())));
        }
        let mut tensors = candle_core::safetensors::load(&path, &Device::Cpu)
            .map_err(|e| ModelError::Config(format!("{}: {e}", path.display())))?;
        let mut take = |name: String, shape: &[usize]| -> Result<Tensor, ModelError> {
            let t = tensors.remove(&name).ok_or_else(|| ModelError::MissingTensor(name.clone()))?;
            if t.dims() != shape {
                return Err(ModelError::Shape { name, expected: shape.to_vec(), found: t.dims().to_vec() });
            }
            Ok(t.to_dtype(DType::F32)?)
        };
        let heads = (0..cfg.medusa_num_heads)
            .map(|h| {
                let blocks = (0..cfg.medusa_num_layers)
                    .map(|l| {
                        let w = take(format!("{h}.{l}.linear.weight"), &[hidden, hidden])?;
                        let b = take(format!("{h}.{l}.linear.bias"), &[hidden])?;
                        Ok((w.t()?.contiguous()?, b))
                    })
                    .collect::<Result<Vec<_>, ModelError>>()?;
                let projection = take(format!("{h}.{}.weight", cfg.medusa_num_layers), &[vocab, hidden])?;
                Ok(Head { blocks, projection: projection.t()?.contiguous()? })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        if let Some(extra) = leftover(&tensors) {
            return Err(ModelError::Config(format!(
                "{}: tensor '{extra}' is not part of {} heads of {} layers",
                path.display(),
                cfg.medusa_num_heads,
                cfg.medusa_num_layers
            )));
        }
        Ok(Medusa { heads, hidden })
    }

    /// Heads loaded.
    pub fn num_heads(&self) -> usize {
        self.heads.len()
    }

    /// For each hidden state in `states` (one per sequence, `hidden` floats), the top-1 proposals of its
    /// first `k` heads (`ks`, one per state): the tokens after the one the target samples from that state.
    pub fn propose(&self, states: &[&[f32]], ks: &[usize]) -> Result<Vec<Vec<u32>>, ModelError> {
        let depth = ks.iter().copied().max().unwrap_or(0).min(self.heads.len());
        let mut out = vec![Vec::new(); states.len()];
        if depth == 0 || states.is_empty() {
            return Ok(out);
        }
        let flat: Vec<f32> = states.iter().flat_map(|s| s.iter().copied()).collect();
        let x = Tensor::from_vec(flat, (states.len(), self.hidden), &Device::Cpu)?;
        for (h, head) in self.heads.iter().take(depth).enumerate() {
            let mut y = x.clone();
            for (w, b) in &head.blocks {
                y = (&y + candle_nn::ops::silu(&y.matmul(w)?.broadcast_add(b)?)?)?;
            }
            let best = y.matmul(&head.projection)?.argmax(1)?.to_vec1::<u32>()?;
            for ((o, &k), &t) in out.iter_mut().zip(ks).zip(&best) {
                if h < k {
                    o.push(t);
                }
            }
        }
        Ok(out)
    }
}

/// A tensor name left over after the heads took theirs.
fn leftover(tensors: &HashMap<String, Tensor>) -> Option<&str> {
    tensors.keys().map(String::as_str).min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/stories-distill-4l/medusa")
    }

    #[test]
    fn loads_the_shared_heads_and_resolves_their_base() {
        let dir = shared();
        let cfg = MedusaConfig::probe(&dir).unwrap().unwrap();
        assert_eq!((cfg.medusa_num_heads, cfg.medusa_num_layers), (4, 1));
        let base = cfg.base_model(&dir).unwrap();
        assert!(base.ends_with("stories-distill-4l/hf"), "{base}");
        let m = Medusa::load(&dir, 256, 512).unwrap();
        assert_eq!(m.num_heads(), 4);
        let state = vec![0.1f32; 256];
        let p = m.propose(&[&state, &state], &[4, 2]).unwrap();
        assert_eq!((p[0].len(), p[1].len()), (4, 2));
        assert_eq!(p[0][..2], p[1][..], "the same state proposes the same tokens");
        assert!(p[0].iter().all(|&t| t < 512));
        assert!(m.propose(&[&state], &[0]).unwrap()[0].is_empty());
    }

    #[test]
    fn refuses_what_does_not_fit() {
        let dir = shared();
        let err = Medusa::load(&dir, 128, 512).unwrap_err().to_string();
        assert!(err.contains("0.0.linear.weight") && err.contains("[128, 128]"), "{err}");
        let err = Medusa::load(&dir, 256, 1000).unwrap_err().to_string();
        assert!(err.contains("0.1.weight"), "{err}");
        let tmp = tempfile::tempdir().unwrap();
        assert!(MedusaConfig::probe(tmp.path()).unwrap().is_none());
        std::fs::write(tmp.path().join("config.json"), r#"{"medusa_num_heads": "four"}"#).unwrap();
        assert!(MedusaConfig::probe(tmp.path()).is_err());
        std::fs::write(tmp.path().join("config.json"), r#"{"medusa_num_heads": 2, "medusa_num_layers": 1}"#).unwrap();
        let err = Medusa::load(tmp.path(), 256, 512).unwrap_err().to_string();
        assert!(err.contains("no medusa_lm_head.safetensors"), "{err}");
        std::fs::write(tmp.path().join(WEIGHTS), b"not safetensors").unwrap();
        assert!(Medusa::load(tmp.path(), 256, 512).is_err());
        let plain = tmp.path().join("plain");
        std::fs::create_dir(&plain).unwrap();
        std::fs::write(plain.join("config.json"), r#"{"model_type": "llama"}"#).unwrap();
        assert!(MedusaConfig::probe(&plain).unwrap().is_none());
    }
}
