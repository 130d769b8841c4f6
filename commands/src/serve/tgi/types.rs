//! TGI's wire types: requests as clients send them, responses field for field as TGI writes them
//! (which fields are omitted when empty and which are written as `null` included).

use crate::serve::lora::AdapterInfo;
use serde::{Deserialize, Serialize};

/// `POST /generate`, `/generate_stream`, `/` and `/tokenize` bodies.
#[derive(Debug, Deserialize)]
pub struct GenerateRequest {
    /// The prompt.
    pub inputs: String,
    /// Generation parameters; a request without any samples (TGI's `do_sample: true` default).
    #[serde(default = "GenerateParameters::absent")]
    pub parameters: GenerateParameters,
    /// `POST /` only: stream the answer.
    #[serde(default)]
    pub stream: bool,
    /// Add the model's special tokens (BOS) to the prompt.
    #[serde(default = "yes")]
    pub add_special_tokens: bool,
}

fn yes() -> bool {
    true
}

/// TGI's `parameters`; `null` is accepted wherever a value may be absent.
#[derive(Debug, Default, Deserialize)]
pub struct GenerateParameters {
    /// Sample this many candidates and return the most likely.
    #[serde(default)]
    pub best_of: Option<usize>,
    /// Softmax temperature.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Repetition penalty (1 = none).
    #[serde(default)]
    pub repetition_penalty: Option<f64>,
    /// OpenAI-style frequency penalty.
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    /// Top-k filtering.
    #[serde(default)]
    pub top_k: Option<i32>,
    /// Nucleus sampling.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Typical decoding mass.
    #[serde(default)]
    pub typical_p: Option<f64>,
    /// Sample instead of greedy decoding.
    #[serde(default)]
    pub do_sample: Option<bool>,
    /// Most tokens to generate [default: what is left of `--max-total-tokens`].
    #[serde(default)]
    pub max_new_tokens: Option<u32>,
    /// Prepend the prompt to `generated_text`.
    #[serde(default)]
    pub return_full_text: Option<bool>,
    /// Stop strings.
    #[serde(default)]
    pub stop: Option<Vec<String>>,
    /// Keep only the last N prompt tokens.
    #[serde(default)]
    pub truncate: Option<usize>,
    /// Watermarking (not supported: refused when true).
    #[serde(default)]
    pub watermark: Option<bool>,
    /// Return `details`.
    #[serde(default)]
    pub details: Option<bool>,
    /// Return the prompt tokens' log-probabilities in `details.prefill`.
    #[serde(default)]
    pub decoder_input_details: Option<bool>,
    /// Sampling seed.
    #[serde(default)]
    pub seed: Option<u64>,
    /// Alternatives per token in `top_tokens`.
    #[serde(default)]
    pub top_n_tokens: Option<u32>,
    /// Grammar constraints (not supported: refused when set).
    #[serde(default)]
    pub grammar: Option<serde_json::Value>,
    /// The LoRA adapter to run on (`--lora-adapters`, `/v1/load_lora_adapter`); absent, empty or the model's id:
    /// the base model.
    #[serde(default)]
    pub adapter_id: Option<String>,
}

impl GenerateParameters {
    /// TGI's parameters when the request has none: sampling on, everything else default.
    fn absent() -> Self {
        GenerateParameters { do_sample: Some(true), ..Self::default() }
    }
}

/// TGI's finish reasons.
pub type FinishReason = &'static str;

/// A generated token.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Token {
    /// Token id.
    pub id: u32,
    /// Its text.
    pub text: String,
    /// Its log-probability.
    pub logprob: f32,
    /// Whether it is a special (control) token.
    pub special: bool,
}

/// A prompt token with its log-probability (`null` for the first).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PrefillToken {
    /// Token id.
    pub id: u32,
    /// Its text.
    pub text: String,
    /// Its log-probability given the tokens before it.
    pub logprob: Option<f32>,
}

/// A losing best_of candidate.
#[derive(Debug, Serialize)]
pub struct BestOfSequence {
    /// Its text.
    pub generated_text: String,
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Tokens generated.
    pub generated_tokens: u32,
    /// Its seed.
    pub seed: Option<u64>,
    /// Prompt tokens, when asked for.
    pub prefill: Vec<PrefillToken>,
    /// Generated tokens.
    pub tokens: Vec<Token>,
    /// Alternatives per token, when asked for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub top_tokens: Vec<Vec<Token>>,
}

