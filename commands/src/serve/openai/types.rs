//! OpenAI's wire types for chat completions, completions and models, as the `openai` SDK and
//! huggingface_hub send and parse them.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tgi_engines::text::chat::{Message, ToolCall};

use super::tools::ToolFields;
use crate::serve::lora::LoraField;

/// `stop`: one string or a list.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One stop string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl Stop {
    /// The stop strings.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

/// `stream_options`.
#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with `usage` (and `usage: null` on the others).
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// Sampling fields chat and completions share (the OpenAI ones, plus vLLM's `top_k`, `min_p`,
/// `repetition_penalty` and `ignore_eos`).
#[derive(Debug, Default, Deserialize)]
pub struct Sampling {
    /// A loaded LoRA adapter's name runs on that adapter (as vLLM); any other name, or none, on the served model.
    #[serde(default)]
    pub model: Option<String>,
    /// llama-server's per-request adapters, `[{"id": index or name, "scale": s}]`: the one with a non-zero scale
    /// runs (at `scale` times its trained scale), over `model`.
    #[serde(default)]
    pub lora: Option<Vec<LoraField>>,
    /// Temperature [default: 1]; 0 is greedy.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Top-k filtering.
    #[serde(default)]
    pub top_k: Option<i64>,
    /// Min-p filtering.
    #[serde(default)]
    pub min_p: Option<f64>,
    /// Frequency penalty in [-2, 2].
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    /// Presence penalty in [-2, 2].
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    /// Repetition penalty (1 = none).
    #[serde(default)]
    pub repetition_penalty: Option<f64>,
    /// Keep generating past end-of-sequence tokens (vLLM extension; benchmarks use it).
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// Seed; choice `i` of `n` uses `seed + i`.
    #[serde(default)]
    pub seed: Option<u64>,
    /// Stop strings.
    #[serde(default)]
    pub stop: Option<Stop>,
    /// Stream the answer.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Streaming options.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Choices to generate.
    #[serde(default)]
    pub n: Option<usize>,
    /// Token biases (not supported: refused when not empty).
    #[serde(default)]
    pub logit_bias: Option<serde_json::Map<String, Value>>,
}

/// `POST /v1/chat/completions` (`model`: the served model or a LoRA adapter).
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    /// The conversation.
    pub messages: Vec<Message>,
    /// Return each token's log-probability.
    #[serde(default)]
    pub logprobs: Option<bool>,
    /// Alternatives per token (0 to 20).
    #[serde(default)]
    pub top_logprobs: Option<usize>,
    /// Most tokens to generate (older name).
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Most tokens to generate.
    #[serde(default)]
    pub max_completion_tokens: Option<u32>,
    /// Tools, `tool_choice`, `parallel_tool_calls` and `tool_prompt`.
    #[serde(flatten)]
    pub tools: ToolFields,
    /// Output format: text, or a grammar the output must match (see `serve::grammar::parse`).
    #[serde(default)]
    pub response_format: Option<Value>,
    /// Extra variables for the chat template.
    #[serde(default)]
    pub chat_template_kwargs: Option<Value>,
    /// The sampling fields.
    #[serde(flatten)]
    pub sampling: Sampling,
}

/// A completions prompt: text, texts, token ids, or lists of token ids.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    /// One text.
    Text(String),
    /// Several texts.
    Texts(Vec<String>),
    /// One prompt as token ids.
    Ids(Vec<u32>),
    /// Several prompts as token ids.
    IdLists(Vec<Vec<u32>>),
}

/// `POST /v1/completions` (`model`: the served model or a LoRA adapter).
#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    /// The prompt(s).
    pub prompt: Prompt,
    /// Most tokens to generate [default: 16, as OpenAI].
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Per token, the log-probabilities of this many most likely tokens.
    #[serde(default)]
    pub logprobs: Option<usize>,
    /// Put the prompt before the completion.
    #[serde(default)]
    pub echo: Option<bool>,
    /// Candidates per prompt, of which the `n` most likely are returned.
    #[serde(default)]
    pub best_of: Option<usize>,
    /// Text after the completion (not supported: refused when given).
    #[serde(default)]
    pub suffix: Option<String>,
    /// The sampling fields.
    #[serde(flatten)]
    pub sampling: Sampling,
}

/// Token counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Both.
    pub total_tokens: usize,
    /// Prompt token details.
    pub prompt_tokens_details: PromptTokensDetails,
}

/// Prompt token details.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: usize,
}

/// A token's log-probability, text and bytes.
#[derive(Debug, Serialize)]
pub struct TopLogprob {
    /// Its text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// Its UTF-8 bytes.
    pub bytes: Vec<u8>,
}

/// A generated token's log-probability and alternatives.
#[derive(Debug, Serialize)]
pub struct TokenLogprob {
    /// Its text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// Its UTF-8 bytes.
    pub bytes: Vec<u8>,
    /// The most likely alternatives.
    pub top_logprobs: Vec<TopLogprob>,
}

/// A chat choice's log-probabilities.
#[derive(Debug, Serialize)]
pub struct ChatLogprobs {
    /// One per generated token.
    pub content: Vec<TokenLogprob>,
}

