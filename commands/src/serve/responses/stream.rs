//! A streamed response as OpenAI's typed events, each with its `sequence_number`: `response.created` and
//! `response.in_progress` when generation starts; per part of the answer `response.output_item.added`, then for
//! thinking `response.reasoning_text.delta`s and `.done`, for text `response.content_part.added`, `response.output_text.delta`s, `response.output_text.done` and
//! `response.content_part.done`, for a call `response.function_call_arguments.delta`s and `.done`, then
//! `response.output_item.done`; and `response.completed` (or `response.incomplete`, cut by
//! `max_output_tokens`), once the response is stored. A failure is an `error` event.

use serde_json::{json, Value};
use tgi_engines::scheduler::{Finished, TokenEvent};

use super::types::{OutputItem, OutputText};
use super::{item_id, Draft};
use crate::serve::error::ApiError;
use crate::serve::openai::conversation::StreamedAnswer;
use crate::serve::parts::{Part, Parts, Step};
use crate::serve::stream::{Sse, StreamFormat};

/// The events of one streamed response.
pub struct ResponsesStream {
    draft: Draft,
    answer: StreamedAnswer,
    parts: Parts,
    /// The items done so far.
    output: Vec<OutputItem>,
    /// The id of the item being written.
    open: String,
    /// Prompt tokens served from the prefix cache.
    cached_tokens: usize,
    /// The next event's `sequence_number`.
    sequence: u64,
}

impl ResponsesStream {
    /// The stream of `draft`'s answer, read by `answer`.
    pub fn new(draft: Draft, answer: StreamedAnswer) -> Self {
        ResponsesStream {
            draft,
            answer,
            parts: Parts::default(),
            output: Vec::new(),
            open: String::new(),
            cached_tokens: 0,
            sequence: 0,
        }
    }

    /// An event: `fields` with its `type` and `sequence_number`.
    fn event(&mut self, name: &'static str, mut fields: Value) -> Sse {
        fields["type"] = Value::from(name);
        fields["sequence_number"] = Value::from(self.sequence);
        self.sequence += 1;
        Sse::named(name, fields.to_string())
    }

    /// The events of `steps`; parts that close now end as `status`.
    fn events(&mut self, steps: Vec<Step>, status: &'static str) -> Vec<Sse> {
        let mut out = Vec::new();
        for step in steps {
            let (index, id) = (self.output.len(), self.open.clone());
            let at = json!({"item_id": id, "output_index": index});
            match step {
                Step::Open(part) => {
                    self.open = item_id(&part);
                    let item = super::item(self.open.clone(), part, "in_progress");
                    let text = matches!(item, OutputItem::Message { .. });
                    out.push(self.event("response.output_item.added", json!({"output_index": index, "item": item})));
                    if text {
                        let fields = json!({"item_id": self.open, "output_index": index, "content_index": 0,
                            "part": OutputText::new(String::new())});
                        out.push(self.event("response.content_part.added", fields));
                    }
                }
                Step::Thinking(delta) => {
                    let fields = with(at, json!({"content_index": 0, "delta": delta}));
                    out.push(self.event("response.reasoning_text.delta", fields));
                }
                Step::Text(delta) => {
                    let fields = with(at, json!({"content_index": 0, "delta": delta, "logprobs": []}));
                    out.push(self.event("response.output_text.delta", fields));
                }
                Step::Arguments(delta) => {
                    out.push(self.event("response.function_call_arguments.delta", with(at, json!({"delta": delta}))));
                }
                Step::Close(part) => {
                    match &part {
                        Part::Thinking(text) => {
                            let done = json!({"content_index": 0, "text": text});
                            out.push(self.event("response.reasoning_text.done", with(at, done)));
                        }
                        Part::Text(text) => {
                            let done = json!({"content_index": 0, "text": text, "logprobs": []});
                            out.push(self.event("response.output_text.done", with(at.clone(), done)));
                            let part = json!({"content_index": 0, "part": OutputText::new(text.clone())});
                            out.push(self.event("response.content_part.done", with(at, part)));
                        }
                        Part::Call { name, arguments, .. } => {
                            let done = json!({"name": name, "arguments": arguments});
                            out.push(self.event("response.function_call_arguments.done", with(at, done)));
                        }
                    }
                    let item = super::item(id, part, status);
                    out.push(self.event("response.output_item.done", json!({"output_index": index, "item": item})));
                    self.output.push(item);
                }
            }
        }
        out
    }
}

/// `fields` added to the object `base`.
fn with(mut base: Value, fields: Value) -> Value {
    if let (Some(b), Value::Object(f)) = (base.as_object_mut(), fields) {
        b.extend(f);
    }
    base
}

impl StreamFormat for ResponsesStream {
    type Event = Sse;

    fn started(&mut self, _index: usize, cached_tokens: usize) -> Vec<Sse> {
        self.cached_tokens = cached_tokens;
        let response = json!({"response": self.draft.object});
        vec![self.event("response.created", response.clone()), self.event("response.in_progress", response)]
    }

    fn token(&mut self, _index: usize, token: TokenEvent) -> Vec<Sse> {
        let steps = self.parts.feed(self.answer.feed(&token.text));
        self.events(steps, "completed")
    }

    fn finished(&mut self, _index: usize, f: Finished) -> Vec<Sse> {
        let (deltas, _) = self.answer.finish(&f);
        let mut steps = self.parts.feed(deltas);
        steps.extend(self.parts.close());
        let mut out = self.events(steps, super::status(&f));
        let output = std::mem::take(&mut self.output);
        let response = self.draft.finish(output, &f, self.cached_tokens, f.generated_tokens);
        let name = if response.status == "completed" { "response.completed" } else { "response.incomplete" };
        out.push(self.event(name, json!({"response": response})));
        out
    }

    fn end(&mut self) -> Vec<Sse> {
        Vec::new()
    }

    fn error(&self, err: &ApiError) -> Sse {
        let e = err.openai_body()["error"].clone();
        let fields = json!({"type": "error", "code": e["code"], "message": e["message"], "param": e["param"],
            "sequence_number": self.sequence});
        Sse::named("error", fields.to_string())
    }
}