/// `details` of a generation.
#[derive(Debug, Serialize)]
pub struct Details {
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Tokens generated.
    pub generated_tokens: u32,
    /// The seed (`null` for greedy decoding).
    pub seed: Option<u64>,
    /// Prompt tokens, when asked for.
    pub prefill: Vec<PrefillToken>,
    /// Generated tokens.
    pub tokens: Vec<Token>,
    /// The other best_of candidates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_of_sequences: Option<Vec<BestOfSequence>>,
    /// Alternatives per token, when asked for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub top_tokens: Vec<Vec<Token>>,
    /// Tokens drafted by speculative decoding and checked by the model (only when the server speculates).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculated_tokens: Option<u32>,
    /// Drafted tokens the model accepted (only when the server speculates).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted_tokens: Option<u32>,
}

/// `POST /generate`'s answer.
#[derive(Debug, Serialize)]
pub struct GenerateResponse {
    /// The text.
    pub generated_text: String,
    /// Present when `details` was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Details>,
}

/// `details` of the last stream event.
#[derive(Debug, Serialize)]
pub struct StreamDetails {
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Tokens generated.
    pub generated_tokens: u32,
    /// The seed (`null` for greedy decoding).
    pub seed: Option<u64>,
    /// Prompt tokens.
    pub input_length: u32,
    /// Tokens drafted by speculative decoding and checked by the model (only when the server speculates).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculated_tokens: Option<u32>,
    /// Drafted tokens the model accepted (only when the server speculates).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted_tokens: Option<u32>,
}

/// One `/generate_stream` event.
#[derive(Debug, Serialize)]
pub struct StreamResponse {
    /// 1-based token index.
    pub index: u32,
    /// The token.
    pub token: Token,
    /// Its alternatives, when asked for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub top_tokens: Vec<Token>,
    /// The whole text, on the last event only.
    pub generated_text: Option<String>,
    /// Details, on the last event only and when asked for.
    pub details: Option<StreamDetails>,
}

/// One `/tokenize` or `/chat_tokenize` token.
#[derive(Debug, PartialEq, Serialize)]
pub struct SimpleToken {
    /// Token id.
    pub id: u32,
    /// The input text it covers.
    pub text: String,
    /// Start offset in the input: bytes for `/tokenize`, characters for `/chat_tokenize` (as TGI).
    pub start: usize,
    /// End offset in the input, in the same unit.
    pub stop: usize,
}

/// `POST /chat_tokenize`'s answer.
#[derive(Debug, Serialize)]
pub struct ChatTokenizeResponse {
    /// The tokens of `templated_text`, with their character spans in it.
    pub tokenize_response: Vec<SimpleToken>,
    /// The conversation rendered through the chat template.
    pub templated_text: String,
}

/// `GET /info`.
#[derive(Debug, Serialize)]
pub struct Info {
    /// The model.
    pub model_id: String,
    /// The model's revision (unknown: `null`).
    pub model_sha: Option<String>,
    /// The pipeline tag (unknown: `null`).
    pub model_pipeline_tag: Option<String>,
    /// `--max-concurrent-requests`.
    pub max_concurrent_requests: usize,
    /// `--max-best-of`.
    pub max_best_of: usize,
    /// `--max-stop-sequences`.
    pub max_stop_sequences: usize,
    /// `--max-input-tokens`.
    pub max_input_tokens: usize,
    /// `--max-total-tokens`.
    pub max_total_tokens: usize,
    /// Tokenization happens on the request's own task.
    pub validation_workers: usize,
    /// Inputs per request.
    pub max_client_batch_size: usize,
    /// The server's name.
    pub router: &'static str,
    /// The server's version.
    pub version: &'static str,
    /// The build's commit (unknown: `null`).
    pub sha: Option<&'static str>,
    /// The container label (`null`).
    pub docker_label: Option<&'static str>,
    /// Tokens the KV cache holds (`--max-batch-total-tokens`, or derived from the memory it lives in).
    pub max_batch_total_tokens: usize,
    /// What sized the KV cache, e.g. "90% of cuda:0's 130.2 GiB free memory".
    pub kv_cache_budget: String,
    /// The KV cache's element type (`--kv-cache-dtype`), llama.cpp's name: f16, q8_0, iq4_nl, ...
    pub kv_cache_dtype: &'static str,
    /// Whether the KV cache stores queries/keys and values Hadamard-rotated (block-quantized types, unless
    /// `--no-kv-rotation`).
    pub kv_cache_rotation: bool,
    /// The LoRA adapters held, in load order.
    pub lora_adapters: Vec<AdapterInfo>,
    /// `--max-loras`.
    pub max_loras: usize,
    /// `--max-lora-rank`.
    pub max_lora_rank: usize,
    /// Memory held back from the KV cache for adapters.
    pub lora_reserved_bytes: u64,
}
