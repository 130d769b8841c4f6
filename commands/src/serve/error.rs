//! Every way a request can fail, and the one table from failure to HTTP status, TGI `error_type`,
//! OpenAI error `type` and the `tgi_request_failure` label; each error rendered in the shape of the API
//! its route belongs to ([`Family`]: TGI's, OpenAI's or Anthropic's).

use std::time::Duration;

use hyper::StatusCode;
use tgi_engines::sampling::SamplingError;
use tgi_engines::scheduler::SubmitError;

use super::openai::tools::ToolError;

/// Why a request's input was refused; the messages are TGI's where TGI has one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValidationError {
    /// `best_of` out of range.
    #[error("`best_of` must be > 0 and <= {max}. Given: {given}")]
    BestOf {
        /// The limit (`--max-best-of`).
        max: usize,
        /// What the request asked for.
        given: usize,
    },
    /// `best_of` > 1 without sampling.
    #[error("you must use sampling when `best_of` is > 1")]
    BestOfSampling,
    /// `best_of` > 1 with a fixed seed.
    #[error("`seed` must not be set when `best_of` > 1")]
    BestOfSeed,
    /// `best_of` > 1 on a streaming request.
    #[error("`best_of` != 1 is not supported when streaming tokens")]
    BestOfStream,
    /// `top_n_tokens` out of range.
    #[error("`top_n_tokens` must be >= 0 and <= {max}. Given: {given}")]
    TopNTokens {
        /// The limit (`--max-top-n-tokens`).
        max: u32,
        /// What the request asked for.
        given: u32,
    },
    /// `decoder_input_details` on a streaming request.
    #[error("`decoder_input_details` == true is not supported when streaming tokens")]
    PrefillDetailsStream,
    /// A sampling parameter out of its range.
    #[error(transparent)]
    Sampling(#[from] SamplingError),
    /// `truncate` of 0 or beyond `--max-input-tokens`.
    #[error("`truncate` must be strictly positive and less than {max}. Given: {given}")]
    Truncate {
        /// `--max-input-tokens`.
        max: usize,
        /// What the request asked for.
        given: usize,
    },
    /// `max_new_tokens` (or `max_tokens`) of 0.
    #[error("`max_new_tokens` must be strictly positive")]
    NegativeMaxNewTokens,
    /// Prompt plus new tokens beyond `--max-total-tokens`.
    #[error(
        "`inputs` tokens + `max_new_tokens` must be <= {max}. Given: {input} `inputs` tokens and {new} `max_new_tokens`"
    )]
    MaxTotalTokens {
        /// `--max-total-tokens`.
        max: usize,
        /// Prompt tokens.
        input: usize,
        /// Tokens asked for.
        new: usize,
    },
    /// Prompt beyond `--max-input-tokens`.
    #[error("`inputs` must have less than {max} tokens. Given: {given}")]
    InputLength {
        /// `--max-input-tokens`.
        max: usize,
        /// Prompt tokens.
        given: usize,
    },
    /// A prompt longer in bytes than `--max-input-tokens` tokens could cover, refused before tokenizing.
    #[error(
        "`inputs` must have less than {max} tokens. Given: {bytes} bytes, more than the {max_bytes} that {max} tokens \
         can cover"
    )]
    InputBytes {
        /// `--max-input-tokens`.
        max: usize,
        /// Prompt bytes.
        bytes: usize,
        /// The byte bound (see `PromptBytes`).
        max_bytes: usize,
    },
    /// An empty prompt.
    #[error("`inputs` cannot be empty")]
    EmptyInput,
    /// Too many stop strings.
    #[error("`stop` supports up to {max} stop sequences. Given: {given}")]
    StopSequence {
        /// `--max-stop-sequences`.
        max: usize,
        /// How many the request gave.
        given: usize,
    },
    /// The tokenizer failed on the prompt.
    #[error("tokenizer error {0}")]
    Tokenizer(String),
    /// A parameter this server does not implement was set.
    #[error("`{0}` is not supported by this server")]
    Unsupported(&'static str),
    /// A grammar (`grammar`, `response_format`, a tool's parameters) that is malformed, does not compile,
    /// or uses a feature the engine cannot enforce.
    #[error("`{param}`: {message}")]
    Grammar {
        /// The request field that carried it.
        param: &'static str,
        /// What is wrong (the grammar compiler's message).
        message: String,
    },
    /// OpenAI's `n` out of range.
    #[error("`n` must be >= 1 and <= {max}. Given: {given}")]
    N {
        /// `--max-n`.
        max: usize,
        /// What the request asked for.
        given: usize,
    },
    /// OpenAI's `best_of` below `n` or beyond `--max-best-of`.
    #[error("`best_of` must be >= `n` ({n}) and <= {max}. Given: {given}")]
    CompletionBestOf {
        /// The request's `n`.
        n: usize,
        /// `--max-best-of`.
        max: usize,
        /// What the request asked for.
        given: usize,
    },
    /// OpenAI's `top_logprobs` (or `logprobs` of completions) out of range.
    #[error("`{name}` must be >= 0 and <= {max}. Given: {given}")]
    Logprobs {
        /// The parameter's name.
        name: &'static str,
        /// The limit.
        max: usize,
        /// What the request asked for.
        given: usize,
    },
    /// `top_logprobs` without `logprobs: true`.
    #[error("`logprobs` must be true when `top_logprobs` is set")]
    TopLogprobsWithoutLogprobs,
    /// A chat request without messages.
    #[error("`messages` cannot be empty")]
    EmptyMessages,
    /// A chat message with a content part that is not text (an image, audio, a file).
    #[error("this model takes text only: `messages` has a content part of type `{0}`")]
    NonTextContent(String),
    /// Bad `tools` or `tool_choice`.
    #[error(transparent)]
    Tools(#[from] ToolError),
    /// A field of a Messages or Responses request that the API does not take in this form.
    #[error("`{at}`: {message}")]
    Field {
        /// The top-level field, for OpenAI's `param`.
        param: &'static str,
        /// Where in the request, e.g. `messages[0].content[1]`.
        at: String,
        /// What is wrong.
        message: String,
    },
    /// The request can never fit the KV cache.
    #[error("the request needs {needed} KV cache tokens but the cache holds {capacity}")]
    KvCapacity {
        /// Tokens the request needs at most.
        needed: usize,
        /// Tokens the cache holds.
        capacity: usize,
    },
    /// More inputs to embed than one request may hold.
    #[error("`{field}` may hold at most {max} inputs. Given: {given}")]
    Inputs {
        /// The field (`input`, `inputs`).
        field: &'static str,
        /// The limit.
        max: usize,
        /// The inputs given.
        given: usize,
    },
    /// A token id outside the vocabulary.
    #[error("`{field}` has token id {id}, outside the vocabulary of {vocab} tokens")]
    TokenId {
        /// The field (`input`, `inputs`).
        field: &'static str,
        /// The id.
        id: u32,
        /// The vocabulary's size.
        vocab: usize,
    },
    /// Embeddings of another size than the model's.
    #[error("`dimensions` is not supported: this model's embeddings have {size} dimensions and cannot be shortened. Given: {given}")]
    Dimensions {
        /// The model's embedding size.
        size: usize,
        /// The size asked for.
        given: u64,
    },
}

impl ValidationError {
    /// The request field the error is about, for OpenAI's `param`.
    pub fn param(&self) -> Option<&'static str> {
        Some(match self {
            Self::BestOf { .. } | Self::BestOfSampling | Self::BestOfStream | Self::CompletionBestOf { .. } => {
                "best_of"
            }
            Self::BestOfSeed => "seed",
            Self::TopNTokens { .. } => "top_n_tokens",
            Self::PrefillDetailsStream => "decoder_input_details",
            Self::Sampling(e) => sampling_param(e),
            Self::Truncate { .. } => "truncate",
            Self::NegativeMaxNewTokens | Self::MaxTotalTokens { .. } | Self::KvCapacity { .. } => "max_tokens",
            Self::InputLength { .. } | Self::InputBytes { .. } | Self::EmptyInput | Self::Tokenizer(_) => "inputs",
            Self::StopSequence { .. } => "stop",
            Self::Unsupported(name) => name,
            Self::Grammar { param, .. } => param,
            Self::N { .. } => "n",
            Self::Logprobs { name, .. } => name,
            Self::TopLogprobsWithoutLogprobs => "logprobs",
            Self::EmptyMessages | Self::NonTextContent(_) => "messages",
            Self::Tools(e) => e.param(),
            Self::Field { param, .. } => param,
            Self::Inputs { field, .. } | Self::TokenId { field, .. } => field,
            Self::Dimensions { .. } => "dimensions",
        })
    }
}

