//! PEFT LoRA adapters: `adapter_config.json` validated into an [`AdapterConfig`], and the stored tensor names
//! (`base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight`) parsed into [`LoraTensorName`]s.
//! Knows no architecture: which modules a model has is the engine's business.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

/// The adapter's configuration file.
pub const CONFIG_FILE: &str = "adapter_config.json";
/// The adapter's weights file.
pub const WEIGHTS_FILE: &str = "adapter_model.safetensors";

/// Why an adapter cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PeftError {
    /// A file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The configuration is not valid JSON of the expected shape.
    #[error("{}: invalid adapter configuration: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: serde_json::Error,
    },
    /// The adapter uses something tgi does not apply.
    #[error("{}: {problem}", path.display())]
    Unsupported {
        /// The configuration file.
        path: PathBuf,
        /// What it uses.
        problem: String,
    },
}

/// A validated LoRA configuration: what scales the product `x · Aᵀ · Bᵀ`.
#[derive(Clone, Debug, PartialEq)]
pub struct AdapterConfig {
    /// The rank `r`.
    pub rank: usize,
    /// `lora_alpha`.
    pub alpha: f64,
    /// rsLoRA: the scale is `alpha / sqrt(r)` instead of `alpha / r`.
    pub rslora: bool,
    /// The base model the adapter was trained on, as recorded (informational).
    pub base_model: Option<String>,
}

impl AdapterConfig {
    /// The factor applied to `B · A`.
    pub fn scale(&self) -> f64 {
        if self.rslora {
            self.alpha / (self.rank as f64).sqrt()
        } else {
            self.alpha / self.rank as f64
        }
    }

    /// Reads and validates `dir/adapter_config.json`.
    pub fn read(dir: &Path) -> Result<Self, PeftError> {
        let path = dir.join(CONFIG_FILE);
        let text = std::fs::read_to_string(&path).map_err(|source| PeftError::Io { path: path.clone(), source })?;
        Self::parse(&text, &path)
    }

    /// Validates the text of an adapter configuration read from `path` (named in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Self, PeftError> {
        let raw: RawConfig =
            serde_json::from_str(text).map_err(|source| PeftError::Json { path: path.to_path_buf(), source })?;
        let refuse = |problem: String| Err(PeftError::Unsupported { path: path.to_path_buf(), problem });
        if raw.peft_type.as_deref().is_some_and(|t| t != "LORA") {
            return refuse(format!("peft_type {:?} is not LORA", raw.peft_type.unwrap_or_default()));
        }
        if raw.r == 0 {
            return refuse("the rank r is 0".into());
        }
        if !raw.lora_alpha.is_finite() {
            return refuse("lora_alpha is not a finite number".into());
        }
        if !is_empty(&raw.modules_to_save) {
            return refuse(
                "modules_to_save replaces whole modules of the base model (fully fine-tuned copies), which tgi does \
                 not serve beside a shared base; train the adapter without modules_to_save"
                    .into(),
            );
        }
        if raw.use_dora {
            return refuse("DoRA (use_dora) is not supported, only plain LoRA".into());
        }
        if raw.fan_in_fan_out {
            return refuse("fan_in_fan_out (Conv1D-style weights) is not supported".into());
        }
        if raw.bias.as_deref().is_some_and(|b| b != "none") {
            return refuse(format!("bias {:?} trains biases of the base; only bias \"none\" is supported", raw.bias));
        }
        for (field, value) in [("rank_pattern", &raw.rank_pattern), ("alpha_pattern", &raw.alpha_pattern)] {
            if !is_empty(value) {
                return refuse(format!("{field} (per-module ranks or alphas) is not supported"));
            }
        }
        if raw.lora_bias {
            return refuse("lora_bias (a bias on lora_B) is not supported".into());
        }
        for (field, value) in [
            ("layer_replication", &raw.layer_replication),
            ("trainable_token_indices", &raw.trainable_token_indices),
            ("target_parameters", &raw.target_parameters),
        ] {
            if !is_empty(value) {
                return refuse(format!("{field} is not supported"));
            }
        }
        Ok(AdapterConfig {
            rank: raw.r,
            alpha: raw.lora_alpha,
            rslora: raw.use_rslora,
            base_model: raw.base_model_name_or_path,
        })
    }
}

/// Whether an optional JSON value is absent, null or an empty list or object.
fn is_empty(v: &Option<Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(o)) => o.is_empty(),
        Some(_) => false,
    }
}

