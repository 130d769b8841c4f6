//! The route table and what surrounds every handler: 404 and 405, the API key, the body limit,
//! CORS, and errors rendered in the route's family (Anthropic's shape under `/v1/messages`, OpenAI's
//! elsewhere under `/v1/`, TGI's elsewhere).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper::header::{
    HeaderValue, ACCESS_CONTROL_ALLOW_ORIGIN, ALLOW, CONNECTION, CONTENT_LENGTH, ORIGIN, RETRY_AFTER, VARY,
};
use hyper::{HeaderMap, Method, Request, StatusCode};
use tgi_engines::sampling::SamplingParams;
use tgi_engines::scheduler::{Event, Request as EngineRequest};
use tracing::Instrument;

use super::backend::ChannelSink;
use super::body::{self, HttpResponse, ResponseBody};
use super::error::{ApiError, Family};
use super::head;
use super::metrics::{render_loras, Caches};
use super::request_id::{RequestId, X_REQUEST_ID};
use super::response_cache::Directive;
use super::state::AppState;
use super::{anthropic, embed, lora, openai, openapi, responses, sagemaker, tgi, webui};

/// What a route does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handler {
    /// `GET /health`, `/ping` and `/` (from clients that do not ask for HTML, or with `--no-webui`).
    Health,
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
    /// `POST /invocations` (SageMaker).
    Invocations,
    /// `GET /info`.
    Info,
    /// `GET /metrics`.
    Metrics,
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/completions`.
    Completions,
    /// `GET /v1/models`.
    Models,
    /// `POST /v1/messages` (Anthropic).
    Messages,
    /// `POST /v1/messages/count_tokens` (Anthropic).
    CountTokens,
    /// `POST /v1/responses` (OpenAI Responses).
    Responses,
    /// `GET /v1/responses/{response_id}`.
    GetResponse,
    /// `DELETE /v1/responses/{response_id}`.
    DeleteResponse,
    /// `GET /api-doc/openapi.json`.
    OpenApi,
    /// `GET /` asking for HTML (a browser), unless `--no-webui`: the web chat page.
    WebUi,
    /// `POST /v1/embeddings`.
    Embeddings,
    /// `POST /embed`.
    Embed,
    /// `POST /v1/load_lora_adapter` (vLLM).
    LoadLora,
    /// `POST /v1/unload_lora_adapter` (vLLM).
    UnloadLora,
}

impl Handler {
    /// Whether the route needs the API key (the routes that run the model).
    fn protected(self) -> bool {
        matches!(
            self,
            Self::Compat
                | Self::Generate
                | Self::GenerateStream
                | Self::Tokenize
                | Self::ChatTokenize
                | Self::Invocations
                | Self::Chat
                | Self::Completions
                | Self::Messages
                | Self::CountTokens
                | Self::Responses
                | Self::GetResponse
                | Self::DeleteResponse
                | Self::Embeddings
                | Self::Embed
                | Self::LoadLora
                | Self::UnloadLora
        )
    }
}

/// One route.
#[derive(Clone, Copy, Debug)]
pub struct Route {
    /// `GET`, `POST` or `DELETE`.
    pub method: &'static str,
    /// The path, as OpenAPI writes it: a `{name}` segment stands for any one non-empty segment.
    pub path: &'static str,
    /// Its handler.
    pub handler: Handler,
}

impl Route {
    /// Whether the route's path is `path`.
    pub fn matches(&self, path: &str) -> bool {
        let (mut pattern, mut given) = (self.path.split('/'), path.split('/'));
        loop {
            match (pattern.next(), given.next()) {
                (None, None) => return true,
                (Some(p), Some(g)) if p == g || (p.starts_with('{') && p.ends_with('}') && !g.is_empty()) => {}
                _ => return false,
            }
        }
    }
}

/// Every route the server serves.
pub const ROUTES: &[Route] = &[
    Route { method: "GET", path: "/", handler: Handler::Health },
    Route { method: "POST", path: "/", handler: Handler::Compat },
    Route { method: "POST", path: "/generate", handler: Handler::Generate },
    Route { method: "POST", path: "/generate_stream", handler: Handler::GenerateStream },
    Route { method: "POST", path: "/tokenize", handler: Handler::Tokenize },
    Route { method: "POST", path: "/chat_tokenize", handler: Handler::ChatTokenize },
    Route { method: "POST", path: "/invocations", handler: Handler::Invocations },
    Route { method: "GET", path: "/info", handler: Handler::Info },
    Route { method: "GET", path: "/health", handler: Handler::Health },
    Route { method: "GET", path: "/ping", handler: Handler::Health },
    Route { method: "GET", path: "/metrics", handler: Handler::Metrics },
    Route { method: "POST", path: "/v1/chat/completions", handler: Handler::Chat },
    Route { method: "POST", path: "/v1/completions", handler: Handler::Completions },
    Route { method: "GET", path: "/v1/models", handler: Handler::Models },
    Route { method: "POST", path: "/v1/messages", handler: Handler::Messages },
    Route { method: "POST", path: "/v1/messages/count_tokens", handler: Handler::CountTokens },
    Route { method: "POST", path: "/v1/responses", handler: Handler::Responses },
    Route { method: "GET", path: "/v1/responses/{response_id}", handler: Handler::GetResponse },
    Route { method: "DELETE", path: "/v1/responses/{response_id}", handler: Handler::DeleteResponse },
    Route { method: "GET", path: "/api-doc/openapi.json", handler: Handler::OpenApi },
    Route { method: "POST", path: "/v1/embeddings", handler: Handler::Embeddings },
    Route { method: "POST", path: "/embed", handler: Handler::Embed },
    Route { method: "POST", path: "/v1/load_lora_adapter", handler: Handler::LoadLora },
    Route { method: "POST", path: "/v1/unload_lora_adapter", handler: Handler::UnloadLora },
];

/// Serves one HTTP request; never fails (errors become JSON responses). The request gets an id
/// (the client's `x-request-id` or a fresh one), returned in `x-request-id`, and a `request` span
/// carrying it that lasts until the response's end (a stream's task runs inside it too). On a
/// connection in the reserve (beyond `--max-connections`) only health checks are served.
pub async fn handle(
    state: Arc<AppState>,
    req: Request<Incoming>,
    in_reserve: bool,
) -> Result<HttpResponse, Infallible> {
    let id = RequestId::of(req.headers());
    let span = tracing::info_span!("request", request_id = %id, method = %req.method(), path = %req.uri().path());
    let echo = id.header_value();
    let mut response = id.scope(respond(state, req, in_reserve)).instrument(span).await;
    response.headers_mut().insert(X_REQUEST_ID, echo);
    Ok(response)
}

/// The response to `req`, logged.
async fn respond(state: Arc<AppState>, req: Request<Incoming>, in_reserve: bool) -> HttpResponse {
    let start = Instant::now();
    let path = req.uri().path().to_owned();
    let origin = req.headers().get(ORIGIN).cloned();
    let mut response = match route(&state, req, in_reserve).await {
        Ok(r) => r,
        Err(e) => {
            let status = e.class().status.as_u16();
            // A flood beyond --max-connections is not the server failing: refused at info, like 4xx.
            if status >= 500 && !matches!(e, ApiError::TooManyConnections) {
                tracing::warn!(status, error = %e, "request failed");
            } else {
                tracing::info!(status, error = %e, "request refused");
            }
            let (status, body) = e.render(Family::of(&path));
            let mut r = body::json(status, &body);
            let h = r.headers_mut();
            match e {
                ApiError::MethodNotAllowed { .. } => {
                    h.insert(ALLOW, allowed(&path));
                }
                ApiError::TooManyConnections => {
                    h.insert(RETRY_AFTER, HeaderValue::from_static("1"));
                }
                _ => {}
            }
            if e.closes_connection() {
                h.insert(CONNECTION, HeaderValue::from_static("close"));
            }
            r
        }
    };
    cors(&state, origin, &mut response);
    let streamed = matches!(response.body(), ResponseBody::Stream(_));
    tracing::info!(status = response.status().as_u16(), streamed, ms = start.elapsed().as_millis() as u64, "response");
    response
}

/// The answer to any request while the model loads: 503 in the route's family, retry in a second.
pub fn loading(path: &str) -> HttpResponse {
    let (status, body) = ApiError::Loading.render(Family::of(path));
    let mut r = body::json(status, &body);
    r.headers_mut().insert(RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

/// The methods `path` answers to, for `Allow` (`HEAD` wherever `GET` is).
fn allowed(path: &str) -> HeaderValue {
    let mut methods = Vec::new();
    for r in ROUTES.iter().filter(|r| r.matches(path)) {
        methods.push(r.method);
        if r.method == "GET" {
            methods.push("HEAD");
        }
    }
    methods.push("OPTIONS");
    HeaderValue::from_str(&methods.join(", ")).expect("method names are valid")
}

async fn route(state: &Arc<AppState>, req: Request<Incoming>, in_reserve: bool) -> Result<HttpResponse, ApiError> {
    head::host(req.version(), req.headers())?;
    head::uri(req.uri())?;
    let path = req.uri().path().to_owned();
    let path = path.as_str();
    if !ROUTES.iter().any(|r| r.matches(path)) {
        return Err(ApiError::NotFound(path.to_owned()));
    }
    if req.method() == Method::OPTIONS {
        return Ok(preflight(state, path, req.headers()));
    }
    // HEAD is GET without the body, which hyper leaves out.
    let method = if req.method() == Method::HEAD { "GET" } else { req.method().as_str() };
    let Some(r) = ROUTES.iter().find(|r| r.matches(path) && r.method == method) else {
        return Err(ApiError::MethodNotAllowed { method: req.method().to_string(), path: path.to_owned() });
    };
    let handler = if r.path == "/" && r.handler == Handler::Health && state.webui && webui::asked(req.headers()) {
        Handler::WebUi
    } else {
        r.handler
    };
    if in_reserve && handler != Handler::Health {
        return Err(ApiError::TooManyConnections);
    }
    if handler.protected() && !state.access.authorized(req.headers()) {
        return Err(ApiError::Unauthorized);
    }
    let directive = Directive::of(req.headers());
    let raw = match r.method {
        "POST" => {
            let declared = req.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse().ok());
            let json = head::json_content_type(req.headers());
            let (limits, body) = (&state.limits, req.into_body());
            if let Err(e) = json {
                // Read what was sent so that the client sees the 415, not a reset.
                body::discard(body, limits.body_timeout, &state.stopping).await;
                return Err(e);
            }
            body::read(body, declared, limits.payload_limit, limits.body_timeout, &state.stopping).await?
        }
        _ => bytes::Bytes::new(),
    };
    directive.scope(answer(state, handler, path, &raw)).await
}

/// `handler`'s answer to a request for `path` with body `raw` (empty but for `POST`), past the checks every
/// route shares.
pub async fn answer(state: &Arc<AppState>, handler: Handler, path: &str, raw: &[u8]) -> Result<HttpResponse, ApiError> {
    match handler {
        Handler::Health => health(state).await,
        Handler::Compat => tgi::compat(state, body::parse(raw)?).await,
        Handler::Generate => tgi::generate(state, body::parse(raw)?).await,
        Handler::GenerateStream => Ok(tgi::generate_stream(state, body::parse(raw)?).await),
        Handler::Tokenize => tgi::tokenize(state, body::parse(raw)?),
        Handler::ChatTokenize => openai::chat_tokenize(state, body::parse(raw)?).await,
        Handler::Invocations => sagemaker::invocations(state, raw).await,
        Handler::Info => Ok(tgi::info(state)),
        Handler::Metrics => {
            let cache = state.response_cache.as_ref().map(|c| c.stats());
            let in_flight = state.limits.max_concurrent_requests.saturating_sub(state.permits.available_permits());
            let caches = Caches { response: cache.as_ref(), grammar: state.grammars.cache_stats() };
            let mut text = state.metrics.render(&state.backend.stats(), &state.limits, in_flight, caches);
            text.push_str(&render_loras(&state.loras.list(), state.loras.evictions()));
            Ok(body::response(StatusCode::OK, "text/plain; version=0.0.4", text))
        }
        Handler::Chat => openai::chat(state, body::parse(raw)?).await,
        Handler::Completions => openai::completions(state, body::parse(raw)?).await,
        Handler::Models => Ok(openai::models(state)),
        Handler::LoadLora => lora::load(state, body::parse(raw)?).await,
        Handler::UnloadLora => lora::unload(state, body::parse(raw)?),
        Handler::Messages => anthropic::messages(state, body::parse(raw)?).await,
        Handler::CountTokens => anthropic::count_tokens(state, body::parse(raw)?),
        Handler::Responses => responses::create(state, body::parse(raw)?).await,
        Handler::GetResponse => responses::get(state, last_segment(path)),
        Handler::DeleteResponse => responses::delete(state, last_segment(path)),
        Handler::OpenApi => {
            let doc = openapi::document(&state.limits, state.lexicon.tokenizer().vocab_size());
            Ok(body::response(StatusCode::OK, "application/json", doc))
        }
        Handler::WebUi => Ok(webui::page()),
        Handler::Embeddings => embed::embeddings(state, body::parse(raw)?).await,
        Handler::Embed => embed::embed(state, body::parse(raw)?).await,
    }
}

/// The last segment of `path` (a `{name}` parameter's value).
fn last_segment(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or_default()
}

/// How long `/health`'s one-token generation may take.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(30);

/// 503 while draining (after SIGTERM, so that routers and readiness probes take the replica out);
/// else 200 when the last generation succeeded or a one-token generation does now; else 503.
async fn health(state: &AppState) -> Result<HttpResponse, ApiError> {
    use std::sync::atomic::Ordering;
    if state.draining.load(Ordering::Relaxed) {
        return Err(ApiError::Draining);
    }
    if state.healthy.load(Ordering::Relaxed) {
        return Ok(body::empty());
    }
    let tok = state.lexicon.tokenizer();
    let req = EngineRequest {
        prompt_ids: vec![tok.bos_id().unwrap_or(0)],
        params: SamplingParams::greedy(),
        max_new_tokens: 1,
        stop: Vec::new(),
        ignore_eos: true,
        prompt_logprobs: false,
        cache_salt: 0,
        constraint: None,
        request_id: RequestId::current(),
        thinking: None,
        pooling: None,
        lora: None,
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    state.backend.submit(req, Box::new(ChannelSink::new(0, tx))).map_err(|_| ApiError::Unhealthy)?;
    let ok = tokio::time::timeout(HEALTH_TIMEOUT, async {
        while let Some((_, ev)) = rx.recv().await {
            match ev {
                Event::Finished(_) => return true,
                Event::Failed(_) => return false,
                _ => {}
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    state.healthy.store(ok, Ordering::Relaxed);
    if ok {
        Ok(body::empty())
    } else {
        Err(ApiError::Unhealthy)
    }
}

/// Answers `OPTIONS` (CORS preflight): 204 with the allowed methods and headers.
fn preflight(state: &AppState, path: &str, headers: &HeaderMap) -> HttpResponse {
    let mut r = body::empty();
    *r.status_mut() = StatusCode::NO_CONTENT;
    let h = r.headers_mut();
    h.insert(ALLOW, allowed(path));
    if !state.access.cors_allow_origin.is_empty() {
        h.insert("access-control-allow-methods", allowed(path));
        let asked = headers.get("access-control-request-headers").cloned();
        h.insert(
            "access-control-allow-headers",
            asked.unwrap_or(HeaderValue::from_static("authorization, content-type, x-api-key, anthropic-version")),
        );
        h.insert("access-control-max-age", HeaderValue::from_static("86400"));
    }
    r
}

/// Adds CORS headers when the request's origin is allowed.
fn cors(state: &AppState, origin: Option<HeaderValue>, r: &mut HttpResponse) {
    let allowed = &state.access.cors_allow_origin;
    let h = r.headers_mut();
    if allowed.iter().any(|o| o == "*") {
        h.insert(ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    } else if let Some(origin) = origin.filter(|o| allowed.iter().any(|a| a.as_bytes() == o.as_bytes())) {
        h.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        h.append(VARY, HeaderValue::from_static("origin"));
    } else {
        return;
    }
    h.insert(
        "access-control-expose-headers",
        HeaderValue::from_static(
            "x-compute-type, x-compute-time, x-compute-characters, x-total-time, x-validation-time, x-queue-time, \
             x-inference-time, x-time-per-token, x-prompt-tokens, x-generated-tokens, x-request-id",
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_paths_match_their_parameters() {
        let get = ROUTES.iter().find(|r| r.handler == Handler::GetResponse).unwrap();
        assert!(get.matches("/v1/responses/resp_1"));
        assert!(!get.matches("/v1/responses/") && !get.matches("/v1/responses") && !get.matches("/v1/responses/a/b"));
        let chat = ROUTES.iter().find(|r| r.handler == Handler::Chat).unwrap();
        assert!(chat.matches("/v1/chat/completions") && !chat.matches("/v1/chat/completions/"));
        assert_eq!(allowed("/v1/responses/resp_1"), "GET, HEAD, DELETE, OPTIONS");
        assert_eq!(last_segment("/v1/responses/resp_1"), "resp_1");
    }
}