/// The parameter a sampling error is about.
fn sampling_param(e: &SamplingError) -> &'static str {
    match e {
        SamplingError::Temperature | SamplingError::NegativeTemperature => "temperature",
        SamplingError::TopK => "top_k",
        SamplingError::TopP => "top_p",
        SamplingError::TypicalP => "typical_p",
        SamplingError::MinP => "min_p",
        SamplingError::RepetitionPenalty => "repetition_penalty",
        SamplingError::FrequencyPenalty => "frequency_penalty",
        SamplingError::PresencePenalty => "presence_penalty",
        SamplingError::TopNTokens { .. } => "top_logprobs",
    }
}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The input was refused.
    #[error("Input validation error: {0}")]
    Validation(#[from] ValidationError),
    /// `--max-concurrent-requests` requests are already in flight.
    #[error("Model is overloaded")]
    Overloaded,
    /// The engine failed while generating.
    #[error("Request failed during generation: {0}")]
    Generation(String),
    /// The engine stopped reporting before the request finished.
    #[error("Incomplete generation")]
    Incomplete,
    /// The chat template is missing or failed.
    #[error("Template error: {0}")]
    Template(String),
    /// `--request-timeout` passed; the request was cancelled.
    #[error("Request timed out after {} s and was cancelled", .0.as_secs_f64())]
    Timeout(Duration),
    /// The engine is not running (shutting down or stopped).
    #[error("The engine is not running")]
    NotRunning,
    /// The body is not JSON (422, as for a body of the wrong shape).
    #[error("Failed to parse the request body as JSON: {0}")]
    JsonSyntax(String),
    /// The body is JSON of the wrong shape.
    #[error("Failed to deserialize the JSON body into the target type: {0}")]
    JsonData(String),
    /// The body is larger than `--payload-limit`.
    #[error("Request body is larger than the limit of {0} bytes")]
    PayloadTooLarge(usize),
    /// The body could not be read.
    #[error("Failed to read the request body: {0}")]
    Body(String),
    /// A missing or wrong API key.
    #[error("Invalid or missing API key: send `Authorization: Bearer <key>` or `x-api-key: <key>`")]
    Unauthorized,
    /// No such route.
    #[error("Not found: {0}")]
    NotFound(String),
    /// No stored response with this id (never stored, expired, evicted or deleted).
    #[error("No response with id '{0}' is stored (responses expire after --responses-store-ttl)")]
    ResponseNotFound(String),
    /// A request names a model that is neither the served model nor a loaded LoRA adapter.
    #[error("The model '{0}' does not exist: it is neither the served model nor a loaded LoRA adapter (GET /v1/models lists them)")]
    UnknownModel(String),
    /// A LoRA adapter could not be loaded or used as asked.
    #[error("LoRA adapter: {0}")]
    Adapter(String),
    /// Every adapter slot holds an adapter a request is running on.
    #[error("All {0} LoRA adapters (--max-loras) are in use by running requests; retry when one is idle")]
    AdaptersBusy(usize),
    /// The route exists but not with this method.
    #[error("Method {method} not allowed on {path}")]
    MethodNotAllowed {
        /// The method used.
        method: String,
        /// The path.
        path: String,
    },
    /// The health check failed.
    #[error("unhealthy")]
    Unhealthy,
    /// The server is shutting down (`/health` during the drain).
    #[error("draining: the server is shutting down")]
    Draining,
    /// The model is still loading (every route until it is).
    #[error("loading: the model is not ready yet")]
    Loading,
    /// The request's head is malformed: a missing or repeated `Host`, or what hyper could not parse.
    #[error("Bad request: {0}")]
    BadRequest(String),
    /// The request target is longer than the limit.
    #[error("The request URI is longer than the limit of {0} bytes")]
    UriTooLong(usize),
    /// The header section is larger than the limit (or has too many fields).
    #[error("The request header section is larger than {bytes} bytes or has more than {fields} fields")]
    HeadersTooLarge {
        /// The byte limit, start line included.
        bytes: usize,
        /// The field limit.
        fields: usize,
    },
    /// A POST body that is not declared as JSON.
    #[error("Expected `Content-Type: application/json`, got {0}")]
    UnsupportedMediaType(String),
    /// The body did not arrive within `--body-timeout`.
    #[error("The request body did not arrive within {} s", .0.as_secs_f64())]
    BodyTimeout(Duration),
    /// `--max-connections` connections are open; only health checks are answered.
    #[error("Too many open connections; retry shortly")]
    TooManyConnections,
    /// The server is stopping and takes no new request.
    #[error("The server is shutting down")]
    ShuttingDown,
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        match e {
            SubmitError::NotRunning => ApiError::NotRunning,
            SubmitError::TooLarge { needed, capacity } => ValidationError::KvCapacity { needed, capacity }.into(),
        }
    }
}

