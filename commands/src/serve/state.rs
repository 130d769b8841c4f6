//! What every handler shares: the engine, the model's text side, the limits, the metrics, the
//! concurrency permits and the access rules.

use std::hash::{Hash, Hasher};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use hyper::header::AUTHORIZATION;
use hyper::HeaderMap;
use tgi_engines::kv::{KvDType, KvRotation};
use tgi_engines::pooling::Pooling;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use super::backend::{Backend, Lexicon};
use super::error::ApiError;
use super::grammar::{GrammarSettings, Grammars};
use super::limits::{PromptBytes, RequestLimits};
use super::lora::Loras;
use super::metrics::Metrics;
use super::openai::reasoning::ReasoningSettings;
use super::openai::tools::ToolCallFormat;
use super::response_cache::ResponseCache;
use super::responses::store::ResponseStore;

/// The server's shared state.
pub struct AppState {
    /// Runs requests.
    pub backend: Arc<dyn Backend>,
    /// Tokenizer and chat template.
    pub lexicon: Arc<dyn Lexicon>,
    /// Per-request budgets.
    pub limits: RequestLimits,
    /// The longest prompt worth tokenizing.
    pub prompt_bytes: PromptBytes,
    /// Request metrics.
    pub metrics: Arc<Metrics>,
    /// One permit per request in flight (`--max-concurrent-requests`).
    pub permits: Arc<Semaphore>,
    /// API key and CORS.
    pub access: Access,
    /// The model as the API names it.
    pub model: ServedModel,
    /// Whether the last generation succeeded; when not, `/health` runs a one-token generation.
    pub healthy: AtomicBool,
    /// Set once the server stops accepting; cuts request bodies still arriving.
    pub stopping: Stopping,
    /// Set on SIGTERM/SIGINT, from when `/health` answers 503 (the drain delay, then the grace period).
    pub draining: AtomicBool,
    /// The response cache, when `--response-cache-size` turns it on.
    pub response_cache: Option<Arc<ResponseCache>>,
    /// The grammar compiler and its threads.
    pub grammars: Grammars,
    /// Whether `GET /` serves the web chat page to browsers (off unless [`AppState::with_webui`] turns it on).
    pub webui: bool,
    /// The Responses API's stored responses.
    pub responses: ResponseStore,
    /// The LoRA adapters served beside the model.
    pub loras: Arc<Loras>,
}

/// Whether the server is stopping: begun once by the accept loop, awaited by body reads (a request
/// whose body is still arriving is not in flight yet, so a graceful stop does not wait for it).
#[derive(Debug)]
pub struct Stopping(watch::Sender<bool>);

impl Stopping {
    /// Not stopping yet.
    pub fn new() -> Self {
        Stopping(watch::channel(false).0)
    }

    /// Marks the server as stopping.
    pub fn begin(&self) {
        self.0.send_replace(true);
    }

    /// Resolves once the server is stopping.
    pub async fn begun(&self) {
        let _ = self.0.subscribe().wait_for(|s| *s).await;
    }
}

impl Default for Stopping {
    fn default() -> Self {
        Self::new()
    }
}

/// Who may call what.
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// The key generation routes require as `Authorization: Bearer <key>` or `x-api-key: <key>` (Anthropic's).
    pub api_key: Option<String>,
    /// Origins allowed by CORS (`*` for any); empty disables CORS headers.
    pub cors_allow_origin: Vec<String>,
}

/// How the API describes the model.
#[derive(Clone, Debug)]
pub struct ServedModel {
    /// The model id (`/info`'s `model_id`, OpenAI's `model`).
    pub id: String,
    /// `x-compute-type`: the device.
    pub compute_type: String,
    /// When the server started, Unix seconds (OpenAI's `created` of the model).
    pub created: u64,
    /// Most tokens drafted per sequence and step when speculative decoding is on.
    pub speculate: Option<usize>,
    /// The tool-call format `--tool-call-parser` sets; `None`: the chat template's family.
    pub tool_call_parser: Option<ToolCallFormat>,
    /// What sized the KV cache, in words (`/info`'s `kv_cache_budget`).
    pub kv_budget: String,
    /// The KV cache's element type (`/info`'s `kv_cache_dtype`).
    pub kv_dtype: KvDType,
    /// The KV cache's Hadamard rotation (`/info`'s `kv_cache_rotation`: whether it is on).
    pub kv_rotation: KvRotation,
    /// How chat answers' thinking is returned and bounded.
    pub reasoning: ReasoningSettings,
    /// How embeddings pool the final hidden states (`--pooling`).
    pub pooling: Pooling,
    /// The embeddings' size (the model's hidden size; 0 without a model).
    pub embedding_size: usize,
}

