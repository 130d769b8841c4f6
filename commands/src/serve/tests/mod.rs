//! In-process tests of the HTTP layer: a real server on a loopback port over a deterministic mock
//! engine (the bundled model's tokenizer, no weights), and a tiny HTTP/1.1 client.

mod anthropic;
mod client;
mod engine_failure;
mod errors;
mod grammar;
mod http;
mod lifecycle;
mod openai;
mod openapi;
mod prompt_bytes;
mod request_id;
mod response_cache;
mod responses;
mod sagemaker;
mod tgi;
mod tools;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tgi_engines::kv::{KvDType, KvRotation};
use tgi_engines::pooling::Pooling;
use tgi_engines::sampling::FinishReason;
use tgi_engines::sampling::StopMatcher;
use tgi_engines::scheduler::{
    Event, EventSink, Finished, Histogram, PromptLogprob, Request, Stats, SubmitError, TokenEvent,
};
use tgi_engines::text::chat::ChatTemplate;
use tgi_engines::text::tokenizer::{IncrementalDecoder, Tokenizer};

use super::backend::{Backend, Lexicon};
use super::limits::RequestLimits;
use super::openai::reasoning::ReasoningSettings;
use super::response_cache::{CacheConfig, ResponseCache};
use super::responses::store::ResponseStore;
use super::server::{serve, ConnectionLimits, Stopped};
use super::state::{Access, AppState, ServedModel};

/// What the mock generates: this text's tokens, then EOS.
const SCRIPT: &str = "Once upon a time there was a little friend named Lily.";

/// What the mock generates for a prompt containing `weather`: text, then a Hermes tool call.
const TOOL_SCRIPT: &str =
    "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

/// The bundled model's tokenizer with a small chat template.
pub(super) struct TestLexicon {
    tokenizer: Tokenizer,
    template: ChatTemplate,
    /// Calls of [`Lexicon::tokenizer`], to tell whether a request cost tokenizing work.
    tokenizer_calls: AtomicU64,
}

impl Lexicon for TestLexicon {
    fn tokenizer(&self) -> &Tokenizer {
        self.tokenizer_calls.fetch_add(1, Ordering::Relaxed);
        &self.tokenizer
    }

    fn chat_template(&self, _tools: bool) -> Option<&ChatTemplate> {
        Some(&self.template)
    }

    fn vocab_size(&self) -> usize {
        self.tokenizer.vocab_size()
    }

    fn eos(&self) -> &[u32] {
        self.tokenizer.eos_ids()
    }
}

/// The shared test lexicon (loaded once).
pub(super) fn lexicon() -> Arc<TestLexicon> {
    static LEX: OnceLock<Arc<TestLexicon>> = OnceLock::new();
    LEX.get_or_init(|| Arc::new(new_lexicon())).clone()
}

/// A test lexicon of its own (its tokenizer calls counted apart from other tests').
fn new_lexicon() -> TestLexicon {
    let path = crate::model_args::bundled_path().unwrap();
    let file = tgi_formats::GgufFile::open(&path).unwrap();
    let template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}\
                    {% if add_generation_prompt %}assistant:{% endif %}";
    TestLexicon {
        tokenizer: Tokenizer::from_gguf(&file).unwrap(),
        template: ChatTemplate::new(template, Some("<s>".into()), Some("</s>".into())).unwrap(),
        tokenizer_calls: AtomicU64::new(0),
    }
}

/// A deterministic engine: every request generates [`SCRIPT`]'s tokens (or [`TOOL_SCRIPT`]'s, for a prompt
/// containing `weather`) then EOS (stop strings and `max_new_tokens` honoured), one thread per request.
/// Prompts containing `slow` repeat the script without end, wait 20 ms per token and notice cancellation;
/// prompts containing `fail` fail after one token.
struct MockBackend {
    lexicon: Arc<TestLexicon>,
    /// Every request submitted.
    submitted: Mutex<Vec<Request>>,
    /// Requests that noticed their sink closed.
    cancelled: Arc<AtomicU64>,
}

impl Backend for MockBackend {
    fn submit(&self, req: Request, sink: Box<dyn EventSink>) -> Result<(), SubmitError> {
        self.submitted.lock().unwrap().push(req.clone());
        let (lex, cancelled) = (self.lexicon.clone(), self.cancelled.clone());
        std::thread::spawn(move || generate(&lex, req, sink, &cancelled));
        Ok(())
    }