/// The API a route belongs to, whose error shape its errors take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// TGI's routes: `{"error": message, "error_type": type}`.
    Tgi,
    /// OpenAI's routes (under `/v1/`): `{"error": {"message", "type", "param", "code"}}`.
    OpenAi,
    /// Anthropic's routes (`/v1/messages...`): `{"type": "error", "error": {"type", "message"}}`.
    Anthropic,
}

impl Family {
    /// The family of the route at `path`.
    pub fn of(path: &str) -> Self {
        if path == "/v1/messages" || path.starts_with("/v1/messages/") {
            Family::Anthropic
        } else if path.starts_with("/v1/") {
            Family::OpenAi
        } else {
            Family::Tgi
        }
    }
}

/// How an error shows on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Class {
    /// The HTTP status.
    pub status: StatusCode,
    /// TGI's `error_type` (what huggingface_hub maps to its exception classes).
    pub tgi_type: &'static str,
    /// OpenAI's `error.type`.
    pub openai_type: &'static str,
    /// The `err` label of `tgi_request_failure`.
    pub metric: &'static str,
}

impl ApiError {
    /// The status, names and metric label of this error: the one place errors meet statuses.
    pub fn class(&self) -> Class {
        let (status, tgi_type, openai_type, metric) = match self {
            Self::Validation(_) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "validation", "invalid_request_error", "validation")
            }
            Self::Overloaded => (StatusCode::TOO_MANY_REQUESTS, "overloaded", "rate_limit_error", "overloaded"),
            Self::Generation(_) => (StatusCode::FAILED_DEPENDENCY, "generation", "server_error", "generation"),
            Self::Incomplete => {
                (StatusCode::INTERNAL_SERVER_ERROR, "incomplete_generation", "server_error", "incomplete")
            }
            Self::Template(_) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "template_error", "invalid_request_error", "template")
            }
            Self::Timeout(_) => (StatusCode::GATEWAY_TIMEOUT, "timeout", "timeout_error", "timeout"),
            Self::NotRunning => (StatusCode::SERVICE_UNAVAILABLE, "unavailable", "server_error", "unavailable"),
            Self::JsonSyntax(_) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "validation", "invalid_request_error", "validation")
            }
            Self::JsonData(_) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "validation", "invalid_request_error", "validation")
            }
            Self::PayloadTooLarge(_) => {
                (StatusCode::PAYLOAD_TOO_LARGE, "validation", "invalid_request_error", "validation")
            }
            Self::Body(_) => (StatusCode::BAD_REQUEST, "validation", "invalid_request_error", "validation"),
            Self::Unauthorized => (StatusCode::UNAUTHORIZED, "authentication", "authentication_error", "unauthorized"),
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "not_found", "invalid_request_error", "not_found"),
            Self::ResponseNotFound(_) => {
                (StatusCode::NOT_FOUND, "not_found", "invalid_request_error", "response_not_found")
            }
            Self::UnknownModel(_) => (StatusCode::NOT_FOUND, "not_found", "invalid_request_error", "model_not_found"),
            Self::Adapter(_) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "validation", "invalid_request_error", "lora_adapter")
            }
            Self::AdaptersBusy(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "overloaded", "server_error", "lora_adapters_busy")
            }
            Self::MethodNotAllowed { .. } => {
                (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "invalid_request_error", "method_not_allowed")
            }
            Self::Unhealthy => (StatusCode::SERVICE_UNAVAILABLE, "healthcheck", "server_error", "unhealthy"),
            Self::Draining => (StatusCode::SERVICE_UNAVAILABLE, "healthcheck", "server_error", "draining"),
            Self::Loading => (StatusCode::SERVICE_UNAVAILABLE, "unavailable", "server_error", "loading"),
            Self::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request", "invalid_request_error", "bad_request"),
            Self::UriTooLong(_) => (StatusCode::URI_TOO_LONG, "bad_request", "invalid_request_error", "bad_request"),
            Self::HeadersTooLarge { .. } => {
                (StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "bad_request", "invalid_request_error", "bad_request")
            }
            Self::UnsupportedMediaType(_) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "invalid_request_error",
                "unsupported_media_type",
            ),
            Self::BodyTimeout(_) => (StatusCode::REQUEST_TIMEOUT, "timeout", "timeout_error", "body_timeout"),
            Self::TooManyConnections => {
                (StatusCode::SERVICE_UNAVAILABLE, "overloaded", "server_error", "too_many_connections")
            }
            Self::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "unavailable", "server_error", "shutting_down"),
        };
        Class { status, tgi_type, openai_type, metric }
    }

    /// Whether the connection is closed after this error's answer (its request body is left unread).
    pub fn closes_connection(&self) -> bool {
        matches!(self, Self::BodyTimeout(_) | Self::TooManyConnections | Self::ShuttingDown)
    }

    /// TGI's error body: `{"error": message, "error_type": type}`.
    pub fn tgi_body(&self) -> serde_json::Value {
        serde_json::json!({"error": self.to_string(), "error_type": self.class().tgi_type})
    }

    /// Anthropic's error body: `{"type": "error", "error": {"type", "message"}}`, its types named by status as
    /// Anthropic names them.
    pub fn anthropic_body(&self) -> serde_json::Value {
        let kind = match self.class().status.as_u16() {
            401 => "authentication_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 => "overloaded_error",
            408 | 504 => "timeout_error",
            // The engine failed: not the request's fault.
            424 => "api_error",
            400..=499 => "invalid_request_error",
            _ => "api_error",
        };
        serde_json::json!({"type": "error", "error": {"type": kind, "message": self.to_string()}})
    }

    /// The status and body of this error on a route of `family`: Anthropic's API answers a refused input with
    /// 400 (it has no 422).
    pub fn render(&self, family: Family) -> (StatusCode, serde_json::Value) {
        let status = self.class().status;
        match family {
            Family::Tgi => (status, self.tgi_body()),
            Family::OpenAi => (status, self.openai_body()),
            Family::Anthropic if status == StatusCode::UNPROCESSABLE_ENTITY => {
                (StatusCode::BAD_REQUEST, self.anthropic_body())
            }
            Family::Anthropic => (status, self.anthropic_body()),
        }
    }

    /// OpenAI's error body: `{"error": {"message", "type", "param", "code"}}`.
    pub fn openai_body(&self) -> serde_json::Value {
        let param = match self {
            Self::Validation(v) => v.param(),
            _ => None,
        };
        let code = match self {
            Self::Unauthorized => Some("invalid_api_key"),
            Self::Validation(
                ValidationError::MaxTotalTokens { .. }
                | ValidationError::InputLength { .. }
                | ValidationError::InputBytes { .. },
            ) => Some("context_length_exceeded"),
            _ => None,
        };
        serde_json::json!({"error": {
            "message": self.to_string(),
            "type": self.class().openai_type,
            "param": param,
            "code": code,
        }})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tgi_messages_and_statuses() {
        let e = ApiError::from(ValidationError::InputLength { max: 10, given: 12 });
        assert_eq!(e.to_string(), "Input validation error: `inputs` must have less than 10 tokens. Given: 12");
        assert_eq!(e.class().status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(e.tgi_body()["error_type"], "validation");
        assert_eq!(ApiError::Overloaded.class().status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(ApiError::Generation("x".into()).class().status, StatusCode::FAILED_DEPENDENCY);
        let o = e.openai_body();
        assert_eq!(o["error"]["param"], "inputs");
        assert_eq!(o["error"]["code"], "context_length_exceeded");
        assert_eq!(ApiError::from(SubmitError::NotRunning).class().status, StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn each_family_has_its_shape() {
        assert_eq!(Family::of("/generate"), Family::Tgi);
        assert_eq!(Family::of("/v1/responses/resp_1"), Family::OpenAi);
        assert_eq!(Family::of("/v1/messages"), Family::Anthropic);
        assert_eq!(Family::of("/v1/messages/count_tokens"), Family::Anthropic);
        assert_eq!(Family::of("/v1/messagesx"), Family::OpenAi);
        let e = ApiError::from(ValidationError::EmptyMessages);
        let (status, body) = e.render(Family::Anthropic);
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            body,
            serde_json::json!({"type": "error", "error": {"type": "invalid_request_error",
                "message": "Input validation error: `messages` cannot be empty"}})
        );
        assert_eq!(e.render(Family::OpenAi).0, StatusCode::UNPROCESSABLE_ENTITY);
        let kind = |e: ApiError| e.render(Family::Anthropic).1["error"]["type"].clone();
        assert_eq!(kind(ApiError::Unauthorized), "authentication_error");
        assert_eq!(kind(ApiError::Overloaded), "rate_limit_error");
        assert_eq!(kind(ApiError::PayloadTooLarge(1)), "request_too_large");
        assert_eq!(kind(ApiError::NotRunning), "overloaded_error");
        assert_eq!(kind(ApiError::Generation("x".into())), "api_error");
        assert_eq!(kind(ApiError::Timeout(std::time::Duration::from_secs(1))), "timeout_error");
        assert_eq!(kind(ApiError::Incomplete), "api_error");
        assert_eq!(ApiError::ResponseNotFound("r".into()).render(Family::OpenAi).0, StatusCode::NOT_FOUND);
    }
}
