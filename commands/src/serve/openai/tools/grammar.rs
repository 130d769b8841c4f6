//! The grammar of the calls a request allows, in the family's markup around each function's arguments,
//! which follow its parameters schema (llguidance Lark with `%json`, laid out as the engine lays out JSON):
//!
//! - forced (`tool_choice` `required` or a named function): the answer is calls from its first token;
//! - `auto`: free text until the family's call marker appears (Hermes' `<tool_call>`, Mistral's
//!   `[TOOL_CALLS]`; a call object at the start for Llama 3), then the calls must follow, as llama.cpp's lazy
//!   grammars trigger on the marker: a text marker ends a lazy lexeme of the text before it, a control
//!   token marker is the token. Free text never holds a marker, so every call the parser reads was forced.
//!
//! One alternative per function; several calls in a row when parallel calls are allowed. Markers the
//! vocabulary holds as control tokens are written by id ([`Markers`]).

use tgi_engines::constraint::{laid_out, Grammar};

use super::format::ToolCallFormat;
use super::markers::{literal, Markers};
use super::spec::{Choice, Function, Tools};

/// The grammar of the calls `tools` allows, over a vocabulary with these control-token `markers`.
pub fn calls(format: ToolCallFormat, tools: &Tools, markers: &Markers) -> Grammar {
    let (functions, several): (&[Function], bool) = match tools.choice {
        Choice::Auto | Choice::Required => (&tools.functions, tools.parallel),
        Choice::Named(i) => (std::slice::from_ref(&tools.functions[i]), false),
    };
    let syntax = format.syntax();
    // The `auto` trigger's marker, which the trigger writes (so the markup after it is written without it).
    let trigger = if tools.choice == Choice::Auto { format.marker() } else { None };
    let after_trigger = |text: String| match trigger {
        Some(m) => text.strip_prefix(m).map(str::to_string).unwrap_or(text),
        None => text,
    };
    // Hermes writes a marker before each call (a section per call), Mistral one before the list.
    let per_call = syntax.separator.is_none();
    let mut rules = Vec::new();
    for (i, f) in functions.iter().enumerate() {
        let head = format.call_head(&f.name);
        let head = markers.lark(&if per_call { after_trigger(head) } else { head });
        let tail = markers.lark(format.call_tail());
        rules.push(format!("call_{i}: {head} %json {} {tail}", laid_out(&f.parameters)));
    }
    let alternatives: Vec<String> = (0..functions.len()).map(|i| format!("call_{i}")).collect();
    rules.push(format!("call: {}", alternatives.join(" | ")));
    let repeated = several && !(per_call && trigger.is_some());
    let calls = if repeated { format!("call ({} call)*", literal(format.between_calls())) } else { "call".into() };
    let before = format.before_calls().to_string();
    let before = markers.lark(&if per_call { before } else { after_trigger(before) });
    let body = join(&[before, calls, markers.lark(format.after_calls())]);
    let start = match (tools.choice, trigger) {
        (Choice::Auto, Some(marker)) => {
            rules.push(match markers.token(marker) {
                Some(id) => format!("head: FREE <[{id}]>"),
                None => format!("head[lazy]: FREE {}", literal(marker)),
            });
            rules.push(free_text(format));
            let sections = if per_call && several { "*" } else { "?" };
            format!("(head {body}){sections} FREE")
        }
        (Choice::Auto, None) => {
            rules.push(free_text(format));
            format!("FREE | {body}")
        }
        (Choice::Required | Choice::Named(_), _) => body,
    };
    rules.insert(0, format!("start: {start}"));
    Grammar::Lark(rules.join("\n") + "\n")
}

/// The `FREE` terminal: text the parser reads as content, holding no marker (or, for a family whose calls
/// are the whole answer, not starting with one or with a call object).
fn free_text(format: ToolCallFormat) -> String {
    let syntax = format.syntax();
    let lead = if syntax.at_start_only { r"/\s*/" } else { "/(?s:.*)/" };
    let openings = syntax.open.iter().copied().chain(syntax.bare_object.then_some("{"));
    let excluded: Vec<String> = openings.map(|m| format!(" & ~({lead} {} /(?s:.*)/)", literal(m))).collect();
    format!("FREE: /(?s:.*)/{}", excluded.concat())
}

