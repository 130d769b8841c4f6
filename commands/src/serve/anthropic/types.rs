//! Anthropic's wire types for `/v1/messages` and `/v1/messages/count_tokens`, as the `anthropic` SDK sends
//! and parses them.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// What `/v1/messages` and `/v1/messages/count_tokens` share: the conversation and its tools (`model` is
/// ignored: the served model answers).
#[derive(Debug, Deserialize)]
pub struct Prompt {
    /// The turns, `user` and `assistant` alternating.
    pub messages: Vec<InputMessage>,
    /// The system prompt: text, or text blocks.
    #[serde(default)]
    pub system: Option<Content>,
    /// Tools the model may call.
    #[serde(default)]
    pub tools: Option<Vec<Tool>>,
    /// What the model must do with them.
    #[serde(default)]
    pub tool_choice: Option<ToolChoice>,
    /// Extended thinking, for templates with a thinking switch (`enable_thinking`).
    #[serde(default)]
    pub thinking: Option<Thinking>,
}

/// `POST /v1/messages`.
#[derive(Debug, Deserialize)]
pub struct MessagesRequest {
    /// The conversation and its tools.
    #[serde(flatten)]
    pub prompt: Prompt,
    /// Most tokens to generate.
    pub max_tokens: u32,
    /// Strings that end the answer.
    #[serde(default)]
    pub stop_sequences: Option<Vec<String>>,
    /// Temperature [default: 1]; 0 is greedy.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Top-k filtering.
    #[serde(default)]
    pub top_k: Option<i64>,
    /// Stream the answer as Anthropic's events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Keep generating past end-of-sequence tokens (vLLM's extension, as chat's; benchmarks use it).
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// The output's format (structured outputs); `effort` is accepted and ignored.
    #[serde(default)]
    pub output_config: Option<OutputConfig>,
}

/// `output_config`.
#[derive(Debug, Deserialize)]
pub struct OutputConfig {
    /// JSON matching a schema, when given.
    #[serde(default)]
    pub format: Option<OutputFormat>,
}

/// `output_config.format`: `{"type": "json_schema", "schema": ...}`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputFormat {
    /// JSON matching the schema.
    JsonSchema {
        /// The JSON schema.
        schema: serde_json::Map<String, Value>,
    },
}

/// A turn of the conversation.
#[derive(Debug, Deserialize)]
pub struct InputMessage {
    /// Who speaks.
    pub role: Role,
    /// What they say.
    pub content: Content,
}

/// `user` or `assistant`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The user (tool results come in its turns).
    User,
    /// The model (tool calls come in its turns).
    Assistant,
}

/// A turn's content: text, or content blocks.
#[derive(Debug)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Blocks.
    Blocks(Vec<Block>),
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(Content::Text(s)),
            Value::Array(blocks) => blocks
                .into_iter()
                .map(|b| serde_json::from_value(b).map_err(D::Error::custom))
                .collect::<Result<_, _>>()
                .map(Content::Blocks),
            other => {
                Err(D::Error::custom(format!("content must be a string or a list of content blocks, not {other}")))
            }
        }
    }
}

/// An input content block (the types a text model can read; images and documents are named to be refused).
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An earlier tool call of the assistant.
    ToolUse {
        /// Its id, which the result repeats.
        id: String,
        /// The tool called.
        name: String,
        /// Its arguments.
        input: serde_json::Map<String, Value>,
    },
    /// A tool's result, in a user turn.
    ToolResult {
        /// The call it answers.
        tool_use_id: String,
        /// The result: text, or text blocks.
        #[serde(default)]
        content: Option<Content>,
        /// Whether the tool failed.
        #[serde(default)]
        is_error: Option<bool>,
    },
    /// The assistant's earlier reasoning.
    Thinking {
        /// The reasoning.
        thinking: String,
    },
    /// Reasoning the API redacted (dropped).
    RedactedThinking {},
    /// An image (refused: the model reads text).
    Image {},
    /// A document (refused: the model reads text).
    Document {},
}

/// A tool the model may call.
#[derive(Debug, Deserialize)]
pub struct Tool {
    /// `custom` (the default); server tools (`bash_...`, `web_search_...`) are refused.
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// Its name.
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: Option<String>,
    /// The JSON schema of its input.
    pub input_schema: serde_json::Map<String, Value>,
}

/// `tool_choice`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolChoice {
    /// Text or calls, as the model chooses.
    Auto {
        /// At most one call.
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    /// One or more calls of any tool.
    Any {
        /// At most one call.
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    /// A call of this tool.
    Tool {
        /// The tool.
        name: String,
        /// At most one call.
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    /// No calls (the tools are not shown).
    None {},
}

/// `thinking`: on (`enabled`, `adaptive`, `between_tools`) or off; its `budget_tokens` is accepted and left to
/// `max_tokens`.
#[derive(Debug, Deserialize)]
pub struct Thinking {
    /// `enabled`, `adaptive` or `disabled`.
    #[serde(rename = "type")]
    pub kind: ThinkingKind,
}

/// Whether the model thinks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThinkingKind {
    /// Thinking on, with a budget.
    Enabled,
    /// Thinking on, as much as the model decides.
    Adaptive,
    /// Thinking on, between tool calls.
    BetweenTools,
    /// Thinking off.
    Disabled,
}

/// An output content block.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutBlock {
    /// A thinking block (its signature empty: nothing here is encrypted or verified).
    Thinking {
        /// The model's reasoning.
        thinking: String,
        /// Always empty.
        signature: String,
    },
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// A tool call.
    ToolUse {
        /// Its id.
        id: String,
        /// The tool.
        name: String,
        /// Its arguments (`{}` when the answer was cut short inside them).
        input: Value,
    },
}

/// Token counts.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: usize,
    /// Generated tokens.
    pub output_tokens: usize,
    /// Prompt tokens served from the prefix cache.
    pub cache_read_input_tokens: usize,
    /// Prompt tokens written to a cache (always 0: the prefix cache needs no writes).
    pub cache_creation_input_tokens: usize,
}

/// `POST /v1/messages`'s answer (also `message_start`'s `message`, with no content yet).
#[derive(Debug, Serialize)]
pub struct MessageResponse {
    /// `msg_...`.
    pub id: String,
    /// `message`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// `assistant`.
    pub role: &'static str,
    /// The served model.
    pub model: String,
    /// The answer.
    pub content: Vec<OutBlock>,
    /// `end_turn`, `max_tokens`, `stop_sequence` or `tool_use` (`null` in `message_start`).
    pub stop_reason: Option<&'static str>,
    /// The stop sequence that ended the answer.
    pub stop_sequence: Option<String>,
    /// Token counts.
    pub usage: Usage,
}

/// `POST /v1/messages/count_tokens`'s answer.
#[derive(Debug, Serialize)]
pub struct TokenCount {
    /// The prompt's tokens.
    pub input_tokens: usize,
}
