//! The conversation through the chat template with its tools: as the template's `tools` variable when it
//! reads one (the list transformers passes: `{"type": "function", "function": {...}}`), else in the
//! default prompt, a system block listing the tools and the call format, with earlier calls and tool
//! results written out as text.

use serde_json::Value;
use tgi_engines::text::chat::{ChatTemplate, ChatTemplateError, Content, Message};

use super::format::ToolCallFormat;
use super::spec::Tools;

/// What the default prompt says before the tools when the request has no `tool_prompt`.
pub const DEFAULT_TOOL_PROMPT: &str = "You may call one or more functions to assist with the user query. You are \
                                       provided with function signatures within <tools></tools> XML tags:";

/// Renders `messages` (with the generation prompt) and the tools offered, with the format their calls are
/// written in; `kwargs` are the request's `chat_template_kwargs`.
pub fn render(
    template: &ChatTemplate,
    messages: &[Message],
    tools: Option<(&Tools, ToolCallFormat)>,
    kwargs: Option<&Value>,
) -> Result<String, ChatTemplateError> {
    let mut extra = kwargs.cloned().unwrap_or(Value::Null);
    let mut messages: Vec<Message> = messages.iter().map(decoded_arguments).collect();
    match tools {
        Some((tools, _)) if template.takes_tools() => {
            let list: Vec<Value> = tools.functions.iter().map(|f| f.as_tool()).collect();
            if extra.is_null() {
                extra = Value::Object(serde_json::Map::new());
            }
            if let Some(map) = extra.as_object_mut() {
                map.insert("tools".into(), Value::Array(list));
            }
        }
        Some((tools, format)) => {
            messages = messages.into_iter().map(|m| as_text(format, m)).collect();
            with_system(&mut messages, &default_prompt(format, tools));
        }
        None => {}
    }
    template.render(&template.with_roles_it_knows(messages), true, &extra)
}

/// The default prompt's system block: the tool prompt, the tools one per line, the call format.
pub fn default_prompt(format: ToolCallFormat, tools: &Tools) -> String {
    let lines: Vec<String> = tools.functions.iter().map(|f| f.as_tool().to_string()).collect();
    let intro = tools.prompt.as_deref().unwrap_or(DEFAULT_TOOL_PROMPT);
    format!("{intro}\n<tools>\n{}\n</tools>\n\n{}", lines.join("\n"), format.instructions())
}

/// The message with tool-call arguments sent as JSON-encoded strings (OpenAI's wire format) decoded, so
/// that templates writing them with `tojson` write the arguments, not a string of them.
fn decoded_arguments(message: &Message) -> Message {
    let mut m = message.clone();
    for call in m.tool_calls.iter_mut().flatten() {
        if let Some(decoded) = call.function.arguments.as_str().and_then(|s| serde_json::from_str::<Value>(s).ok()) {
            call.function.arguments = decoded;
        }
    }
    m
}

/// For a template that renders no tools: an assistant turn's calls written as the model writes them,
/// after its text, and a tool result as a user turn in `<tool_response>` tags.
fn as_text(format: ToolCallFormat, mut m: Message) -> Message {
    if m.role == "tool" {
        let result = m.text();
        return Message::new("user", format!("<tool_response>\n{result}\n</tool_response>"));
    }
    if let Some(calls) = m.tool_calls.take().filter(|c| !c.is_empty()) {
        let written = format.write_calls(calls.iter().map(|c| (c.function.name.as_str(), &c.function.arguments)));
        let before = m.text();
        let joined = if before.is_empty() { written } else { format!("{before}\n{written}") };
        m.content = Some(Content::Text(joined));
    }
    m
}

/// Puts `block` first in the system message, adding one when the conversation has none.
fn with_system(messages: &mut Vec<Message>, block: &str) {
    match messages.first_mut() {
        Some(first) if first.role == "system" => {
            let rest = first.text();
            first.content =
                Some(Content::Text(if rest.is_empty() { block.to_string() } else { format!("{block}\n\n{rest}") }));
        }
        _ => messages.insert(0, Message::new("system", block)),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::serve::openai::tools::spec::ToolFields;

    const LISTING: &str = "{% for m in messages %}[{{ m.role }}] {{ m.content }}{% for c in m.tool_calls or [] %}\
                           <call {{ c.function.name }} {{ c.function.arguments | tojson }}>{% endfor %}{{ '\\n' }}{% endfor %}";

    fn tools() -> Tools {
        let fields = ToolFields {
            tools: Some(json!([{"type": "function", "function": {"name": "f", "description": "Does f.",
                "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}])),
            tool_prompt: Some("Tools:".into()),
            ..ToolFields::default()
        };
        fields.check().unwrap().unwrap()
    }

    fn conversation() -> Vec<Message> {
        serde_json::from_value(json!([
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "42"}
        ]))
        .unwrap()
    }

    #[test]
    fn templates_that_read_tools_get_them_and_decoded_arguments() {
        let source = format!("{{{{ tools | tojson }}}}\n{LISTING}");
        let template = ChatTemplate::new(&source, None, None).unwrap();
        let out = render(&template, &conversation(), Some((&tools(), ToolCallFormat::Hermes)), None).unwrap();
        assert!(
            out.starts_with(r#"[{"type": "function", "function": {"name": "f", "description": "Does f.""#),
            "{out}"
        );
        assert!(out.contains(r#"<call f {"a": 1}>"#), "{out}");
        assert!(out.contains("[tool] 42"), "{out}");
    }

    #[test]
    fn other_templates_get_the_default_prompt_and_calls_as_text() {
        let template = ChatTemplate::new(LISTING, None, None).unwrap();
        let mut messages = conversation();
        messages.insert(0, Message::new("system", "Be brief."));
        let out = render(&template, &messages, Some((&tools(), ToolCallFormat::Hermes)), None).unwrap();
        let block = default_prompt(ToolCallFormat::Hermes, &tools());
        assert!(out.starts_with(&format!("[system] {block}\n\nBe brief.\n[user] Hi\n")), "{out}");
        assert!(block.starts_with("Tools:\n<tools>\n{\"type\":\"function\",\"function\":{\"name\":\"f\""), "{block}");
        assert!(
            out.contains("[assistant] <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\":1}}\n</tool_call>\n"),
            "{out}"
        );
        assert!(out.ends_with("[user] <tool_response>\n42\n</tool_response>\n"), "{out}");
        // Without a system message, the block is one.
        let out = render(&template, &conversation(), Some((&tools(), ToolCallFormat::Hermes)), None).unwrap();
        assert!(out.starts_with(&format!("[system] {block}\n[user] Hi")), "{out}");
        // Without tools, the conversation is rendered as it is.
        let out = render(&template, &conversation()[..1], None, None).unwrap();
        assert_eq!(out, "[user] Hi\n");
    }
}
