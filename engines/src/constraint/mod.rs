//! Constrained decoding: the grammar a request's output must match.

/// What a request's output must match, as the HTTP layer parsed it (compiled by the engine).
#[derive(Clone, Debug, PartialEq)]
pub enum Grammar {
    /// Any JSON object (OpenAI `response_format: {"type": "json_object"}`).
    JsonObject,
    /// JSON valid for this JSON Schema (TGI `grammar: {"type": "json"}`, OpenAI `json_schema`).
    JsonSchema(serde_json::Value),
    /// Text matching this regular expression as a whole (TGI `grammar: {"type": "regex"}`).
    Regex(String),
    /// A grammar in llguidance's Lark dialect, which may embed JSON schemas with `%json`.
    Lark(String),
}