    fn stats(&self) -> Stats {
        Stats {
            queue_size: 0,
            batch_size: 1,
            batch_tokens: 12,
            kv_blocks_total: 64,
            kv_blocks_used: 2,
            block_size: 16,
            prefix_cache_queries: 10,
            prefix_cache_hits: 4,
            preemptions: 0,
            cancelled: self.cancelled.load(Ordering::Relaxed),
            steps_prefill: 3,
            steps_decode: 9,
            prefill_tokens: 30,
            generated_tokens: 20,
            step_duration_decode: Histogram::exponential(0.001, 2.0, 4),
            step_duration_mixed: Histogram::exponential(0.001, 2.0, 4),
            step_duration_prefill: Histogram::exponential(0.001, 2.0, 4),
            step_prefill_tokens: Histogram::exponential(1.0, 2.0, 4),
            prefill_cap: 16,
            step_batch_size: Histogram::exponential(1.0, 2.0, 3),
            speculated_tokens: 0,
            speculative_accepted_tokens: 0,
            speculative_verifications: 0,
            speculated_by_position: Vec::new(),
            accepted_by_position: Vec::new(),
            grammar_mask_seconds: Histogram::exponential(1e-5, 2.0, 4),
            speculation_token_cost: 0.25,
            speculation_predicted_speedup: 1.5,
            speculation_held_steps: 3,
        }
    }
}

