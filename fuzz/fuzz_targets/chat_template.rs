//! Chat templates rendering hostile conversations: the real templates of
//! `engines/tests/data/chat-templates/` (compiled once) given arbitrary roles, contents, names,
//! reasoning, tool calls, any number of messages and arbitrary extra context.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tgi_engines::text::chat::{ChatTemplate, Content, ContentPart, FunctionCall, Message, ToolCall};

/// Every template that compiles, loaded once, in file name order.
fn templates() -> &'static [ChatTemplate] {
    static ALL: OnceLock<Vec<ChatTemplate>> = OnceLock::new();
    ALL.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engines/tests/data/chat-templates");
        let mut paths: Vec<_> = std::fs::read_dir(&dir)
            .expect("the chat templates")
            .map(|e| e.expect("a directory entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "jinja"))
            .collect();
        paths.sort();
        // A fixed time for `strftime_now`, so that a crash replays the same.
        let now = chrono::NaiveDateTime::default();
        paths
            .iter()
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .filter_map(|source| ChatTemplate::new(&source, Some("<s>".into()), Some("</s>".into())).ok())
            .map(|t| t.with_time(now))
            .collect()
    })
}

/// The role: one the templates know, or any string.
#[derive(Arbitrary, Debug)]
enum Role {
    System,
    User,
    Assistant,
    Tool,
    Other(String),
}

#[derive(Arbitrary, Debug)]
enum ArbContent {
    None,
    Text(String),
    Parts(Vec<String>),
}

#[derive(Arbitrary, Debug)]
struct ArbCall {
    id: Option<String>,
    name: String,
    /// JSON text when it parses, else a string (OpenAI's wire format).
    arguments: String,
}

#[derive(Arbitrary, Debug)]
struct ArbMessage {
    role: Role,
    content: ArbContent,
    reasoning: Option<String>,
    name: Option<String>,
    tool_calls: Option<Vec<ArbCall>>,
    tool_call_id: Option<String>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    template: u8,
    messages: Vec<ArbMessage>,
    add_generation_prompt: bool,
    /// Extra context as JSON text (`chat_template_kwargs`); ignored when it does not parse.
    extra: String,
}

fn json_or_string(text: String) -> serde_json::Value {
    serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
}

fn message(m: ArbMessage) -> Message {
    let role = match m.role {
        Role::System => "system".into(),
        Role::User => "user".into(),
        Role::Assistant => "assistant".into(),
        Role::Tool => "tool".into(),
        Role::Other(s) => s,
    };
    let content = match m.content {
        ArbContent::None => None,
        ArbContent::Text(t) => Some(Content::Text(t)),
        ArbContent::Parts(p) => Some(Content::Parts(p.into_iter().map(|text| ContentPart::Text { text }).collect())),
    };
    let tool_calls = m.tool_calls.map(|calls| {
        calls
            .into_iter()
            .map(|c| ToolCall {
                id: c.id,
                kind: "function".into(),
                function: FunctionCall { name: c.name, arguments: json_or_string(c.arguments) },
            })
            .collect()
    });
    Message { role, content, reasoning_content: m.reasoning, name: m.name, tool_calls, tool_call_id: m.tool_call_id }
}

// Loaded before the first input, so that loading does not count against `-timeout`.
fuzz_target!(init: { templates(); }, |input: Input| {
    let all = templates();
    let template = &all[input.template as usize % all.len()];
    let messages: Vec<Message> = input.messages.into_iter().map(message).collect();
    let extra = serde_json::from_str(&input.extra).unwrap_or(serde_json::Value::Null);
    let _ = template.render(&messages, input.add_generation_prompt, &extra);
});
