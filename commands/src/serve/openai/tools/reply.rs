//! Answers read for tool calls, in OpenAI's shapes: a whole answer's `content` and `tool_calls`, or a
//! stream's `delta`s (a call's first delta with its index, id, type and name, then argument fragments
//! with only the index), and `finish_reason: "tool_calls"` when the answer ends with its calls complete.

use tgi_engines::text::chat::{FunctionCall, ToolCall};

use super::format::ToolCallFormat;
use super::parse::{Piece, ToolCallParser};
use crate::serve::openai::common::random;
use crate::serve::openai::types::{Delta, FunctionDelta, ToolCallDelta};

/// A fresh call id: `call_` and 24 letters and digits, or 9 letters and digits for Mistral (whose
/// templates refuse other ids).
pub fn call_id(format: ToolCallFormat) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let (prefix, len) = if format == ToolCallFormat::Mistral { ("", 9) } else { ("call_", 24) };
    let mut bits = 0u64;
    let id: String = (0..len)
        .map(|i| {
            if i % 10 == 0 {
                bits = random();
            }
            let c = ALPHABET[(bits % ALPHABET.len() as u64) as usize];
            bits /= ALPHABET.len() as u64;
            char::from(c)
        })
        .collect();
    format!("{prefix}{id}")
}

/// The finish reason of an answer whose engine reason is `engine`: `tool_calls` when it made calls and
/// none was cut short.
fn finish_reason(parser: &ToolCallParser, engine: &'static str) -> &'static str {
    if parser.calls() > 0 && !parser.is_open() {
        "tool_calls"
    } else {
        engine
    }
}

/// A whole answer read for tool calls.
#[derive(Debug, PartialEq)]
pub struct Reply {
    /// The text outside the calls; `None` when there is none.
    pub content: Option<String>,
    /// The calls, with fresh ids and their arguments as a JSON string.
    pub tool_calls: Vec<ToolCall>,
    /// `tool_calls`, or the engine's reason.
    pub finish_reason: &'static str,
}

impl Reply {
    /// Reads `text`, which the engine ended for `engine` reason.
    pub fn read(format: ToolCallFormat, text: &str, engine: &'static str) -> Reply {
        let mut parser = ToolCallParser::new(format);
        let mut pieces = parser.feed(text);
        pieces.extend(parser.finish());
        let mut content = String::new();
        let mut tool_calls: Vec<ToolCall> = Vec::new();
        for piece in pieces {
            match piece {
                Piece::Content(t) => content.push_str(&t),
                Piece::Call { name, .. } => tool_calls.push(ToolCall {
                    id: Some(call_id(format)),
                    kind: "function".into(),
                    function: FunctionCall { name, arguments: serde_json::Value::String(String::new()) },
                }),
                Piece::Arguments { index, text } => {
                    if let serde_json::Value::String(args) = &mut tool_calls[index].function.arguments {
                        args.push_str(&text);
                    }
                }
            }
        }
        let finish_reason = finish_reason(&parser, engine);
        Reply { content: (!content.is_empty() || tool_calls.is_empty()).then_some(content), tool_calls, finish_reason }
    }
}

/// The calls of one streamed answer.
#[derive(Debug)]
pub struct StreamedCalls {
    format: ToolCallFormat,
    parser: ToolCallParser,
}

impl StreamedCalls {
    /// Reads an answer of this format.
    pub fn new(format: ToolCallFormat) -> Self {
        StreamedCalls { format, parser: ToolCallParser::new(format) }
    }

    /// The deltas of more output.
    pub fn feed(&mut self, text: &str) -> Vec<Delta> {
        let pieces = self.parser.feed(text);
        self.deltas(pieces)
    }

    /// The deltas of what was held back, at the end of the answer.
    pub fn finish(&mut self) -> Vec<Delta> {
        let pieces = self.parser.finish();
        self.deltas(pieces)
    }

    /// The answer's finish reason, once finished, when the engine ended it for `engine` reason.
    pub fn finish_reason(&self, engine: &'static str) -> &'static str {
        finish_reason(&self.parser, engine)
    }

    fn deltas(&self, pieces: Vec<Piece>) -> Vec<Delta> {
        pieces
            .into_iter()
            .map(|piece| match piece {
                Piece::Content(text) => Delta::content(text),
                Piece::Call { index, name } => Delta::tool_call(ToolCallDelta {
                    index,
                    id: Some(call_id(self.format)),
                    kind: Some("function"),
                    function: FunctionDelta { name: Some(name), arguments: String::new() },
                }),
                Piece::Arguments { index, text } => Delta::tool_call(ToolCallDelta {
                    index,
                    id: None,
                    kind: None,
                    function: FunctionDelta { name: None, arguments: text },
                }),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ids_look_like_openai_and_mistral_ones() {
        let id = call_id(ToolCallFormat::Hermes);
        assert!(id.starts_with("call_") && id.len() == 29 && id[5..].chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(id, call_id(ToolCallFormat::Hermes));
        let id = call_id(ToolCallFormat::Mistral);
        assert!(id.len() == 9 && id.chars().all(|c| c.is_ascii_alphanumeric()), "{id}");
    }

    #[test]
    fn a_whole_answer_has_content_or_calls() {
        let text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
        let r = Reply::read(ToolCallFormat::Hermes, text, "stop");
        assert_eq!((r.content, r.finish_reason, r.tool_calls.len()), (None, "tool_calls", 1));
        assert_eq!(r.tool_calls[0].function.arguments, json!("{\"a\": 1}"));
        let r = Reply::read(ToolCallFormat::Hermes, "Hello", "stop");
        assert_eq!((r.content.as_deref(), r.finish_reason, r.tool_calls.len()), (Some("Hello"), "stop", 0));
        let r = Reply::read(ToolCallFormat::Hermes, "", "length");
        assert_eq!((r.content.as_deref(), r.finish_reason), (Some(""), "length"));
        let cut = Reply::read(ToolCallFormat::Hermes, &text[..30], "length");
        assert_eq!((cut.finish_reason, cut.tool_calls.len()), ("length", 1));
    }

    #[test]
    fn streamed_deltas_are_openai_shaped() {
        let mut s = StreamedCalls::new(ToolCallFormat::Hermes);
        let mut deltas = s.feed("Hi <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\"");
        deltas.extend(s.feed(": 1}}\n</tool_call>"));
        deltas.extend(s.finish());
        let wire: Vec<serde_json::Value> = deltas.iter().map(|d| serde_json::to_value(d).unwrap()).collect();
        let id = wire[1]["tool_calls"][0]["id"].clone();
        assert!(id.as_str().unwrap().starts_with("call_"));
        assert_eq!(
            wire,
            [
                json!({"role": "assistant", "content": "Hi"}),
                json!({"role": "assistant", "tool_calls": [
                    {"index": 0, "id": id, "type": "function", "function": {"name": "f", "arguments": ""}}]}),
                json!({"role": "assistant", "tool_calls": [{"index": 0, "function": {"arguments": "{\"a\""}}]}),
                json!({"role": "assistant", "tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}),
            ]
        );
        assert_eq!(s.finish_reason("stop"), "tool_calls");
    }
}
