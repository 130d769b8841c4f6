//! Chat messages in the OpenAI shape, as chat templates read them.

use serde::{Deserialize, Serialize};

/// One chat message (OpenAI shape: role, content as a string or a list of `{type: "text", text}`
/// parts, optional name, tool_calls, tool_call_id, and the reasoning of earlier assistant turns).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant`, `tool` (or whatever else the template knows).
    pub role: String,
    /// The text; absent for an assistant turn that only calls tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    /// An assistant turn's reasoning; also read as `reasoning` or `thinking`, and shown to templates
    /// under both `reasoning_content` and `thinking`, as transformers does.
    #[serde(default, alias = "reasoning", alias = "thinking", skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// The participant's or tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The tools an assistant turn calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// The call a `tool` message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    /// A message with a role and plain text content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Message { role: role.into(), content: Some(Content::Text(content.into())), ..Message::default() }
    }
}

/// A message's content: a string, or a list of parts (passed to the template as is).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Typed parts, e.g. `[{"type": "text", "text": "Hello"}]`.
    Parts(Vec<ContentPart>),
}

/// One part of a list-valued content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// `{"type": "text", "text": ...}`.
    Text {
        /// The text.
        text: String,
    },
}

/// A tool call made by an assistant turn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id, which the answering `tool` message repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Always `function` today.
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    /// The function called.
    pub function: FunctionCall,
}

fn function_kind() -> String {
    "function".into()
}

/// The function and arguments of a tool call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The function's name.
    pub name: String,
    /// The arguments: a JSON object (what most templates expect) or a JSON-encoded string (OpenAI's
    /// wire format); passed to the template as given.
    pub arguments: serde_json::Value,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn openai_shapes_round_trip() {
        let wire = json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}], "name": "ann"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}
            ]},
            {"role": "tool", "content": "42", "tool_call_id": "c1"},
            {"role": "assistant", "content": "ok", "reasoning": "thought"}
        ]);
        let messages: Vec<Message> = serde_json::from_value(wire).unwrap();
        assert_eq!(messages[0], Message::new("system", "Be brief."));
        assert_eq!(messages[1].content, Some(Content::Parts(vec![ContentPart::Text { text: "Hi".into() }])));
        assert_eq!(messages[2].tool_calls.as_ref().unwrap()[0].function.arguments, json!("{\"a\":1}"));
        assert_eq!(messages[4].reasoning_content.as_deref(), Some("thought"));
        // None fields are dropped, as transformers drops None keys before rendering.
        assert_eq!(
            serde_json::to_value(&messages[2]).unwrap(),
            json!({"role": "assistant", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}
            ]})
        );
    }
}
