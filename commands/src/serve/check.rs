//! Request bodies answered as `tgi serve` answers them, without a socket or an engine: the route's
//! own handler parses and validates the body, and submitting to the engine is refused. The fuzz
//! targets (`fuzz/`) drive the validation of every generation route through it.

use std::sync::Arc;

use anyhow::Result;
use tgi_engines::device::DeviceSpec;
use tgi_engines::kv::{KvDType, KvRotation};
use tgi_engines::scheduler::{EventSink, Request, SchedulerConfig, Stats, SubmitError};
use tgi_engines::text::chat::ChatTemplate;
use tgi_engines::text::tokenizer::Tokenizer;

use super::backend::{Backend, Lexicon};
use super::budget::{size, SizingInputs};
use super::error::Family;
use super::router::{answer, Handler, ROUTES};
use super::settings::ServeSettings;
use super::state::{AppState, ServedModel};

/// A route whose request body carries what the model is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// `POST /`.
    Compat,
    /// `POST /generate`.
    Generate,
    /// `POST /generate_stream`.
    GenerateStream,
    /// `POST /tokenize`.
    Tokenize,
    /// `POST /chat_tokenize`.
    ChatTokenize,
    /// `POST /invocations`.
    Invocations,
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/messages` (Anthropic).
    Messages,
    /// `POST /v1/messages/count_tokens` (Anthropic).
    CountTokens,
    /// `POST /v1/responses` (OpenAI Responses).
    Responses,
}

/// Answers request bodies with the server's handlers over a tokenizer and chat template, with an
/// engine that refuses every request.
pub struct RequestChecker {
    state: Arc<AppState>,
    runtime: tokio::runtime::Runtime,
}

impl RequestChecker {
    /// A checker with the limits `settings` give a model of `context` tokens.
    pub fn new(
        settings: &ServeSettings,
        context: usize,
        tokenizer: Tokenizer,
        chat_template: Option<ChatTemplate>,
    ) -> Result<Self> {
        let inputs =
            SizingInputs { context, kv_bytes_per_token: 1, memory: None, device: DeviceSpec::Cpu, lora_reserved: 0 };
        let sizes = size(settings, &inputs)?;
        let model = ServedModel {
            id: "checker".into(),
            compute_type: "cpu".into(),
            created: 0,
            speculate: None,
            tool_call_parser: settings.tool_call_parser,
            kv_budget: sizes.kv_budget.to_string(),
            // No model, no cache: the default type, unrotated.
            kv_dtype: KvDType::F16,
            kv_rotation: KvRotation::OFF,
            reasoning: settings.reasoning,
            pooling: settings.pooling,
            // No model: no `dimensions` is its size.
            embedding_size: 0,
        };
        let lexicon = Arc::new(CheckerLexicon { tokenizer, chat_template });
        let state = AppState::new(Arc::new(NoEngine), lexicon, sizes.limits, settings.access.clone(), model)
            .with_grammars(settings.grammar);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        Ok(RequestChecker { state: Arc::new(state), runtime })
    }

    /// The status `route` answers `raw` with: 503 when it passed validation (200 for a stream,
    /// which reports the refusal in its first event).
    pub fn status(&self, route: Route, raw: &[u8]) -> u16 {
        let handler = match route {
            Route::Compat => Handler::Compat,
            Route::Generate => Handler::Generate,
            Route::GenerateStream => Handler::GenerateStream,
            Route::Tokenize => Handler::Tokenize,
            Route::ChatTokenize => Handler::ChatTokenize,
            Route::Invocations => Handler::Invocations,
            Route::Completions => Handler::Completions,
            Route::Chat => Handler::Chat,
            Route::Messages => Handler::Messages,
            Route::CountTokens => Handler::CountTokens,
            Route::Responses => Handler::Responses,
        };
        let path = ROUTES.iter().find(|r| r.handler == handler).map_or("/", |r| r.path);
        let answer = self.runtime.block_on(answer(&self.state, handler, path, raw));
        match answer {
            Ok(response) => response.status().as_u16(),
            Err(e) => e.render(Family::of(path)).0.as_u16(),
        }
    }
}

/// The tokenizer and chat template a [`RequestChecker`] validates with.
struct CheckerLexicon {
    tokenizer: Tokenizer,
    chat_template: Option<ChatTemplate>,
}

impl Lexicon for CheckerLexicon {
    fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    fn chat_template(&self, _tools: bool) -> Option<&ChatTemplate> {
        self.chat_template.as_ref()
    }

    fn vocab_size(&self) -> usize {
        self.tokenizer.vocab_size()
    }

    fn eos(&self) -> &[u32] {
        self.tokenizer.eos_ids()
    }
}

/// An engine that is not running: every submission is refused.
struct NoEngine;

impl Backend for NoEngine {
    fn submit(&self, _req: Request, _sink: Box<dyn EventSink>) -> Result<(), SubmitError> {
        Err(SubmitError::NotRunning)
    }

    fn stats(&self) -> Stats {
        Stats::new(&SchedulerConfig::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::settings::tests::settings;

    fn checker() -> RequestChecker {
        let path = crate::model_args::bundled_path().unwrap();
        let tokenizer = Tokenizer::from_gguf(&tgi_formats::GgufFile::open(&path).unwrap()).unwrap();
        let template = ChatTemplate::new("{% for m in messages %}{{ m.content }}{% endfor %}", None, None).unwrap();
        RequestChecker::new(&settings(&[]).unwrap(), 64, tokenizer, Some(template)).unwrap()
    }

    #[test]
    fn valid_bodies_reach_the_engine_and_invalid_ones_do_not() {
        let c = checker();
        assert_eq!(c.status(Route::Generate, br#"{"inputs": "Once upon a time"}"#), 503);
        assert_eq!(c.status(Route::Chat, br#"{"messages": [{"role": "user", "content": "Hi"}]}"#), 503);
        assert_eq!(c.status(Route::Completions, br#"{"prompt": "Once", "max_tokens": 4}"#), 503);
        assert_eq!(c.status(Route::Tokenize, br#"{"inputs": "Once"}"#), 200);
        assert_eq!(c.status(Route::GenerateStream, br#"{"inputs": "Once"}"#), 200);
        assert_eq!(c.status(Route::Generate, br#"{"inputs": ""}"#), 422);
        assert_eq!(c.status(Route::Compat, b"{"), 422);
        assert_eq!(c.status(Route::Chat, br#"{"messages": []}"#), 422);
        assert_eq!(c.status(Route::ChatTokenize, br#"{"messages": [{"role": "user", "content": "Hi"}]}"#), 200);
        assert_eq!(c.status(Route::Invocations, br#"{"messages": [{"role": "user", "content": "Hi"}]}"#), 503);
        assert_eq!(c.status(Route::Invocations, br#"{"inputs": "Once"}"#), 503);
        assert_eq!(c.status(Route::Invocations, br#"{"parameters": {}}"#), 422);
        let hi = br#"{"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}"#;
        assert_eq!(c.status(Route::Messages, hi), 503);
        assert_eq!(c.status(Route::Messages, br#"{"max_tokens": 4, "messages": []}"#), 400);
        assert_eq!(c.status(Route::CountTokens, br#"{"messages": [{"role": "user", "content": "Hi"}]}"#), 200);
        assert_eq!(c.status(Route::Responses, br#"{"input": "Hi"}"#), 503);
        assert_eq!(c.status(Route::Responses, br#"{"input": 3}"#), 422);
    }
}
