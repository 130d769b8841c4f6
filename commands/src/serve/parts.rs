//! An answer as Anthropic's Messages API and OpenAI's Responses API show it: a list of parts, each a thinking
//! block, text or a tool call, in the order the model wrote them. A whole answer's parts come from its [`Reply`]; a streamed
//! answer's from the chat path's deltas ([`Parts`]), as steps: a part opens, grows, and closes whole.

use super::openai::tools::Reply;
use super::openai::types::Delta;

/// One part of an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// A reasoning model's thinking block (split out of the answer as chat completions' `reasoning_content`).
    Thinking(String),
    /// Text.
    Text(String),
    /// A tool call.
    Call {
        /// The call's id.
        id: String,
        /// The function called.
        name: String,
        /// Its arguments' JSON text (as far as the model wrote them, when the answer was cut short).
        arguments: String,
    },
}

impl Part {
    /// The parts of a whole answer: its thinking and its text (each when there is any), then its calls.
    pub fn of(thought: Option<String>, reply: Reply) -> Vec<Part> {
        let thinking = thought.filter(|t| !t.is_empty()).map(Part::Thinking);
        let text = reply.content.filter(|t| !t.is_empty()).map(Part::Text);
        let calls = reply.tool_calls.into_iter().map(|c| Part::Call {
            id: c.id.unwrap_or_default(),
            name: c.function.name,
            arguments: c.function.arguments.as_str().unwrap_or_default().to_string(),
        });
        thinking.into_iter().chain(text).chain(calls).collect()
    }
}

/// What a streamed answer did next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A part opens: empty thinking or text, or a call with its id and name and no arguments yet.
    Open(Part),
    /// More text of the open thinking part.
    Thinking(String),
    /// More text of the open text part.
    Text(String),
    /// More arguments of the open call.
    Arguments(String),
    /// The open part closes; here whole.
    Close(Part),
}

/// A streamed answer's parts: OpenAI's chat deltas in, [`Step`]s out.
#[derive(Debug, Default)]
pub struct Parts {
    /// The part open now, as far as it got.
    open: Option<Part>,
}

impl Parts {
    /// The steps of more deltas.
    pub fn feed(&mut self, deltas: Vec<Delta>) -> Vec<Step> {
        let mut steps = Vec::new();
        for d in deltas {
            if let Some(text) = d.reasoning_content.filter(|t| !t.is_empty()) {
                if !matches!(self.open, Some(Part::Thinking(_))) {
                    steps.extend(self.close());
                    steps.push(self.begin(Part::Thinking(String::new())));
                }
                if let Some(Part::Thinking(t)) = &mut self.open {
                    t.push_str(&text);
                }
                steps.push(Step::Thinking(text));
            }
            if let Some(text) = d.content.filter(|t| !t.is_empty()) {
                if !matches!(self.open, Some(Part::Text(_))) {
                    steps.extend(self.close());
                    steps.push(self.begin(Part::Text(String::new())));
                }
                if let Some(Part::Text(t)) = &mut self.open {
                    t.push_str(&text);
                }
                steps.push(Step::Text(text));
            }
            for call in d.tool_calls.into_iter().flatten() {
                if let Some(name) = call.function.name {
                    steps.extend(self.close());
                    let id = call.id.unwrap_or_default();
                    steps.push(self.begin(Part::Call { id, name, arguments: String::new() }));
                }
                let more = call.function.arguments;
                if let (Some(Part::Call { arguments, .. }), false) = (&mut self.open, more.is_empty()) {
                    arguments.push_str(&more);
                    steps.push(Step::Arguments(more));
                }
            }
        }
        steps
    }

    /// Closes the open part, if any (at the answer's end).
    pub fn close(&mut self) -> Option<Step> {
        self.open.take().map(Step::Close)
    }

    fn begin(&mut self, part: Part) -> Step {
        self.open = Some(part.clone());
        Step::Open(part)
    }
}

#[cfg(test)]
mod tests {
    use tgi_engines::text::chat::{FunctionCall, ToolCall};

    use super::*;
    use crate::serve::openai::types::{FunctionDelta, ToolCallDelta};

    fn call(id: Option<&str>, name: Option<&str>, arguments: &str) -> Delta {
        Delta::tool_call(ToolCallDelta {
            index: 0,
            id: id.map(str::to_string),
            kind: id.map(|_| "function"),
            function: FunctionDelta { name: name.map(str::to_string), arguments: arguments.into() },
        })
    }

    #[test]
    fn deltas_become_parts_that_open_grow_and_close() {
        let mut p = Parts::default();
        let mut steps = p.feed(vec![Delta::reasoning("Hmm".into()), Delta::reasoning(".".into())]);
        steps.extend(p.feed(vec![Delta::content(String::new()), Delta::content("Hi".into())]));
        steps.extend(p.feed(vec![Delta::content(" there".into()), call(Some("c1"), Some("f"), "")]));
        steps.extend(p.feed(vec![call(None, None, "{\"a\""), call(None, None, ": 1}")]));
        steps.extend(p.close());
        assert_eq!(p.close(), None);
        let f = |args: &str| Part::Call { id: "c1".into(), name: "f".into(), arguments: args.into() };
        assert_eq!(
            steps,
            [
                Step::Open(Part::Thinking(String::new())),
                Step::Thinking("Hmm".into()),
                Step::Thinking(".".into()),
                Step::Close(Part::Thinking("Hmm.".into())),
                Step::Open(Part::Text(String::new())),
                Step::Text("Hi".into()),
                Step::Text(" there".into()),
                Step::Close(Part::Text("Hi there".into())),
                Step::Open(f("")),
                Step::Arguments("{\"a\"".into()),
                Step::Arguments(": 1}".into()),
                Step::Close(f("{\"a\": 1}")),
            ]
        );
    }

    #[test]
    fn a_whole_reply_is_its_thinking_its_text_then_its_calls() {
        let tool_call = ToolCall {
            id: Some("c1".into()),
            kind: "function".into(),
            function: FunctionCall { name: "f".into(), arguments: "{}".into() },
        };
        let reply = Reply { content: Some("Hi".into()), tool_calls: vec![tool_call], finish_reason: "tool_calls" };
        let call = Part::Call { id: "c1".into(), name: "f".into(), arguments: "{}".into() };
        let thought = Some("Use f.".to_string());
        assert_eq!(Part::of(thought, reply), [Part::Thinking("Use f.".into()), Part::Text("Hi".into()), call]);
        let empty = Reply { content: Some(String::new()), tool_calls: Vec::new(), finish_reason: "length" };
        assert_eq!(Part::of(Some(String::new()), empty), []);
    }
}
