//! The seam between HTTP and the engine: [`Backend`] runs validated requests, [`Lexicon`] turns text
//! into tokens and back, and [`ChannelSink`] carries a request's events to the task serving it.

use tgi_engines::model::LoadedModel;
use tgi_engines::scheduler::{Event, EventSink, Request, SchedulerHandle, Stats, SubmitError};
use tgi_engines::text::chat::ChatTemplate;
use tgi_engines::text::tokenizer::Tokenizer;
use tokio::sync::mpsc::UnboundedSender;

/// What the HTTP layer needs from the engine.
pub trait Backend: Send + Sync {
    /// Queues a request; its events go to `sink` until it finishes or the sink closes.
    fn submit(&self, req: Request, sink: Box<dyn EventSink>) -> Result<(), SubmitError>;
    /// A snapshot of the engine's counters, for `/metrics`.
    fn stats(&self) -> Stats;
}

impl Backend for SchedulerHandle {
    fn submit(&self, req: Request, sink: Box<dyn EventSink>) -> Result<(), SubmitError> {
        SchedulerHandle::submit(self, req, sink)
    }

    fn stats(&self) -> Stats {
        SchedulerHandle::stats(self)
    }
}

/// The model's text side: its tokenizer and chat template.
pub trait Lexicon: Send + Sync {
    /// The tokenizer.
    fn tokenizer(&self) -> &Tokenizer;
    /// The chat template for a request with or without tools, when the model ships one.
    fn chat_template(&self, tools: bool) -> Option<&ChatTemplate>;
    /// Entries of the model's logits (at least the tokenizer's vocabulary).
    fn vocab_size(&self) -> usize;
    /// The tokens that end generation.
    fn eos(&self) -> &[u32];

    /// A token's text on its own (invalid UTF-8 replaced), for token lists.
    fn piece(&self, id: u32) -> String {
        String::from_utf8_lossy(&self.tokenizer().token_to_piece(id)).into_owned()
    }

    /// Whether a token is a control token (BOS, EOS, chat markers).
    fn is_special(&self, id: u32) -> bool {
        let t = self.tokenizer();
        t.is_control(id) || t.bos_id() == Some(id) || t.eos_ids().contains(&id)
    }
}

impl Lexicon for LoadedModel {
    fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    fn chat_template(&self, tools: bool) -> Option<&ChatTemplate> {
        self.chat_templates.get(tools)
    }

    fn vocab_size(&self) -> usize {
        self.model.config().vocab
    }

    fn eos(&self) -> &[u32] {
        &self.eos
    }
}

/// Sends one candidate's events, tagged with its index, into a channel that all candidates of an
/// HTTP request share; closed once the receiver is dropped (client gone, timed out), which cancels
/// every candidate inside the engine.
pub struct ChannelSink {
    /// The candidate's index within its HTTP request.
    index: usize,
    /// Where events go.
    tx: UnboundedSender<(usize, Event)>,
}

impl ChannelSink {
    /// A sink for candidate `index`.
    pub fn new(index: usize, tx: UnboundedSender<(usize, Event)>) -> Self {
        ChannelSink { index, tx }
    }
}

impl EventSink for ChannelSink {
    fn send(&mut self, event: Event) -> bool {
        self.tx.send((self.index, event)).is_ok()
    }

    fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sink_closes_with_its_receiver() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut sink = ChannelSink::new(3, tx);
        assert!(sink.send(Event::Failed("x".into())));
        assert_eq!(rx.try_recv().unwrap(), (3, Event::Failed("x".into())));
        assert!(!sink.is_closed());
        drop(rx);
        assert!(sink.is_closed());
        assert!(!sink.send(Event::Failed("y".into())));
    }
}
