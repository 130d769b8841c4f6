//! `--method awq`: the engine's activation-aware search (`tgi_engines::awq`) as the source of each decoder
//! layer's weights, and the calibration set it runs on (`--calib-*`).

use std::path::PathBuf;

use anyhow::{Context, Result};
use indicatif::ProgressBar;
use tgi_engines::awq::{
    parse_texts, AwqOptions as SearchOptions, AwqSearch, AwqSearchError, Calibration, Proj, Step, TextFormat,
    DEFAULT_NAME, DEFAULT_TEXT,
};
use tgi_engines::convert::metadata::llama3_rope_factors;
use tgi_engines::model::DecoderConfig;
use tgi_engines::text::tokenizer::Tokenizer;
use tgi_formats::hf::ModelConfig;

use super::super::hf_dir::FloatCheckpoint;
use super::layers::{Layer, LayerTensors, LayerWeights};
use crate::error::InputError;

/// The calibration flags.
#[derive(Clone, Debug)]
pub struct CalibOptions {
    /// Plain text (one text per line) or JSONL with a "text" field; the built-in text when `None`.
    pub file: Option<PathBuf>,
    /// Blocks of `seq_len` tokens.
    pub samples: usize,
    /// Tokens per block.
    pub seq_len: usize,
    /// Blocks the scale search's losses are evaluated on.
    pub search_samples: usize,
}

/// Tokenizes the calibration set for `input`.
pub fn calibration(input: &FloatCheckpoint, opts: &CalibOptions) -> Result<Calibration> {
    let tj = input.files.tokenizer_json.as_deref().ok_or_else(|| {
        InputError(format!(
            "{}: no tokenizer.json to tokenize the calibration text with (--method rtn needs none)",
            input.files.root.display()
        ))
    })?;
    let tokenizer = Tokenizer::from_tokenizer_json(tj)?;
    let (name, texts) = match &opts.file {
        Some(path) => {
            let name = path.display().to_string();
            let content = std::fs::read_to_string(path).map_err(|e| InputError(format!("--calib-file {name}: {e}")))?;
            let texts =
                parse_texts(&name, &content, TextFormat::from_path(path)).map_err(|e| InputError(e.to_string()))?;
            (name, texts)
        }
        None => (DEFAULT_NAME.to_string(), parse_texts(DEFAULT_NAME, DEFAULT_TEXT, TextFormat::Plain)?),
    };
    Calibration::from_texts(&name, &texts, &tokenizer, opts.samples, opts.seq_len)
        .map_err(|e| InputError(e.to_string()).into())
}

/// One line saying which calibration set is used.
pub fn describe(c: &Calibration, asked: usize) -> String {
    let short = if c.blocks.len() < asked {
        format!(" (the text fills only {} of {asked})", c.blocks.len())
    } else {
        String::new()
    };
    format!("{}: {} samples x {} tokens = {} tokens{short}", c.name, c.blocks.len(), c.seq_len, c.tokens())
}

/// The searched weights, one layer per call, reporting each step on a progress bar.
pub struct SearchedWeights<'a> {
    search: AwqSearch<'a>,
    progress: ProgressBar,
}

impl<'a> SearchedWeights<'a> {
    /// Prepares the search over `input` (embedding the calibration tokens).
    pub fn new(
        input: &'a FloatCheckpoint,
        calib: &Calibration,
        group_size: usize,
        zero_point: bool,
        search_samples: usize,
        progress: ProgressBar,
    ) -> Result<Self> {
        let hf = ModelConfig::from_file(&input.files.config)?;
        let cfg = DecoderConfig::from_hf(&hf)?;
        let factors = llama3_rope_factors(&hf);
        let opts = SearchOptions { group_size, zero_point, search_samples };
        let search = AwqSearch::new(&input.weights, cfg, factors.as_deref(), calib, opts).map_err(|e| match e {
            AwqSearchError::Source(_) | AwqSearchError::Candle(_) => anyhow::Error::from(e),
            e => InputError(e.to_string()).into(),
        })?;
        Ok(SearchedWeights { search, progress })
    }
}

/// A step as the progress bar names it.
fn step_name(s: Step) -> String {
    let short = |p: Proj| p.name().rsplit('.').next().unwrap_or_default().trim_end_matches("_proj").to_string();
    match s {
        Step::Forward => "calibration forward".into(),
        Step::Scale(Proj::Q) => "scale search q/k/v".into(),
        Step::Scale(Proj::Gate) => "scale search gate/up".into(),
        Step::Scale(p) => format!("scale search {}", short(p)),
        Step::Clip(p) => format!("clip search {}", short(p)),
    }
}

impl LayerWeights for SearchedWeights<'_> {
    fn layer(&mut self, layer: &Layer) -> Result<LayerTensors> {
        let bar = self.progress.clone();
        let i = layer.index;
        let searched = self
            .search
            .next_layer(&mut |s| bar.set_message(format!("layer {i}: {}", step_name(s))))?
            .context("the search ran out of layers")?;
        let w = searched.weights;
        anyhow::ensure!(w.index == i, "the search produced layer {} where layer {i} was expected", w.index);
        let mut out = LayerTensors::new();
        for p in Proj::ALL {
            out.insert(format!("{}.weight", p.hf_name(i)), w.weight(p).to_vec());
        }
        out.insert(format!("model.layers.{i}.input_layernorm.weight"), w.input_norm);
        out.insert(format!("model.layers.{i}.post_attention_layernorm.weight"), w.post_norm);
        if let Some(biases) = w.qkv_bias {
            for (p, b) in [Proj::Q, Proj::K, Proj::V].into_iter().zip(biases) {
                out.insert(format!("{}.bias", p.hf_name(i)), b);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_named_for_the_bar() {
        assert_eq!(step_name(Step::Scale(Proj::Q)), "scale search q/k/v");
        assert_eq!(step_name(Step::Scale(Proj::Down)), "scale search down");
        assert_eq!(step_name(Step::Clip(Proj::Gate)), "clip search gate");
    }
}
