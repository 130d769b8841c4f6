//! `tgi serve`: TGI's and OpenAI's HTTP APIs (hyper on tokio) over the continuous-batching engine.
//!
//! A request is parsed into its route's raw type, validated into engine [`Request`]s
//! (`tgi_engines::scheduler::Request`), submitted through the [`engine::Engine`] trait with a
//! channel sink, and answered at once or streamed as server-sent events. Dropping a response (the
//! client went away) closes the channel, which cancels the request inside the engine.

mod args;
mod body;
mod budget;
mod config;
mod engine;
mod error;
mod generation;
mod headers;
mod limits;
mod metrics;
mod openai;
mod router;
mod run;
mod server;
mod state;
mod stream;
#[cfg(test)]
mod tests;
mod tgi;

pub use args::ServeArgs;
pub use run::run;
