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

    /// The message's text: its content, or its text parts one after another.
    pub fn text(&self) -> String {
        match &self.content {
            None => String::new(),
            Some(Content::Text(t)) => t.clone(),
            Some(Content::Parts(parts)) => parts
                .iter()
                .filter_map(|p| if let ContentPart::Text { text } = p { Some(text.as_str()) } else { None })
                .collect(),
        }
    }

    /// The type of the message's first content part that is not text, if it has one.
    pub fn non_text_part(&self) -> Option<&str> {
        let Some(Content::Parts(parts)) = &self.content else { return None };
        parts.iter().find_map(|p| match p {
            ContentPart::NonText { kind } => Some(kind.as_str()),
            ContentPart::Text { .. } => None,
        })
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
#[serde(try_from = "RawPart", into = "RawPart")]
pub enum ContentPart {
    /// `{"type": "text", "text": ...}`.
    Text {
        /// The text.
        text: String,
    },
    /// A part of any other type (`image_url`, `input_audio`, `file`, ...), kept by its type so that
    /// a text-only model can refuse it by name; its other fields are dropped.
    NonText {
        /// The part's `type`.
        kind: String,
    },
}

/// A content part as sent: its `type`, and its `text` for a text part.
#[derive(Serialize, Deserialize)]
struct RawPart {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<String>,
}

/// A text part without its text.
#[derive(Debug, thiserror::Error)]
#[error("missing field `text` in a content part of type `text`")]
pub struct MissingText;

impl TryFrom<RawPart> for ContentPart {
    type Error = MissingText;

    fn try_from(raw: RawPart) -> Result<Self, MissingText> {
        match (raw.kind.as_str(), raw.text) {
            ("text", Some(text)) => Ok(ContentPart::Text { text }),
            ("text", None) => Err(MissingText),
            _ => Ok(ContentPart::NonText { kind: raw.kind }),
        }
    }
}

impl From<ContentPart> for RawPart {
    fn from(part: ContentPart) -> Self {
        match part {
            ContentPart::Text { text } => RawPart { kind: "text".into(), text: Some(text) },
            ContentPart::NonText { kind } => RawPart { kind, text: None },
        }
    }
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
        assert!(messages.iter().all(|m| m.non_text_part().is_none()));
        // None fields are dropped, as transformers drops None keys before rendering.
        assert_eq!(
            serde_json::to_value(&messages[2]).unwrap(),
            json!({"role": "assistant", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}
            ]})
        );
    }

    #[test]
    fn other_part_types_are_kept_by_name() {
        let m: Message = serde_json::from_value(json!({"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
            {"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}}
        ]}))
        .unwrap();
        assert_eq!(m.non_text_part(), Some("image_url"));
        let Some(Content::Parts(parts)) = &m.content else { panic!("{m:?}") };
        assert_eq!(parts[2], ContentPart::NonText { kind: "input_audio".into() });
        assert_eq!(serde_json::to_value(&parts[0]).unwrap(), json!({"type": "text", "text": "What is this?"}));
        let missing = serde_json::from_value::<ContentPart>(json!({"type": "text"})).unwrap_err();
        assert!(missing.to_string().contains("missing field `text`"), "{missing}");
        assert!(serde_json::from_value::<ContentPart>(json!({"text": "no type"})).is_err());
    }
}