/// The mock's generation loop.
fn generate(lex: &TestLexicon, req: Request, mut sink: Box<dyn EventSink>, cancelled: &AtomicU64) {
    let tok = &lex.tokenizer;
    let prompt = tok.decode(&req.prompt_ids, true).unwrap_or_default();
    let (slow, fail) = (prompt.contains("slow"), prompt.contains("fail"));
    sink.send(Event::Started { queue_time: Duration::from_millis(1), cached_tokens: 2 });
    if req.pooling.is_some() {
        // An embedding of the prompt's length and first token.
        let (length, first) = (req.prompt_ids.len() as f32, req.prompt_ids[0] as f32);
        sink.send(Event::Finished(Finished {
            reason: FinishReason::Length,
            generated_tokens: 0,
            text: String::new(),
            stop_sequence: None,
            seed: 0,
            inference_time: Duration::from_millis(1),
            preemptions: 0,
            speculated_tokens: 0,
            accepted_tokens: 0,
            embedding: vec![length, first, 0.0],
        }));
        return;
    }
    if prompt.contains("hold") {
        // Holds its slot until the client goes away (at most a minute), however slow the test is.
        let until = std::time::Instant::now() + Duration::from_secs(60);
        while !sink.is_closed() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        cancelled.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if req.prompt_logprobs {
        let top = if req.params.logprobs { req.params.top_logprobs } else { 0 };
        let lp = (0..req.prompt_ids.len())
            .map(|i| {
                let logprob = -0.25 * i as f32;
                let top = (0..top).map(|k| (k as u32 + 2, logprob - k as f32)).collect();
                (i > 0).then_some(PromptLogprob { logprob, top })
            })
            .collect();
        sink.send(Event::PromptLogprobs(lp));
    }
    let script = tok.encode(if prompt.contains("weather") { TOOL_SCRIPT } else { SCRIPT }, false, false).unwrap();
    let eos = tok.eos_ids()[0];
    let seed = req.params.seed.unwrap_or(7);
    let mut decoder = IncrementalDecoder::new(tok);
    let mut stops = StopMatcher::new(req.stop.clone());
    let mut text = String::new();
    for i in 0..req.max_new_tokens {
        if slow {
            std::thread::sleep(Duration::from_millis(20));
            if sink.is_closed() {
                cancelled.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        if fail && i == 1 {
            sink.send(Event::Failed("mock failure".into()));
            return;
        }
        let (id, special) = if i < script.len() || slow { (script[i % script.len()], false) } else { (eos, true) };
        let piece = if special { String::new() } else { decoder.push(id).unwrap_or_default() };
        let step = if special { Default::default() } else { stops.push(&piece) };
        let last = special || step.stop.is_some() || i + 1 == req.max_new_tokens;
        let mut emitted = step.text;
        if last && step.stop.is_none() {
            emitted.push_str(&stops.flush());
        }
        text.push_str(&emitted);
        let logprob = -(((seed as usize + i) % 7) as f32) / 10.0 - 0.05;
        let top = (0..req.params.top_logprobs).map(|k| (id + k as u32, logprob - k as f32)).collect();
        sink.send(Event::Token(TokenEvent { id, logprob, top, piece, text: emitted, special }));
        if last {
            let reason = match (special, &step.stop) {
                (true, _) => FinishReason::EosToken,
                (_, Some(_)) => FinishReason::StopSequence,
                _ => FinishReason::Length,
            };
            sink.send(Event::Finished(Finished {
                reason,
                generated_tokens: i + 1,
                text,
                stop_sequence: step.stop,
                seed,
                inference_time: Duration::from_millis(5),
                preemptions: 0,
                speculated_tokens: 0,
                accepted_tokens: 0,
                embedding: Vec::new(),
            }));
            return;
        }
    }
}

/// Limits for the tests: 512-token context like the bundled model, few requests in flight.
fn limits() -> RequestLimits {
    RequestLimits {
        max_concurrent_requests: 8,
        max_best_of: 2,
        max_stop_sequences: 4,
        max_top_n_tokens: 5,
        max_input_tokens: 64,
        max_total_tokens: 96,
        max_n: 4,
        payload_limit: 4096,
        request_timeout: None,
        body_timeout: Duration::from_secs(30),
        max_batch_total_tokens: 1024,
    }
}

/// A server on a loopback port over a fresh mock engine; stopped when dropped.
struct TestServer {
    addr: SocketAddr,
    mock: Arc<MockBackend>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Stopped>>,
}

impl TestServer {
    /// A server with the test limits and open access.
    fn start() -> Self {
        Self::with(limits(), Access::default())
    }

    /// A server with these limits and access rules.
    fn with(limits: RequestLimits, access: Access) -> Self {
        Self::build(limits, access, lexicon(), 64, None, ResponseStore::default())
    }

    /// A server with these limits, open access and this store of responses.
    fn with_store(limits: RequestLimits, store: ResponseStore) -> Self {
        Self::build(limits, Access::default(), lexicon(), 64, None, store)
    }

    /// A server with these limits and access rules serving at most `max_connections` connections as usual.
    fn bounded(limits: RequestLimits, access: Access, max_connections: usize) -> Self {
        Self::build(limits, access, lexicon(), max_connections, None, ResponseStore::default())
    }

    /// A server with these limits and access rules over `lex`.
    fn with_lexicon(limits: RequestLimits, access: Access, lex: Arc<TestLexicon>) -> Self {
        Self::build(limits, access, lex, 64, None, ResponseStore::default())
    }

    /// A server with the test limits, these access rules and a response cache.
    fn cached(access: Access, cache: CacheConfig) -> Self {
        Self::build(limits(), access, lexicon(), 64, Some(cache), ResponseStore::default())
    }

    /// A server over `lex` with these limits, access rules, connection bound, response cache and store of
    /// responses.
    fn build(
        limits: RequestLimits,
        access: Access,
        lex: Arc<TestLexicon>,
        max_connections: usize,
        cache: Option<CacheConfig>,
        store: ResponseStore,
    ) -> Self {
        let mock =
            Arc::new(MockBackend { lexicon: lex.clone(), submitted: Mutex::default(), cancelled: Arc::default() });
        let model = ServedModel {
            id: "stories260k".into(),
            compute_type: "cpu".into(),
            created: 1,
            speculate: None,
            tool_call_parser: None,
            kv_budget: "--max-batch-total-tokens".into(),
            kv_dtype: KvDType::F16,
            kv_rotation: KvRotation::OFF,
            reasoning: ReasoningSettings::default(),
            pooling: Pooling::Mean,
            embedding_size: 3,
        };
        let state = AppState::new(mock.clone(), lex, limits, access, model);
        let state = Arc::new(state.with_response_cache(cache.map(ResponseCache::new)).with_responses_store(store));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(listener.local_addr().unwrap()).unwrap();
                let shutdown = async {
                    let _ = stopped.await;
                };
                let conns = ConnectionLimits { max_connections, grace: Duration::from_secs(5), drain: Duration::ZERO };
                serve(listener, state, shutdown, conns).await
            })
        });
        let addr = addr_rx.recv().unwrap();
        TestServer { addr, mock, stop: Some(stop), thread: Some(thread) }
    }

    /// Stops the server and waits for it.
    fn shutdown(mut self) -> Stopped {
        let _ = self.stop.take().unwrap().send(());
        self.thread.take().unwrap().join().unwrap()
    }

    /// Requests the mock received.
    fn submitted(&self) -> Vec<Request> {
        self.mock.submitted.lock().unwrap().clone()
    }

    /// Waits until the mock saw `n` cancellations (up to a minute).
    fn wait_cancelled(&self, n: u64) -> bool {
        within_a_minute(|| self.mock.cancelled.load(Ordering::Relaxed) >= n)
    }

    /// Waits until the mock received `n` requests (up to a minute).
    fn wait_submitted(&self, n: usize) -> bool {
        within_a_minute(|| self.mock.submitted.lock().unwrap().len() >= n)
    }
}

/// Whether `done` holds within a minute (generous: the whole suite shares two cores), polled every 10 ms.
fn within_a_minute(done: impl Fn() -> bool) -> bool {
    let until = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if done() {
            return true;
        }
        if std::time::Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
