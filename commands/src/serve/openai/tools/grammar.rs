//! The grammar that forces tool calls (`tool_choice` `required` or a named function): the family's call
//! markup around each function's arguments, which follow its parameters schema (llguidance Lark with
//! `%json`, laid out as the engine lays out JSON); one alternative per function, several calls in a row when
//! parallel calls are allowed.

use serde_json::Value;
use tgi_engines::constraint::{laid_out, Grammar};

use super::format::ToolCallFormat;
use super::spec::{Choice, Function, Tools};

/// The grammar of the calls `tools` asks for; `None` when the model chooses (`auto`).
pub fn forced_calls(format: ToolCallFormat, tools: &Tools) -> Option<Grammar> {
    let (functions, several): (&[Function], bool) = match tools.choice {
        Choice::Auto => return None,
        Choice::Required => (&tools.functions, tools.parallel),
        Choice::Named(i) => (std::slice::from_ref(&tools.functions[i]), false),
    };
    let calls = if several { format!("call ({} call)*", literal(format.between_calls())) } else { "call".into() };
    let start = [literal(format.before_calls()), calls, literal(format.after_calls())];
    let mut lark =
        format!("start: {}\n", start.iter().filter(|s| !s.is_empty()).cloned().collect::<Vec<_>>().join(" "));
    let alternatives: Vec<String> = (0..functions.len()).map(|i| format!("call_{i}")).collect();
    lark.push_str(&format!("call: {}\n", alternatives.join(" | ")));
    for (i, f) in functions.iter().enumerate() {
        let head = literal(&format.call_head(&f.name));
        let tail = literal(format.call_tail());
        lark.push_str(&format!("call_{i}: {head} %json {} {tail}\n", laid_out(&f.parameters)));
    }
    Some(Grammar::Lark(lark))
}

/// A Lark string literal of `text` (JSON string syntax); empty for empty text.
fn literal(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        Value::from(text).to_string()
    }
}

#[cfg(test)]
mod tests {
    use llguidance::api::TopLevelGrammar;
    use llguidance::earley::SlicedBiasComputer;
    use llguidance::toktrie::{ApproximateTokEnv, InferenceCapabilities, TokEnv};
    use llguidance::{Matcher, ParserFactory};

    use serde_json::json;

    use super::*;
    use crate::serve::openai::tools::spec::ToolFields;

    /// Whether `grammar` accepts `text` whole (over a vocabulary of single bytes).
    fn accepts(grammar: &Grammar, text: &str) -> bool {
        let Grammar::Lark(lark) = grammar else { panic!("a Lark grammar") };
        let env: TokEnv = std::sync::Arc::new(ApproximateTokEnv::single_byte());
        let factory =
            ParserFactory::new(&env, InferenceCapabilities::default(), &SlicedBiasComputer::general_slices()).unwrap();
        let mut parser = factory.create_parser(TopLevelGrammar::from_lark(lark.clone())).unwrap();
        parser.start_without_prompt();
        let mut m = Matcher::new(Ok(parser));
        let ids: Vec<u32> = text.bytes().map(u32::from).collect();
        m.consume_tokens(&ids).is_ok() && m.is_accepting().unwrap_or(false)
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

    #[test]
    fn auto_is_not_forced() {
        assert_eq!(forced_calls(ToolCallFormat::Hermes, &tools(json!("auto"), true)), None);
    }

    #[test]
    fn required_calls_follow_the_schemas_in_each_family() {
        let weather = r#"{"name": "get_weather", "arguments": {"city": "Rome"}}"#;
        let g = forced_calls(ToolCallFormat::Hermes, &tools(json!("required"), true)).unwrap();
        let one = format!("<tool_call>\n{weather}\n</tool_call>");
        assert!(accepts(&g, &one));
        assert!(accepts(&g, &format!("{one}\n<tool_call>\n{{\"name\": \"now\", \"arguments\": {{}}}}\n</tool_call>")));
        assert!(!accepts(&g, &one.replace("Rome", "Oslo")));
        assert!(!accepts(&g, &one.replace("{\"city\": ", "{\"city\":")));
        assert!(!accepts(&g, "Hello"));
        let single = forced_calls(ToolCallFormat::Hermes, &tools(json!("required"), false)).unwrap();
        assert!(accepts(&single, &one) && !accepts(&single, &format!("{one}\n{one}")));

        let g = forced_calls(ToolCallFormat::Mistral, &tools(json!("required"), true)).unwrap();
        assert!(accepts(&g, &format!("[TOOL_CALLS][{weather}, {weather}]")));
        let g = forced_calls(ToolCallFormat::Llama3Json, &tools(json!("required"), true)).unwrap();
        assert!(accepts(&g, &weather.replace("arguments", "parameters")));
    }

    #[test]
    fn a_named_function_is_the_only_call() {
        let g = forced_calls(
            ToolCallFormat::Hermes,
            &tools(json!({"type": "function", "function": {"name": "now"}}), true),
        )
        .unwrap();
        assert!(accepts(&g, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
        assert!(!accepts(
            &g,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"
        ));
    }
}
