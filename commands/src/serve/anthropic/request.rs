//! A Messages request as the chat request it asks for: the system prompt first, text blocks joined, an
//! assistant turn's `tool_use` blocks as its tool calls and `thinking` as its reasoning, each `tool_result` as a
//! `tool` turn; tools as functions, `tool_choice` as OpenAI's, `thinking` as the template's `enable_thinking`,
//! `output_config.format` as `response_format`, and the sampling fields as they are.

use serde_json::{json, Value};
use tgi_engines::text::chat::{Content as ChatContent, FunctionCall, Message, ToolCall};

use super::types::{Block, Content, MessagesRequest, OutputFormat, Prompt, Role, ThinkingKind, ToolChoice};
use crate::serve::error::ValidationError;
use crate::serve::openai::tools::ToolFields;
use crate::serve::openai::types::{ChatRequest, Sampling, Stop};

impl MessagesRequest {
    /// The chat request this asks for.
    pub fn to_chat(&self) -> Result<ChatRequest, ValidationError> {
        let mut chat = self.prompt.to_chat()?;
        chat.max_tokens = Some(self.max_tokens);
        if let Some(OutputFormat::JsonSchema { schema }) = self.output_config.as_ref().and_then(|c| c.format.as_ref()) {
            chat.response_format =
                Some(json!({"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}));
        }
        chat.sampling = Sampling {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            stop: self.stop_sequences.clone().map(Stop::Many),
            stream: self.stream,
            ignore_eos: self.ignore_eos,
            ..Sampling::default()
        };
        Ok(chat)
    }
}

impl Prompt {
    /// The chat request of this conversation and its tools (no sampling fields).
    pub fn to_chat(&self) -> Result<ChatRequest, ValidationError> {
        if self.messages.is_empty() {
            return Err(ValidationError::EmptyMessages);
        }
        let mut messages = Vec::new();
        if let Some(system) = &self.system {
            messages.push(Message::new("system", text_of(system, "system")?));
        }
        for (i, m) in self.messages.iter().enumerate() {
            let at = format!("messages[{i}].content");
            match (m.role, &m.content) {
                (Role::User, Content::Text(t)) => messages.push(Message::new("user", t.clone())),
                (Role::Assistant, Content::Text(t)) => messages.push(Message::new("assistant", t.clone())),
                (Role::User, Content::Blocks(blocks)) => user_turn(blocks, &at, &mut messages)?,
                (Role::Assistant, Content::Blocks(blocks)) => messages.push(assistant_turn(blocks, &at)?),
            }
        }
        let tools = self.tools.as_ref().map(|list| list.iter().enumerate().map(tool).collect()).transpose()?;
        let (tool_choice, parallel) = match &self.tool_choice {
            None => (None, None),
            Some(c) => {
                let (choice, disable) = match c {
                    ToolChoice::Auto { disable_parallel_tool_use: d } => (json!("auto"), *d),
                    ToolChoice::Any { disable_parallel_tool_use: d } => (json!("required"), *d),
                    ToolChoice::Tool { name, disable_parallel_tool_use: d } => {
                        (json!({"type": "function", "function": {"name": name}}), *d)
                    }
                    ToolChoice::None {} => (json!("none"), None),
                };
                (Some(choice), disable.map(|d| !d))
            }
        };
        let kwargs = self.thinking.as_ref().map(|t| json!({"enable_thinking": t.kind != ThinkingKind::Disabled}));
        Ok(ChatRequest {
            messages,
            logprobs: None,
            top_logprobs: None,
            max_tokens: None,
            max_completion_tokens: None,
            tools: ToolFields {
                tools: tools.map(Value::Array),
                tool_choice,
                parallel_tool_calls: parallel,
                tool_prompt: None,
            },
            response_format: None,
            chat_template_kwargs: kwargs,
            sampling: Sampling::default(),
        })
    }
}

/// A tool as the chat request's function; server tools (a `type` other than `custom`) are refused.
fn tool((index, t): (usize, &super::types::Tool)) -> Result<Value, ValidationError> {
    if let Some(kind) = t.kind.as_deref().filter(|k| *k != "custom") {
        let message = format!("server tools are not supported (type `{kind}`): give a `custom` tool's input_schema");
        return Err(ValidationError::Field { param: "tools", at: format!("tools[{index}].type"), message });
    }
    let mut function = json!({"name": t.name, "parameters": t.input_schema});
    if let Some(d) = &t.description {
        function["description"] = Value::from(d.as_str());
    }
    Ok(json!({"type": "function", "function": function}))
}

/// The text of text-only content (the system prompt, a tool result): its text blocks joined by newlines.
fn text_of(content: &Content, at: &str) -> Result<String, ValidationError> {
    let blocks = match content {
        Content::Text(t) => return Ok(t.clone()),
        Content::Blocks(blocks) => blocks,
    };
    let mut texts = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        match b {
            Block::Text { text } => texts.push(text.as_str()),
            other => return Err(not_here(other, &format!("{at}[{j}]"), "text")),
        }
    }
    Ok(texts.join("\n"))
}

/// The chat messages of a user turn's blocks: text blocks together as one user message, each tool result a
/// `tool` message, in their order.
fn user_turn(blocks: &[Block], at: &str, out: &mut Vec<Message>) -> Result<(), ValidationError> {
    let mut texts: Vec<&str> = Vec::new();
    let flush = |texts: &mut Vec<&str>, out: &mut Vec<Message>| {
        if !texts.is_empty() {
            out.push(Message::new("user", texts.join("\n")));
            texts.clear();
        }
    };
    for (j, b) in blocks.iter().enumerate() {
        match b {
            Block::Text { text } => texts.push(text),
            Block::ToolResult { tool_use_id, content, is_error } => {
                flush(&mut texts, out);
                let at = format!("{at}[{j}].content");
                let mut result = content.as_ref().map(|c| text_of(c, &at)).transpose()?.unwrap_or_default();
                if *is_error == Some(true) {
                    result = format!("Error: {result}");
                }
                let mut m = Message::new("tool", result);
                m.tool_call_id = Some(tool_use_id.clone());
                out.push(m);
            }
            other => return Err(not_here(other, &format!("{at}[{j}]"), "user")),
        }
    }
    if blocks.is_empty() {
        texts.push("");
    }
    flush(&mut texts, out);
    Ok(())
}

/// The chat message of an assistant turn's blocks: its text, calls and reasoning.
fn assistant_turn(blocks: &[Block], at: &str) -> Result<Message, ValidationError> {
    let (mut texts, mut calls, mut thinking) = (Vec::new(), Vec::new(), Vec::new());
    for (j, b) in blocks.iter().enumerate() {
        match b {
            Block::Text { text } => texts.push(text.as_str()),
            Block::ToolUse { id, name, input } => calls.push(ToolCall {
                id: Some(id.clone()),
                kind: "function".into(),
                function: FunctionCall { name: name.clone(), arguments: Value::Object(input.clone()) },
            }),
            Block::Thinking { thinking: t } => thinking.push(t.as_str()),
            Block::RedactedThinking {} => {}
            other => return Err(not_here(other, &format!("{at}[{j}]"), "assistant")),
        }
    }
    let text = (!texts.is_empty() || calls.is_empty()).then(|| ChatContent::Text(texts.join("\n")));
    Ok(Message {
        role: "assistant".into(),
        content: text,
        reasoning_content: (!thinking.is_empty()).then(|| thinking.join("\n")),
        tool_calls: (!calls.is_empty()).then_some(calls),
        ..Message::default()
    })
}

/// The refusal of a block where it cannot stand (`turn`: the kind of content): images and documents because
/// the model reads text, the others by their type.
fn not_here(block: &Block, at: &str, turn: &str) -> ValidationError {
    let kind = match block {
        Block::Image {} => return ValidationError::NonTextContent("image".into()),
        Block::Document {} => return ValidationError::NonTextContent("document".into()),
        Block::Text { .. } => "text",
        Block::ToolUse { .. } => "tool_use",
        Block::ToolResult { .. } => "tool_result",
        Block::Thinking { .. } => "thinking",
        Block::RedactedThinking {} => "redacted_thinking",
    };
    let param = if at.starts_with("system") { "system" } else { "messages" };
    ValidationError::Field {
        param,
        at: at.to_string(),
        message: format!("a `{kind}` block cannot be in {turn} content"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: Value) -> Result<ChatRequest, ValidationError> {
        serde_json::from_value::<MessagesRequest>(body).unwrap().to_chat()
    }

    #[test]
    fn a_conversation_with_tools_becomes_chat_messages() {
        let body = json!({"model": "m", "max_tokens": 9, "system": [{"type": "text", "text": "Be brief."}],
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "Use the tool.", "signature": "x"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "Sunny"}]},
                    {"type": "text", "text": "And tomorrow?"}]}],
            "tools": [{"name": "get_weather", "description": "Weather.", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "stop_sequences": ["\n\n"], "temperature": 0, "thinking": {"type": "enabled", "budget_tokens": 2048}});
        let c = chat(body).unwrap();
        let wire = serde_json::to_value(&c.messages).unwrap();
        assert_eq!(
            wire,
            json!([
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "Checking.", "reasoning_content": "Use the tool.", "tool_calls": [
                    {"id": "toolu_1", "type": "function", "function": {"name": "get_weather",
                        "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "content": "Sunny", "tool_call_id": "toolu_1"},
                {"role": "user", "content": "And tomorrow?"},
            ])
        );
        assert_eq!(
            c.tools.tools,
            Some(json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                "parameters": {"type": "object"}}}]))
        );
        assert_eq!((c.tools.tool_choice, c.tools.parallel_tool_calls), (Some(json!("required")), Some(false)));
        assert_eq!(c.chat_template_kwargs, Some(json!({"enable_thinking": true})));
        assert_eq!((c.max_tokens, c.sampling.temperature), (Some(9), Some(0.0)));
        assert_eq!(c.sampling.stop.map(Stop::into_vec), Some(vec!["\n\n".to_string()]));
    }

    #[test]
    fn tool_choices_and_errors() {
        let base = |extra: Value| {
            let mut b = json!({"max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]});
            b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            chat(b)
        };
        let named = base(json!({"tool_choice": {"type": "tool", "name": "f"}})).unwrap();
        assert_eq!(named.tools.tool_choice, Some(json!({"type": "function", "function": {"name": "f"}})));
        assert_eq!(base(json!({"tool_choice": {"type": "none"}})).unwrap().tools.tool_choice, Some(json!("none")));
        let off = base(json!({"thinking": {"type": "disabled"}})).unwrap();
        assert_eq!(off.chat_template_kwargs, Some(json!({"enable_thinking": false})));
        let between = base(json!({"thinking": {"type": "between_tools"}})).unwrap();
        assert_eq!(between.chat_template_kwargs, Some(json!({"enable_thinking": true})));
        let format = base(json!({"output_config": {"effort": "low", "format": {"type": "json_schema",
            "schema": {"type": "object"}}}}));
        assert_eq!(format.unwrap().response_format.unwrap()["json_schema"]["schema"], json!({"type": "object"}));
        let server = base(json!({"tools": [{"type": "web_search_20250305", "name": "w", "input_schema": {}}]}));
        assert!(server.unwrap_err().to_string().starts_with("`tools[0].type`: server tools are not supported"));
        let image = json!({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": ""}}]}]});
        assert_eq!(chat(image).unwrap_err(), ValidationError::NonTextContent("image".into()));
        let misplaced = json!({"max_tokens": 4, "messages": [{"role": "user", "content": [
            {"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]});
        assert_eq!(
            chat(misplaced).unwrap_err().to_string(),
            "`messages[0].content[0]`: a `tool_use` block cannot be in user content"
        );
        assert_eq!(chat(json!({"max_tokens": 4, "messages": []})).unwrap_err(), ValidationError::EmptyMessages);
        assert!(serde_json::from_value::<MessagesRequest>(json!({"max_tokens": 4, "messages": [
            {"role": "user", "content": [{"type": "video"}]}]}))
        .is_err());
    }
}
