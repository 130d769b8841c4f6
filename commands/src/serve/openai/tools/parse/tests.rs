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

/// The answer of `chunks` fed one after the other, the model having ended it.
fn parse(format: ToolCallFormat, chunks: &[&str]) -> Answer {
    parse_read(Reading { format, forced: false }, chunks, false)
}

/// The answer of `chunks` fed one after the other, read this way and `cut` short or not.
fn parse_read(reading: Reading, chunks: &[&str], cut: bool) -> Answer {
    let mut p = ToolCallParser::new(reading);
    let mut pieces = Vec::new();
    for c in chunks {
        pieces.extend(p.feed(c));
    }
    pieces.extend(p.finish(cut));
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
    let mut p = ToolCallParser::new(Reading { format: Hermes, forced: false });
    assert_eq!(p.feed("Hi <tool_"), vec![Piece::Content("Hi".into())]);
    assert_eq!(p.feed("call>{\"name\": \"f\""), vec![Piece::Call { index: 0, name: "f".into() }]);
    assert_eq!(p.feed(", \"arguments\": {\"a\""), vec![Piece::Arguments { index: 0, text: "{\"a\"".into() }]);
    assert_eq!(p.feed(": 1}}</tool_call>"), vec![Piece::Arguments { index: 0, text: ": 1}".into() }]);
    assert!(!p.is_open());
    assert_eq!(p.finish(false), vec![]);
    assert_eq!(p.calls(), 1);
}

/// The answer of `text` cut short, read this way, checked to be the same however the text is split.
fn cut_all_ways(reading: Reading, text: &str) -> Answer {
    let whole = parse_read(reading, &[text], true);
    for (i, _) in text.char_indices().skip(1) {
        assert_eq!(parse_read(reading, &[&text[..i], &text[i..]], true), whole, "split at {i} of {text:?}");
    }
    whole
}

fn open_call(content: &str, name: &str, arguments: &str) -> Answer {
    let arguments = serde_json::from_str(arguments).unwrap_or(Value::String(arguments.into()));
    Answer { content: content.into(), calls: vec![(name.into(), arguments)], open: true }
}

#[test]
fn a_cut_output_ends_with_the_call_it_began() {
    let auto = Reading { format: Hermes, forced: false };
    let cases = [
        ("Hi <tool_call>", open_call("Hi", "", "")),
        ("Hi <tool_call>\n{\"na", open_call("Hi", "", "")),
        ("Hi <tool_call>\n{\"name\": \"get_wea", open_call("Hi", "get_wea", "")),
        ("<tool_call>\n{\"name\": \"f\", \"argu", open_call("", "f", "")),
        ("<tool_call>{\"arguments\": {\"a\": 1}, \"na", open_call("", "", "{\"a\": 1}")),
    ];
    for (text, want) in cases {
        assert_eq!(cut_all_ways(auto, text), want, "{text:?}");
    }
    // A marker's first characters may still be text, unless the answer is forced calls.
    assert_eq!(cut_all_ways(auto, "Hi <tool_c"), answer("Hi <tool_c", &[]));
    assert_eq!(cut_all_ways(Reading { format: Hermes, forced: true }, "<tool_c"), open_call("", "", ""));
    let forced = Reading { format: Mistral, forced: true };
    for text in ["[", "[TOOL_CALLS]", "[TOOL_CALLS] [", "[TOOL_CALLS][{\"name\""] {
        assert_eq!(cut_all_ways(forced, text), open_call("", "", ""), "{text:?}");
    }
    // After a separator, the next call has begun.
    let two = cut_all_ways(forced, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}, ");
    assert_eq!((two.calls.len(), two.calls[1].0.as_str(), two.open), (2, "", true));
}

#[test]
fn markup_closing_the_last_call_is_never_content() {
    let call = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}";
    for tail in ["", "\n", "\n</tool", "\n</tool_call"] {
        for cut in [false, true] {
            let got = parse_read(Reading { format: Hermes, forced: false }, &[call, tail], cut);
            assert_eq!(got, answer("", &[("f", json!({}))]), "{tail:?}, cut: {cut}");
        }
    }
}
