//! AWQ's activation-aware weight search (Lin et al. 2023, as AutoAWQ implements it): calibration tokens run
//! through the model one decoder layer at a time; per group of linears sharing an input, a grid search picks the
//! per-channel scales that minimise the block's output error after 4-bit quantization, the scales are folded
//! into the preceding norm or linear, then each linear's clipping range is searched. The result is dense f32
//! weights that a round-to-nearest encoder (`tgi_formats::awq`) turns into the file.

mod calibration;
mod clip;
mod forward;
mod layer;
mod scale;
mod search;

pub use calibration::{parse_texts, Calibration, CalibrationError, TextFormat, DEFAULT_NAME, DEFAULT_TEXT};
pub use layer::{LayerWeights, Proj};
pub use search::{AwqSearch, GroupReport, SearchedLayer, Step};

/// Errors of the AWQ search.
#[derive(Debug, thiserror::Error)]
pub enum AwqSearchError {
    /// A checkpoint tensor could not be read.
    #[error(transparent)]
    Source(#[from] tgi_formats::SourceError),
    /// A tensor operation failed.
    #[error("tensor operation failed: {0}")]
    Candle(#[from] candle_core::Error),
    /// A tensor has the wrong number of values.
    #[error("tensor '{name}' holds {found} values, expected {expected}")]
    Shape {
        /// Stored name.
        name: String,
        /// Values the configuration implies.
        expected: usize,
        /// Values stored.
        found: usize,
    },
    /// A linear layer's input features do not divide into quantization groups.
    #[error("{name}: {in_features} input features do not divide into groups of {group_size}")]
    GroupSize {
        /// The layer's Hugging Face name.
        name: String,
        /// Its input features.
        in_features: usize,
        /// The group size asked for.
        group_size: usize,
    },
    /// Something the search does not handle.
    #[error("AWQ search: {0}")]
    Unsupported(String),
    /// The calibration set is unusable.
    #[error(transparent)]
    Calibration(#[from] CalibrationError),
}

/// How the search quantizes and how much of the calibration set it evaluates losses on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AwqOptions {
    /// Input channels per quantization group.
    pub group_size: usize,
    /// Asymmetric quantization with a zero point (AutoAWQ's default).
    pub zero_point: bool,
    /// The scale search's losses are evaluated on the first this many calibration samples (activation
    /// statistics always use all of them).
    pub search_samples: usize,
}

impl Default for AwqOptions {
    fn default() -> Self {
        AwqOptions { group_size: 128, zero_point: true, search_samples: DEFAULT_SEARCH_SAMPLES }
    }
}

/// Samples the scale-search losses are evaluated on by default (4096 tokens at 512 per sample).
pub const DEFAULT_SEARCH_SAMPLES: usize = 8;
