//! config.json `quantization_config` of an AWQ checkpoint: the minimal dict AutoAWQ writes and
//! transformers (gptqmodel), vLLM and TGI all read (formats.md §2.3).

use serde_json::{json, Value};

use super::codec::AwqError;

/// The AWQ settings recorded in config.json.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AwqConfig {
    /// Bits per weight (4).
    pub bits: u32,
    /// Input channels per group.
    pub group_size: usize,
    /// Asymmetric quantization with a zero point per group.
    pub zero_point: bool,
}

impl AwqConfig {
    /// The AWQ settings of a parsed config.json, `None` when its `quantization_config` is not AWQ.
    /// Accepts AutoAWQ's legacy names (`w_bit`, `q_group_size`); refuses what tgi cannot run
    /// (other bit widths, the GEMV/Marlin layouts).
    pub fn from_config(config: &Value) -> Result<Option<AwqConfig>, AwqError> {
        let Some(q) = config.get("quantization_config") else {
            return Ok(None);
        };
        if q.get("quant_method").and_then(Value::as_str).map(str::to_ascii_lowercase).as_deref() != Some("awq") {
            return Ok(None);
        }
        let int = |a: &str, b: &str| q.get(a).or_else(|| q.get(b)).and_then(Value::as_u64);
        let bits = int("bits", "w_bit").ok_or_else(|| AwqError::Config("no `bits`".into()))? as u32;
        if bits != 4 {
            return Err(AwqError::Config(format!("{bits}-bit AWQ is not supported (only 4-bit)")));
        }
        let group_size = int("group_size", "q_group_size").ok_or_else(|| AwqError::Config("no `group_size`".into()))?;
        let version = q.get("version").or_else(|| q.get("format")).and_then(Value::as_str).unwrap_or("gemm");
        if !version.eq_ignore_ascii_case("gemm") {
            return Err(AwqError::Config(format!("AWQ version `{version}` is not supported (only GEMM)")));
        }
        let zero_point = q.get("zero_point").and_then(Value::as_bool).unwrap_or(true);
        Ok(Some(AwqConfig { bits, group_size: group_size as usize, zero_point }))
    }

    /// The `quantization_config` object AutoAWQ writes for these settings.
    pub fn to_json(&self) -> Value {
        json!({
            "quant_method": "awq",
            "bits": self.bits,
            "group_size": self.group_size,
            "zero_point": self.zero_point,
            "version": "gemm",
            "modules_to_not_convert": null
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_reads_legacy_names() {
        let c = AwqConfig { bits: 4, group_size: 128, zero_point: true };
        assert_eq!(AwqConfig::from_config(&json!({ "quantization_config": c.to_json() })).unwrap(), Some(c));
        let legacy = json!({ "quantization_config": { "quant_method": "AWQ", "w_bit": 4, "q_group_size": 64,
                             "zero_point": false, "version": "GEMM" } });
        let l = AwqConfig::from_config(&legacy).unwrap().unwrap();
        assert_eq!((l.group_size, l.zero_point), (64, false));
        assert_eq!(AwqConfig::from_config(&json!({})).unwrap(), None);
        let bnb = json!({ "quantization_config": { "quant_method": "bitsandbytes" } });
        assert_eq!(AwqConfig::from_config(&bnb).unwrap(), None);
    }

    #[test]
    fn refuses_what_it_cannot_run() {
        for q in [
            json!({ "quant_method": "awq", "bits": 8, "group_size": 128 }),
            json!({ "quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv" }),
            json!({ "quant_method": "awq", "bits": 4 }),
        ] {
            assert!(AwqConfig::from_config(&json!({ "quantization_config": q })).is_err());
        }
    }
}
