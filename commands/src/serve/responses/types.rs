//! OpenAI's Responses API wire types, as the `openai` SDK's `client.responses` sends and parses them.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// `POST /v1/responses` (`model` is ignored: the served model answers).
#[derive(Debug, Deserialize)]
pub struct CreateRequest {
    /// The new input: text (one user message), or items.
    pub input: Input,
    /// A system message before the conversation (a continuation does not inherit it).
    #[serde(default)]
    pub instructions: Option<String>,
    /// Function tools: `{"type": "function", "name", "description", "parameters", "strict"}`.
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    /// `none`, `auto`, `required` or `{"type": "function", "name": ...}`.
    #[serde(default)]
    pub tool_choice: Option<Value>,
    /// Whether several calls may be made in one answer [default: true].
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// The output's format.
    #[serde(default)]
    pub text: Option<TextConfig>,
    /// Most tokens to generate.
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    /// Temperature [default: 1]; 0 is greedy.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Stream the answer as typed events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Keep generating past end-of-sequence tokens (vLLM's extension, as chat's; benchmarks use it).
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// Keep the response for `GET` and `previous_response_id` [default: true].
    #[serde(default)]
    pub store: Option<bool>,
    /// The stored response this one continues.
    #[serde(default)]
    pub previous_response_id: Option<String>,
    /// Key-value pairs echoed in the response.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

/// `input`: text or items.
#[derive(Debug)]
pub enum Input {
    /// One user message.
    Text(String),
    /// Messages, function calls and their outputs.
    Items(Vec<Item>),
}

impl<'de> Deserialize<'de> for Input {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(Input::Text(s)),
            Value::Array(items) => items
                .into_iter()
                .map(|i| Item::from_value(i).map_err(D::Error::custom))
                .collect::<Result<_, _>>()
                .map(Input::Items),
            other => Err(D::Error::custom(format!("`input` must be a string or a list of items, not {other}"))),
        }
    }
}

/// An input item.
#[derive(Debug)]
pub enum Item {
    /// A message (`type` may be left out).
    Message {
        /// Who speaks.
        role: ItemRole,
        /// What they say.
        content: ItemContent,
    },
    /// An earlier function call of the model.
    FunctionCall {
        /// The call's id, which its output repeats.
        call_id: String,
        /// The function.
        name: String,
        /// The arguments' JSON text.
        arguments: String,
    },
    /// A function call's output.
    FunctionCallOutput {
        /// The call it answers.
        call_id: String,
        /// The output.
        output: ItemContent,
    },
    /// Earlier reasoning (dropped).
    Reasoning,
}

/// A message item as sent.
#[derive(Deserialize)]
struct MessageWire {
    role: ItemRole,
    content: ItemContent,
}

/// A function call item as sent.
#[derive(Deserialize)]
struct CallWire {
    call_id: String,
    name: String,
    arguments: String,
}

/// A function call output item as sent.
#[derive(Deserialize)]
struct OutputWire {
    call_id: String,
    output: ItemContent,
}

impl Item {
    /// Reads an item by its `type` (a message when it has none).
    fn from_value(v: Value) -> Result<Item, String> {
        let kind = match v.get("type") {
            None | Some(Value::Null) => "message".to_string(),
            Some(Value::String(k)) => k.clone(),
            Some(other) => return Err(format!("an input item's `type` must be a string, not {other}")),
        };
        let read = |e: serde_json::Error| format!("a `{kind}` input item: {e}");
        Ok(match kind.as_str() {
            "message" => {
                let m: MessageWire = serde_json::from_value(v).map_err(read)?;
                Item::Message { role: m.role, content: m.content }
            }
            "function_call" => {
                let c: CallWire = serde_json::from_value(v).map_err(read)?;
                Item::FunctionCall { call_id: c.call_id, name: c.name, arguments: c.arguments }
            }
            "function_call_output" => {
                let o: OutputWire = serde_json::from_value(v).map_err(read)?;
                Item::FunctionCallOutput { call_id: o.call_id, output: o.output }
            }
            "reasoning" => Item::Reasoning,
            other => return Err(format!("input items of type `{other}` are not supported")),
        })
    }
}

/// A message's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ItemRole {
    /// The user.
    User,
    /// The model.
    Assistant,
    /// Instructions.
    System,
    /// Instructions (OpenAI's newer name for system).
    Developer,
}

/// A message's content, or a call's output: text, or parts.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum ItemContent {
    /// Plain text.
    Text(String),
    /// Parts.
    Parts(Vec<ItemPart>),
}

/// A content part.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ItemPart {
    /// Input text.
    InputText {
        /// The text.
        text: String,
    },
    /// Text an earlier response output.
    OutputText {
        /// The text.
        text: String,
    },
    /// An earlier refusal.
    Refusal {
        /// Its text.
        refusal: String,
    },
    /// An image (refused: the model reads text).
    InputImage {},
    /// A file (refused: the model reads text).
    InputFile {},
    /// Audio (refused: the model reads text).
    InputAudio {},
}