/// An assistant message.
#[derive(Debug, Serialize)]
pub struct AssistantMessage {
    /// Always `assistant`.
    pub role: &'static str,
    /// The text; `null` when the answer is only tool calls.
    pub content: Option<String>,
    /// The thinking block's text, when the answer has one (llama-server's and DeepSeek's name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// The same (vLLM's newer name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// The tool calls, when the answer makes any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
}

/// A chat choice.
#[derive(Debug, Serialize)]
pub struct ChatChoice {
    /// Its index.
    pub index: usize,
    /// The answer.
    pub message: AssistantMessage,
    /// Log-probabilities, when asked for.
    pub logprobs: Option<ChatLogprobs>,
    /// `stop`, `length` or `tool_calls`.
    pub finish_reason: &'static str,
}

/// `POST /v1/chat/completions`'s answer.
#[derive(Debug, Serialize)]
pub struct ChatCompletion {
    /// Request id.
    pub id: String,
    /// `chat.completion`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The model.
    pub model: String,
    /// The server build.
    pub system_fingerprint: String,
    /// The choices.
    pub choices: Vec<ChatChoice>,
    /// Token counts.
    pub usage: Usage,
}

/// A streamed message part.
#[derive(Debug, Serialize)]
pub struct Delta {
    /// Always `assistant`.
    pub role: &'static str,
    /// New text, when there is any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// More of the thinking block's text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// The same (vLLM's newer name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// A tool call's start or more of its arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

impl Delta {
    /// New text.
    pub fn content(text: String) -> Self {
        Delta { content: Some(text), ..Self::empty() }
    }

    /// More of the thinking block's text, under both names.
    pub fn reasoning(text: String) -> Self {
        Delta { reasoning_content: Some(text.clone()), reasoning: Some(text), ..Self::empty() }
    }

    /// A tool call's part.
    pub fn tool_call(call: ToolCallDelta) -> Self {
        Delta { tool_calls: Some(vec![call]), ..Self::empty() }
    }

    fn empty() -> Self {
        Delta { role: "assistant", content: None, reasoning_content: None, reasoning: None, tool_calls: None }
    }
}

/// A streamed part of a tool call: its first carries `id`, `type` and the function's name.
#[derive(Debug, Serialize)]
pub struct ToolCallDelta {
    /// The call's position in the answer.
    pub index: usize,
    /// The call's id, on its first part.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `function`, on its first part.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// The function's name (first part) or more of its arguments.
    pub function: FunctionDelta,
}

/// A streamed part of a called function.
#[derive(Debug, Serialize)]
pub struct FunctionDelta {
    /// The function's name, on the call's first part.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// More of the arguments' JSON text (empty on the first part).
    pub arguments: String,
}

/// A streamed chat choice.
#[derive(Debug, Serialize)]
pub struct ChunkChoice {
    /// Its index.
    pub index: usize,
    /// The new part.
    pub delta: Delta,
    /// The new tokens' log-probabilities, when asked for.
    pub logprobs: Option<ChatLogprobs>,
    /// Set on the choice's last chunk: `stop`, `length` or `tool_calls`.
    pub finish_reason: Option<&'static str>,
}

/// One chat stream event.
#[derive(Debug, Serialize)]
pub struct ChatChunk {
    /// Request id.
    pub id: String,
    /// `chat.completion.chunk`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The model.
    pub model: String,
    /// The server build.
    pub system_fingerprint: String,
    /// The choices this chunk updates (none on the usage chunk).
    pub choices: Vec<ChunkChoice>,
    /// Token counts, on the last chunk when `stream_options.include_usage`.
    pub usage: Option<Usage>,
}

/// Legacy completions log-probabilities.
#[derive(Debug, Serialize)]
pub struct CompletionLogprobs {
    /// Token texts.
    pub tokens: Vec<String>,
    /// Their log-probabilities (`null` for the first prompt token).
    pub token_logprobs: Vec<Option<f32>>,
    /// Alternatives per token, text to log-probability.
    pub top_logprobs: Vec<Option<serde_json::Map<String, Value>>>,
    /// Character offset of each token in the choice's text.
    pub text_offset: Vec<usize>,
}

/// A completion choice (also its stream chunks).
#[derive(Debug, Serialize)]
pub struct CompletionChoice {
    /// Its index.
    pub index: usize,
    /// The text (a chunk's new text when streaming).
    pub text: String,
    /// Log-probabilities, when asked for.
    pub logprobs: Option<CompletionLogprobs>,
    /// Set on the choice's end.
    pub finish_reason: Option<&'static str>,
}

/// `POST /v1/completions`'s answer, and each of its stream chunks.
#[derive(Debug, Serialize)]
pub struct Completion {
    /// Request id.
    pub id: String,
    /// `text_completion`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The model.
    pub model: String,
    /// The server build.
    pub system_fingerprint: String,
    /// The choices.
    pub choices: Vec<CompletionChoice>,
    /// Token counts (`null` on stream chunks but the usage chunk).
    pub usage: Option<Usage>,
}

/// One model in `GET /v1/models`.
#[derive(Debug, Serialize)]
pub struct Model {
    /// The model id.
    pub id: String,
    /// `model`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// Who serves it.
    pub owned_by: &'static str,
    /// For a LoRA adapter, the model it adapts (vLLM's field); absent for the model itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}

/// `GET /v1/models`.
#[derive(Debug, Serialize)]
pub struct ModelList {
    /// `list`.
    pub object: &'static str,
    /// The served model.
    pub data: Vec<Model>,
}
