//! A streamed Messages answer as Anthropic's named events: `message_start` (the message with no content) and a
//! `ping` when generation starts; per part of the answer `content_block_start`, `content_block_delta`s
//! (`thinking_delta`, `text_delta`, or `input_json_delta` for a call's arguments) and `content_block_stop`; then `message_delta`
//! (the stop reason and output tokens) and `message_stop`. A failure is an `error` event.

use serde_json::{json, Value};
use tgi_engines::scheduler::{Finished, TokenEvent};

use super::types::{MessageResponse, OutBlock};
use super::{stop_reason, stop_sequence};
use crate::serve::error::{ApiError, Family};
use crate::serve::openai::conversation::StreamedAnswer;
use crate::serve::parts::{Part, Parts, Step};
use crate::serve::stream::{Sse, StreamFormat};

/// The events of one streamed answer.
pub struct MessagesStream {
    /// The message as `message_start` shows it.
    message: MessageResponse,
    answer: StreamedAnswer,
    parts: Parts,
    /// Content blocks opened so far.
    blocks: usize,
}

impl MessagesStream {
    /// The stream of `message`'s answer, read by `answer`.
    pub fn new(message: MessageResponse, answer: StreamedAnswer) -> Self {
        MessagesStream { message, answer, parts: Parts::default(), blocks: 0 }
    }

    /// The events of `steps`.
    fn events(&mut self, steps: impl IntoIterator<Item = Step>) -> Vec<Sse> {
        steps
            .into_iter()
            .map(|step| match step {
                Step::Open(part) => {
                    self.blocks += 1;
                    let block = match part {
                        Part::Thinking(thinking) => OutBlock::Thinking { thinking, signature: String::new() },
                        Part::Text(text) => OutBlock::Text { text },
                        Part::Call { id, name, .. } => OutBlock::ToolUse { id, name, input: json!({}) },
                    };
                    event("content_block_start", json!({"index": self.index(), "content_block": block}))
                }
                Step::Thinking(text) => delta(self.index(), json!({"type": "thinking_delta", "thinking": text})),
                Step::Text(text) => delta(self.index(), json!({"type": "text_delta", "text": text})),
                Step::Arguments(more) => delta(self.index(), json!({"type": "input_json_delta", "partial_json": more})),
                Step::Close(_) => event("content_block_stop", json!({"index": self.index()})),
            })
            .collect()
    }

    /// The open block's index.
    fn index(&self) -> usize {
        self.blocks - 1
    }
}

/// An event: `fields` with its `type`.
fn event(name: &'static str, mut fields: Value) -> Sse {
    fields["type"] = Value::from(name);
    Sse::named(name, fields.to_string())
}

/// A `content_block_delta` of block `index`.
fn delta(index: usize, delta: Value) -> Sse {
    event("content_block_delta", json!({"index": index, "delta": delta}))
}

impl StreamFormat for MessagesStream {
    type Event = Sse;

    fn started(&mut self, _index: usize, cached_tokens: usize) -> Vec<Sse> {
        self.message.usage.cache_read_input_tokens = cached_tokens;
        let start = event("message_start", json!({"message": self.message}));
        vec![start, event("ping", json!({}))]
    }

    fn token(&mut self, _index: usize, token: TokenEvent) -> Vec<Sse> {
        let steps = self.parts.feed(self.answer.feed(&token.text));
        self.events(steps)
    }

    fn finished(&mut self, _index: usize, f: Finished) -> Vec<Sse> {
        let (deltas, reason) = self.answer.finish(&f);
        let mut steps = self.parts.feed(deltas);
        steps.extend(self.parts.close());
        let mut out = self.events(steps);
        let (stop_reason, output_tokens) = (stop_reason(reason, &f), f.generated_tokens);
        let delta = json!({"stop_reason": stop_reason, "stop_sequence": stop_sequence(stop_reason, f)});
        out.push(event("message_delta", json!({"delta": delta, "usage": {"output_tokens": output_tokens}})));
        out.push(event("message_stop", json!({})));
        out
    }

    fn end(&mut self) -> Vec<Sse> {
        Vec::new()
    }

    fn error(&self, err: &ApiError) -> Sse {
        Sse::named("error", err.render(Family::Anthropic).1.to_string())
    }
}
