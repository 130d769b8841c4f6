//! `tgi serve`: TGI's, OpenAI's (chat, completions, Responses) and Anthropic's (Messages) HTTP APIs (hyper on
//! tokio) over the continuous-batching engine.
//!
//! A request is parsed into its route's raw type, validated into engine [`Request`]s
//! (`tgi_engines::scheduler::Request`), submitted through the [`backend::Backend`] trait with a
//! channel sink, and answered at once or streamed as server-sent events. Dropping a response (the
//! client went away) closes the channel, which cancels the request inside the engine.
//!
//! The flags, environment, `--config` file and `--profile` are resolved once into
//! [`ServeSettings`] before [`run`] starts; every request carries an id (`x-request-id`) in its log
//! span.

mod anthropic;
mod args;
mod backend;
mod body;
mod budget;
mod byte_size;
mod check;
mod config;
mod connections;
mod embed;
mod error;
mod generation;
mod grammar;
mod head;
mod headers;
mod limits;
mod log;
mod lora;
mod lru;
mod metrics;
mod openai;
mod openapi;
mod parse_errors;
mod parts;
mod request_id;
mod response_cache;
mod responses;
mod router;
mod run;
mod sagemaker;
mod server;
mod settings;
mod spans;
mod speculation;
mod state;
mod stream;
#[cfg(test)]
mod tests;
mod tgi;
mod webui;

pub use args::ServeArgs;
pub use check::{RequestChecker, Route};
pub use log::LogFormat;
pub use run::{listening_port, run};
pub use settings::ServeSettings;
