//! A Responses request as the chat request it asks for: `instructions` as the system message, the conversation
//! of `previous_response_id` and then the input items as chat messages (a function call joins the assistant
//! turn before it, a call's output is a `tool` turn), function tools and `tool_choice` as chat's, `text.format`
//! as `response_format`, and the sampling fields as they are.

use serde_json::{json, Value};
use tgi_engines::text::chat::{FunctionCall, Message, ToolCall};

use super::types::{CreateRequest, Input, Item, ItemContent, ItemPart, ItemRole, TextFormat};
use crate::serve::error::ValidationError;
use crate::serve::openai::tools::ToolFields;
use crate::serve::openai::types::{ChatRequest, Sampling};

impl CreateRequest {
    /// The input items as chat messages.
    pub fn input_messages(&self) -> Result<Vec<Message>, ValidationError> {
        let items = match &self.input {
            Input::Text(t) => return Ok(vec![Message::new("user", t.clone())]),
            Input::Items(items) => items,
        };
        let mut out: Vec<Message> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let at = || format!("input[{i}]");
            match item {
                Item::Message { role, content } => {
                    let role = match role {
                        ItemRole::User => "user",
                        ItemRole::Assistant => "assistant",
                        ItemRole::System | ItemRole::Developer => "system",
                    };
                    out.push(Message::new(role, text_of(content, &at())?));
                }
                Item::FunctionCall { call_id, name, arguments } => {
                    let call = ToolCall {
                        id: Some(call_id.clone()),
                        kind: "function".into(),
                        function: FunctionCall { name: name.clone(), arguments: Value::String(arguments.clone()) },
                    };
                    match out.last_mut().filter(|m| m.role == "assistant") {
                        Some(turn) => turn.tool_calls.get_or_insert_with(Vec::new).push(call),
                        None => out.push(Message {
                            role: "assistant".into(),
                            tool_calls: Some(vec![call]),
                            ..Message::default()
                        }),
                    }
                }
                Item::FunctionCallOutput { call_id, output } => {
                    let mut m = Message::new("tool", text_of(output, &format!("{}.output", at()))?);
                    m.tool_call_id = Some(call_id.clone());
                    out.push(m);
                }
                Item::Reasoning => {}
            }
        }
        Ok(out)
    }

    /// The chat request of `conversation` (the previous response's, then the input's messages), which must not
    /// be empty (the input's reasoning items alone are not a conversation).
    pub fn to_chat(&self, conversation: Vec<Message>) -> Result<ChatRequest, ValidationError> {
        if conversation.is_empty() {
            let message = "the conversation is empty: no message, function call or output, and no previous response";
            return Err(ValidationError::Field { param: "input", at: "input".into(), message: message.into() });
        }
        let mut messages = Vec::with_capacity(conversation.len() + 1);
        if let Some(i) = &self.instructions {
            messages.push(Message::new("system", i.clone()));
        }
        messages.extend(conversation);
        let tools = self.tools.as_ref().map(|list| list.iter().enumerate().map(tool).collect()).transpose()?;
        let tool_choice = self.tool_choice.as_ref().map(tool_choice).transpose()?;
        let response_format = match self.text.as_ref().and_then(|t| t.format.as_ref()) {
            None | Some(TextFormat::Text {}) => None,
            Some(TextFormat::JsonObject {}) => Some(json!({"type": "json_object"})),
            Some(f @ TextFormat::JsonSchema { .. }) => {
                let mut config = serde_json::to_value(f).expect("formats serialize");
                config.as_object_mut().expect("an object").remove("type");
                Some(json!({"type": "json_schema", "json_schema": config}))
            }
        };
        Ok(ChatRequest {
            messages,
            logprobs: None,
            top_logprobs: None,
            max_tokens: None,
            max_completion_tokens: self.max_output_tokens,
            tools: ToolFields {
                tools: tools.map(Value::Array),
                tool_choice,
                parallel_tool_calls: self.parallel_tool_calls,
                tool_prompt: None,
            },
            response_format,
            chat_template_kwargs: None,
            sampling: Sampling {
                temperature: self.temperature,
                top_p: self.top_p,
                stream: self.stream,
                ignore_eos: self.ignore_eos,
                ..Sampling::default()
            },
        })
    }
}

/// A function tool as chat's; other tool types are refused.
fn tool((index, t): (usize, &Value)) -> Result<Value, ValidationError> {
    let field = |message: String| ValidationError::Field { param: "tools", at: format!("tools[{index}]"), message };
    let kind = t.get("type").and_then(Value::as_str);
    if kind != Some("function") {
        return Err(field(format!("only function tools are supported, not {}", t.get("type").unwrap_or(&Value::Null))));
    }
    let Some(name) = t.get("name").and_then(Value::as_str) else {
        return Err(field("a function tool needs a `name`".into()));
    };
    if t.get("strict").is_some_and(|s| !s.is_boolean() && !s.is_null()) {
        return Err(field("`strict` must be a boolean".into()));
    }
    let mut function = json!({"name": name});
    for key in ["description", "parameters"] {
        if let Some(v) = t.get(key).filter(|v| !v.is_null()) {
            function[key] = v.clone();
        }
    }
    Ok(json!({"type": "function", "function": function}))
}