impl AppState {
    /// Builds the state; `limits.max_concurrent_requests` permits.
    pub fn new(
        backend: Arc<dyn Backend>,
        lexicon: Arc<dyn Lexicon>,
        limits: RequestLimits,
        access: Access,
        model: ServedModel,
    ) -> Self {
        AppState {
            backend,
            prompt_bytes: PromptBytes::new(limits.max_input_tokens, lexicon.as_ref()),
            lexicon,
            metrics: Arc::new(Metrics::new(&limits)),
            permits: Arc::new(Semaphore::new(limits.max_concurrent_requests)),
            limits,
            access,
            model,
            healthy: AtomicBool::new(false),
            stopping: Stopping::new(),
            draining: AtomicBool::new(false),
            response_cache: None,
            grammars: Grammars::new(GrammarSettings::default()),
            webui: false,
            responses: ResponseStore::default(),
            loras: Arc::new(Loras::new(None, 0, 0)),
        }
    }

    /// The state with grammars compiled this way.
    pub fn with_grammars(mut self, settings: GrammarSettings) -> Self {
        self.grammars = Grammars::new(settings);
        self
    }

    /// The state with this response cache.
    pub fn with_response_cache(mut self, cache: Option<ResponseCache>) -> Self {
        self.response_cache = cache.map(Arc::new);
        self
    }

    /// The state with the web chat page on or off.
    pub fn with_webui(mut self, on: bool) -> Self {
        self.webui = on;
        self
    }

    /// The state with these LoRA adapters.
    pub fn with_loras(mut self, loras: Loras) -> Self {
        self.loras = Arc::new(loras);
        self
    }

    /// The state with this store of responses.
    pub fn with_responses_store(mut self, store: ResponseStore) -> Self {
        self.responses = store;
        self
    }

    /// A permit for one more request in flight, or 429 at once (never a wait).
    pub fn permit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        self.permits.clone().try_acquire_owned().map_err(|_| ApiError::Overloaded)
    }
}

impl Access {
    /// Whether the request's headers carry the key, as `Authorization: Bearer <key>` or `x-api-key: <key>`
    /// (always, without a key). The comparison takes the same time wherever the first difference is.
    pub fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(key) = &self.api_key else { return true };
        let bearer = headers.get(AUTHORIZATION).and_then(|h| h.as_bytes().strip_prefix(b"Bearer "));
        let given = [bearer, headers.get("x-api-key").map(|h| h.as_bytes())];
        given.into_iter().flatten().any(|g| constant_time_eq(g, key.as_bytes()))
    }

    /// The prefix-cache namespace: a hash of the API key (0 without one), so cached prompt blocks
    /// are only shared by requests made with the same key.
    pub fn cache_salt(&self) -> u64 {
        match &self.api_key {
            None => 0,
            Some(key) => {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                key.hash(&mut h);
                h.finish()
            }
        }
    }
}

/// Byte-string equality in time that depends only on the lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0xff);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs.iter().map(|&(k, v)| (hyper::header::HeaderName::from_static(k), v.parse().unwrap())).collect()
    }

    #[test]
    fn bearer_and_x_api_keys() {
        let open = Access::default();
        assert!(open.authorized(&HeaderMap::new()));
        assert_eq!(open.cache_salt(), 0);
        let a = Access { api_key: Some("s3cret".into()), ..Access::default() };
        let bearer = |v: &'static str| a.authorized(&headers(&[("authorization", v)]));
        assert!(bearer("Bearer s3cret"));
        assert!(!bearer("Bearer s3cre"));
        assert!(!bearer("Bearer s3cret!"));
        assert!(!bearer("s3cret"));
        assert!(!a.authorized(&HeaderMap::new()));
        assert!(a.authorized(&headers(&[("x-api-key", "s3cret")])));
        assert!(!a.authorized(&headers(&[("x-api-key", "Bearer s3cret")])));
        assert!(a.authorized(&headers(&[("authorization", "Bearer nope"), ("x-api-key", "s3cret")])));
        assert_ne!(a.cache_salt(), 0);
        assert!(constant_time_eq(b"", b""));
        assert!(!constant_time_eq(b"", b"\xff"));
    }
}