/// Lark items in a row, the empty ones left out.
fn join(items: &[String]) -> String {
    items.iter().filter(|s| !s.is_empty()).cloned().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use llguidance::api::TopLevelGrammar;
    use llguidance::earley::SlicedBiasComputer;
    use llguidance::toktrie::{ApproximateTokEnv, InferenceCapabilities, TokEnv, TokRxInfo, TokTrie};
    use llguidance::{Matcher, ParserFactory};
    use serde_json::{json, Value};

    use tgi_engines::constraint::{GrammarCompiler, GrammarConfig, GrammarLimits};
    use tgi_engines::text::tokenizer::Tokenizer;

    use super::*;
    use crate::serve::openai::tools::markers::tests::{markers, mistral_like};
    use crate::serve::openai::tools::spec::ToolFields;
    use ToolCallFormat::{Hermes, Llama3Json, Mistral};

    /// The control token `[TOOL_CALLS]` of [`vocabulary`].
    const TOOL_CALLS: u32 = 256;

    /// A vocabulary of the 256 bytes, the control token `[TOOL_CALLS]` and end-of-sequence.
    fn vocabulary() -> TokEnv {
        let mut words: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        for special in ["[TOOL_CALLS]", "</s>"] {
            words.push([&[TokTrie::SPECIAL_TOKEN_MARKER], special.as_bytes()].concat());
        }
        let info = TokRxInfo::new(words.len() as u32, TOOL_CALLS + 1);
        Arc::new(ApproximateTokEnv::new(TokTrie::from(&info, &words)))
    }

    /// Whether `grammar` accepts `tokens` whole.
    fn accepts_tokens(grammar: &Grammar, tokens: &[u32]) -> bool {
        let Grammar::Lark(lark) = grammar else { panic!("a Lark grammar") };
        let env = vocabulary();
        let factory =
            ParserFactory::new(&env, InferenceCapabilities::default(), &SlicedBiasComputer::general_slices()).unwrap();
        let mut parser = factory.create_parser(TopLevelGrammar::from_lark(lark.clone())).unwrap();
        parser.start_without_prompt();
        let mut m = Matcher::new(Ok(parser));
        m.consume_tokens(tokens).is_ok() && m.is_accepting().unwrap_or(false)
    }

    /// Whether `grammar` accepts `text` whole, a token per byte.
    fn accepts(grammar: &Grammar, text: &str) -> bool {
        accepts_tokens(grammar, &bytes(text))
    }

    fn bytes(text: &str) -> Vec<u32> {
        text.bytes().map(u32::from).collect()
    }

    fn tools(choice: Value, parallel: bool) -> Tools {
        let fields = ToolFields {
            tools: Some(json!([
                {"type": "function", "function": {"name": "get_weather", "parameters": {
                    "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
                    "required": ["city"], "additionalProperties": false}}},
                {"type": "function", "function": {"name": "now"}}
            ])),
            tool_choice: Some(choice),
            parallel_tool_calls: Some(parallel),
            tool_prompt: None,
        };
        fields.check().unwrap().unwrap()
    }

    /// The calls grammar without control-token markers.
    fn grammar(format: ToolCallFormat, choice: Value, parallel: bool) -> Grammar {
        calls(format, &tools(choice, parallel), &Markers::default())
    }

    const WEATHER: &str = r#"{"name": "get_weather", "arguments": {"city": "Rome"}}"#;

    #[test]
    fn required_calls_follow_the_schemas_in_each_family() {
        let g = grammar(Hermes, json!("required"), true);
        let one = format!("<tool_call>\n{WEATHER}\n</tool_call>");
        assert!(accepts(&g, &one));
        assert!(accepts(&g, &format!("{one}\n<tool_call>\n{{\"name\": \"now\", \"arguments\": {{}}}}\n</tool_call>")));
        assert!(!accepts(&g, &one.replace("Rome", "Oslo")));
        assert!(!accepts(&g, &one.replace("{\"city\": ", "{\"city\":")));
        assert!(!accepts(&g, "Hello"));
        let single = grammar(Hermes, json!("required"), false);
        assert!(accepts(&single, &one) && !accepts(&single, &format!("{one}\n{one}")));

        let g = grammar(Mistral, json!("required"), true);
        assert!(accepts(&g, &format!("[TOOL_CALLS][{WEATHER}, {WEATHER}]")));
        let g = grammar(Llama3Json, json!("required"), true);
        assert!(accepts(&g, &WEATHER.replace("arguments", "parameters")));
    }

    #[test]
    fn a_named_function_is_the_only_call() {
        let g = grammar(Hermes, json!({"type": "function", "function": {"name": "now"}}), true);
        assert!(accepts(&g, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
        assert!(!accepts(&g, &format!("<tool_call>\n{WEATHER}\n</tool_call>")));
    }

    #[test]
    fn auto_is_free_text_until_the_marker_then_calls_that_follow_the_schemas() {
        let g = grammar(Hermes, json!("auto"), true);
        let call = format!("<tool_call>\n{WEATHER}\n</tool_call>");
        for text in ["", "Hello", "a < b and {\"city\": 1}", "Hi <tool", "see </tool_call>"] {
            assert!(accepts(&g, text), "{text:?}");
        }
        assert!(accepts(&g, &format!("Let me check.\n{call}")));
        assert!(accepts(&g, &format!("Let me check.\n{call}\n{call} Done.")));
        assert!(!accepts(&g, &format!("Let me check.\n{}", call.replace("Rome", "Oslo"))), "arguments are forced");
        assert!(!accepts(&g, "Hi <tool_call>not a call"));
        assert!(!accepts(&g, "Hi <tool_call>"), "a marker must be followed by a call");
        assert!(!accepts(&grammar(Hermes, json!("auto"), false), &format!("{call}\n{call}")), "one call");

        let g = grammar(Mistral, json!("auto"), true);
        assert!(accepts(&g, "Hello [world]"));
        assert!(accepts(&g, &format!("Hi [TOOL_CALLS][{WEATHER}, {WEATHER}]")));
        assert!(!accepts(&g, &format!("[TOOL_CALLS][{}]", WEATHER.replace("Rome", "Oslo"))));
        assert!(!accepts(&g, "[TOOL_CALLS] nope"));
        let single = grammar(Mistral, json!("auto"), false);
        assert!(accepts(&single, &format!("[TOOL_CALLS][{WEATHER}]")));
        assert!(!accepts(&single, &format!("[TOOL_CALLS][{WEATHER}, {WEATHER}]")));

        let g = grammar(Llama3Json, json!("auto"), true);
        let weather = WEATHER.replace("arguments", "parameters");
        assert!(accepts(&g, "Sure: {\"a\": 1}") && accepts(&g, &format!("{weather}; {weather}")));
        assert!(!accepts(&g, "{\"a\": 1}"), "an object at the start is a call");
        assert!(!accepts(&g, &format!(" \n{weather}")), "calls start the answer");
        assert!(!accepts(&g, "<|python_tag|>{}"));
    }

    #[test]
    fn mistral_control_token_is_written_by_id() {
        let tokens = markers(&[("[TOOL_CALLS]", TOOL_CALLS)]);
        let forced = calls(Mistral, &tools(json!("required"), false), &tokens);
        let Grammar::Lark(lark) = &forced else { panic!("a Lark grammar") };
        assert!(lark.starts_with(&format!("start: <[{TOOL_CALLS}]> \"[\" call \"]\"\n")), "{lark}");
        assert!(!lark.contains("TOOL_CALLS"), "{lark}");
        let list = bytes(&format!("[{WEATHER}]"));
        assert!(accepts_tokens(&forced, &[&[TOOL_CALLS], list.as_slice()].concat()));
        assert!(!accepts(&forced, &format!("[TOOL_CALLS][{WEATHER}]")), "the marker's text is not the token");

        let auto = calls(Mistral, &tools(json!("auto"), false), &tokens);
        let Grammar::Lark(lark) = &auto else { panic!("a Lark grammar") };
        assert!(lark.contains(&format!("head: FREE <[{TOOL_CALLS}]>")), "{lark}");
        assert!(accepts_tokens(&auto, &[bytes("Hi "), vec![TOOL_CALLS], list].concat()));
        assert!(accepts(&auto, "Hello"));
        assert!(!accepts(&auto, &format!("Hi [TOOL_CALLS][{WEATHER}]")), "nor is it free text");
    }

    #[test]
    fn a_forced_mistral_call_opens_with_the_control_token_in_a_vocabulary_that_has_it() {
        let dir = tempfile::tempdir().unwrap();
        let tokenizer = Tokenizer::from_tokenizer_json(&mistral_like(dir.path())).unwrap();
        let grammar = calls(Mistral, &tools(json!("required"), false), &Markers::find(Mistral, &tokenizer));
        let vocab = tokenizer.vocab_size();
        let compiler = GrammarCompiler::new(&tokenizer, vocab, tokenizer.eos_ids(), &GrammarConfig::default()).unwrap();
        let (constraint, _) = compiler.compile(&GrammarLimits::default().check(grammar).unwrap()).unwrap();
        let allowed = |c: &tgi_engines::constraint::Constraint| {
            let mask = c.mask().unwrap();
            (0..vocab as u32).filter(|&id| mask.allows(id)).collect::<Vec<_>>()
        };
        assert_eq!(allowed(&constraint), [512], "only the control token starts the answer");
        constraint.commit(512).unwrap();
        let next = allowed(&constraint);
        assert!(!next.is_empty() && !next.contains(&512), "{next:?}");
    }
}