/// `text`.
#[derive(Debug, Default, Deserialize)]
pub struct TextConfig {
    /// The output's format [default: text].
    #[serde(default)]
    pub format: Option<TextFormat>,
}

/// `text.format`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TextFormat {
    /// Free text.
    Text {},
    /// Any JSON object.
    JsonObject {},
    /// JSON matching a schema.
    JsonSchema {
        /// The format's name.
        name: String,
        /// The JSON schema.
        schema: Map<String, Value>,
        /// What it is for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        /// Whether the schema is followed exactly (always: a grammar enforces it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        strict: Option<bool>,
    },
}

/// A response object: what `POST` answers, what the stream's lifecycle events carry, and what `GET` returns.
#[derive(Clone, Debug, Serialize)]
pub struct ResponseObject {
    /// `resp_...`.
    pub id: String,
    /// `response`.
    pub object: &'static str,
    /// Unix seconds.
    pub created_at: u64,
    /// `in_progress`, `completed` or `incomplete`.
    pub status: &'static str,
    /// Always `null` (a failed generation is an error, not a stored response).
    pub error: Option<Value>,
    /// Why it is incomplete: `{"reason": "max_output_tokens"}`.
    pub incomplete_details: Option<Value>,
    /// The request's instructions.
    pub instructions: Option<String>,
    /// The request's `max_output_tokens`.
    pub max_output_tokens: Option<u32>,
    /// The served model.
    pub model: String,
    /// The answer's items.
    pub output: Vec<OutputItem>,
    /// Whether several calls may be made.
    pub parallel_tool_calls: bool,
    /// The response this one continues.
    pub previous_response_id: Option<String>,
    /// Whether it is stored.
    pub store: bool,
    /// The request's temperature.
    pub temperature: Option<f64>,
    /// The request's `top_p`.
    pub top_p: Option<f64>,
    /// The output's format.
    pub text: TextOut,
    /// The request's `tool_choice` (`auto` when not given).
    pub tool_choice: Value,
    /// The request's tools.
    pub tools: Vec<Value>,
    /// Always `disabled`: a conversation too long for the context is refused.
    pub truncation: &'static str,
    /// Token counts, once done.
    pub usage: Option<ResponseUsage>,
    /// The request's metadata.
    pub metadata: Map<String, Value>,
}

/// The response's `text`.
#[derive(Clone, Debug, Serialize)]
pub struct TextOut {
    /// Its format.
    pub format: TextFormat,
}

/// An output item.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputItem {
    /// A reasoning model's thinking block.
    Reasoning {
        /// `rs_...`.
        id: String,
        /// Always empty (the text is in `content`).
        summary: Vec<Value>,
        /// Its `reasoning_text` part (none while it is added).
        content: Vec<ReasoningText>,
        /// `in_progress`, `completed` or `incomplete`.
        status: &'static str,
    },
    /// Text.
    Message {
        /// `msg_...`.
        id: String,
        /// `in_progress`, `completed` or `incomplete`.
        status: &'static str,
        /// `assistant`.
        role: &'static str,
        /// Its text part (none while it is added).
        content: Vec<OutputText>,
    },
    /// A function call.
    FunctionCall {
        /// `fc_...`.
        id: String,
        /// The call's id, which its output repeats.
        call_id: String,
        /// The function.
        name: String,
        /// The arguments' JSON text.
        arguments: String,
        /// `in_progress`, `completed` or `incomplete`.
        status: &'static str,
    },
}

/// A `reasoning_text` part.
#[derive(Clone, Debug, Serialize)]
pub struct ReasoningText {
    /// `reasoning_text`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The reasoning.
    pub text: String,
}

impl ReasoningText {
    /// The part of `text`.
    pub fn new(text: String) -> Self {
        ReasoningText { kind: "reasoning_text", text }
    }
}

/// An `output_text` part.
#[derive(Clone, Debug, Serialize)]
pub struct OutputText {
    /// `output_text`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The text.
    pub text: String,
    /// Always empty.
    pub annotations: Vec<Value>,
    /// Always empty.
    pub logprobs: Vec<Value>,
}

impl OutputText {
    /// A part holding `text`.
    pub fn new(text: String) -> Self {
        OutputText { kind: "output_text", text, annotations: Vec::new(), logprobs: Vec::new() }
    }
}

/// Token counts.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ResponseUsage {
    /// Prompt tokens.
    pub input_tokens: usize,
    /// Their details.
    pub input_tokens_details: InputDetails,
    /// Generated tokens.
    pub output_tokens: usize,
    /// Their details.
    pub output_tokens_details: OutputDetails,
    /// Both.
    pub total_tokens: usize,
}

/// Prompt token details.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct InputDetails {
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: usize,
}

/// Generated token details.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct OutputDetails {
    /// Reasoning tokens (0: reasoning is not told apart).
    pub reasoning_tokens: usize,
}

/// `DELETE /v1/responses/{id}`'s answer.
#[derive(Debug, Serialize)]
pub struct Deleted {
    /// The id.
    pub id: String,
    /// `response.deleted`.
    pub object: &'static str,
    /// `true`.
    pub deleted: bool,
}
