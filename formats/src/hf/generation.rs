//! `generation_config.json`: special token ids and the model author's sampling defaults.

use std::path::Path;

use super::json::{parse_json, read_json, Obj};
use super::HfError;

/// Special ids and sampling defaults from generation_config.json; every field is optional there.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerationConfig {
    /// Beginning-of-sequence token id.
    pub bos_token_id: Option<u32>,
    /// Ids that end generation (`eos_token_id`: one id or a list).
    pub eos_token_ids: Vec<u32>,
    /// Padding token id.
    pub pad_token_id: Option<u32>,
    /// Whether to sample (`false` means greedy).
    pub do_sample: Option<bool>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Top-k cutoff (0 disables it).
    pub top_k: Option<usize>,
    /// Nucleus (top-p) cutoff.
    pub top_p: Option<f32>,
    /// Repetition penalty (1.0 disables it).
    pub repetition_penalty: Option<f32>,
    /// Most tokens to generate after the prompt.
    pub max_new_tokens: Option<usize>,
    /// Most tokens in prompt plus generation.
    pub max_length: Option<usize>,
}

impl GenerationConfig {
    /// Reads a generation_config.json file.
    pub fn from_file(path: &Path) -> Result<Self, HfError> {
        Self::parse(&read_json(path)?, path)
    }

    /// Parses generation_config.json text; errors name the file `generation_config.json`.
    pub fn from_json_str(json: &str) -> Result<Self, HfError> {
        let path = Path::new("generation_config.json");
        Self::parse(&parse_json(json, path)?, path)
    }

    fn parse(value: &serde_json::Value, path: &Path) -> Result<Self, HfError> {
        let o = Obj::root(path, value)?;
        Ok(GenerationConfig {
            bos_token_id: o.u32("bos_token_id")?,
            eos_token_ids: o.u32_list("eos_token_id")?,
            pad_token_id: o.u32("pad_token_id")?,
            do_sample: o.bool("do_sample")?,
            temperature: o.f32("temperature")?,
            top_k: o.usize("top_k")?,
            top_p: o.f32("top_p")?,
            repetition_penalty: o.f32("repetition_penalty")?,
            max_new_tokens: o.usize("max_new_tokens")?,
            max_length: o.usize("max_length")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stories260k() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/stories260k/hf/generation_config.json");
        let g = GenerationConfig::from_file(Path::new(path)).unwrap();
        let expected = GenerationConfig {
            bos_token_id: Some(1),
            eos_token_ids: vec![2],
            do_sample: Some(false),
            max_length: Some(512),
            ..Default::default()
        };
        assert_eq!(g, expected);
    }

    #[test]
    fn llama31_style() {
        let g = GenerationConfig::from_json_str(
            r#"{"bos_token_id": 128000, "do_sample": true, "eos_token_id": [128001, 128008, 128009],
                "temperature": 0.6, "top_p": 0.9, "top_k": 20, "repetition_penalty": 1.05,
                "max_new_tokens": 2048, "pad_token_id": null, "transformers_version": "4.45.0"}"#,
        )
        .unwrap();
        assert_eq!(g.eos_token_ids, vec![128001, 128008, 128009]);
        assert_eq!((g.temperature, g.top_p, g.top_k), (Some(0.6), Some(0.9), Some(20)));
        assert_eq!((g.repetition_penalty, g.max_new_tokens), (Some(1.05), Some(2048)));
        assert_eq!((g.pad_token_id, g.do_sample, g.max_length), (None, Some(true), None));
    }

    #[test]
    fn errors() {
        let msg = GenerationConfig::from_json_str(r#"{"temperature": "hot"}"#).unwrap_err().to_string();
        assert_eq!(msg, "generation_config.json: field 'temperature': expected a number, found a string");
        let msg = GenerationConfig::from_json_str(r#"{"eos_token_id": -1}"#).unwrap_err().to_string();
        assert!(msg.contains("field 'eos_token_id'"), "{msg}");
        assert_eq!(GenerationConfig::from_json_str("{}").unwrap(), GenerationConfig::default());
    }
}
