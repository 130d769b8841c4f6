//! config.json `quantization_config` of a bitsandbytes 4-bit model (`BitsAndBytesConfig.to_dict()`
//! as transformers 5.24 saves it).

use serde_json::{json, Value};

use super::codec::FourBitType;
use super::BnbError;

/// The bitsandbytes 4-bit settings recorded in config.json.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BnbQuantConfig {
    /// `bnb_4bit_quant_type`.
    pub quant_type: FourBitType,
    /// `bnb_4bit_use_double_quant`.
    pub double_quant: bool,
    /// `bnb_4bit_compute_dtype`: `float16`, `bfloat16` or `float32`.
    pub compute_dtype: String,
}

impl BnbQuantConfig {
    /// The bitsandbytes 4-bit settings of a parsed config.json, `None` when it has no
    /// `quantization_config` with `quant_method: "bitsandbytes"` and `load_in_4bit: true`
    /// (an 8-bit bitsandbytes config is an error: tgi reads only 4-bit ones).
    pub fn from_config(config: &Value) -> Result<Option<BnbQuantConfig>, BnbError> {
        let Some(q) = config.get("quantization_config") else {
            return Ok(None);
        };
        if q.get("quant_method").and_then(Value::as_str) != Some("bitsandbytes") {
            return Ok(None);
        }
        let flag = |k: &str| q.get(k).and_then(Value::as_bool).unwrap_or(false);
        if !(flag("load_in_4bit") || flag("_load_in_4bit")) {
            return Err(BnbError::Invalid {
                weight: "quantization_config".into(),
                reason: "a bitsandbytes config without load_in_4bit (8-bit LLM.int8 checkpoints are not supported)"
                    .into(),
            });
        }
        let quant_type = q.get("bnb_4bit_quant_type").and_then(Value::as_str).unwrap_or("fp4").parse()?;
        let compute_dtype = match q.get("bnb_4bit_compute_dtype") {
            None | Some(Value::Null) => "float32".to_owned(),
            Some(v) => v.as_str().unwrap_or("float32").trim_start_matches("torch.").to_owned(),
        };
        Ok(Some(BnbQuantConfig { quant_type, double_quant: flag("bnb_4bit_use_double_quant"), compute_dtype }))
    }

    /// The `quantization_config` object transformers writes for these settings.
    pub fn to_json(&self) -> Value {
        json!({
            "_load_in_4bit": true,
            "_load_in_8bit": false,
            "bnb_4bit_compute_dtype": self.compute_dtype,
            "bnb_4bit_quant_storage": "uint8",
            "bnb_4bit_quant_type": self.quant_type.name(),
            "bnb_4bit_use_double_quant": self.double_quant,
            "llm_int8_enable_fp32_cpu_offload": false,
            "llm_int8_has_fp16_weight": false,
            "llm_int8_skip_modules": null,
            "llm_int8_threshold": 6.0,
            "load_in_4bit": true,
            "load_in_8bit": false,
            "quant_method": "bitsandbytes"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_detects() {
        let c = BnbQuantConfig { quant_type: FourBitType::Nf4, double_quant: true, compute_dtype: "bfloat16".into() };
        let config = json!({ "model_type": "llama", "quantization_config": c.to_json() });
        assert_eq!(BnbQuantConfig::from_config(&config).unwrap(), Some(c));
        assert_eq!(BnbQuantConfig::from_config(&json!({ "model_type": "llama" })).unwrap(), None);
        let awq = json!({ "quantization_config": { "quant_method": "awq" } });
        assert_eq!(BnbQuantConfig::from_config(&awq).unwrap(), None);
        let int8 = json!({ "quantization_config": { "quant_method": "bitsandbytes", "load_in_8bit": true } });
        assert!(BnbQuantConfig::from_config(&int8).is_err());
    }
}