/// The fields of `adapter_config.json` tgi reads; the others (dropout, init, task type) do not change inference.
#[derive(Deserialize)]
struct RawConfig {
    peft_type: Option<String>,
    r: usize,
    lora_alpha: f64,
    #[serde(default)]
    use_rslora: bool,
    #[serde(default)]
    use_dora: bool,
    #[serde(default)]
    fan_in_fan_out: bool,
    bias: Option<String>,
    modules_to_save: Option<Value>,
    rank_pattern: Option<Value>,
    alpha_pattern: Option<Value>,
    layer_replication: Option<Value>,
    #[serde(default)]
    lora_bias: bool,
    trainable_token_indices: Option<Value>,
    target_parameters: Option<Value>,
    base_model_name_or_path: Option<String>,
}

/// Which factor of a LoRA pair a tensor holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Factor {
    /// `lora_A`: `[r, in]`, the shrink.
    A,
    /// `lora_B`: `[out, r]`, the expand.
    B,
}

/// A LoRA tensor's place: layer, module path within the layer (`self_attn.q_proj`) and factor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoraTensorName {
    /// The decoder layer.
    pub layer: usize,
    /// The module's path inside the layer, as transformers names it (`mlp.down_proj`).
    pub module: String,
    /// A or B.
    pub factor: Factor,
}

impl LoraTensorName {
    /// Parses `base_model.model.model.layers.N.<module>.lora_{A,B}[.default].weight`; `None` for any other name.
    pub fn parse(name: &str) -> Option<Self> {
        let rest = name.strip_prefix("base_model.model.")?;
        let rest = rest.strip_prefix("model.").unwrap_or(rest);
        let rest = rest.strip_prefix("layers.")?;
        let (layer, rest) = rest.split_once('.')?;
        let layer = layer.parse().ok()?;
        let rest = rest.strip_suffix(".weight")?;
        let rest = rest.strip_suffix(".default").unwrap_or(rest);
        let (module, factor) = if let Some(m) = rest.strip_suffix(".lora_A") {
            (m, Factor::A)
        } else {
            (rest.strip_suffix(".lora_B")?, Factor::B)
        };
        Some(LoraTensorName { layer, module: module.to_string(), factor })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<AdapterConfig, PeftError> {
        AdapterConfig::parse(text, Path::new("adapter_config.json"))
    }

    #[test]
    fn scales_follow_lora_and_rslora() {
        let c = parse(r#"{"peft_type":"LORA","r":4,"lora_alpha":8,"modules_to_save":null,"bias":"none"}"#).unwrap();
        assert_eq!((c.rank, c.scale()), (4, 2.0));
        let c = parse(r#"{"r":16,"lora_alpha":8,"use_rslora":true,"rank_pattern":{}}"#).unwrap();
        assert_eq!(c.scale(), 2.0);
    }

    #[test]
    fn unsupported_options_are_refused_by_name() {
        for (json, word) in [
            (r#"{"r":4,"lora_alpha":8,"modules_to_save":["lm_head"]}"#, "modules_to_save"),
            (r#"{"r":4,"lora_alpha":8,"use_dora":true}"#, "DoRA"),
            (r#"{"r":4,"lora_alpha":8,"bias":"all"}"#, "bias"),
            (r#"{"r":4,"lora_alpha":8,"rank_pattern":{"q_proj":8}}"#, "rank_pattern"),
            (r#"{"r":0,"lora_alpha":8}"#, "rank"),
            (r#"{"peft_type":"IA3","r":4,"lora_alpha":8}"#, "LORA"),
        ] {
            let e = parse(json).unwrap_err().to_string();
            assert!(e.contains(word), "{e}");
        }
        assert!(matches!(parse("{}"), Err(PeftError::Json { .. })));
    }

    #[test]
    fn tensor_names_parse_into_layer_module_and_factor() {
        let n = LoraTensorName::parse("base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight").unwrap();
        assert_eq!(n, LoraTensorName { layer: 3, module: "self_attn.q_proj".into(), factor: Factor::A });
        let n = LoraTensorName::parse("base_model.model.model.layers.0.mlp.down_proj.lora_B.default.weight").unwrap();
        assert_eq!((n.layer, n.module.as_str(), n.factor), (0, "mlp.down_proj", Factor::B));
        assert_eq!(LoraTensorName::parse("base_model.model.lm_head.lora_A.weight"), None);
        assert_eq!(LoraTensorName::parse("base_model.model.model.embed_tokens.lora_embedding_A"), None);
    }
}
