//! Answers read for tool calls, in OpenAI's shapes: a whole answer's `content` and `tool_calls`, or a
//! stream's `delta`s (a call's first delta with its index, id, type and name, then argument fragments
//! with only the index), and `finish_reason: "tool_calls"` when the answer ends with its calls complete.
//! An answer cut short inside a call has that call as far as it got, whole or streamed alike (see
//! [`super::parse`]), and the engine's reason (`length`).

use tgi_engines::sampling::FinishReason;
use tgi_engines::text::chat::{FunctionCall, ToolCall};

use super::format::ToolCallFormat;
use super::parse::{Piece, Reading, ToolCallParser};
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

/// The finish reason of an answer the engine ended for `engine` reason: `tool_calls` when it made calls
/// and none was cut short.
fn finish_reason(parser: &ToolCallParser, engine: FinishReason) -> &'static str {
    if parser.calls() > 0 && !parser.is_open() {
        "tool_calls"
    } else {
        engine.as_openai()
    }
}

/// Whether the engine ended the output before the model did (its length, a stop string).
fn cut(engine: FinishReason) -> bool {
    engine != FinishReason::EosToken
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
    pub fn read(reading: Reading, text: &str, engine: FinishReason) -> Reply {
        let mut parser = ToolCallParser::new(reading);
        let mut pieces = parser.feed(text);
        pieces.extend(parser.finish(cut(engine)));
        let mut content = String::new();
        let mut tool_calls: Vec<ToolCall> = Vec::new();
        for piece in pieces {
            match piece {
                Piece::Content(t) => content.push_str(&t),
                Piece::Call { name, .. } => tool_calls.push(ToolCall {
                    id: Some(call_id(reading.format)),
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
    /// Reads an answer this way.
    pub fn new(reading: Reading) -> Self {
        StreamedCalls { format: reading.format, parser: ToolCallParser::new(reading) }
    }

    /// The deltas of more output.
    pub fn feed(&mut self, text: &str) -> Vec<Delta> {
        let pieces = self.parser.feed(text);
        self.deltas(pieces)
    }

    /// The deltas of what was held back, at the end of the answer, which the engine ended for `engine`
    /// reason, and the answer's finish reason.
    pub fn finish(&mut self, engine: FinishReason) -> (Vec<Delta>, &'static str) {
        let pieces = self.parser.finish(cut(engine));
        (self.deltas(pieces), finish_reason(&self.parser, engine))
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
    use serde_json::{json, Value};
    use FinishReason::{EosToken, Length, StopSequence};

    use super::*;

    const HERMES: Reading = Reading { format: ToolCallFormat::Hermes, forced: false };

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
        let r = Reply::read(HERMES, text, EosToken);
        assert_eq!((r.content, r.finish_reason, r.tool_calls.len()), (None, "tool_calls", 1));
        assert_eq!(r.tool_calls[0].function.arguments, json!("{\"a\": 1}"));
        let r = Reply::read(HERMES, "Hello", EosToken);
        assert_eq!((r.content.as_deref(), r.finish_reason, r.tool_calls.len()), (Some("Hello"), "stop", 0));
        let r = Reply::read(HERMES, "", Length);
        assert_eq!((r.content.as_deref(), r.finish_reason), (Some(""), "length"));
        let cut = Reply::read(HERMES, &text[..30], Length);
        assert_eq!((cut.finish_reason, cut.tool_calls.len()), ("length", 1));
        // A marker the model ended on is text; one the engine cut the output after begins a call.
        let r = Reply::read(HERMES, "Hi <tool_call>", EosToken);
        assert_eq!((r.content.as_deref(), r.tool_calls.len()), (Some("Hi <tool_call>"), 0));
        let r = Reply::read(HERMES, "Hi <tool_call>", StopSequence);
        assert_eq!((r.content.as_deref(), r.finish_reason, r.tool_calls.len()), (Some("Hi"), "stop", 1));
    }

    #[test]
    fn streamed_deltas_are_openai_shaped() {
        let mut s = StreamedCalls::new(HERMES);
        let mut deltas = s.feed("Hi <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\"");
        deltas.extend(s.feed(": 1}}\n</tool_call>"));
        let (last, reason) = s.finish(EosToken);
        deltas.extend(last);
        let wire: Vec<Value> = deltas.iter().map(|d| serde_json::to_value(d).unwrap()).collect();
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
        assert_eq!(reason, "tool_calls");
    }

    /// A streamed answer as a client accumulates it: its content, and per call the deltas that carry an id
    /// (exactly one each), its name and its arguments.
    fn accumulate(
        reading: Reading,
        chunks: &[&str],
        engine: FinishReason,
    ) -> (String, Vec<(String, String)>, &'static str) {
        let mut s = StreamedCalls::new(reading);
        let mut deltas: Vec<Delta> = chunks.iter().flat_map(|c| s.feed(c)).collect();
        let (last, reason) = s.finish(engine);
        deltas.extend(last);
        let (mut content, mut calls) = (String::new(), Vec::<(String, String)>::new());
        for d in deltas {
            content.push_str(d.content.as_deref().unwrap_or_default());
            for t in d.tool_calls.unwrap_or_default() {
                if let Some(name) = t.function.name {
                    assert!(t.id.is_some() && t.kind == Some("function") && t.index == calls.len());
                    calls.push((name, t.function.arguments));
                } else {
                    assert!(t.id.is_none() && t.kind.is_none() && t.index + 1 == calls.len());
                    calls[t.index].1.push_str(&t.function.arguments);
                }
            }
        }
        (content, calls, reason)
    }

    #[test]
    fn a_forced_call_cut_anywhere_is_the_call_so_far_in_every_family() {
        let args = r#"{"city": "Paris", "days": 3}"#;
        for format in [ToolCallFormat::Hermes, ToolCallFormat::Llama3Json, ToolCallFormat::Mistral] {
            let reading = Reading { format, forced: true };
            let call = format!("{}{args}{}", format.call_head("get_weather"), format.call_tail());
            let text = format!("{}{call}{}", format.before_calls(), format.after_calls());
            let mut complete = false;
            for cut in (1..=text.len()).filter(|&i| text.is_char_boundary(i)) {
                let part = &text[..cut];
                let r = Reply::read(reading, part, Length);
                let what = format!("{format:?} cut to {part:?}: {r:?}");
                assert_eq!((r.content.as_deref(), r.tool_calls.len()), (None, 1), "{what}");
                let f = &r.tool_calls[0].function;
                let got = f.arguments.as_str().unwrap();
                assert!("get_weather".starts_with(&f.name) && args.starts_with(got), "{what}");
                complete |= r.finish_reason == "tool_calls";
                assert_eq!(r.finish_reason, if complete { "tool_calls" } else { "length" }, "{what}");
                assert!(!complete || (f.name == "get_weather" && got == args), "{what}");
                // Streamed a character at a time, the client accumulates the same.
                let chars: Vec<String> = part.chars().map(String::from).collect();
                let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
                let (content, calls, reason) = accumulate(reading, &chars, Length);
                assert_eq!((content.as_str(), reason), ("", r.finish_reason), "{what}");
                assert_eq!(calls, [(f.name.clone(), got.to_string())], "{what}");
            }
            assert!(complete, "{format:?}: the whole call is complete");
            let whole = Reply::read(reading, &text, EosToken);
            assert_eq!((whole.finish_reason, whole.tool_calls.len()), ("tool_calls", 1), "{format:?}");
        }
    }

    #[test]
    fn an_auto_call_cut_after_its_marker_is_the_call_so_far() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
        let marked = text.find("<tool_call>").unwrap() + "<tool_call>".len();
        for cut in 1..=text.len() {
            let r = Reply::read(HERMES, &text[..cut], Length);
            let (content, calls, _) = accumulate(HERMES, &[&text[..cut]], Length);
            let whole: Vec<(String, String)> = r
                .tool_calls
                .iter()
                .map(|c| (c.function.name.clone(), c.function.arguments.as_str().unwrap().to_string()))
                .collect();
            assert_eq!((r.content.clone().unwrap_or_default(), whole), (content, calls), "cut at {cut}");
            assert_eq!(r.tool_calls.len(), usize::from(cut >= marked), "cut at {cut}: {r:?}");
            if cut >= marked {
                let reason = if cut == text.len() { "tool_calls" } else { "length" };
                assert_eq!((r.content.as_deref(), r.finish_reason), (Some("Let me check."), reason), "cut at {cut}");
            }
        }
    }
}
