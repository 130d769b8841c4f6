use super::*;
use serde_json::{json, Value};

use ToolCallFormat::{Hermes, Llama3Json, Mistral};

/// What an answer parses to: its content and its calls (name, arguments as JSON), and whether a call was left open.
#[derive(Debug, PartialEq)]
struct Answer {
    content: String,
    calls: Vec<(String, Value)>,
    open: bool,
}

/// The answer of `chunks` fed one after the other.
fn parse(format: ToolCallFormat, chunks: &[&str]) -> Answer {
    let mut p = ToolCallParser::new(format);
    let mut pieces = Vec::new();
    for c in chunks {
        pieces.extend(p.feed(c));
    }
    pieces.extend(p.finish());
    let mut content = String::new();
    let mut calls: Vec<(String, String)> = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Content(t) => content.push_str(&t),
            Piece::Call { index, name } => {
                assert_eq!(index, calls.len(), "calls are numbered in order");
                calls.push((name, String::new()));
            }
            Piece::Arguments { index, text } => {
                assert_eq!(index + 1, calls.len(), "arguments follow their call");
                calls[index].1.push_str(&text);
            }
        }
    }
    assert_eq!(p.calls(), calls.len());
    let calls = calls.into_iter().map(|(n, a)| (n, serde_json::from_str(&a).unwrap_or(Value::String(a)))).collect();
    Answer { content, calls, open: p.is_open() }
}

/// The answer of `text` whole, checked to be the same when the text comes in two chunks split anywhere,
/// and one character at a time.
fn parse_all_ways(format: ToolCallFormat, text: &str) -> Answer {
    let whole = parse(format, &[text]);
    for (i, _) in text.char_indices().skip(1) {
        assert_eq!(parse(format, &[&text[..i], &text[i..]]), whole, "split at {i} of {text:?}");
    }
    let chars: Vec<String> = text.chars().map(String::from).collect();
    let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(parse(format, &chars), whole, "char by char: {text:?}");
    whole
}

fn answer(content: &str, calls: &[(&str, Value)]) -> Answer {
    Answer {
        content: content.into(),
        calls: calls.iter().map(|(n, a)| (n.to_string(), a.clone())).collect(),
        open: false,
    }
}

#[test]
fn plain_text_is_content_in_every_family() {
    for format in [Hermes, Llama3Json, Mistral] {
        for text in ["Once upon a time, ", "a < b and [x] {y}\n", "  spaced  \n", "<tool", "[TOOL"] {
            assert_eq!(parse_all_ways(format, text), answer(text, &[]), "{format:?}");
        }
    }
}

#[test]
fn hermes_calls_between_text() {
    let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": [1, {\"a\": \"}\"}]}}\n</tool_call>\n<tool_call>\n{\"arguments\": {}, \"name\": \"now\"}\n</tool_call>\n";
    assert_eq!(
        parse_all_ways(Hermes, text),
        answer("Let me check.", &[("get_weather", json!({"city": "Paris", "n": [1, {"a": "}"}]})), ("now", json!({}))])
    );
}

#[test]
fn hermes_markup_that_is_no_call_is_content() {
    for text in [
        "<tool_call>not json</tool_call>",
        "see <tool_call>{\"x\": 1}</tool_call> here",
        "<tool_call>\n{\"name\": 3}",
        "a <tool_call>",
    ] {
        assert_eq!(parse_all_ways(Hermes, text), answer(text, &[]), "{text:?}");
    }
}

#[test]
fn arguments_as_a_string_and_missing_arguments() {
    let text = r#"<tool_call>{"name": "f", "arguments": "{\"a\": 1}"}</tool_call><tool_call>{"name": "g"}</tool_call>"#;
    assert_eq!(parse_all_ways(Hermes, text), answer("", &[("f", json!({"a": 1})), ("g", json!({}))]));
}

#[test]
fn a_call_cut_short_stays_open() {
    let text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2";
    let got = parse_all_ways(Hermes, text);
    assert_eq!((got.calls.len(), got.open, got.content.as_str()), (1, true, ""));
    assert_eq!(got.calls[0].1, Value::String("{\"a\": [1, 2".into()));
}

#[test]
fn llama3_json_calls_are_the_whole_answer() {
    let text = "{\"name\": \"f\", \"parameters\": {\"x\": true}}; {\"name\": \"g\", \"parameters\": {\"y\": null}}";
    assert_eq!(parse_all_ways(Llama3Json, text), answer("", &[("f", json!({"x": true})), ("g", json!({"y": null}))]));
    let tagged = "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": -1.5e3}}";
    assert_eq!(parse_all_ways(Llama3Json, tagged), answer("", &[("f", json!({"x": -1.5e3}))]));
    // Not at the start: text.
    let later = "Sure: {\"name\": \"f\", \"parameters\": {}}";
    assert_eq!(parse_all_ways(Llama3Json, later), answer(later, &[]));
    assert_eq!(parse_all_ways(Llama3Json, "{\"a\": 1}"), answer("{\"a\": 1}", &[]));
}

#[test]
fn mistral_calls_are_a_list_after_the_marker() {
    let text =
        "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"q\": \"a]b\"}}, {\"name\": \"g\", \"arguments\": {}}]";
    assert_eq!(parse_all_ways(Mistral, text), answer("", &[("f", json!({"q": "a]b"})), ("g", json!({}))]));
    assert_eq!(parse_all_ways(Mistral, "[TOOL_CALLS] nope"), answer("[TOOL_CALLS] nope", &[]));
}

#[test]
fn arguments_stream_as_they_arrive() {
    let mut p = ToolCallParser::new(Hermes);
    assert_eq!(p.feed("Hi <tool_"), vec![Piece::Content("Hi".into())]);
    assert_eq!(p.feed("call>{\"name\": \"f\""), vec![Piece::Call { index: 0, name: "f".into() }]);
    assert_eq!(p.feed(", \"arguments\": {\"a\""), vec![Piece::Arguments { index: 0, text: "{\"a\"".into() }]);
    assert_eq!(p.feed(": 1}}</tool_call>"), vec![Piece::Arguments { index: 0, text: ": 1}".into() }]);
    assert!(!p.is_open());
    assert_eq!(p.finish(), vec![]);
    assert_eq!(p.calls(), 1);
}