/// `tool_choice` as chat's: the modes as they are, a named function in chat's shape.
fn tool_choice(choice: &Value) -> Result<Value, ValidationError> {
    match choice {
        Value::String(_) => Ok(choice.clone()),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => match o.get("name") {
            Some(Value::String(name)) => Ok(json!({"type": "function", "function": {"name": name}})),
            _ => Err(bad_choice("a function `tool_choice` needs a `name`")),
        },
        _ => Err(bad_choice(&format!(
            "must be \"none\", \"auto\", \"required\" or {{\"type\": \"function\", \"name\": ...}}. Given: {choice}"
        ))),
    }
}

fn bad_choice(message: &str) -> ValidationError {
    ValidationError::Field { param: "tool_choice", at: "tool_choice".into(), message: message.into() }
}

/// The text of a message's content (its text parts joined by newlines); other parts are refused.
fn text_of(content: &ItemContent, at: &str) -> Result<String, ValidationError> {
    let parts = match content {
        ItemContent::Text(t) => return Ok(t.clone()),
        ItemContent::Parts(parts) => parts,
    };
    let mut texts = Vec::new();
    for p in parts {
        let kind = match p {
            ItemPart::InputText { text } | ItemPart::OutputText { text } | ItemPart::Refusal { refusal: text } => {
                texts.push(text.as_str());
                continue;
            }
            ItemPart::InputImage {} => "input_image",
            ItemPart::InputFile {} => "input_file",
            ItemPart::InputAudio {} => "input_audio",
        };
        let message = format!("this model takes text only: a content part of type `{kind}`");
        return Err(ValidationError::Field { param: "input", at: at.to_string(), message });
    }
    Ok(texts.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: Value) -> CreateRequest {
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn items_become_chat_messages() {
        let r = request(json!({"model": "m", "instructions": "Be brief.", "input": [
            {"role": "user", "content": "Weather?"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"},
            {"role": "developer", "content": [{"type": "input_text", "text": "Answer in French."}]}]}));
        let messages = r.input_messages().unwrap();
        let chat = r.to_chat(messages).unwrap();
        assert_eq!(
            serde_json::to_value(&chat.messages).unwrap(),
            json!([
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "Checking.", "tool_calls": [{"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
                {"role": "tool", "content": "Sunny", "tool_call_id": "call_1"},
                {"role": "system", "content": "Answer in French."},
            ])
        );
        let lone =
            request(json!({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]}));
        let m = &lone.input_messages().unwrap()[0];
        assert_eq!(
            (m.role.as_str(), m.content.is_none(), m.tool_calls.as_ref().map(Vec::len)),
            ("assistant", true, Some(1))
        );
    }

    #[test]
    fn tools_choice_and_format_become_chat_fields() {
        let r = request(json!({"input": "Hi", "max_output_tokens": 7, "temperature": 0.5, "stream": true,
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": true}],
            "tool_choice": {"type": "function", "name": "f"}, "parallel_tool_calls": false,
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}}));
        let chat = r.to_chat(r.input_messages().unwrap()).unwrap();
        assert_eq!(
            chat.tools.tools,
            Some(json!([{"type": "function", "function": {"name": "f",
            "parameters": {"type": "object"}}}]))
        );
        assert_eq!(chat.tools.tool_choice, Some(json!({"type": "function", "function": {"name": "f"}})));
        assert_eq!((chat.tools.parallel_tool_calls, chat.max_completion_tokens), (Some(false), Some(7)));
        assert_eq!(chat.response_format.unwrap()["json_schema"]["schema"], json!({"type": "object"}));
        assert_eq!((chat.sampling.temperature, chat.sampling.stream), (Some(0.5), Some(true)));
        let empty = request(json!({"input": [{"type": "reasoning"}], "instructions": "Be brief."}));
        let e = empty.to_chat(empty.input_messages().unwrap()).unwrap_err().to_string();
        assert!(e.starts_with("`input`: the conversation is empty"), "{e}");
        let hi = vec![Message::new("user", "Hi")];
        let bad = request(json!({"input": "Hi", "tools": [{"type": "web_search"}]}));
        let e = bad.to_chat(hi.clone()).unwrap_err().to_string();
        assert!(e.starts_with("`tools[0]`: only function tools are supported"), "{e}");
        let bad = request(json!({"input": "Hi", "tools": [{"type": "function", "name": "f", "strict": 1}]}));
        assert!(bad.to_chat(hi.clone()).unwrap_err().to_string().contains("`strict` must be a boolean"));
        let bad = request(json!({"input": "Hi", "tool_choice": {"type": "allowed_tools"}}));
        assert_eq!(bad.to_chat(hi).unwrap_err().param(), Some("tool_choice"));
        let image =
            request(json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}));
        assert!(image.input_messages().unwrap_err().to_string().contains("type `input_image`"));
        assert!(serde_json::from_value::<CreateRequest>(json!({"input": [{"type": "item_reference", "id": "x"}]}))
            .unwrap_err()
            .to_string()
            .contains("not supported"));
    }
}
