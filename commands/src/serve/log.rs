//! The server's structured logs (`tracing`): one subscriber writing to stderr, as text for people
//! or as JSON lines for log collectors, at the level `RUST_LOG` asks for (default `info`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::error::InputError;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event (colored on a terminal).
    Text,
    /// One JSON object per line, with the event's fields and its request span (`request_id`).
    Json,
}

/// Installs the process's log subscriber; `rust_log` is the `RUST_LOG` filter, when set.
pub fn init(format: LogFormat, rust_log: Option<&str>) -> Result<(), InputError> {
    let filter = match rust_log {
        Some(spec) => EnvFilter::try_new(spec).map_err(|e| InputError(format!("RUST_LOG={spec}: {e}")))?,
        None => EnvFilter::new("info"),
    };
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(false).try_init(),
    };
    installed.map_err(|e| InputError(format!("cannot install the log subscriber: {e}")))
}
