//! How a model family writes tool calls: the markup around and between calls, which a chat template
//! tells (or `--tool-call-parser` sets), used alike to parse calls out of the output, to force them with
//! a grammar and to write earlier calls back into the prompt.

use serde_json::{json, Value};

/// A family's tool-call format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ToolCallFormat {
    /// Hermes / Qwen: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` per call; also the format
    /// of the default prompt, for templates of no known family.
    Hermes,
    /// Llama 3.1+ JSON: the whole answer is `{"name": ..., "parameters": {...}}` (optionally after
    /// `<|python_tag|>`), several separated by `; `.
    #[value(name = "llama3_json")]
    Llama3Json,
    /// Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`.
    Mistral,
}

/// The markup of a format, as the parser reads it (leniently: whitespace anywhere between the parts).
#[derive(Debug)]
pub struct Syntax {
    /// Markers that open a section of calls.
    pub open: &'static [&'static str],
    /// Whether a section opens only at the start of the output (else anywhere in the text).
    pub at_start_only: bool,
    /// Whether a call object at the start of the output opens a section without a marker.
    pub bare_object: bool,
    /// What follows the marker before the first call.
    pub begin: Option<&'static str>,
    /// What separates the calls of a section (none: one call per section).
    pub separator: Option<&'static str>,
    /// What closes a section (none: it runs to the end of the output).
    pub close: Option<&'static str>,
}

impl ToolCallFormat {
    /// The format a chat template's model family writes: Hermes' `<tool_call>` tags, Llama 3's
    /// `<|python_tag|>` or `ipython` role, Mistral's `[TOOL_CALLS]`; Hermes (the default prompt's) when
    /// the template shows none of them.
    pub fn detect(template: &str) -> Self {
        if template.contains("[TOOL_CALLS]") {
            ToolCallFormat::Mistral
        } else if template.contains("<tool_call>") {
            ToolCallFormat::Hermes
        } else if template.contains("<|python_tag|>") || template.contains("ipython") {
            ToolCallFormat::Llama3Json
        } else {
            ToolCallFormat::Hermes
        }
    }

    /// The markup the parser reads.
    pub fn syntax(self) -> &'static Syntax {
        match self {
            ToolCallFormat::Hermes => &Syntax {
                open: &["<tool_call>"],
                at_start_only: false,
                bare_object: false,
                begin: None,
                separator: None,
                close: Some("</tool_call>"),
            },
            ToolCallFormat::Llama3Json => &Syntax {
                open: &["<|python_tag|>"],
                at_start_only: true,
                bare_object: true,
                begin: None,
                separator: Some(";"),
                close: None,
            },
            ToolCallFormat::Mistral => &Syntax {
                open: &["[TOOL_CALLS]"],
                at_start_only: false,
                bare_object: false,
                begin: Some("["),
                separator: Some(","),
                close: Some("]"),
            },
        }
    }

    /// The marker the calls follow (each call for Hermes, the list for Mistral), on which `auto` grammars
    /// trigger; none for Llama 3, whose calls are the whole answer.
    pub fn marker(self) -> Option<&'static str> {
        let syntax = self.syntax();
        syntax.open.first().copied().filter(|_| !syntax.at_start_only)
    }

    /// The key of a call object that holds the arguments.
    fn arguments_key(self) -> &'static str {
        match self {
            ToolCallFormat::Llama3Json => "parameters",
            ToolCallFormat::Hermes | ToolCallFormat::Mistral => "arguments",
        }
    }

    /// What comes before the first of the calls the model writes.
    pub fn before_calls(self) -> &'static str {
        match self {
            ToolCallFormat::Mistral => "[TOOL_CALLS][",
            ToolCallFormat::Hermes | ToolCallFormat::Llama3Json => "",
        }
    }

    /// What separates two calls the model writes.
    pub fn between_calls(self) -> &'static str {
        match self {
            ToolCallFormat::Hermes => "\n",
            ToolCallFormat::Llama3Json => "; ",
            ToolCallFormat::Mistral => ", ",
        }
    }

    /// What comes after the last call the model writes.
    pub fn after_calls(self) -> &'static str {
        match self {
            ToolCallFormat::Mistral => "]",
            ToolCallFormat::Hermes | ToolCallFormat::Llama3Json => "",
        }
    }

    /// A call written up to its arguments: `<tool_call>\n{"name": "f", "arguments": ` for Hermes.
    pub fn call_head(self, name: &str) -> String {
        let open = match self {
            ToolCallFormat::Hermes => "<tool_call>\n",
            ToolCallFormat::Llama3Json | ToolCallFormat::Mistral => "",
        };
        format!("{open}{{\"name\": {}, \"{}\": ", json!(name), self.arguments_key())
    }

    /// What closes a call after its arguments.
    pub fn call_tail(self) -> &'static str {
        match self {
            ToolCallFormat::Hermes => "}\n</tool_call>",
            ToolCallFormat::Llama3Json | ToolCallFormat::Mistral => "}",
        }
    }

    /// Calls as the model writes them, `(name, arguments)` each, for earlier turns shown to templates
    /// that do not render `tool_calls` themselves.
    pub fn write_calls<'a>(self, calls: impl IntoIterator<Item = (&'a str, &'a Value)>) -> String {
        let calls: Vec<String> = calls
            .into_iter()
            .map(|(name, args)| format!("{}{args}{}", self.call_head(name), self.call_tail()))
            .collect();
        format!("{}{}{}", self.before_calls(), calls.join(self.between_calls()), self.after_calls())
    }

    /// How the default prompt tells the model to write its calls.
    pub fn instructions(self) -> String {
        let call = format!("{}<arguments-json-object>{}", self.call_head("<function-name>"), self.call_tail());
        format!(
            "To call one or more functions, answer with the calls, written like this (several calls separated by \
             {:?}):\n{}{call}{}",
            self.between_calls(),
            self.before_calls(),
            self.after_calls()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_the_family_from_the_template() {
        assert_eq!(ToolCallFormat::detect("{{ '<tool_call>\\n' }}"), ToolCallFormat::Hermes);
        assert_eq!(ToolCallFormat::detect("{% if m.role == 'ipython' %}"), ToolCallFormat::Llama3Json);
        assert_eq!(ToolCallFormat::detect("<|python_tag|>"), ToolCallFormat::Llama3Json);
        assert_eq!(ToolCallFormat::detect("[AVAILABLE_TOOLS] [TOOL_CALLS]"), ToolCallFormat::Mistral);
        assert_eq!(ToolCallFormat::detect("{{ m.content }}"), ToolCallFormat::Hermes);
    }

    #[test]
    fn writes_calls_as_each_family_does() {
        let args = json!({"city": "Paris"});
        let calls = [("get", &args), ("put", &args)];
        assert_eq!(
            ToolCallFormat::Hermes.write_calls(calls),
            "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>\n\
             <tool_call>\n{\"name\": \"put\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>"
        );
        assert_eq!(
            ToolCallFormat::Llama3Json.write_calls(calls),
            "{\"name\": \"get\", \"parameters\": {\"city\":\"Paris\"}}; {\"name\": \"put\", \"parameters\": {\"city\":\"Paris\"}}"
        );
        assert_eq!(
            ToolCallFormat::Mistral.write_calls(calls),
            "[TOOL_CALLS][{\"name\": \"get\", \"arguments\": {\"city\":\"Paris\"}}, {\"name\": \"put\", \"arguments\": {\"city\":\"Paris\"}}]"
        );
        assert!(ToolCallFormat::Hermes.instructions().contains("<tool_call>\n{\"name\": \"<function-name>\""));
    }
}
