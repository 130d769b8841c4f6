//! The HTTP side of a benchmark: a streaming client, SSE, and the TGI and OpenAI request/event formats.

pub mod api;
pub mod http;
pub mod sse;
